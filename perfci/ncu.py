"""Nsight Compute: per benchmark, per kernel hardware metrics and roofline place.

Command: ``ncu --clock-control none --nvtx --nvtx-include 'regex:perfci@.*::.*/' --set basic|full
--metrics ... -o DIR/perfci`` over the pytest child (``--clock-control none``: the card's clocks are
never changed). The include filter follows the Nsight Compute CLI docs (v2026.1, "NVTX Filtering"):
``Domain@Range`` with the domain first, a trailing ``/`` for a push/pop range, ``regex:`` making both
parts regular expressions; so it selects the kernels launched inside a push/pop range of the
``perfci`` domain whose name contains ``::`` (a pytest node id). The report is exported with
``ncu --import DIR/perfci.ncu-rep --csv --page raw --print-units base`` to ``DIR/ncu_raw.csv`` and
parsed here (:func:`parse_ncu_raw_csv`): row 1 the column names, row 2 the units, then one row per
profiled kernel. The benchmark comes from the NVTX column ``thread Domain:Push/Pop_Range:PL_Type:
PL_Value:CLR_Type:Color:Msg_Type:Msg``, whose cell is ``<tid>  "<domain>:<range>:<6 fields>"``, one
quoted entry per open range, outermost first; the innermost benchmark range wins. (The old parser
looked for a column with "nvtx" in its name, which this one has not: every kernel fell under
"(no NVTX range)". Node ids contain ``::`` and ``/``, so entries are split from both ends.)

Roofline, as ncu's roofline sections do: FLOPs = fadd + fmul + 2 ffma (and d*, and 2 hadd + 2 hmul
+ 4 hfma for packed half) from ``smsp__sass_thread_inst_executed_op_*_pred_on.sum``, plus the
tensor-core FLOPs ``sm__ops_path_tensor_src_*.sum`` (each source type once; the per-instruction
``..._op_hgmma_...`` paths only where this ncu lacks those, ``ncu --query-metrics``); intensity =
FLOPs / DRAM bytes (read + write). Peaks are ncu's per-cycle device peaks (``<metric>.peak_sustained``:
FFMA, DFMA, HFMA issue rates, tensor ops paths, DRAM bytes) times the clock measured during the
kernel (``sm__cycles_elapsed.avg.per_second``, ``dram__cycles_elapsed.avg.per_second``): % of peak is
at the clock the kernel ran at (clocks are not locked). ncu's tensor ops-path peak is the 2:4-sparse
rate for the types that have one (H100: 8192 bf16 FLOP/clk/SM; the datasheet's dense 989 TFLOPS at
1830 MHz is 4096): perfci takes half of it, the dense peak. Measured on an H100 with ncu 2025.3.1
(tests/data/nsight/h100_device_check.log): a 4096^3 bf16 GEMM counted exactly 2*4096^3 tensor FLOPs
and reached 90.0-90.1 % of that dense peak in three runs, as ncu's own tensor-pipe activity says
(90.07 % of elapsed cycles in the first). ``pct_peak_flops`` is for the kernel's
dominant precision (the group with the most FLOPs, named ``precision`` in the summary). Note: on
sm_90 the compiler moves registers with HFMA2.MMA, so a plain copy kernel shows some "fp16" FLOPs
(0.5 FLOP/byte for a 256 MiB copy); they are ncu's counts, and far below any roof.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfci.categories import classify_kernel, display_kernel_name
from perfci.errors import BadInputError, InfrastructureError
from perfci.kernelrows import NO_RANGE, KernelRow
from perfci.nsight import (
    SCHEMA_VERSION,
    is_benchmark_range,
    pytest_child,
    require_tool,
    run_tool,
    tool_failed,
)
from perfci.profilers import ProfileRun
from perfci.ranges import DOMAIN as NVTX_DOMAIN
from perfci.record import write_atomic

SUMMARY_NAME = "ncu_summary.json"
NVTX_FILTER = f"regex:{NVTX_DOMAIN}@.*::.*/"
SETS = ("basic", "full")
DURATION = "gpu__time_duration.sum"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
DRAM_PEAK, DRAM_CLOCK, SM_CLOCK = ("dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second",
                                   "sm__cycles_elapsed.avg.per_second")
# metric -> KernelRow metric key (percentages: time-weighted mean over launches)
PERCENT_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
}
TENSOR_PCT = ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
              "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active")
LAUNCH_METRICS = {"launch__registers_per_thread": "registers"}
SHARED = ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
_SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
_SASS_PEAK = "sm__sass_thread_inst_executed_op_{}_pred_on.sum.peak_sustained"
# group -> ({op: FLOPs per thread instruction}, (op whose peak rate bounds the group, FLOPs per op))
SASS_GROUPS = {
    "fp64": ({"dadd": 1, "dmul": 1, "dfma": 2}, ("dfma", 2)),
    "fp32": ({"fadd": 1, "fmul": 1, "ffma": 2}, ("ffma", 2)),
    "fp16": ({"hadd": 2, "hmul": 2, "hfma": 4}, ("hfma", 4)),
}
BASE_METRICS = (DURATION, DRAM_READ, DRAM_WRITE, DRAM_PEAK, DRAM_CLOCK, SM_CLOCK, *PERCENT_METRICS, *TENSOR_PCT,
                *LAUNCH_METRICS, *SHARED,
                *(_SASS.format(op) for ops, _ in SASS_GROUPS.values() for op in ops),
                *(_SASS_PEAK.format(op) for _, (op, _) in SASS_GROUPS.values()))
TENSOR_PREFIX = "sm__ops_path_tensor_"
TABLE_METRICS = ("dram_bytes", "dram_gbps", "sm_pct", "tensor_pct", "occupancy_pct", "registers", "shared_bytes",
                 "intensity_flop_per_byte", "pct_peak_flops", "pct_peak_bandwidth")
NVTX_PUSH_POP = "Push/Pop_Range"
SPARSE_TYPES = frozenset({"bf16", "fp16", "tf32", "fp8", "fp6", "fp4", "int8", "int4"})  # 2:4 sparse MMA types

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "n": 1e-9, "u": 1e-6, "m": 1e-3}
_BASES = ("second", "byte", "cycle", "inst", "hz", "s")
_METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]*__[a-z0-9_]+$")


def _unit_factor(term: str) -> float:
    """Scale of one unit term to its base: 'Kbyte' 1e3, 'nsecond' / 'ns' 1e-9, 'Ghz' 1e9, '%' 1."""
    t = term.strip()
    if t.lower().endswith("hz"):
        return _PREFIX.get(t[:-2].upper() if len(t) > 2 else "", 1.0)
    for base in _BASES:
        if t.endswith(base) and (base != "s" or t in ("s", "ns", "us", "ms")):
            return _PREFIX.get(t[: -len(base)], 1.0)
    return 1.0


def to_base_units(value: float, unit: str) -> float:
    """``value`` in ``unit`` (as ncu prints it: 'usecond', 'Gbyte/second', '1/ns', 'Kbyte/cycle')
    in base units (seconds, bytes, per second, per cycle)."""
    if "/" not in unit:
        return value * _unit_factor(unit)
    num, den = unit.split("/", 1)
    num_factor = 1.0 if num.strip() in ("", "1") else _unit_factor(num)
    return value * num_factor / _unit_factor(den)


def parse_number(text: str) -> float | None:
    """A number as ncu's CSV prints it (thousands separated by commas), or None ("-", "n/a", text)."""
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def benchmark_of_nvtx(cell: str) -> str:
    """The innermost benchmark range in an ncu NVTX push/pop cell, or NO_RANGE.

    A cell reads ``<tid>  "<domain>:<range>:<PL_Type>:<PL_Value>:<CLR_Type>:<Color>:<Msg_Type>:<Msg>"``
    (one quoted entry per open range); range names may hold ':' (``file.py::test``) and ``Msg`` may
    repeat the name, so each entry is split from both ends."""
    found = NO_RANGE
    for entry in re.findall(r'"([^"]*)"', cell):
        _, _, rest = entry.partition(":")
        name = _range_name(rest)
        if is_benchmark_range(name):
            found = name
    return found


