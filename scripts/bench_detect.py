"""`make bench-detect`: does the gate catch real slowdowns without false alarms?

Fresh processes throughout, laid out the way CI meets them: the baseline and the candidate are
different processes that time the same benchmark at the same point of their run.

1. Planted slowdowns. One process per job times n back-to-back 2048^3 bf16 GEMMs (one CUDA graph)
   at n = 66 ("base") or n = 67, 68, 70: +1.5 %, +3 %, +6 % work, exactly. Jobs take turns across
   the sizes (base, +1.5 %, +3 %, +6 %, base, ...) so drift of the card over the experiment touches
   every size alike. Every (base process, variant process) pair is one detection trial; every
   ordered pair of base processes is one A/A trial. Judged three ways: perfci against a one-run
   baseline; perfci against a five-run baseline (five base processes with their run medians, as
   `perfci baseline update --from r1 ... r5` stores, when there are six or more); and pytest-
   benchmark's ``--benchmark-compare-fail=median:5%`` rule on the same pairs (raw medians). The
   measured device-time change of each size is printed raw and at the reference SM clock.
2. Suite A/A. The whole suite (``tests/perf`` or --suite) runs R times (default 5) in fresh
   processes. Each run is judged against a baseline made from the other runs (as `perfci baseline
   update` makes it): every SLOWER is a false alarm. median:5% is applied to the same pairs.

Both are also judged as `perfci run` judges them: a SLOWER is re-measured by another fresh process
of the same job (another planted process of that size; another suite run, with the baseline made
from the remaining runs) and decided on the two pooled (``perfci.confirm``).

Collection needs a CUDA GPU (exit 3 without one) and writes one JSON file per process under
--dir; analysis reads them back and runs anywhere (``--analyse-only``). Collection skips jobs whose
file exists and stops starting jobs after --time-budget seconds, so a long experiment can be
gathered over several calls into one directory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfci.record import write_atomic  # noqa: E402  (after the path insert; imports no torch)
from scripts.detect_sim import median5_fails  # noqa: E402

# planted work: n back-to-back 2048^3 bf16 GEMMs; one more GEMM is exactly 1/n more work
SIZES = {"base": 66, "+1.5%": 67, "+3%": 68, "+6%": 70}


def gemm_worker(args: argparse.Namespace) -> None:
    import torch

    from perfci.fingerprint import detect
    from perfci.measurement import SamplingPolicy
    from perfci.normalize import measure_compared
    from perfci.timing import GraphTimer

    fp = detect()
    policy = SamplingPolicy(max_time_s=args.max_time, min_time_s=min(args.min_time, args.max_time))
    a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(2048, 2048, device="cuda", dtype=torch.bfloat16)
    n = SIZES[args.label]

    def work() -> None:
        for _ in range(n):
            torch.matmul(a, b, out=c)

    m = measure_compared(GraphTimer(), work, policy, fp)
    doc = {"gpu": fp.name, "slug": fp.slug, "fingerprint": fp.machine_info(), "label": args.label, "gemms": n,
           "samples_ms": list(m.samples_ms), "sm_clock_mhz": list(m.sample_sm_clock_mhz),
           "gated_ms": list(m.compared_samples_ms), "median_ms": m.median_ms, "gated_median_ms": m.compared_median_ms,
           "clock_mhz": m.median_sm_clock_mhz, "noisy": m.noisy, "noise": list(m.noise_reasons),
           "normalization": m.normalization, "reference_sm_clock_mhz": m.reference_sm_clock_mhz}
    write_atomic(Path(args.output), doc)


# -- collection (GPU) -------------------------------------------------------------------------------

def collect(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    t0 = time.monotonic()
    jobs: list[tuple[str, Path, list[str]]] = []
    for k in range(args.planted_start, args.planted_start + args.planted_processes):
        for label in SIZES:
            out = root / "planted" / f"{label}_{k}.json"
            jobs.append((f"planted {label} #{k}", out,
                         [sys.executable, __file__, "--gemm-worker", "--label", label, "--output", str(out),
                          "--max-time", str(args.max_time), "--min-time", str(args.min_time)]))
    for i in range(args.suite_start, args.suite_start + args.suite_runs):
        out = root / "suite" / f"run{i}.json"
        jobs.append((f"suite run #{i}", out,
                     [sys.executable, "-m", "pytest", args.suite, "-q", "-p", "no:cacheprovider",
                      f"--benchmark-json={out}", f"--perfci-max-time={args.max_time}",
                      f"--perfci-min-time={args.min_time}"]))
    todo = [job for job in jobs if not job[1].exists()]
    print(f"bench-detect: {len(todo)} of {len(jobs)} jobs to run into {root}", flush=True)
    for done, (what, out, cmd) in enumerate(todo):
        elapsed = time.monotonic() - t0
        if args.time_budget and elapsed > args.time_budget:
            print(f"time budget of {args.time_budget:.0f} s spent; {len(todo) - done} job(s) left for the next call",
                  flush=True)
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
        if not out.exists():
            raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        print(f"[{done + 1}/{len(todo)}] {what}: {time.monotonic() - started:.0f} s", flush=True)


# -- analysis (anywhere) ----------------------------------------------------------------------------

def _samples(docs: list[dict], key: str) -> list:
    """One comparison side per process document: its gated (key="gated_ms") or raw samples."""
    from perfci.compare import Sample

    return [Sample(tuple(d[key]), d["noisy"], tuple(d["noise"])) for d in docs]


def analyse_planted(root: Path) -> dict:
    from perfci.compare import compare_samples
    from perfci.stats import median

    runs: dict[str, list[dict]] = {label: [] for label in SIZES}
    def round_of(path: Path) -> int:
        return int(path.stem.rsplit("_", 1)[1])

    for path in sorted((root / "planted").glob("*.json"), key=round_of):
        doc = json.loads(path.read_text())
        doc["round"] = round_of(path)  # processes of one round ran back to back
        runs[doc["label"]].append(doc)
    bases = runs["base"]
    if len(bases) < 2:
        return {}
    base_sides = {key: _samples(bases, key) for key in ("gated_ms", "samples_ms")}
    # five-run baselines, as `perfci baseline update --from r1 .. r5` stores them: every 5-subset of the
    # base processes (the first one's samples, the five gated medians), judged against every other process
    five_run = [(set(subset), replace(base_sides["gated_ms"][subset[0]],
                                      run_medians_ms=tuple(bases[i]["gated_median_ms"] for i in subset)))
                for subset in itertools.combinations(range(len(bases)), 5)] if len(bases) >= 6 else []
    one_run = [({i}, base_sides["gated_ms"][i]) for i in range(len(bases))]
    base_median = median([d["median_ms"] for d in bases])
    base_gated_median = median([d["gated_median_ms"] for d in bases])
    table: dict[str, dict] = {}
    for label, variants in runs.items():
        if not variants:
            continue
        same = label == "base"  # A/A: a process is never judged against a baseline it is part of
        pairs = [(i, j) for i in range(len(bases)) for j in range(len(variants)) if not (same and i == j)]
        new_sides = base_sides if same else {key: _samples(variants, key) for key in base_sides}
        # one pass and perfci run's confirmation: a SLOWER (base, process j) is re-measured by another
        # process k of the same size, and judged on j and k pooled; one trial per (baseline, j, k)
        first_1, confirmed_1 = _confirmed(label, one_run, variants, new_sides["gated_ms"], same)
        first_5, confirmed_5 = (_confirmed(label, five_run, variants, new_sides["gated_ms"], same)
                                if five_run else ([], None))
        raw = [compare_samples(label, base_sides["samples_ms"][i], new_sides["samples_ms"][j]).verdict
               for i, j in pairs]
        row: dict = {"processes": len(variants),
                     "measured_change": median([d["median_ms"] for d in variants]) / base_median - 1,
                     "gated_change": median([d["gated_median_ms"] for d in variants]) / base_gated_median - 1,
                     "clocks_mhz": [round(d["clock_mhz"] or 0.0) for d in variants],
                     "noisy_runs": sum(d["noisy"] for d in variants),
                     "perfci": _counts(first_1, len(first_1)),
                     "perfci_raw": _counts(raw, len(pairs)),
                     "median5": {"pairs": len(pairs), "slower": sum(
                         median5_fails(bases[i]["median_ms"], variants[j]["median_ms"]) for i, j in pairs)}}
        if five_run:
            row["perfci_5run"] = _counts(first_5, len(first_5))
        row["perfci_confirmed"] = confirmed_1
        if five_run:
            row["perfci_5run_confirmed"] = confirmed_5
            row["perfci_5run_ab"] = _ab_confirmed(label, five_run, bases, variants, same, first_5)
        table[label] = row
    return {"gpu": bases[0]["gpu"], "fingerprint": bases[0].get("fingerprint"), "sizes": table}


def _confirmed(label: str, baselines: list, docs: list[dict], sides: list, same_processes: bool) -> tuple[list, dict]:
    """The one-pass verdicts of every (baseline, process j), and the confirmation trials (baseline, j,
    confirming process k) with how many ended SLOWER after pooling."""
    from perfci.compare import Verdict, compare_samples

    pooled: dict[tuple[int, int], object] = {}  # the pooled side of (j, k): j's run median, then k's
    first_verdicts = []
    trials = slower = first_slower = 0
    for used, base in baselines:
        for j, first in enumerate(sides):
            if same_processes and j in used:
                continue
            others = [k for k in range(len(sides)) if k != j and not (same_processes and k in used)]
            trials += len(others)
            verdict = compare_samples(label, base, first).verdict
            first_verdicts.append(verdict)
            if verdict is not Verdict.SLOWER:
                continue
            first_slower += len(others)
            for k in others:
                if (j, k) not in pooled:  # as perfci.confirm.pooled records it
                    pooled[j, k] = replace(sides[k], run_medians_ms=(docs[j]["gated_median_ms"],
                                                                     docs[k]["gated_median_ms"]))
                slower += compare_samples(label, base, pooled[j, k]).verdict is Verdict.SLOWER
    return first_verdicts, {"pairs": trials, "slower": slower, "first_pass_slower": first_slower}


def _record(doc: dict, label: str):
    from perfci.record import BenchmarkRecord

    return BenchmarkRecord(name=label, timer="graph", device_time=True, median_ms=doc["median_ms"],
                           compared_samples_ms=tuple(doc["gated_ms"]), noise_reasons=tuple(doc["noise"]))


def _ab_confirmed(label: str, baselines: list, bases: list[dict], docs: list[dict], same: bool,
                  first_verdicts: list, max_pairs: int = 5) -> dict:
    """``perfci run --against``: a first-pass SLOWER or NOISY (against a five-run baseline) is A/B'd
    on the same card: pairs (base process, variant process) of the same round, starting at the round of
    the process judged, taken until the paired verdict resolves (at least 2 pairs) or ``max_pairs``.
    For A/A (``same``) a round has one base process, so a pair is two base processes of adjacent
    rounds (back to back in time, not interleaved): a stricter test than the real A/B.
    ``first_verdicts``: ``_confirmed``'s one-pass verdicts on the same baselines, in the same order."""
    from perfci.ab import MIN_PAIRS, paired_verdict
    from perfci.compare import Verdict

    by_round = {d["round"]: d for d in bases}
    rounds = sorted(by_round)
    mine = {d["round"]: d for d in docs}
    firsts = iter(first_verdicts)
    trials = slower = sent = 0
    pairs_used: list[int] = []
    for used, _base in baselines:
        for j, doc in enumerate(docs):
            if same and j in used:
                continue
            trials += 1
            first = next(firsts)
            if first not in (Verdict.SLOWER, Verdict.NOISY):
                continue
            sent += 1
            start = rounds.index(doc["round"]) if doc["round"] in by_round else 0
            order = rounds[start:] + rounds[:start]
            if same:  # (process r, process r+1): two base processes back to back
                pairs = [(by_round[r], by_round[order[(i + 1) % len(order)]]) for i, r in enumerate(order)]
            else:
                pairs = [(by_round[r], mine[r]) for r in order if r in mine]
            refs, curs, final = [], [], first
            for ref_doc, cur_doc in pairs[:max_pairs]:
                refs.append(_record(ref_doc, label))
                curs.append(_record(cur_doc, label))
                final = paired_verdict(label, refs, curs).comparison.verdict
                if len(refs) >= MIN_PAIRS and final in (Verdict.SLOWER, Verdict.FASTER, Verdict.SAME):
                    break
            pairs_used.append(len(refs))
            slower += final is Verdict.SLOWER
    return {"pairs": trials, "slower": slower, "sent_to_ab": sent,
            "mean_ab_pairs": round(sum(pairs_used) / len(pairs_used), 2) if pairs_used else 0.0}


