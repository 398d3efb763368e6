"""The CLI verbs, one function each, on parsed arguments. Output to stdout, errors as PerfCIError."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from contextlib import nullcontext
from pathlib import Path

from perfci.baseline import (
    GPU_BASELINE_RUNS,
    available,
    baseline_path,
    describe_available,
    load_baseline,
    load_for_gpu,
    locked,
    make_baseline,
    merge_baseline,
)
from perfci.errors import EXIT_OK, BadInputError, UsageError
from perfci.fingerprint import Fingerprint, detect, require_same_gpu
from perfci.gate import RunVerdict, judge_files, run_verdict
from perfci.kernelrows import format_rows
from perfci.pipeline import RunOptions, check_writable, measure_runs, run, store_ncu_summary
from perfci.profilers import registry
from perfci.record import ResultFile, load_results, require_one_gpu, write_results
from perfci.report import headline, terminal_table, write_report
from perfci.runner import RESULTS_DIR, project_root, results_path
from perfci.shard import load_shards, merge_results, parse_gpus, parse_shard, run_workers


def _resolve_defaults(args: argparse.Namespace) -> None:
    """Default locations live under the project root, wherever perfci is run from; given paths are the user's."""
    root = project_root()
    defaults: dict[str, str | Path] = {"baselines": "baselines", "results_dir": RESULTS_DIR}
    if args.verb == "run":
        defaults["report_dir"] = "reports/latest"
    for key, relative in defaults.items():
        if getattr(args, key, "absent") is None:
            setattr(args, key, root / relative)


def dispatch(args: argparse.Namespace, rest: list[str]) -> int:
    _resolve_defaults(args)
    verb = args.verb
    if verb == "run":
        return cmd_run(args, rest)
    if verb == "profile":
        return cmd_profile(args, rest)
    if verb == "ab":
        return cmd_ab(args, rest)
    if verb == "baseline":
        if args.action is None:
            raise UsageError("perfci baseline needs an action: update, show or list",
                             hint="see `perfci baseline --help`")
        return {"update": cmd_baseline_update, "show": cmd_baseline_show, "list": cmd_baseline_list}[args.action](
            args, rest)
    if verb == "compare":
        return cmd_compare(args)
    if verb == "merge":
        return cmd_merge(args)
    if verb == "report":
        return cmd_report(args)
    if verb == "env":
        return cmd_env(args)
    raise UsageError(f"unknown verb {verb!r}")


def _mode_line(fp: Fingerprint) -> str:
    if fp.gpu_available:
        return f"perfci: GPU {fp.describe()} (baseline key {fp.baseline_key})"
    return (f"perfci: no GPU found - CPU mode: host wall-clock times, structural checks at op level; "
            f"timings are reported, not gated (baseline key {fp.baseline_key})")


def cmd_run(args: argparse.Namespace, rest: list[str]) -> int:
    if args.max_pairs < 1:  # before any worker starts
        raise UsageError(f"--max-pairs must be at least 1, got {args.max_pairs}")
    if args.gpus is not None:
        return _run_on_gpus(args, rest)
    fp = detect()
    print(_mode_line(fp), flush=True)
    options = RunOptions(pytest_args=tuple(rest), baselines=None if args.no_compare else args.baselines,
                         results_dir=args.results_dir, report_dir=args.report_dir, confirm=not args.no_confirm,
                         require_baseline=args.require_baseline, against=args.against, max_pairs=args.max_pairs,
                         fail_on_noisy=args.fail_on_noisy,
                         shard=parse_shard(args.shard) if args.shard else None, profile=args.profile)
    outcome = run(options, fp)
    _print_verdict(outcome.verdict, fp)
    print(f"perfci: results {outcome.result.path}; report {', '.join(str(p) for p in outcome.report_paths)}")
    for message in outcome.messages:
        print(message, file=sys.stderr)
    return outcome.exit_code


