"""`make bench-detect`: does the gate catch real slowdowns without false alarms?

Two experiments, fresh processes throughout (needs a CUDA GPU; exit 3 without one):

1. Suite A/A. The whole suite (``tests/perf`` or --suite) runs R times (default 6) in fresh
   processes. For each run i, a baseline is made from the other runs (their samples from the
   first of them, their per-run medians as the noise floor, as `perfci baseline update --runs`
   does) and run i is judged against it: every SLOWER is a false alarm. pytest-benchmark's
   ``--benchmark-compare-fail=median:5%`` rule is applied to the same pairs (raw medians).
2. Planted slowdowns. P processes (default 8) each time n back-to-back 2048^3 bf16 GEMMs at
   n = 66 and n = 67, 68, 70 (+1.5 %, +3 %, +6 % work, exactly). Every ordered pair of different processes gives
   one base -> variant comparison per size (detection) and one base -> base (A/A), judged by perfci
   (one-run baseline) and by median:5%. The measured device-time change of each size is printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# planted work: n back-to-back 2048^3 bf16 GEMMs; one more GEMM is exactly 1/n more work
SIZES = {"base": 66, "+1.5%": 67, "+3%": 68, "+6%": 70}


def gemm_worker(args: argparse.Namespace) -> None:
    import torch

    from perfci.fingerprint import detect
    from perfci.measurement import SamplingPolicy
    from perfci.timing import GraphTimer, choose_normalization

    fp = detect()
    policy = SamplingPolicy(max_time_s=args.max_time, min_time_s=min(args.min_time, args.max_time))
    out = {}
    a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(2048, 2048, device="cuda", dtype=torch.bfloat16)
    # rotate the order per process, so that warming up over a process affects every size alike
    labels = list(SIZES)
    order = labels[args.rotate % len(labels):] + labels[:args.rotate % len(labels)]
    for label in order:
        n = SIZES[label]

        def work(n=n):
            for _ in range(n):
                torch.matmul(a, b, out=c)

        m = GraphTimer().measure(work, policy)
        m = choose_normalization(m, policy, bytes_moved=None, peak_bandwidth_gbps=fp.peak_memory_bandwidth_gbps,
                                 reference_sm_clock_mhz=fp.max_sm_clock_mhz)
        out[label] = {"gated": list(m.gated_samples_ms), "median_ms": m.median_ms, "noisy": m.noisy,
                      "noise": list(m.noise_reasons), "gated_median_ms": m.gated_median_ms,
                      "clock_mhz": m.median_sm_clock_mhz}
    print("RESULT " + json.dumps({"gpu": fp.name, "gemm": out}), flush=True)


def median5_fails(base_ms: float, new_ms: float) -> bool:
    return (new_ms - base_ms) / base_ms > 0.05


def planted(args: argparse.Namespace) -> dict:
    from perfci.compare import Sample, Verdict, compare_samples
    from perfci.stats import median

    runs = []
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--gemm-worker", "--max-time", str(args.max_time),
               "--min-time", str(args.min_time), "--rotate", str(i)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            raise SystemExit(f"gemm worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        runs.append(json.loads(lines[-1][7:])["gemm"])
        print(f"planted: process {i + 1}/{args.processes}", flush=True)
    table = {}
    base_median = median([r["base"]["median_ms"] for r in runs])
    for label in SIZES:
        change = median([r[label]["median_ms"] for r in runs]) / base_median - 1
        gated_change = median([r[label]["gated_median_ms"] for r in runs]) / median(
            [r["base"]["gated_median_ms"] for r in runs]) - 1
        ours = theirs = noisy = pairs = 0
        for i, j in itertools.permutations(range(len(runs)), 2):
            base, new = runs[i]["base"], runs[j][label]
            c = compare_samples(label, Sample(tuple(base["gated"]), base["noisy"]),
                                Sample(tuple(new["gated"]), new["noisy"]))
            pairs += 1
            ours += c.verdict is Verdict.SLOWER
            noisy += c.verdict is Verdict.NOISY
            theirs += median5_fails(base["median_ms"], new["median_ms"])
        table[label] = {"measured_change": change, "gated_change": gated_change, "pairs": pairs,
                        "clocks_mhz": [r[label]["clock_mhz"] for r in runs], "perfci_slower": ours,
                        "perfci_noisy": noisy, "median5_fail": theirs}
    return table


def suite_aa(args: argparse.Namespace) -> dict:
    from perfci.baseline import make_baseline
    from perfci.compare import Verdict
    from perfci.gate import judge_files
    from perfci.results import ResultFile, load_results

    tmp = Path(args.save_runs) if args.save_runs else Path(tempfile.mkdtemp(prefix="perfci-detect-"))
    tmp.mkdir(parents=True, exist_ok=True)
    runs: list[ResultFile] = []
    for i in range(args.suite_runs):
        out = tmp / f"run{i}.json"
        cmd = [sys.executable, "-m", "pytest", args.suite, "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}",
               f"--perfci-max-time={args.max_time}", f"--perfci-min-time={args.min_time}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
        if not out.exists():
            raise SystemExit(f"suite run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
        runs.append(load_results(out))
        print(f"suite A/A: run {i + 1}/{args.suite_runs} ({len(runs[-1].benchmarks)} benchmarks)", flush=True)
    alarms, median5, noisy, compared, per_run, reasons = [], [], 0, 0, [], []
    for i, new in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        doc = make_baseline(others, gpu=new.gpu or "", force=True)
        path = tmp / f"baseline_{i}.json"
        path.write_text(json.dumps(doc))
        verdict = judge_files(new, load_results(path))
        base = load_results(path)
        run_alarms = 0
        for o in verdict.outcomes:
            compared += 1
            if o.comparison is not None and o.comparison.verdict is Verdict.SLOWER:
                alarms.append((i, o.name, o.comparison.change_pct))
                run_alarms += 1
            if o.comparison is not None and o.comparison.verdict is Verdict.NOISY:
                noisy += 1
                reasons.append(f"{o.name}: {'; '.join(o.comparison.reasons)[:200]}")
            b = base.benchmarks.get(o.name)
            if b is not None and median5_fails(b.median_ms, new.benchmarks[o.name].median_ms):
                median5.append((i, o.name))
        per_run.append(run_alarms)
    return {"runs": args.suite_runs, "benchmarks": len(runs[0].benchmarks), "comparisons": compared,
            "false_alarms": alarms, "false_alarms_per_run": per_run, "noisy": noisy, "median5_false_alarms": median5,
            "noisy_reasons": reasons}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="tests/perf")
    ap.add_argument("--suite-runs", type=int, default=6)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--max-time", type=float, default=2.0)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--skip-suite", action="store_true")
    ap.add_argument("--save-runs", default=None, help="keep the suite's result files here (run<i>.json)")
    ap.add_argument("--out", default="reports/bench_detect.json")
    ap.add_argument("--gemm-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rotate", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gemm_worker:
        gemm_worker(args)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("bench-detect needs a CUDA GPU; none is visible (exit 3)", file=sys.stderr)
        return 3
    result = {"gpu": torch.cuda.get_device_name(), "planted": planted(args)}
    if not args.skip_suite:
        result["suite_aa"] = suite_aa(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"\nGPU: {result['gpu']}")
    print(f"{'planted (GEMMs)':18s} {'measured':>9s} {'pairs':>6s} {'perfci SLOWER':>14s} {'NOISY':>6s} "
          f"{'median:5% fail':>15s}")
    for label, row in result["planted"].items():
        n = row["pairs"]
        print(f"{label:18s} {row['measured_change'] * 100:+8.2f}% {n:6d} {row['perfci_slower'] / n:13.1%} "
              f"{row['perfci_noisy']:6d} {row['median5_fail'] / n:14.1%}"
              f"   (at ref clock {row['gated_change'] * 100:+.2f}%)")
    if "suite_aa" in result:
        aa = result["suite_aa"]
        print(f"suite A/A: {aa['runs']} fresh-process runs x {aa['benchmarks']} benchmarks, each judged against a "
              f"baseline of the other runs: {len(aa['false_alarms'])} false alarms "
              f"(per run {aa['false_alarms_per_run']}), "
              f"{aa['noisy']} NOISY; median:5% false alarms: {len(aa['median5_false_alarms'])}")
        for reason in aa["noisy_reasons"][:8]:
            print(f"  NOISY: {reason}")
        for alarm in aa["false_alarms"]:
            print(f"  false alarm: run {alarm[0]} {alarm[1]} {alarm[2]:+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