def _range_name(rest: str) -> str:
    parts = rest.split(":")
    for n in range(1, len(parts) - 5):
        head = ":".join(parts[:n])
        if ":".join(parts[n + 5:]) == head:  # name:<5 fields>:name (message repeats the name)
            return head
    return ":".join(parts[:-6]) if len(parts) > 6 else rest


@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch, its metrics in base units (s, bytes, 1/s, per cycle, %)."""

    benchmark: str
    kernel: str  # the full (demangled) name ncu printed
    values: Mapping[str, float]


def parse_ncu_raw_csv(text: str) -> list[Launch]:
    """Launches from ``ncu --csv --page raw`` output: a header row, a units row, one row per launch.
    Lines before the header (``==PROF==`` messages, application output) are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(table) < 2:
        return []
    header, units = table[0], table[1]
    col = {name: i for i, name in enumerate(header)}
    nvtx_cols = [i for i, name in enumerate(header) if NVTX_PUSH_POP in name]
    if "Kernel Name" not in col:
        raise BadInputError("ncu CSV has no 'Kernel Name' column", hint="export with ncu --csv --page raw")
    metric_cols = [(i, name) for i, name in enumerate(header) if _METRIC_NAME.match(name.split(".")[0])]
    launches = []
    for row in table[2:]:
        if len(row) != len(header) or not row[col["ID"]].strip().isdigit():
            continue
        bench = next((b for b in (benchmark_of_nvtx(row[i]) for i in nvtx_cols) if b != NO_RANGE), NO_RANGE)
        values = {}
        for i, name in metric_cols:
            number = parse_number(row[i])
            if number is not None:
                values[name] = to_base_units(number, units[i] if i < len(units) else "")
        launches.append(Launch(bench, row[col["Kernel Name"]], values))
    return launches


