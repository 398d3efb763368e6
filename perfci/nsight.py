"""Nsight runners and parsers (optional tools). A missing tool or GPU is exit 3 with a reason.

- ``ncu``: runs the selected benchmarks once each (pytest-benchmark disabled, so ``perf`` makes one
  eager call) under Nsight Compute with ``--clock-control none`` (the card's clocks are never
  changed), ``--nvtx`` (each kernel carries the benchmark's NVTX range), and prints a per-benchmark
  kernel table from its CSV.
- ``nsys``: runs them under Nsight Systems with CUDA + NVTX tracing, then ``nsys stats`` with the
  ``nvtx_kern_sum`` report (kernels per NVTX range), printed per benchmark.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from perfci.errors import EXIT_OK, EXIT_REGRESSION, InfrastructureError

NCU_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed")


@dataclass(frozen=True)
class KernelRow:
    benchmark: str
    kernel: str
    count: int
    time_us: float
    dram_bytes: float | None = None
    sm_pct: float | None = None


def require_tool(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        product = "Systems" if tool == "nsys" else "Compute"
        raise InfrastructureError(f"{tool} is not on PATH",
                                  hint=f"install Nsight {product} or use `perfci profile --torch`")
    try:
        import torch

        if not torch.cuda.is_available():
            raise InfrastructureError(f"{tool} needs a CUDA GPU and none is visible")
    except ImportError:
        raise InfrastructureError("torch is not installed") from None
    return exe


def _pytest_cmd(pytest_args: list[str]) -> list[str]:
    from perfci.runner import with_default_suite

    return [sys.executable, "-m", "pytest", *with_default_suite(pytest_args, require_dir=False),
            "--benchmark-disable", "--perfci-no-profile", "-q", "-p", "no:cacheprovider"]


def profile_with(tool: str, pytest_args: list[str], out: Path) -> int:
    exe = require_tool(tool)
    out.mkdir(parents=True, exist_ok=True)
    if tool == "ncu":
        log = out / "ncu.csv"
        cmd = [exe, "--clock-control", "none", "--nvtx", "--csv", "--page", "raw", "--log-file", str(log),
               "--metrics", ",".join(NCU_METRICS), "--target-processes", "all", *_pytest_cmd(pytest_args)]
        code = _run(cmd)
        if not log.exists():
            raise InfrastructureError(f"ncu wrote no output ({log}); see its messages above")
        rows = parse_ncu_csv(log.read_text(encoding="utf-8", errors="replace"))
    else:
        report = out / "perfci"
        cmd = [exe, "profile", "--trace=cuda,nvtx", "--force-overwrite=true", "-o", str(report),
               *_pytest_cmd(pytest_args)]
        code = _run(cmd)
        rep = report.with_suffix(".nsys-rep")
        if not rep.exists():
            raise InfrastructureError(f"nsys wrote no report ({rep}); an nsys without its importer leaves only "
                                      "a .qdstrm file", hint="use a complete Nsight Systems install")
        stats = subprocess.run([exe, "stats", "--report", "nvtx_kern_sum", "--format", "csv", "--output", "-",
                                str(rep)], capture_output=True, text=True, check=False)
        if stats.returncode != 0:
            raise InfrastructureError(f"nsys stats failed: {stats.stderr.strip()[:300]}")
        rows = parse_nsys_nvtx_kern_sum(stats.stdout)
    print(format_rows(rows))
    print(f"\nperfci: {tool} files in {out}")
    return EXIT_OK if code == 0 else EXIT_REGRESSION


def _run(cmd: list[str]) -> int:
    try:
        return subprocess.run(cmd, check=False).returncode
    except OSError as exc:
        raise InfrastructureError(f"could not start {cmd[0]}: {exc}") from None


def _benchmark_of(nvtx_text: str) -> str:
    """The innermost perfci range named after a test (``path::test[param]``) in an NVTX stack text."""
    parts = [p for p in nvtx_text.replace("\\", "/").split("/") if "::" in p]
    name = parts[-1] if parts else nvtx_text or "(no NVTX range)"
    return name.split("@")[0].strip().removesuffix(" [profile]")


def parse_ncu_csv(text: str) -> list[KernelRow]:
    """Rows of ``ncu --csv --page raw``: one row per kernel launch, one column per metric."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    grouped: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in reader:
        if not row.get("Kernel Name") or row.get("ID", "").strip() in ("", "ID"):
            continue
        nvtx_col = next((k for k in row if k and "nvtx" in k.lower()), None)
        bench = _benchmark_of(row.get(nvtx_col, "") if nvtx_col else "")
        grouped[(bench, row["Kernel Name"])].append(row)
    out = []
    for (bench, kernel), launches in grouped.items():
        time_us = sum(_num(r.get("gpu__time_duration.sum")) for r in launches) / len(launches) / 1e3
        dram = sum(_num(r.get("dram__bytes_read.sum")) + _num(r.get("dram__bytes_write.sum")) for r in launches)
        sm = [_num(r.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")) for r in launches]
        out.append(KernelRow(bench, kernel, len(launches), time_us, dram / len(launches), sum(sm) / len(sm)))
    return out


def parse_nsys_nvtx_kern_sum(text: str) -> list[KernelRow]:
    """``nsys stats --report nvtx_kern_sum --format csv``: kernels summed per NVTX range."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "Kernel Name" in ln or "Kernel Name" in ln.replace('"', "")), None)
    if start is None:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    out = []
    for row in reader:
        rng = row.get("NVTX Range") or row.get("Range") or ""
        count = int(_num(row.get("Kern Instances") or row.get("Instances") or "1"))
        total_ns = _num(row.get("Kern Total Time (ns)") or row.get("Total Time (ns)") or "0")
        out.append(KernelRow(_benchmark_of(rng), row.get("Kernel Name", "?"), count, total_ns / max(count, 1) / 1e3))
    return out


def _num(value: str | None) -> float:
    if value is None:
        return 0.0
    try:
        return float(str(value).replace(",", ""))
    except ValueError:
        return 0.0


def format_rows(rows: list[KernelRow]) -> str:
    by_bench: dict[str, list[KernelRow]] = defaultdict(list)
    for r in rows:
        by_bench[r.benchmark].append(r)
    out = []
    for bench, items in sorted(by_bench.items()):
        out.append(f"\n== {bench}")
        out.append(f"  {'kernel':60s} {'count':>6s} {'time/launch':>12s} {'DRAM bytes':>12s} {'SM %':>6s}")
        for r in sorted(items, key=lambda r: -r.time_us * r.count):
            dram = f"{r.dram_bytes:12.3g}" if r.dram_bytes is not None else f"{'':12s}"
            sm = f"{r.sm_pct:6.1f}" if r.sm_pct is not None else ""
            out.append(f"  {r.kernel[:60]:60s} {r.count:6d} {r.time_us:10.2f}us {dram} {sm}")
    return "\n".join(out) if out else "(no kernels recorded)"
