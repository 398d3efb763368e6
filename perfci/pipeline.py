"""The run pipeline: passes, confirmation, merge, the MISSING rule, report; one place for all of it.

``perfci run`` (and so ``make bench`` and the CI workflow) calls :func:`run`; ``perfci baseline
update`` calls :func:`measure_runs`; the pytest plugin judges each benchmark in-process with the same
``perfci.gate`` functions and the same report writers. ``commands.py`` only parses, calls and prints.

Files of one run (``<stamp>`` shared): ``<stamp>_run.json`` is the result the verdict is taken on;
with a confirmation pass, ``<stamp>_first.json`` keeps the first pass and ``<stamp>_confirm.json``
the second. Every result file is written whole or not at all.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfci.baseline import baseline_path, describe_available, load_or_empty
from perfci.confirm import merge, to_confirm, with_notes
from perfci.errors import EXIT_INFRASTRUCTURE, EXIT_REGRESSION, BadInputError, InfrastructureError, PerfCIError
from perfci.fingerprint import Fingerprint
from perfci.gate import RunVerdict, judge_files
from perfci.record import ResultFile, load_errors, load_results, read_json, write_results
from perfci.report import github_outputs, in_github_actions, write_report
from perfci.runner import (
    PYTEST_FAILED,
    PYTEST_INTERNAL,
    PYTEST_INTERRUPTED,
    PYTEST_NO_TESTS,
    RESULTS_DIR,
    confirmation_args,
    pytest_exit_to_perfci,
    results_path,
    run_suite,
    selecting,
    sibling_results_path,
)

Log = Callable[..., None]
NCU_BASELINE = "ncu_summary.json"  # beside a GPU's baseline: the kernels' roofline places it was measured with
SESSION_ERROR = "(pytest session)"  # the name an ERROR takes when the whole pass measured nothing


@dataclass(frozen=True)
class RunOptions:
    pytest_args: tuple[str, ...] = ()
    baselines: Path | None = Path("baselines")  # None: measure only, no comparison
    results_dir: Path = RESULTS_DIR
    report_dir: Path | None = Path("reports/latest")
    confirm: bool = True  # re-measure a timing SLOWER or NOISY in a second fresh process
    require_baseline: bool = False
    title: str = "perfci run"
    against: str | None = None  # a git ref: SLOWER/NOISY (or, with no baseline, every benchmark) A/B'd against it
    shard: tuple[int, int] | None = None  # (i, n): measure shard i of n only (perfci.shard)
    profile: str | None = None  # "nsys" | "ncu": profile the run's benchmarks into the report folder
    max_pairs: int = 5
    fail_on_noisy: bool = False


@dataclass(frozen=True)
class RunOutcome:
    result: ResultFile
    verdict: RunVerdict
    exit_code: int
    report_paths: tuple[Path, ...]
    baseline: ResultFile | None
    messages: tuple[str, ...] = ()  # what went wrong besides regressions (stderr)


class PassFailed(PerfCIError):
    """A pytest pass settled the outcome by its exit code alone (usage error, nothing collected, crash)."""

    def __init__(self, pytest_exit: int, exit_code: int) -> None:
        why = "no benchmarks were collected" if pytest_exit == PYTEST_NO_TESTS else "see its output above"
        super().__init__(f"pytest exited {pytest_exit}: {why}")
        self.exit_code = exit_code


def measure(pytest_args: list[str], out: Path, *, baselines: Path | None = None,
            extra: list[str] | None = None, cwd: Path | None = None) -> tuple[ResultFile, int]:
    """One fresh-process pass over the suite: its result file and pytest's exit code. The benchmarks
    that raised come back through ``--perfci-errors`` too, so a pass that measured nothing still names them."""
    errors_path = Path(out).absolute().with_name(Path(out).stem + ".errors.json")
    suite = run_suite(pytest_args, out=out, baselines=baselines, cwd=cwd,
                      extra=[*(extra or []), f"--perfci-errors={errors_path}"])
    errors = load_errors(errors_path)
    errors_path.unlink(missing_ok=True)
    settled = pytest_exit_to_perfci(suite.pytest_exit)
    if settled is not None:
        raise PassFailed(suite.pytest_exit, settled)
    if not suite.results_path.exists():
        if suite.pytest_exit != PYTEST_FAILED:
            raise InfrastructureError(f"pytest wrote no result file ({suite.results_path})")
        # tests ran and failed, and no benchmark was measured: a complete result that says so
        failed = ResultFile.empty(suite.results_path, None).with_benchmarks(
            (), errors=errors or {SESSION_ERROR: "no benchmark was measured: the tests failed (see pytest's output "
                                                 "above)"})
        write_results(failed)
        return failed, suite.pytest_exit
    result = load_results(suite.results_path)
    if set(errors) - set(result.errors):  # the file missed some (e.g. a benchmark that raised after measuring)
        result = result.with_benchmarks(result.benchmarks.values(), errors={**result.errors, **errors})
        write_results(result)
    return result, suite.pytest_exit


def load_baseline_for(options: RunOptions, fp: Fingerprint) -> tuple[ResultFile | None, str]:
    """The baseline a run compares with (bad files fail here, before the long run)."""
    if options.baselines is None:
        return None, "measuring only (no baseline comparison)"
    if options.require_baseline and not baseline_path(options.baselines, fp.slug).exists():
        raise BadInputError(f"no baseline for {fp.slug} in {options.baselines}",
                            hint=describe_available(options.baselines) + "; write one with `perfci baseline update`")
    return load_or_empty(options.baselines, fp.slug)


def check_writable(*directories: Path | None) -> None:
    """Fail before the suite runs (exit 3, one line) when an output directory cannot be written."""
    for directory in directories:
        if directory is None:
            continue
        try:
            Path(directory).mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=directory, prefix=".perfci-write-check-"):
                pass
        except OSError as exc:
            raise InfrastructureError(f"cannot write to {directory}: {exc.strerror or exc}",
                                      hint="choose a writable --results-dir / --report-dir") from None


def run(options: RunOptions, fp: Fingerprint, log: Log = print) -> RunOutcome:
    """Measure the suite, compare, confirm SLOWER/NOISY in a second fresh process (or A/B them against
    ``options.against`` on this card), write the report."""
    check_writable(options.results_dir, options.report_dir)
    baseline, note = load_baseline_for(options, fp)
    log(f"perfci: {note}")
    if options.shard is not None:
        options, empty = _shard_args(options, baseline, log)
        if empty is not None:
            paths, verdict = _finish(replace(options, profile=None), fp, baseline, empty,
                                     judge_files(empty, baseline), github=False)
            return RunOutcome(empty, verdict, verdict.exit_code, paths, baseline)
    if options.against is not None:
        return _run_against(options, fp, baseline, log)
    confirming = options.baselines is not None and options.confirm
    args = list(options.pytest_args)
    new, pytest_exit = measure(args, results_path(options.results_dir), baselines=options.baselines,
                               extra=["--perfci-provisional"] if confirming else None)
    verdict = judge_files(new, baseline)
    interrupted, names = False, to_confirm(verdict) if confirming else ()
    messages: list[str] = []
    if names:
        new, verdict, interrupted, why = _confirm(args, new, verdict, names, baseline, options.baselines, log)
        messages += why
    return _outcome(options, fp, baseline, new, verdict, pytest_exit, messages, github=confirming,
                    interrupted=interrupted)


def _shard_args(options: RunOptions, baseline: ResultFile | None,
                log: Log) -> tuple[RunOptions, ResultFile | None]:
    """The options that measure only this shard's benchmarks; for an empty shard, its (empty) result."""
    from perfci.shard import collect, split

    assert options.shard is not None
    index, count = options.shard
    names = collect(list(options.pytest_args))
    mine = split(names, count, baseline)[index - 1]
    log(f"perfci: shard {index}/{count}: {len(mine)} of {len(names)} benchmark(s)", flush=True)
    if not mine:  # a valid, empty result: everything was deselected on purpose
        empty = ResultFile.empty(results_path(options.results_dir), None).with_benchmarks(
            (), deselected=frozenset(names), header={})
        write_results(empty)
        return options, empty
    args = tuple(selecting(options.pytest_args, mine))
    return replace(options, pytest_args=args), None