def _run_on_gpus(args: argparse.Namespace, rest: list[str]) -> int:
    """``perfci run --gpus``: a worker per GPU, then one verdict per GPU model from its merged shards."""
    if args.shard:
        raise UsageError("--gpus and --shard do not go together: --gpus shards the suite over the GPUs itself")
    devices = parse_gpus(args.gpus)
    flags = [f"--baselines={args.baselines}", f"--max-pairs={args.max_pairs}"]
    flags += [flag for flag, on in (("--no-compare", args.no_compare), ("--no-confirm", args.no_confirm),
                                    ("--fail-on-noisy", args.fail_on_noisy),
                                    ("--require-baseline", args.require_baseline)) if on]
    flags += [f"--against={args.against}"] if args.against else []
    results = run_workers(devices, [*flags, "--", *rest], args.results_dir)
    by_model: dict[str, list[ResultFile]] = {}
    for result in results:
        by_model.setdefault(result.gpu or "unknown", []).append(result)
    outcomes, missing = [], []
    for model, shards in by_model.items():
        merged = merge_results(shards, results_path(args.results_dir, f"merged-{model}"))
        write_results(merged)
        base = None if args.no_compare else load_for_gpu(args.baselines, model)
        verdict = judge_files(merged, base)
        print(f"perfci: {model}: {len(shards)} worker(s), merged into {merged.path}")
        outcomes += verdict.outcomes
        missing += verdict.missing
    verdict = run_verdict(outcomes, missing)
    fp = Fingerprint.recorded(results[0].fingerprint) or detect()
    write_report(results, verdict, args.report_dir, f"perfci run --gpus {args.gpus}")
    _print_verdict(verdict, fp)
    return verdict.exit_code_for(args.fail_on_noisy)  # 1 when any model regressed (or stayed NOISY, if asked)


def _print_verdict(verdict: RunVerdict, fp: Fingerprint) -> None:
    """pytest already printed the per-benchmark table: the headline, each regression's evidence, then
    what stayed NOISY with its reason."""
    print(headline(verdict, fp))
    drift = sorted({line for o in verdict.outcomes for line in o.drift})
    if drift:
        print("perfci: against the baseline's machine: " + "; ".join(drift))
    for regressed in verdict.regressions:
        print(regressed.evidence())
    for noisy in verdict.noisy:
        reasons = noisy.comparison.reasons if noisy.comparison is not None else ()
        print(f"perfci: still NOISY: {noisy.name}: {'; '.join(reasons) or 'no reason recorded'}")
    for problem in verdict.problems:
        print(f"perfci: error: {problem}", file=sys.stderr)


def cmd_ab(args: argparse.Namespace, rest: list[str]) -> int:
    from perfci import ab

    fp = detect()
    print(_mode_line(fp), flush=True)
    check_writable(args.results_dir, args.report_dir)
    pytest_args = list(rest) + (["-k", args.keyword] if args.keyword else [])
    repo = ab.repo_root(Path.cwd())
    with ab.worktree(args.ref, repo) as ref, (ab.worktree(args.ref2, repo) if args.ref2 else
                                              nullcontext(ab.Tree("working tree", Path.cwd()))) as current:
        for tree in (ref, current):
            why_not = ab.needs_build(tree.root) if tree.sha else None
            if why_not:
                raise BadInputError(f"cannot A/B {tree.label}: {why_not}", hint="build it and compare result files "
                                    "with `perfci compare` instead")
        result = ab.measure_trees(ref, current, pytest_args, None, args.results_dir, max_pairs=args.max_pairs)
    base = ResultFile.empty(Path(ref.label), fp.slug).with_benchmarks(result.ref.values())
    new = ResultFile.empty(Path(current.label), fp.slug).with_benchmarks(result.current.values())
    verdict = ab.apply(judge_files(new, None), new, result, None)
    print(terminal_table(verdict, fp, f"same-card A/B: {ref.label} -> {current.label}"))
    for outcome in verdict.outcomes:
        print(f"  {outcome.name}: {outcome.notes[-1] if outcome.notes else 'not measured on both trees'}")
    if args.report_dir:
        write_report([base, new], verdict, args.report_dir, f"perfci ab {ref.label} -> {current.label}")
    return verdict.exit_code