def tensor_metrics(available: Iterable[str]) -> list[str]:
    """Tensor-core op counters to sum, each op counted once: the per-source-type paths
    (``sm__ops_path_tensor_src_bf16_dst_fp32``) when offered, else the per-instruction ones
    (``..._op_hgmma_src_...``), less any name that only refines another (``..._sparsity_off``)."""
    names = {n for n in available if n.startswith(TENSOR_PREFIX)}
    generic = {n for n in names if not n.startswith(TENSOR_PREFIX + "op_")}
    names = generic or names
    return sorted(n for n in names if not any(n != m and n.startswith(m + "_") for m in names))


def exported_tensor_metrics(launches: Iterable[Launch]) -> list[str]:
    """The tensor-core op counters an export holds (when ``ncu --query-metrics`` could not say)."""
    return tensor_metrics(n.removesuffix(".sum") for la in launches for n in la.values if n.endswith(".sum"))


def tensor_peak_factor(name: str) -> float:
    """ncu's tensor ops-path ``peak_sustained`` is the 2:4-sparse rate for the types that have one;
    the dense peak is half of it (H100: 8192 bf16 FLOP/clk/SM in ncu, 4096 dense in the datasheet)."""
    match = re.search(r"src_([a-z]+\d*)", name)
    return 0.5 if match and match.group(1) in SPARSE_TYPES else 1.0