def _stored(baseline: ResultFile | None) -> ResultFile | None:
    """The baseline when it holds entries (an empty one compares with nothing and is not reported)."""
    return baseline if baseline is not None and baseline.benchmarks else None


def _outcome(options: RunOptions, fp: Fingerprint, baseline: ResultFile | None, new: ResultFile,
             verdict: RunVerdict, pytest_exit: int, messages: list[str], *, github: bool,
             interrupted: bool = False) -> RunOutcome:
    """The run's end: :func:`_finish`, then the exit code (an interrupted confirmation pass is exit 3;
    tests that failed for other reasons than a regression exit 1; NOISY fails with ``fail_on_noisy``)."""
    paths, verdict = _finish(options, fp, baseline, new, verdict, github=github)
    exit_code = verdict.exit_code_for(options.fail_on_noisy)
    if interrupted:
        messages.append("perfci: the confirmation pass was interrupted; the verdict above stands on the first pass "
                        "for what it did not re-measure")
        exit_code = EXIT_INFRASTRUCTURE
    elif pytest_exit == PYTEST_FAILED and not verdict.regressions:
        messages.append("perfci: some tests failed or errored for reasons other than a perf regression (see above)")
        exit_code = EXIT_REGRESSION
    return RunOutcome(new, verdict, exit_code, paths, baseline, tuple(messages))