def _counts(verdicts: list, pairs: int) -> dict:
    from perfci.compare import Verdict

    return {"pairs": pairs, "slower": verdicts.count(Verdict.SLOWER), "noisy": verdicts.count(Verdict.NOISY),
            "faster": verdicts.count(Verdict.FASTER)}


def analyse_suite(root: Path) -> dict:
    from perfci.baseline import make_baseline
    from perfci.compare import Verdict
    from perfci.gate import judge_files
    from perfci.record import load_results

    files = sorted((root / "suite").glob("run*.json"), key=lambda p: int(p.stem[3:]))
    runs = [load_results(p) for p in files]
    if len(runs) < 2:
        return {}
    alarms, median5, noisy, compared, per_run, reasons = [], [], 0, 0, [], []
    for i, new in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        base = make_baseline(others, gpu=new.gpu or "", force=True, path=root / f"baseline_without_{i}.json")
        verdict = judge_files(new, base)
        run_alarms = 0
        for o in verdict.outcomes:
            compared += 1
            c = o.comparison
            if c is not None and c.verdict is Verdict.SLOWER:
                alarms.append((i, o.name, c.change_pct))
                run_alarms += 1
            if c is not None and c.verdict is Verdict.NOISY:
                noisy += 1
                reasons.append(f"{o.name}: {'; '.join(c.reasons)[:200]}")
            b = base.benchmarks.get(o.name)
            if b is not None and median5_fails(b.median_ms, new.benchmarks[o.name].median_ms):
                median5.append((i, o.name))
        per_run.append(run_alarms)
    return {"runs": len(runs), "benchmarks": len(runs[0].benchmarks), "comparisons": compared,
            "false_alarms": alarms, "false_alarms_per_run": per_run, "noisy": noisy, "median5_false_alarms": median5,
            "noisy_reasons": reasons, "gpu": runs[0].gpu, "confirmed": _suite_confirmed(root, runs)}