def cmd_profile(args: argparse.Namespace, rest: list[str]) -> int:
    profiler = registry()[args.tool or "torch"]
    if args.source is not None:
        reader = getattr(profiler, "read", None)
        if reader is None or rest or args.keyword:
            raise UsageError(f"--from reads an existing export: it goes with --nsys alone, not --{profiler.name} "
                             "or pytest arguments", hint="perfci profile --nsys --from FILE.sqlite [-o DIR]")
        done = reader(args.source, args.out)
    else:
        if args.section_set is not None and profiler.name != "ncu":
            raise UsageError("--set chooses Nsight Compute's sections: it goes with --ncu")
        pytest_args = list(rest) + (["-k", args.keyword] if args.keyword else [])
        done = profiler.run(pytest_args, args.out, {"set": args.section_set} if args.section_set else None)
    if done.rows:
        print(format_rows(done.rows, metrics=done.metrics))
    for note in done.notes:
        print(f"note: {note}")
    if done.files:
        print(f"\nperfci: {profiler.name} files in {args.out}")
    return done.exit_code


def cmd_baseline_update(args: argparse.Namespace, rest: list[str]) -> int:
    fp = None if args.sources else detect()  # --from: the result files' GPU model, not this machine's
    if fp is not None:
        print(_mode_line(fp), flush=True)
    runs_wanted = args.runs if args.runs is not None else (GPU_BASELINE_RUNS if fp is not None and fp.gpu_available
                                                             else 1)
    if runs_wanted < 1:
        raise UsageError(f"--runs must be at least 1, got {runs_wanted}")
    sources = [load_results(p) for p in args.sources or ()]
    if fp is None:  # result files measured elsewhere (a GPU runner): the baseline is for their GPU model
        gpu = _one_gpu(sources)
        print(f"perfci: baseline for {gpu} from {len(sources)} result file(s) measured there", flush=True)
        if args.profile:
            raise UsageError("--profile ncu needs this machine's GPU; it cannot be combined with --from")
    else:
        gpu = fp.slug
    target = baseline_path(args.baselines, gpu)
    with locked(target.parent):
        existing = None if args.replace else load_for_gpu(args.baselines, gpu)  # a bad file fails before the runs
        runs = sources or measure_runs(rest, runs_wanted, args.results_dir)
        code = _write_baseline(args, target, gpu, runs, existing)
        if args.profile == "ncu":
            store_ncu_summary(rest, target, args.results_dir / "ncu")
        return code


def _one_gpu(runs: list[ResultFile]) -> str:
    """The GPU model of result files given to ``baseline update --from`` (all must share one)."""
    first = runs[0]
    if not first.gpu:
        raise BadInputError(f"{first.path} records no GPU (not a perfci result file?)",
                            hint="use the *_run.json files that perfci run writes, or perfci merge's output")
    require_one_gpu(runs, "give the result files of one GPU model")
    return first.gpu


def _write_baseline(args: argparse.Namespace, target: Path, gpu: str, runs: list[ResultFile],
                    existing: ResultFile | None) -> int:
    fresh = make_baseline(runs, gpu=gpu, force=args.force, path=target)
    if existing is not None:
        fresh, merged = merge_baseline(existing, fresh, runs[0])
        print(f"perfci: merged into {target}: {merged.describe()} (--replace rewrites it whole)")
    written = write_results(fresh)
    print(f"perfci: wrote {written} ({len(fresh.benchmarks)} benchmarks, {len(runs)} new run(s))")
    return EXIT_OK


