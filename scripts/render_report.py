"""Render the HTML report end to end from a stored baseline with planted changes (no GPU needed).

The baseline's stored runs become result files (each benchmark's samples rescaled to that run's
median), so the changes and the history show the baseline's real between-run movement. The last run
is "now", judged against the baseline, with two planted changes: (1) one benchmark 25 % slower (its
compared samples and median scaled), (2) one benchmark with an added transpose copy kernel in its
kernel profile (a structural regression with a culprit line); the other runs are the history.
With ``--ncu`` the H100 Nsight Compute capture in tests/data/nsight (a 4096³ bf16 GEMM and a 256 MiB
copy) is attached to the suite's equivalents (test_torch_ops.py::test_gemm / ::test_copy_256mb) for
the roofline section: a demo of the section, not a measurement of those two benchmarks.

    python scripts/render_report.py [--baseline FILE] [--out report.html] [--ncu] [--screenshot PNG]
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfci import gate, html_report, ncu  # noqa: E402
from perfci.fingerprint import Fingerprint  # noqa: E402
from perfci.record import BenchmarkRecord, ResultFile, load_results  # noqa: E402
from perfci.trace import Culprit, KernelRecord  # noqa: E402

DEFAULT_BASELINE = ROOT / "baselines/NVIDIA_H100_80GB_HBM3/0001_baseline.json"
SLOWER = "matmul[4096x4096x4096-ours]"  # a substring of the benchmark planted +25 %
COPIED = "test_flash_forward[L4096-d128-full-ours]"  # ... and the one given a new copy kernel
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def scaled(record: BenchmarkRecord, factor: float) -> BenchmarkRecord:
    return dataclasses.replace(record, median_ms=record.median_ms * factor,
                               compared_samples_ms=tuple(v * factor for v in record.compared_samples_ms),
                               run_medians_ms=tuple(v * factor for v in record.run_medians_ms))


def with_copy(record: BenchmarkRecord) -> BenchmarkRecord:
    assert record.profile is not None
    copy = KernelRecord("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>", "copy", 3.0, 61.0,
                        3 * 2**26, Culprit("kernels/attention.py", 212, "flash_attention"), "transpose")
    profile = dataclasses.replace(record.profile, kernels=(*record.profile.kernels, copy),
                                  launches_per_call=record.profile.launches_per_call + 3,
                                  copy_bytes_per_call=record.profile.copy_bytes_per_call + 3 * 2**26)
    return dataclasses.replace(record, profile=profile)


def planted(run: ResultFile) -> ResultFile:
    """``run`` as a one-run result (no run medians) with the two planted changes."""
    def change(r: BenchmarkRecord) -> BenchmarkRecord:
        r = dataclasses.replace(r, run_medians_ms=())
        if SLOWER in r.name:
            return scaled(r, 1.25)
        return with_copy(r) if COPIED in r.name else r
    return run.with_benchmarks([change(r) for r in run.benchmarks.values()], path=Path("planted_run.json"))


def history_from_runs(base: ResultFile) -> list[ResultFile]:
    """One result file per stored run of the baseline: each benchmark at that run's median."""
    runs = max((len(r.run_medians_ms) for r in base.benchmarks.values()), default=0)
    out = []
    for i in range(runs):
        records = [scaled(r, r.run_medians_ms[i] / r.compared_median_ms) for r in base.benchmarks.values()
                   if len(r.run_medians_ms) > i and r.compared_median_ms > 0]
        out.append(base.with_benchmarks(records, path=Path(f"baseline_run{i}.json"), header={}))
    return out


def ncu_roofline() -> dict:
    launches = ncu.parse_ncu_raw_csv((ROOT / "tests/data/nsight/ncu_raw_h100.csv").read_text())
    ranges = ncu.summary_json(ncu.summarise(launches), Path("ncu_raw_h100.csv"), [])["ranges"]
    rename = {"test_matmul_bf16": "tests/perf/test_torch_ops.py::test_gemm",
              "test_copy_256mib": "tests/perf/test_torch_ops.py::test_copy_256mb"}
    return {next(v for k, v in rename.items() if name.endswith(k)): {k["name"]: k["metrics"] for k in r["kernels"]}
            for name, r in ranges.items()}


def screenshot(page: Path, png: Path, size: str = "1400,2400") -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(["/usr/bin/chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
                        "--hide-scrollbars", "--virtual-time-budget=8000", f"--screenshot={png}",
                        page.resolve().as_uri()], check=True, capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE)
    parser.add_argument("--out", type=Path, default=ROOT / "reports/example/report.html")
    parser.add_argument("--ncu", action="store_true", help="attach the stored H100 ncu capture (roofline)")
    parser.add_argument("--no-history", action="store_true")
    parser.add_argument("--screenshot", type=Path, help="also write a PNG of the page (headless Chromium)")
    args = parser.parse_args(argv)
    base = load_results(args.baseline)
    if base.path.resolve().is_relative_to(ROOT):  # show the repository path, not this machine's
        base = dataclasses.replace(base, path=base.path.resolve().relative_to(ROOT))
    runs = history_from_runs(base)
    # now: the baseline's last stored run (real between-run movement) with the planted changes
    new = planted(runs[-1] if runs else base)
    verdict = gate.judge_files(new, base)
    fingerprint = Fingerprint.recorded(dict(base.fingerprint)) or Fingerprint(False, "unknown", "unknown")
    page = html_report.render(verdict, [base, new], baseline=base, fingerprint=fingerprint,
                              title=f"perfci report: planted changes vs {args.baseline.parent.name}",
                              history=() if args.no_history else runs[:-1],
                              roofline=ncu_roofline() if args.ncu else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page, encoding="utf-8")
    print(f"wrote {args.out} ({len(page) / 1e6:.1f} MB); verdict counts {verdict.counts()}")
    if args.screenshot:
        screenshot(args.out, args.screenshot)
        print(f"wrote {args.screenshot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