def roofline(v: Mapping[str, float], tensor: Sequence[str]) -> dict[str, Any]:
    """FLOPs, intensity and % of peak for one launch (values in base units)."""
    sm_hz = v.get(SM_CLOCK, 0.0)
    groups: dict[str, tuple[float, float]] = {}  # group -> (flops, peak flop/s)
    for group, (ops, (peak_op, per_op)) in SASS_GROUPS.items():
        flops = sum(v.get(_SASS.format(op), 0.0) * k for op, k in ops.items())
        groups[group] = (flops, v.get(_SASS_PEAK.format(peak_op), 0.0) * per_op * sm_hz)
    for name in tensor:
        peak = v.get(f"{name}.sum.peak_sustained", 0.0) * tensor_peak_factor(name) * sm_hz
        groups["tensor_" + name.removeprefix(TENSOR_PREFIX)] = (v.get(f"{name}.sum", 0.0), peak)
    flops = sum(f for f, _ in groups.values())
    dram = v.get(DRAM_READ, 0.0) + v.get(DRAM_WRITE, 0.0)
    seconds = v.get(DURATION, 0.0)
    dominant = max(groups, key=lambda g: groups[g][0]) if flops > 0 else ""
    out: dict[str, Any] = {"flops": flops, "dram_bytes": dram, "precision": dominant}
    out["intensity_flop_per_byte"] = flops / dram if dram else None
    if seconds > 0 and dominant and groups[dominant][1] > 0:
        out["pct_peak_flops"] = 100.0 * groups[dominant][0] / seconds / groups[dominant][1]
    peak_bw = v.get(DRAM_PEAK, 0.0) * v.get(DRAM_CLOCK, 0.0)
    if seconds > 0 and peak_bw > 0:
        out["pct_peak_bandwidth"] = 100.0 * dram / seconds / peak_bw
        out["peak_bandwidth_gbps"] = peak_bw / 1e9
    if dominant and groups[dominant][1] > 0:
        out["peak_tflops"] = groups[dominant][1] / 1e12
    return out


@dataclass(frozen=True)
class KernelSummary:
    row: KernelRow
    precision: str  # the dominant FLOP group ("" when none)


def summarise(launches: Sequence[Launch], tensor: Sequence[str] | None = None) -> list[KernelSummary]:
    """Per benchmark and kernel: launches, total time, metrics over its launches (bytes and FLOPs
    summed, rates over the total time, percentages time-weighted, registers and shared memory max)."""
    if tensor is None:
        tensor = exported_tensor_metrics(launches)
    groups: dict[tuple[str, str], list[Launch]] = defaultdict(list)
    for la in launches:
        groups[(la.benchmark, la.kernel)].append(la)
    out = []
    for (bench, kernel), items in groups.items():
        seconds = sum(la.values.get(DURATION, 0.0) for la in items)
        roofs = [roofline(la.values, tensor) for la in items]
        flops, dram = sum(r["flops"] for r in roofs), sum(r["dram_bytes"] for r in roofs)
        m: dict[str, float] = {"dram_bytes": dram, "flops": flops}
        if seconds > 0:
            m["dram_gbps"] = dram / seconds / 1e9
            m["tflops"] = flops / seconds / 1e12
        if dram:
            m["intensity_flop_per_byte"] = flops / dram
        weights = [la.values.get(DURATION, 0.0) for la in items]
        for key in ("pct_peak_flops", "pct_peak_bandwidth", "peak_tflops", "peak_bandwidth_gbps"):
            _weighted(m, key, [(r.get(key), w) for r, w in zip(roofs, weights, strict=True)])
        for metric, key in PERCENT_METRICS.items():
            _weighted(m, key, [(la.values.get(metric), w) for la, w in zip(items, weights, strict=True)])
        tensor_pct = next((t for t in TENSOR_PCT if any(t in la.values for la in items)), None)
        if tensor_pct is not None:
            _weighted(m, "tensor_pct", [(la.values.get(tensor_pct), w) for la, w in zip(items, weights, strict=True)])
        for metric, key in LAUNCH_METRICS.items():
            if any(metric in la.values for la in items):
                m[key] = max(la.values.get(metric, 0.0) for la in items)
        if any(s in la.values for la in items for s in SHARED):
            m["shared_bytes"] = max(sum(la.values.get(s, 0.0) for s in SHARED) for la in items)
        category, kind = classify_kernel(kernel)
        precisions = [r["precision"] for r in roofs if r["precision"]]
        row = KernelRow(bench, display_kernel_name(kernel), category, kind, len(items), seconds * 1e3, metrics=m)
        out.append(KernelSummary(row, max(set(precisions), key=precisions.count) if precisions else ""))
    return out