def _finish(options: RunOptions, fp: Fingerprint, baseline: ResultFile | None, new: ResultFile,
            verdict: RunVerdict, *, github: bool) -> tuple[tuple[Path, ...], RunVerdict]:
    """The Nsight pass when asked, the report, and the GitHub outputs the passes left to the final verdict.
    A profiler that is missing or fails leaves the verdict and the report standing and is reported (exit 3
    when nothing regressed)."""
    roofline = None
    if options.profile is not None:
        try:
            verdict, roofline = _nsight_pass(options, fp, new, verdict)
        except PerfCIError as exc:
            verdict = replace(verdict, problems=(*verdict.problems, f"--profile {options.profile}: {exc}"))
    paths: tuple[Path, ...] = ()
    if options.report_dir is not None:
        stored = _stored(baseline)
        paths = tuple(write_report([r for r in (stored, new) if r is not None], verdict, options.report_dir,
                                   f"{options.title} on {fp.name}", baseline=stored.path if stored else None,
                                   roofline=roofline))
    if github and in_github_actions():
        github_outputs(verdict, fp, Path.cwd())
    return paths, verdict


def _nsight_pass(options: RunOptions, fp: Fingerprint, new: ResultFile,
                 verdict: RunVerdict) -> tuple[RunVerdict, dict[str, Any] | None]:
    """Profile the run's benchmarks under Nsight into ``<report dir>/<tool>/``; with ncu, a kernel that
    moved from compute-bound to memory-bound, or lost tensor-pipe use, against the baseline's stored
    ``ncu_summary.json`` is noted on its benchmark. A missing tool fails here (exit 3) after the run."""
    from perfci.profilers import registry

    assert options.profile is not None
    out = Path(options.report_dir or options.results_dir) / options.profile
    names = sorted(new.benchmarks)
    done = registry()[options.profile].run(selecting(options.pytest_args, names), out)
    if options.profile != "ncu" or done.summary is None:
        return verdict, None
    summary = read_json(done.summary, "ncu summary")  # the roofline of the report
    stored = baseline_path(options.baselines, fp.slug).with_name(NCU_BASELINE) if options.baselines else None
    if stored is None or not stored.exists():
        return verdict, summary
    from perfci.ncu import bound_changes

    changes = bound_changes(read_json(stored, "baseline ncu summary"), summary)
    return replace(verdict, outcomes=tuple(replace(o, notes=(*o.notes, *(f"ncu: {c}" for c in changes[o.name])))
                                           if o.name in changes else o for o in verdict.outcomes)), summary


def _run_against(options: RunOptions, fp: Fingerprint, baseline: ResultFile | None, log: Log) -> RunOutcome:
    """``perfci run --against REF``: one pass against the stored baseline, then every benchmark that
    reads SLOWER or NOISY (every benchmark, when there is no stored baseline) A/B'd on this card
    against REF's tree; their timing verdicts come from the A/B."""
    from perfci import ab

    args = list(options.pytest_args)
    repo = ab.repo_root(Path.cwd())
    with ab.worktree(options.against or "", repo) as ref:
        why_not = ab.needs_build(ref.root)
        new, pytest_exit = measure(args, results_path(options.results_dir), baselines=options.baselines,
                                   extra=["--perfci-provisional"] if baseline is not None else None)
        stored = _stored(baseline)
        first = judge_files(new, stored)
        names = to_confirm(first) if stored is not None else tuple(new.benchmarks)
        messages: list[str] = []
        verdict = first
        if why_not:
            messages.append(f"perfci: cannot A/B against {ref.label}: {why_not}; the stored-baseline verdicts stand")
        elif names:
            log(f"perfci: A/B on this card against {ref.label}: {len(names)} benchmark(s)", flush=True)
            result = ab.measure_trees(ref, ab.Tree("working tree", Path.cwd()), args, names, options.results_dir,
                                      thresholds={n: r.threshold for n, r in new.benchmarks.items()
                                                  if r.threshold}, max_pairs=options.max_pairs, log=log)
            verdict = ab.apply(first, new, result, stored)
    return _outcome(options, fp, baseline, new, verdict, pytest_exit, messages, github=True)


