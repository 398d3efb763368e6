"""Confirmation stage: a timing SLOWER seen in one fresh process is re-measured in a second fresh
process, and the verdict is taken on the two runs pooled.

Why
---
Between fresh processes a kernel's device time moves by an offset that its own samples cannot show
(clocks, memory placement, what ran before). On an H100, kernels whose five or six baseline runs
agreed within about 1 % had single processes land +1.9 %, +2.2 % and +2.3 % away: a one-pass gate
that catches a 3 % slowdown with a 2.25 % flag level meets such a process now and then. A second
fresh process draws a new offset, so a false SLOWER rarely survives it, while a real slowdown does.

Pooling
-------
The second run keeps its own samples and carries both runs' medians (``run_medians_ms``: the first
run's compared median, or its own run medians when it was pooled already, then the second's). The
comparison (``perfci.compare``) then puts the new side's level at the mean of the two runs (between-
run error sigma_b / sqrt 2), and their disagreement joins the baseline runs' in the between-run
estimate: two runs that agree on a slowdown stay SLOWER, one high run and one normal run pool to a
smaller change (SAME; NOISY against a one-run baseline, where the two new runs' own disagreement is
all the spread there is to go by), and two that disagree wildly widen the interval (NOISY).

Only timing SLOWERs of device timers are re-measured (a structural failure is deterministic, and a
host wall-clock time is never gated); the pytest plugin does the pooling in the second process
(``--perfci-pool-with``), ``perfci.pipeline`` drives the two passes and merges them here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from perfci.gate import BenchmarkOutcome, RunVerdict
from perfci.record import CONFIRMATION_KEY, BenchmarkRecord, ResultFile


def to_confirm(verdict: RunVerdict) -> tuple[str, ...]:
    """The benchmarks a second pass re-measures: timing SLOWER or NOISY (device time) and no structural
    failure (a structural regression fails its test whatever the timing reads)."""
    return tuple(o.name for o in verdict.outcomes if o.needs_confirmation)


def pooled_run_medians(first: BenchmarkRecord, second: BenchmarkRecord) -> tuple[float, ...]:
    """Run medians of ``first`` (or its compared median) followed by ``second``'s compared median."""
    earlier = first.run_medians_ms or (first.compared_median_ms,)
    return (*earlier, round(second.compared_median_ms, 7))


def pooled(first: BenchmarkRecord, second: BenchmarkRecord, first_path: Path | str | None = None) -> BenchmarkRecord:
    """``second`` judged as the two runs pooled: its own samples, both runs' medians."""
    return replace(second, run_medians_ms=pooled_run_medians(first, second),
                   pooled_with=str(first_path) if first_path is not None else second.pooled_with or "",
                   first_pass_median_ms=round(first.compared_median_ms, 7))


def merge(first: ResultFile, second: ResultFile, names: Iterable[str],
          path: Path | None = None) -> tuple[ResultFile, tuple[str, ...]]:
    """The run's result (at ``path``, default ``first.path``): ``first`` with each of ``names`` replaced
    by its pooled record from ``second``, keeping the first pass's kernel profile (the structure judged
    is the run's, whatever the second process saw).

    Returns the merged result and the names the second pass did not re-measure (their first-pass
    records stand).
    """
    wanted = set(names)
    redone = {n: r for n, r in second.benchmarks.items() if n in wanted and r.pooled_with is not None}
    not_re_measured = tuple(sorted(wanted - set(redone)))

    def pick(record: BenchmarkRecord) -> BenchmarkRecord:
        again = redone.get(record.name)
        if again is None:
            return record
        return again if record.profile is None else replace(again, profile=record.profile)

    confirmation = {**dict(first.document.get(CONFIRMATION_KEY) or {}), "first_pass": str(first.path),
                    "second_pass": str(second.path), "re_measured": sorted(redone),
                    "not_re_measured": list(not_re_measured)}
    merged = first.with_benchmarks((pick(r) for r in first.benchmarks.values()), path=Path(path or first.path),
                                   document={**first.document, CONFIRMATION_KEY: confirmation})
    return merged, not_re_measured


def with_notes(verdict: RunVerdict, names: Iterable[str], first: RunVerdict, unconfirmed: Iterable[str]) -> RunVerdict:
    """The merged verdict with a line for each of ``names`` (those sent to the second pass) saying what
    each pass read."""
    before = {o.name: o for o in first.outcomes}
    sent, missing_second = set(names), set(unconfirmed)
    outcomes = tuple(replace(o, notes=(*o.notes, _note(o, before[o.name], o.name in missing_second)))
                     if o.name in sent else o for o in verdict.outcomes)
    return replace(verdict, outcomes=outcomes)


def _note(final: BenchmarkOutcome, first: BenchmarkOutcome, not_re_measured: bool) -> str:
    assert first.comparison is not None  # it was re-measured for a timing SLOWER or NOISY
    change = first.comparison.change_pct
    read = f"{change:+.2f}% ({first.comparison.verdict})" if change is not None else str(first.comparison.verdict)
    if not_re_measured:
        return f"first pass read {read}; the second pass did not re-measure it, so the first-pass verdict stands"
    c = final.comparison
    both = f"{c.change_pct:+.2f}%" if c is not None and c.change_pct is not None else "?"
    outcome = ("confirmed" if final.timing_failed else "not confirmed") if first.comparison.failed else "re-measured"
    return (f"{outcome} by a second fresh process: first pass read {read}, the two runs pooled "
            f"{both} ({final.verdict})")