def _suite_confirmed(root: Path, runs: list) -> dict:
    """perfci run's two passes on the A/A runs: run i against a baseline of the runs other than i and k,
    its SLOWERs re-measured by run k and judged pooled (leave-two-out: every ordered pair i, k)."""
    from perfci.baseline import make_baseline
    from perfci.confirm import pooled, to_confirm
    from perfci.gate import judge_files

    if len(runs) < 3:
        return {}
    first_alarms, confirmed, compared = [], [], 0
    baselines: dict[frozenset, object] = {}  # (i, k) and (k, i) leave the same runs out
    for i, k in itertools.permutations(range(len(runs)), 2):
        pair = frozenset((i, k))
        if pair not in baselines:
            others = [r for j, r in enumerate(runs) if j not in pair]
            baselines[pair] = make_baseline(others, gpu=runs[i].gpu or "", force=True,
                                            path=root / f"baseline_without_{min(pair)}_{max(pair)}.json")
        base = baselines[pair]
        first = judge_files(runs[i], base)
        compared += len(first.outcomes)
        names = to_confirm(first)
        first_alarms += [(i, k, n) for n in names]
        final = first
        if names:
            merged = replace(runs[i], benchmarks={**runs[i].benchmarks, **{
                n: pooled(runs[i].benchmarks[n], runs[k].benchmarks[n]) for n in names if n in runs[k].benchmarks}})
            final = judge_files(merged, base)
        confirmed += [(i, k, o.name, o.comparison.change_pct) for o in final.outcomes if o.timing_failed]
    return {"baseline_runs": len(runs) - 2, "comparisons": compared, "first_pass_false_alarms": len(first_alarms),
            "false_alarms": confirmed}