def cmd_baseline_show(args: argparse.Namespace, rest: list[str]) -> int:
    gpu = args.gpu or detect().slug
    base = load_for_gpu(args.baselines, gpu)
    if base is None:
        raise BadInputError(f"no baseline for {gpu} ({baseline_path(args.baselines, gpu)})",
                            hint=describe_available(args.baselines))
    header = base.header
    print(f"{base.path}: {len(base.benchmarks)} benchmarks, written {header.get('written')}, runs {header.get('runs')}")
    fp = base.fingerprint
    print("fingerprint: " + ", ".join(f"{k}={fp.get(k)}" for k in ("name", "driver", "cuda", "torch", "triton")))
    for name, b in sorted(base.benchmarks.items()):
        noisy = " NOISY" if b.noisy else ""
        print(f"  {name}  {b.median_ms:.6g} ms  [{b.timer}, {b.normalization}]{noisy}")
    return EXIT_OK


def cmd_baseline_list(args: argparse.Namespace, rest: list[str]) -> int:
    gpus = available(args.baselines)
    if not gpus:
        print(f"{args.baselines}: no baselines yet (write one with `perfci baseline update`)")
        return EXIT_OK
    for gpu in gpus:
        try:
            base = load_baseline(baseline_path(args.baselines, gpu), gpu=gpu)
            print(f"{gpu}: {len(base.benchmarks)} benchmarks, written {base.header.get('written')}")
        except BadInputError as exc:
            print(f"{gpu}: unreadable: {exc}")
    return EXIT_OK


def _judge_pair(old: ResultFile, new: ResultFile) -> tuple[RunVerdict, Fingerprint]:
    """The verdict of ``new`` against ``old`` (one GPU model only), and the fingerprint to show with it."""
    require_same_gpu(old.gpu, new.gpu, first_what=str(old.path), second_what=str(new.path))
    return judge_files(new, old), Fingerprint.recorded(new.fingerprint) or detect()


def cmd_compare(args: argparse.Namespace) -> int:
    old, new = load_results(args.old), load_results(args.new)
    verdict, fp = _judge_pair(old, new)
    print(terminal_table(verdict, fp))
    if args.report_dir:
        write_report([old, new], verdict, args.report_dir, f"perfci compare {old.path.name} -> {new.path.name}",
                     baseline=old.path)
    return verdict.exit_code


def cmd_merge(args: argparse.Namespace) -> int:
    merged = merge_results(load_shards(args.results), args.out)
    write_results(merged)
    print(f"perfci: merged {len(args.results)} result file(s) into {args.out}: {len(merged.benchmarks)} benchmark(s)"
          + (f", {len(merged.errors)} error(s)" if merged.errors else ""))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    results = [load_results(p) for p in args.results]
    history = []
    if args.history is not None:
        if not args.history.is_dir():
            raise BadInputError(f"--history {args.history} is not a directory", hint="name a folder of result files")
        named = {p.resolve() for p in args.results}
        history = [load_results(p) for p in sorted(args.history.glob("*.json")) if p.resolve() not in named]
    verdict: RunVerdict | None = None
    if len(results) >= 2:
        verdict, fp = _judge_pair(results[0], results[-1])
    paths = write_report(results, verdict, args.out, "perfci report", history=[*history, *results[:-1]],
                         baseline=results[0].path if verdict is not None else None)
    if verdict is not None:
        print(headline(verdict, fp))
    print("perfci: wrote " + ", ".join(str(p) for p in paths))
    return verdict.exit_code if verdict is not None else EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    fp = detect()
    path = baseline_path(args.baselines, fp.slug)
    if args.json:
        print(json.dumps({**fp.machine_info(), "baseline_key": fp.baseline_key,
                          "baseline_file": str(path), "baseline_exists": path.exists(),
                          "nsys": shutil.which("nsys"), "ncu": shutil.which("ncu")}, indent=1))
        return EXIT_OK
    print(_mode_line(fp))
    for key, value in fp.machine_info().items():
        print(f"  {key}: {value}")
    print(f"  baseline: {path} ({'present' if path.exists() else 'absent'})")
    print(f"  nsys: {shutil.which('nsys') or 'not found'}; ncu: {shutil.which('ncu') or 'not found'}")
    return EXIT_OK