def _weighted(m: dict[str, float], key: str, pairs: list[tuple[float | None, float]]) -> None:
    known = [(v, w) for v, w in pairs if v is not None]
    total = sum(w for _, w in known)
    if known:
        m[key] = sum(v * w for v, w in known) / total if total > 0 else sum(v for v, _ in known) / len(known)


def summary_json(summaries: Sequence[KernelSummary], source: Path, tensor: Sequence[str]) -> dict[str, Any]:
    ranges: dict[str, dict[str, Any]] = {}
    for s in sorted(summaries, key=lambda s: (s.row.benchmark, -s.row.time_ms)):
        r = ranges.setdefault(s.row.benchmark, {"kernel_count": 0, "kernel_time_ms": 0.0, "kernels": []})
        r["kernel_count"] += s.row.count
        r["kernel_time_ms"] += s.row.time_ms
        r["kernels"].append({"name": s.row.name, "category": s.row.category, "kind": s.row.kind,
                             "count": s.row.count, "time_ms": s.row.time_ms, "precision": s.precision,
                             "metrics": dict(s.row.metrics)})
    return {"schema_version": SCHEMA_VERSION, "tool": "ncu", "source": str(source),
            "tensor_flop_metrics": [f"{n}.sum" for n in tensor], "ranges": ranges}


def available_metrics(ncu: str) -> set[str] | None:
    """Base metric names this ncu offers for the GPU here (``ncu --query-metrics``); None if unknown."""
    try:
        done = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, check=False, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = {ln.split()[0] for ln in done.stdout.splitlines() if ln.strip() and _METRIC_NAME.match(ln.split()[0])}
    return names or None


def metric_list(available: set[str] | None) -> tuple[list[str], list[str]]:
    """(metrics to request, tensor counters used): the base list (less what this ncu lacks) and the
    tensor-core op counters with their peaks."""
    tensor = tensor_metrics(available) if available else []
    wanted = [*BASE_METRICS, *(f"{n}.sum" for n in tensor), *(f"{n}.sum.peak_sustained" for n in tensor)]
    if available:
        wanted = [m for m in wanted if m.split(".")[0] in available]
    return wanted, tensor


def profile_command(ncu: str, stem: Path, child: Sequence[str], *, section_set: str, metrics: Sequence[str],
                    nvtx_filter: str | None = NVTX_FILTER) -> list[str]:
    nvtx = ["--nvtx", "--nvtx-include", nvtx_filter] if nvtx_filter else ["--nvtx"]
    return [ncu, "--clock-control", "none", *nvtx, "--target-processes", "all", "--set", section_set,
            "--metrics", ",".join(metrics), "--force-overwrite", "--export", str(stem), *child]