def _rate(cell: dict | None) -> str:
    if not cell or not cell["pairs"]:
        return "-"
    return f"{cell['slower'] / cell['pairs']:.1%} ({cell['slower']}/{cell['pairs']})"


def print_report(result: dict) -> None:
    planted = result.get("planted") or {}
    if planted:
        print(f"\nplanted slowdowns on {planted['gpu']} (one process per job; n x 2048^3 bf16 GEMMs)")
        print(f"{'planted work':12s} {'procs':>5s} {'raw':>8s} {'ref clk':>8s} {'perfci 1-run':>20s} "
              f"{'perfci 5-run':>22s} {'NOISY':>5s} {'median:5%':>20s}")
        for label, row in planted["sizes"].items():
            print(f"{label:12s} {row['processes']:5d} {row['measured_change'] * 100:+7.2f}% "
                  f"{row['gated_change'] * 100:+7.2f}% {_rate(row['perfci']):>20s} "
                  f"{_rate(row.get('perfci_5run')):>22s} "
                  f"{row['perfci']['noisy']:5d} {_rate(row['median5']):>20s}")
        print("(base row = A/A false alarms; raw / ref clk = median device-time change vs base, as timed and at the "
              "reference SM clock)")
        print(f"\nwith perfci run's confirmation (a SLOWER re-measured by a second process, judged pooled), and "
              f"with perfci run --against (a SLOWER or NOISY A/B'd on the same card, paired per round)\n"
              f"{'planted work':12s} {'perfci 1-run':>24s} {'perfci 5-run':>26s} {'5-run + A/B':>26s} "
              f"{'sent to A/B':>11s} {'pairs':>5s}")
        for label, row in planted["sizes"].items():
            ab = row.get("perfci_5run_ab") or {}
            print(f"{label:12s} {_rate(row.get('perfci_confirmed')):>24s} "
                  f"{_rate(row.get('perfci_5run_confirmed')):>26s} {_rate(ab):>26s} "
                  f"{ab.get('sent_to_ab', 0):>11d} {ab.get('mean_ab_pairs', 0.0):>5.2f}")
    aa = result.get("suite_aa") or {}
    if aa:
        print(f"\nsuite A/A on {aa['gpu']}: {aa['runs']} fresh-process runs x {aa['benchmarks']} benchmarks, each "
              f"judged against a baseline of the other runs: {len(aa['false_alarms'])} false alarms "
              f"(per run {aa['false_alarms_per_run']}), {aa['noisy']} NOISY of {aa['comparisons']}; "
              f"median:5% false alarms: {len(aa['median5_false_alarms'])}")
        for reason in aa["noisy_reasons"][:10]:
            print(f"  NOISY: {reason}")
        for alarm in aa["false_alarms"]:
            print(f"  false alarm: run {alarm[0]} {alarm[1]} {alarm[2]:+.2f}%")
        for run, name in aa["median5_false_alarms"]:
            print(f"  median:5% false alarm: run {run} {name}")
        conf = aa.get("confirmed") or {}
        if conf:
            print(f"with perfci run's confirmation (run i vs a baseline of {conf['baseline_runs']} other runs, its "
                  f"SLOWERs re-measured by run k, every ordered pair i, k): {conf['first_pass_false_alarms']} "
                  f"first-pass SLOWER, {len(conf['false_alarms'])} confirmed, of {conf['comparisons']} comparisons")
            for i, k, name, change in conf["false_alarms"]:
                print(f"  confirmed false alarm: run {i} (re-measured by run {k}) {name} {change:+.2f}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="reports/bench_detect", help="where the per-process files go (and are read)")
    ap.add_argument("--suite", default="tests/perf")
    ap.add_argument("--suite-runs", type=int, default=5)
    ap.add_argument("--suite-start", type=int, default=0, help="index of the first suite run (to add runs)")
    ap.add_argument("--planted-processes", type=int, default=6, help="processes per planted size")
    ap.add_argument("--planted-start", type=int, default=0, help="index of the first planted process")
    ap.add_argument("--max-time", type=float, default=2.0)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--time-budget", type=float, default=0.0, help="start no new job after this many seconds")
    ap.add_argument("--collect-only", action="store_true")
    ap.add_argument("--analyse-only", action="store_true", help="analyse --dir; needs no GPU")
    ap.add_argument("--out", default=None, help="summary JSON (default: <dir>/summary.json)")
    ap.add_argument("--gemm-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--label", choices=list(SIZES), default="base", help=argparse.SUPPRESS)
    ap.add_argument("--output", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gemm_worker:
        gemm_worker(args)
        return 0
    if not args.analyse_only:
        import torch

        if not torch.cuda.is_available():
            print("bench-detect collects on a CUDA GPU and none is visible (exit 3); "
                  "use --analyse-only --dir DIR to analyse files gathered elsewhere", file=sys.stderr)
            return 3
        collect(args)
        if args.collect_only:
            return 0
    root = Path(args.dir)
    if not root.is_dir():
        print(f"bench-detect: {root} does not exist; collect first (exit 2)", file=sys.stderr)
        return 2
    result = {"planted": analyse_planted(root), "suite_aa": analyse_suite(root)}
    if not result["planted"] and not result["suite_aa"]:
        print(f"bench-detect: nothing to analyse under {root} (need >= 2 base processes or suite runs)",
              file=sys.stderr)
        return 2
    write_atomic(Path(args.out) if args.out else root / "summary.json", result)
    print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
