"""The CLI verbs, one function each, on parsed arguments. Output to stdout, errors as PerfCIError."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from perfci.baseline import (
    GPU_BASELINE_RUNS,
    available,
    baseline_path,
    describe_available,
    load_baseline,
    load_for_gpu,
    load_or_empty,
    make_baseline,
    write_atomic,
)
from perfci.confirm import annotate, merge, to_confirm
from perfci.errors import (
    EXIT_INFRASTRUCTURE,
    EXIT_OK,
    EXIT_REGRESSION,
    BadInputError,
    InfrastructureError,
    PerfCIError,
    UsageError,
)
from perfci.fingerprint import Fingerprint, detect
from perfci.gate import RunVerdict, judge_files
from perfci.report import github_outputs, headline, in_github_actions, terminal_table, write_report
from perfci.results import ResultFile, load_results
from perfci.runner import (
    PYTEST_FAILED,
    PYTEST_INTERNAL,
    PYTEST_INTERRUPTED,
    PYTEST_NO_TESTS,
    PYTEST_OK,
    confirmation_args,
    pytest_exit_to_perfci,
    results_path,
    run_suite,
    sibling_results_path,
)


def dispatch(args: argparse.Namespace, rest: list[str]) -> int:
    verb = args.verb
    if verb == "run":
        return cmd_run(args, rest)
    if verb == "profile":
        return cmd_profile(args, rest)
    if verb == "baseline":
        if args.action is None:
            raise UsageError("perfci baseline needs an action: update, show or list",
                             hint="see `perfci baseline --help`")
        return {"update": cmd_baseline_update, "show": cmd_baseline_show, "list": cmd_baseline_list}[args.action](
            args, rest)
    if verb == "compare":
        return cmd_compare(args)
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
    fp = detect()
    print(_mode_line(fp), flush=True)
    baselines = None if args.no_compare else args.baselines
    baseline = None
    if baselines is not None:
        if args.require_baseline and not baseline_path(baselines, fp.slug).exists():
            raise BadInputError(f"no baseline for {fp.slug} in {baselines}",
                                hint=describe_available(baselines) + "; write one with `perfci baseline update`")
        baseline, note = load_or_empty(baselines, fp.slug)  # bad files fail here, before the long run
        print(f"perfci: {note}")
    confirming = baselines is not None and not args.no_confirm
    suite = run_suite(rest, out=results_path(args.results_dir), baselines=baselines,
                      extra=["--perfci-provisional"] if confirming else None)
    settled = pytest_exit_to_perfci(suite.pytest_exit)
    if settled is not None:
        print(f"perfci: pytest exited {suite.pytest_exit}: "
              + ("no benchmarks were collected" if suite.pytest_exit == PYTEST_NO_TESTS else "see its output above"),
              file=sys.stderr)
        return settled
    if not suite.results_path.exists():
        raise InfrastructureError(f"pytest wrote no result file ({suite.results_path})")
    new = load_results(suite.results_path)
    verdict = judge_files(new, baseline)
    interrupted, names = False, to_confirm(verdict) if confirming else ()
    if names:
        new, verdict, interrupted = _confirm(rest, new, verdict, names, baseline, baselines)
    paths = write_report([r for r in (baseline, new) if r is not None and r.benchmarks], verdict, args.report_dir,
                         f"perfci run on {fp.name}")
    # pytest already printed the per-benchmark table; here the verdict from the files, and the evidence
    print(headline(verdict, fp))
    for outcome in verdict.regressions:
        print(outcome.evidence())
    print(f"perfci: results {new.path}; report {', '.join(str(p) for p in paths)}")
    if confirming and in_github_actions():  # the passes left these to the final verdict
        github_outputs(verdict, fp, Path.cwd())
    if interrupted:
        print("perfci: the confirmation pass was interrupted; the verdict above stands on the first pass "
              "for what it did not re-measure", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    if suite.pytest_exit == PYTEST_FAILED and not verdict.regressions:
        print("perfci: some tests failed or errored for reasons other than a perf regression (see above)",
              file=sys.stderr)
        return EXIT_REGRESSION
    return verdict.exit_code


def _confirm(rest: list[str], first: ResultFile, first_verdict: RunVerdict, names: tuple[str, ...],
             baseline: ResultFile | None, baselines: Path) -> tuple[ResultFile, RunVerdict, bool]:
    """Re-measure ``names`` (the first pass's timing SLOWERs) in a fresh process; the run's result
    pools the two.

    Files: the first pass is copied to ``*_first.json``, the second pass is ``*_confirm.json``, and the
    merged result (what the verdict is taken on) replaces ``*_run.json`` atomically. When the second
    pass measures nothing (crash, skip, error, interruption) the first-pass verdicts stand, said so,
    and the report is still written; the third value is True when it was interrupted.
    """
    run_path = first.path
    first_path, second_path = sibling_results_path(run_path, "first"), sibling_results_path(run_path, "confirm")
    shutil.copyfile(run_path, first_path)
    first = replace(first, path=first_path)
    print(f"perfci: {len(names)} benchmark(s) read SLOWER in this pass; re-measuring them in a fresh process "
          "before failing (perfci run --no-confirm skips this):", flush=True)
    for name in names:
        print(f"  {name}", flush=True)
    second, why_not, interrupted = None, "", False
    try:
        done = run_suite(confirmation_args(rest), out=second_path, baselines=baselines,
                         extra=[f"--perfci-pool-with={first_path}", *(f"--perfci-select={n}" for n in names)])
        interrupted = done.pytest_exit in (PYTEST_INTERRUPTED, PYTEST_INTERNAL)
        second = load_results(second_path)
        why_not = f"pytest exit {done.pytest_exit}"
    except PerfCIError as exc:  # interrupted (Ctrl-C), or no usable result file (crash, nothing collected)
        interrupted = interrupted or isinstance(exc, InfrastructureError)
        why_not = str(exc)
    merged, unconfirmed = merge(first, second if second is not None else ResultFile.empty(second_path, ""), names,
                                path=run_path)
    if unconfirmed:
        print(f"perfci: the confirmation pass did not re-measure {len(unconfirmed)} benchmark(s) ({why_not}): "
              "their first-pass verdicts stand", file=sys.stderr)
    write_atomic(run_path, merged.raw)
    verdict = annotate(judge_files(merged, baseline), names, first_verdict, unconfirmed)
    for outcome in verdict.outcomes:
        if outcome.name in names:
            print(f"perfci: {outcome.name}: {outcome.notes[-1]}")
    return merged, verdict, interrupted


def cmd_profile(args: argparse.Namespace, rest: list[str]) -> int:
    tool = args.tool or "torch"
    pytest_args = list(rest)
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    if tool == "torch":
        return _profile_torch(args, pytest_args)
    from perfci.nsight import profile_with

    return profile_with(tool, pytest_args, args.out)


def _profile_torch(args: argparse.Namespace, pytest_args: list[str]) -> int:
    from perfci.trace import KernelProfile, format_profile_table

    out = args.out
    traces = out / "traces"
    suite = run_suite(pytest_args, out=out / "results.json", baselines=None,
                      extra=[f"--perfci-trace-dir={traces}", "--perfci-max-time=0.5", "--perfci-min-time=0.1"])
    settled = pytest_exit_to_perfci(suite.pytest_exit)
    if settled is not None:
        return settled
    result = load_results(suite.results_path)
    for name, bench in result.benchmarks.items():
        print(f"\n== {name}")
        if bench.profile is None:
            print("   (no profile recorded)")
            continue
        print(format_profile_table(KernelProfile.from_dict(bench.profile)))
    print(f"\nperfci: traces (Chrome/Perfetto JSON) in {traces}; results {suite.results_path}")
    return EXIT_OK if suite.pytest_exit == PYTEST_OK else EXIT_REGRESSION


def cmd_baseline_update(args: argparse.Namespace, rest: list[str]) -> int:
    fp = detect()
    print(_mode_line(fp), flush=True)
    if args.runs is None:
        args.runs = GPU_BASELINE_RUNS if fp.gpu_available and not args.sources else 1
    if args.runs < 1:
        raise UsageError(f"--runs must be at least 1, got {args.runs}")
    if args.sources:
        runs = [load_results(p) for p in args.sources]
    else:
        runs = []
        for i in range(args.runs):
            print(f"perfci: baseline run {i + 1}/{args.runs}", flush=True)
            suite = run_suite(rest, out=results_path(args.results_dir, "baseline"), baselines=None)
            settled = pytest_exit_to_perfci(suite.pytest_exit)
            if settled is not None:
                return settled
            if suite.pytest_exit != 0:
                raise UsageError("the suite failed: not writing a baseline from a failing run",
                                 hint="fix the failing tests first")
            runs.append(load_results(suite.results_path))
    doc = make_baseline(runs, gpu=fp.slug, force=args.force)
    target = baseline_path(args.baselines, fp.slug)
    write_atomic(target, doc)
    print(f"perfci: wrote {target} ({len(doc['benchmarks'])} benchmarks, {len(runs)} run(s))")
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


def _same_gpu(old: ResultFile, new: ResultFile) -> None:
    if old.gpu and new.gpu and old.gpu != new.gpu:
        raise BadInputError(f"{old.path} was measured on {old.gpu} and {new.path} on {new.gpu}: "
                            "refusing to compare across GPU models", hint="compare two runs of one GPU model")


def _judge_pair(old: ResultFile, new: ResultFile) -> tuple[RunVerdict, Fingerprint]:
    """The verdict of ``new`` against ``old`` (one GPU model only), and the fingerprint to show with it."""
    _same_gpu(old, new)
    return judge_files(new, old), Fingerprint.recorded(new.fingerprint) or detect()


def cmd_compare(args: argparse.Namespace) -> int:
    old, new = load_results(args.old), load_results(args.new)
    verdict, fp = _judge_pair(old, new)
    print(terminal_table(verdict, fp))
    if args.report_dir:
        write_report([old, new], verdict, args.report_dir, f"perfci compare {old.path.name} -> {new.path.name}")
    return verdict.exit_code


def cmd_report(args: argparse.Namespace) -> int:
    results = [load_results(p) for p in args.results]
    verdict: RunVerdict | None = None
    if len(results) >= 2:
        verdict, fp = _judge_pair(results[0], results[-1])
    paths = write_report(results, verdict, args.out, "perfci report")
    if verdict is not None:
        print(headline(verdict, fp))
    print("perfci: wrote " + ", ".join(str(p) for p in paths))
    return EXIT_OK


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