def _confirm(args: list[str], first: ResultFile, first_verdict: RunVerdict, names: tuple[str, ...],
             baseline: ResultFile | None, baselines: Path | None,
             log: Log) -> tuple[ResultFile, RunVerdict, bool, list[str]]:
    """Re-measure ``names`` (the first pass's timing SLOWERs) in a fresh process; the run's result
    pools the two. When the second pass measures nothing (crash, skip, error, interruption) the
    first-pass verdicts stand, said so; the third value is True when it was interrupted."""
    run_path = first.path
    first_path, second_path = sibling_results_path(run_path, "first"), sibling_results_path(run_path, "confirm")
    shutil.copyfile(run_path, first_path)
    first = replace(first, path=first_path)
    log(f"perfci: {len(names)} benchmark(s) read SLOWER or NOISY in this pass; re-measuring them in a fresh "
        "process and judging the two runs pooled (perfci run --no-confirm skips this):", flush=True)
    for name in names:
        log(f"  {name}", flush=True)
    second, why_not, interrupted = None, "", False
    try:
        second, code = measure(selecting(confirmation_args(args), names), second_path, baselines=baselines,
                               extra=[f"--perfci-pool-with={first_path}"])
        interrupted = code in (PYTEST_INTERRUPTED, PYTEST_INTERNAL)
        why_not = f"pytest exit {code}"
    except PassFailed as exc:
        interrupted = exc.exit_code == EXIT_INFRASTRUCTURE
        why_not = str(exc)
    except PerfCIError as exc:  # interrupted (Ctrl-C), or no usable result file (crash, nothing collected)
        interrupted = isinstance(exc, InfrastructureError)
        why_not = str(exc)
    merged, unconfirmed = merge(first, second if second is not None else ResultFile.empty(second_path, None), names,
                                path=run_path)
    messages = []
    if unconfirmed:
        messages.append(f"perfci: the confirmation pass did not re-measure {len(unconfirmed)} benchmark(s) "
                        f"({why_not}): their first-pass verdicts stand")
    write_results(merged)
    verdict = with_notes(judge_files(merged, baseline), names, first_verdict, unconfirmed)
    for outcome in verdict.outcomes:
        if outcome.name in names:
            log(f"perfci: {outcome.name}: {outcome.notes[-1]}")
    return merged, verdict, interrupted, messages


def store_ncu_summary(pytest_args: list[str], target: Path, work_dir: Path, log: Log = print) -> Path:
    """``perfci baseline update --profile ncu``: the suite under Nsight Compute; its summary is kept
    beside the baseline (``NCU_BASELINE``), the reference for later runs' roofline findings."""
    from perfci.profilers import registry

    done = registry()["ncu"].run(pytest_args, work_dir)
    if done.summary is None:
        raise InfrastructureError("Nsight Compute wrote no summary", hint=f"see {work_dir}")
    path = target.with_name(NCU_BASELINE)
    shutil.copyfile(done.summary, path)
    log(f"perfci: wrote {path} (roofline places of {len(done.rows)} kernel row(s))")
    return path


def measure_runs(pytest_args: list[str], runs: int, results_dir: Path, log: Log = print) -> list[ResultFile]:
    """``runs`` fresh-process passes for a baseline; a failing pass stops with a usage error."""
    out = []
    for i in range(runs):
        log(f"perfci: baseline run {i + 1}/{runs}", flush=True)
        result, code = measure(pytest_args, results_path(results_dir, "baseline"))
        if code != 0:
            raise BadInputError("the suite failed: not writing a baseline from a failing run",
                                hint="fix the failing tests first")
        out.append(result)
    return out