def export_raw_csv(ncu: str, report: Path) -> Path:
    """``DIR/ncu_raw.csv`` from the report (base units, demangled names; plain options if refused)."""
    target = report.with_name("ncu_raw.csv")
    base = [ncu, "--import", str(report), "--csv", "--page", "raw"]
    for extra in (["--print-units", "base", "--print-kernel-base", "demangled"], []):
        try:
            done = subprocess.run([*base, *extra], capture_output=True, text=True, check=False, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InfrastructureError(f"ncu --import {report} failed: {exc}", hint="the report is kept") from None
        if done.returncode == 0 and '"ID"' in done.stdout:
            target.write_text(done.stdout, encoding="utf-8")
            return target
    raise tool_failed(f"ncu --import {report} --csv --page raw failed", done, hint="the report is kept")


class NcuProfiler:
    name = "ncu"
    help = "Nsight Compute: per-kernel DRAM, SM, tensor, occupancy and roofline place per benchmark (keeps .ncu-rep)"

    def __init__(self, section_set: str = "basic", nvtx_filter: str | None = NVTX_FILTER) -> None:
        if section_set not in SETS:
            raise BadInputError(f"--set {section_set!r}: not one of {', '.join(SETS)}")
        self.section_set = section_set
        self.nvtx_filter = nvtx_filter

    def run(self, pytest_args: list[str], out_dir: Path, options: Mapping[str, str] | None = None) -> ProfileRun:
        """``options``: {"set": "basic" | "full"} (``perfci profile --ncu --set``)."""
        section_set = (options or {}).get("set", self.section_set)
        return NcuProfiler(section_set, self.nvtx_filter).profile_command(pytest_child(pytest_args), out_dir)

    def profile_command(self, child: Sequence[str], out_dir: Path) -> ProfileRun:
        """Profile any command that pushes perfci's ranges (the pytest child, or a script)."""
        exe = require_tool("ncu")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / "perfci"
        report = stem.with_suffix(".ncu-rep")
        report.unlink(missing_ok=True)
        metrics, tensor = metric_list(available_metrics(exe))
        child_exit = run_tool(profile_command(exe, stem, child, section_set=self.section_set, metrics=metrics,
                                              nvtx_filter=self.nvtx_filter))
        if not report.is_file():
            raise InfrastructureError(
                f"ncu profiled no kernel inside a perfci benchmark range (no {report}; exit {child_exit})",
                hint=f"ncu's filter was --nvtx-include '{self.nvtx_filter}': check that the tests call perf(...) "
                     "and that the nvtx package is installed (ranges in domain 'perfci')")
        raw = export_raw_csv(exe, report)
        launches = parse_ncu_raw_csv(raw.read_text(encoding="utf-8", errors="replace"))
        used = tensor or exported_tensor_metrics(launches)
        summaries = summarise(launches, used)
        summary = out_dir / SUMMARY_NAME
        write_atomic(summary, summary_json(summaries, report, used))
        return ProfileRun(tuple(s.row for s in summaries), (report, raw, summary), summary, child_exit, TABLE_METRICS,
                          (), "ncu")


def _bound(metrics: Mapping[str, Any]) -> str | None:
    """'compute' or 'memory': which roof a kernel is nearer to (None without both percentages)."""
    flops, bandwidth = metrics.get("pct_peak_flops"), metrics.get("pct_peak_bandwidth")
    if flops is None or bandwidth is None:
        return None
    return "compute" if flops >= bandwidth else "memory"


TENSOR_LOST_PCT = (20.0, 5.0)  # tensor-pipe use from at least 20 % down to under 5 %: the matrix units went unused


def bound_changes(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per benchmark, the kernels (by name, in both summaries) that moved from compute-bound to
    memory-bound or lost tensor-pipe use, each as one line. Both are ``ncu_summary.json`` documents."""
    out: dict[str, list[str]] = {}
    for bench, now in (new.get("ranges") or {}).items():
        before = {k["name"]: k for k in ((base.get("ranges") or {}).get(bench) or {}).get("kernels", [])}
        for kernel in now.get("kernels", []):
            old = before.get(kernel["name"])
            if old is None:
                continue
            m_old, m_new = old.get("metrics") or {}, kernel.get("metrics") or {}
            if _bound(m_old) == "compute" and _bound(m_new) == "memory":
                out.setdefault(bench, []).append(
                    f"{kernel['name']} moved from compute-bound ({m_old['pct_peak_flops']:.0f}% of peak FLOP/s) to "
                    f"memory-bound ({m_new['pct_peak_bandwidth']:.0f}% of peak bandwidth, "
                    f"{m_new['pct_peak_flops']:.0f}% of peak FLOP/s)")
            t_old, t_new = m_old.get("tensor_pct"), m_new.get("tensor_pct")
            if t_old is not None and t_new is not None and t_old >= TENSOR_LOST_PCT[0] and t_new < TENSOR_LOST_PCT[1]:
                out.setdefault(bench, []).append(
                    f"{kernel['name']} lost tensor-pipe use ({t_old:.0f}% -> {t_new:.0f}%)")
    return out
