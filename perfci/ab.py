"""Same-card A/B: a reference tree (a git worktree of REF) and the current tree, measured in
interleaved fresh processes on this GPU (REF, current, REF, current, ...) and judged on the pairs.

Why: a stored baseline from another card of the same model, or from before the autotune cache was
lost, carries offsets of 2-4 % that no statistics on one side can remove (README: cross-card runs).
Measured on the same card, back to back, both trees see the same clocks, memory and cache, so only
the code differs. Pairs continue until the paired verdict resolves the threshold or ``max_pairs``.

The paired statistic: per pair i, d_i = log(current_i / ref_i) of the runs' compared medians; the
level is the mean of the d_i and its interval ``mean -+ t(n-1) * sd / sqrt(n)``, with sd never
below the floor that the runs' own sampling errors set. The rule is ``perfci.compare``'s: SLOWER
when the interval lies above 1 and the change reaches ``effect_fraction * threshold``; SAME when
the half-width is within the threshold; NOISY while it is not (more pairs are taken). A single pair
is judged by ``perfci.compare.compare_samples`` with its default between-run floor.

A tree is measured by running pytest *in* it (its tests and importable packages shadow the
installed ones: the checkout's directory comes first on ``sys.path``), while perfci itself is the
installed one, so both trees are measured by the same tool. A tree whose code needs a build step
(a compiled extension) cannot be measured from its sources alone: :func:`needs_build` says why, and
the caller falls back to the stored baseline.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from perfci.compare import DEFAULT_THRESHOLD, CompareSettings, Comparison, Sample, compare_samples
from perfci.errors import BadInputError, InfrastructureError
from perfci.gate import RunVerdict, judge
from perfci.record import BenchmarkRecord, ResultFile
from perfci.rules import check_against_baseline
from perfci.stats import t_quantile
from perfci.verdicts import Verdict

DEFAULT_MAX_PAIRS = 5
MIN_PAIRS = 2  # a verdict from one pair only when the cap allows no more
_BUILD_FILES = ("setup.py", "CMakeLists.txt", "meson.build", "build.rs")
_NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".pyx", ".rs")


@dataclass(frozen=True)
class Tree:
    label: str  # "REF (sha)" or "working tree"
    root: Path  # the directory pytest runs in
    sha: str | None = None


@dataclass(frozen=True)
class PairedVerdict:
    name: str
    comparison: Comparison
    ratios: tuple[float, ...]  # current / reference, per pair (compared medians)

    @property
    def pairs(self) -> int:
        return len(self.ratios)

    def evidence(self) -> str:
        c = self.comparison
        if c.ratio is None or c.ratio_low is None or c.ratio_high is None:
            return f"same-card A/B: {c.verdict} after {self.pairs} pair(s)"
        per_pair = ", ".join(f"{(r - 1) * 100:+.2f}%" for r in self.ratios)
        return (f"same-card A/B, {self.pairs} interleaved pair(s) [{per_pair}]: {c.verdict} {c.change_pct:+.2f}% "
                f"(interval {(c.ratio_low - 1) * 100:+.2f}%..{(c.ratio_high - 1) * 100:+.2f}%)")


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise InfrastructureError(f"git could not be started: {exc}", hint="install git") from None
    if done.returncode != 0:
        raise BadInputError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip().splitlines()[-1:]}",
                            hint="--against/ab take a git ref of this repository (a commit, branch or tag)")
    return done.stdout.strip()


def resolve_ref(ref: str, repo: Path) -> str:
    """The commit ``ref`` names in ``repo`` (a one-line usage error when it names none)."""
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def repo_root(start: Path) -> Path:
    return Path(_git(start, "rev-parse", "--show-toplevel"))


@contextmanager
def worktree(ref: str, repo: Path) -> Iterator[Tree]:
    """A detached git worktree of ``ref`` in a temporary directory, removed afterwards."""
    sha = resolve_ref(ref, repo)
    where = Path(tempfile.mkdtemp(prefix="perfci-ab-"))
    _git(repo, "worktree", "add", "--detach", "--force", str(where), sha)
    try:
        yield Tree(f"{ref} ({sha[:10]})", where, sha)
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(where)],
                       capture_output=True, check=False)
        shutil.rmtree(where, ignore_errors=True)


def needs_build(root: Path) -> str | None:
    """Why the tree at ``root`` cannot be measured from its sources (a compiled extension), or None."""
    for name in _BUILD_FILES:
        if (root / name).exists():
            return f"{name} builds native code that a source checkout does not contain"
    for path in root.rglob("*"):
        if path.suffix in _NATIVE_SUFFIXES and ".git" not in path.parts and "tests" not in path.parts:
            return f"{path.relative_to(root)} is compiled code: the tree needs a build before it can be measured"
    return None


def paired_verdict(name: str, ref_runs: Sequence[BenchmarkRecord], new_runs: Sequence[BenchmarkRecord],
                   threshold: float = DEFAULT_THRESHOLD) -> PairedVerdict:
    """The verdict of the current tree against the reference from interleaved pairs of runs."""
    settings = CompareSettings(min_effect=threshold)
    pairs = list(zip(ref_runs, new_runs, strict=False))
    ratios = tuple(b.compared_median_ms / a.compared_median_ms for a, b in pairs)
    if len(pairs) < 2:
        a, b = pairs[-1]
        c = compare_samples(name, Sample(a.compared_samples_ms, noise_reasons=a.noise_reasons, noisy=a.noisy),
                            Sample(b.compared_samples_ms, noise_reasons=b.noise_reasons, noisy=b.noisy), settings)
        return PairedVerdict(name, c, ratios)
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    floor = settings.min_noise_floor / 2.326  # the smallest between-run sigma perfci ever assumes
    half = t_quantile(settings.confidence, n - 1) * max(sd, floor) / math.sqrt(n)
    ratio, low, high = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    effect = settings.effect_fraction * threshold
    medians = (ref_runs[-1].compared_median_ms, new_runs[-1].compared_median_ms)
    summary = f"{ratio - 1:+.2%} (interval {low - 1:+.2%} .. {high - 1:+.2%}, {n} pairs)"
    if low > 1.0 and ratio >= 1.0 + effect:
        verdict, why = Verdict.SLOWER, f"slower by {summary} on the same card"
    elif high < 1.0 and ratio <= 1.0 / (1.0 + effect):
        verdict, why = Verdict.FASTER, f"faster by {summary} on the same card"
    elif math.expm1(half) > threshold:
        verdict, why = Verdict.NOISY, f"cannot resolve a {threshold:.1%} change yet: {summary}"
    else:
        verdict, why = Verdict.SAME, f"no change beyond the flag level: {summary}"
    levels = (math.exp(sum(math.log(r.compared_median_ms) for r in ref_runs) / n),
              math.exp(sum(math.log(r.compared_median_ms) for r in new_runs) / n))  # geometric means of the runs
    return PairedVerdict(name, Comparison(name, verdict, *medians, ratio, low, high, threshold, (why,), *levels),
                         ratios)


Measure = Callable[[Tree, Sequence[str], int], dict[str, BenchmarkRecord]]
Runs = dict[str, tuple[list[BenchmarkRecord], list[BenchmarkRecord]]]


def run_pairs(ref: Tree, current: Tree, names: Sequence[str], measure: Measure, *,
              thresholds: dict[str, float], max_pairs: int = DEFAULT_MAX_PAIRS,
              log: Callable[..., None] = print, seed: Runs | None = None) -> dict[str, PairedVerdict]:
    """Measure ``names`` on both trees in interleaved fresh processes until each resolves or the cap.

    ``measure(tree, names, pair_index)`` runs one fresh process over ``names`` in ``tree`` and returns
    its records by name; ``seed`` holds pairs measured already. Benchmarks that one tree lacks get no
    verdict here. The cap counts the seeded pairs too.
    """
    if max_pairs < 1:
        raise BadInputError(f"--max-pairs must be at least 1, got {max_pairs}")
    seeded = seed or {}
    runs: Runs = {}
    for n in names:
        ref_seed, new_seed = seeded.get(n, ([], []))
        runs[n] = (list(ref_seed), list(new_seed))
    verdicts: dict[str, PairedVerdict] = {}

    def unresolved(name: str) -> bool:
        ref_runs, new_runs = runs[name]
        if not ref_runs:
            return True  # nothing yet: measure it (max_pairs >= 1)
        verdicts[name] = v = paired_verdict(name, ref_runs, new_runs, thresholds.get(name, DEFAULT_THRESHOLD))
        resolved = v.comparison.verdict in (Verdict.SLOWER, Verdict.FASTER, Verdict.SAME)
        return len(ref_runs) < max_pairs and (not resolved or len(ref_runs) < MIN_PAIRS)

    pending = [n for n in names if unresolved(n)]
    while pending:
        index = max(len(runs[n][0]) for n in pending)
        log(f"perfci ab: pair {index + 1} of at most {max_pairs}: {len(pending)} benchmark(s), {ref.label} then "
            f"{current.label}", flush=True)
        a, b = measure(ref, pending, index), measure(current, pending, index)
        measured = [n for n in pending if n in a and n in b]
        for name in measured:
            runs[name][0].append(a[name])
            runs[name][1].append(b[name])
        pending = [n for n in measured if unresolved(n)]  # one that failed to run on a side stops here
    return verdicts


# --- measuring trees and judging them ------------------------------------------------------------


@dataclass(frozen=True)
class ABResult:
    verdicts: dict[str, PairedVerdict]
    ref: dict[str, BenchmarkRecord]  # the reference tree's last record of each benchmark
    current: dict[str, BenchmarkRecord]  # the current tree's last record
    files: tuple[Path, ...]


def measure_trees(ref: Tree, current: Tree, pytest_args: Sequence[str], names: Sequence[str] | None,
                  results_dir: Path, *, thresholds: dict[str, float] | None = None, max_pairs: int = DEFAULT_MAX_PAIRS,
                  log: Callable[..., None] = print) -> ABResult:
    """Interleaved fresh-process runs of both trees (``names``, or every benchmark when None)."""
    from perfci.pipeline import PassFailed, measure
    from perfci.runner import confirmation_args, results_path, selecting

    files: list[Path] = []
    last: dict[str, dict[str, BenchmarkRecord]] = {ref.label: {}, current.label: {}}
    base_args = confirmation_args(list(pytest_args))

    def run_tree(tree: Tree, wanted: Sequence[str] | None, index: int) -> dict[str, BenchmarkRecord]:
        tag = "ab-ref" if tree is ref else "ab-current"
        args = base_args if wanted is None else selecting(base_args, wanted)  # a shard's pass: its flagged only
        try:
            result, _ = measure(args, results_path(results_dir, f"{tag}{index}"),
                                cwd=tree.root if tree.sha is not None else None)
        except PassFailed as exc:
            log(f"perfci ab: {tree.label}: {exc}")
            return {}
        files.append(result.path)
        last[tree.label].update(result.benchmarks)
        return dict(result.benchmarks)

    seed: Runs = {}
    if names is None:  # the first pair finds the benchmarks both trees have
        log(f"perfci ab: pair 1 of at most {max_pairs}: every selected benchmark, {ref.label} then "
            f"{current.label}", flush=True)
        a, b = run_tree(ref, None, 0), run_tree(current, None, 0)
        names = sorted(set(a) & set(b))
        for only, label in ((set(a) - set(b), ref.label), (set(b) - set(a), current.label)):
            if only:
                log(f"perfci ab: only measured in {label}: {', '.join(sorted(only))}")
        seed = {n: ([a[n]], [b[n]]) for n in names}
    verdicts = run_pairs(ref, current, names, run_tree, thresholds=thresholds or {}, max_pairs=max_pairs, log=log,
                         seed=seed)
    return ABResult(verdicts, last[ref.label], last[current.label], tuple(files))


def apply(first: RunVerdict, new: ResultFile, result: ABResult, stored: ResultFile | None) -> RunVerdict:
    """``first`` (the verdict against the stored baseline, or against nothing) with the A/B's timing
    verdicts for the benchmarks it measured, and REF's kernel profile as a second structural baseline."""
    outcomes = []
    for outcome in first.outcomes:
        paired = result.verdicts.get(outcome.name)
        if paired is None:
            if outcome.name in result.ref or outcome.name in result.current:
                outcome = replace(outcome, notes=(*outcome.notes, "same-card A/B: not measured on both trees"))
            outcomes.append(outcome)
            continue
        record, ref_record = new.benchmarks[outcome.name], result.ref.get(outcome.name)
        if stored is None and ref_record is not None:  # REF is the baseline: declared rules and REF's structure
            outcome = judge(record, ref_record, compared=True)
        elif ref_record is not None and record.profile is not None and ref_record.profile is not None:
            seen = {f.message for f in outcome.findings}
            against_ref = [replace(f, message=f"{f.message} (against the A/B reference)")
                           for f in check_against_baseline(record.profile, ref_record.profile)
                           if f.failed and f.message not in seen]
            outcome = replace(outcome, findings=(*outcome.findings, *against_ref))
        outcomes.append(replace(outcome, comparison=paired.comparison, notes=(*outcome.notes, paired.evidence())))
    return replace(first, outcomes=tuple(outcomes))
