"""The state of one pytest session of perfci: one object, registered with the plugin manager."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfci.annotate import Ranges
from perfci.confirm import pool_info, pooled
from perfci.fingerprint import Fingerprint, slugify
from perfci.gate import BenchmarkOutcome, RunVerdict, environment_drift, gate, judge_result
from perfci.results import ResultFile, bench_from_info
from perfci.settings import PerfSettings


@dataclass
class PerfSession:
    fingerprint: Fingerprint
    settings: PerfSettings
    baseline: ResultFile | None = None
    baseline_note: str = ""
    ranges: Ranges = field(default_factory=Ranges)
    outcomes: list[BenchmarkOutcome] = field(default_factory=list)
    executed: set[str] = field(default_factory=set)
    drift: tuple[str, ...] = ()  # environment drift against the baseline: one value for the whole session
    # perfci run's two passes (perfci.confirm): the first reports a timing-only SLOWER without failing
    # the test; the second pools each re-measured benchmark with its first-pass entry
    provisional: bool = False
    pool_with: ResultFile | None = None

    def set_baseline(self, baseline: ResultFile, note: str) -> None:
        self.baseline, self.baseline_note = baseline, note
        self.drift = environment_drift(baseline.fingerprint, self.fingerprint.machine_info())

    def profile(self, call: Callable[[], Any], test: str, settings: PerfSettings) -> Any:
        from perfci.trace import profile_call

        trace_path = None
        if settings.trace_dir is not None:
            trace_path = Path(settings.trace_dir) / f"{slugify(test)}.json"
        with self.ranges.range(f"{test} [profile]"):
            return profile_call(call, calls=settings.profile_calls, label=test, trace_path=trace_path)

    def defers(self, outcome: BenchmarkOutcome) -> bool:
        """True when a failing outcome is left to the confirmation pass instead of failing its test."""
        return self.provisional and outcome.only_timing_failed

    def deferred(self) -> tuple[BenchmarkOutcome, ...]:
        return tuple(o for o in self.outcomes if self.defers(o))

    def judge(self, name: str, extra_info: dict[str, Any]) -> BenchmarkOutcome:
        """This benchmark's outcome from its record; in a confirmation pass, first pooled with its
        first-pass run (the record gains both run medians)."""
        new = bench_from_info(name, extra_info)
        first = self.pool_with.benchmarks.get(name) if self.pool_with else None
        if first is not None and self.pool_with is not None:
            extra_info["perfci"].update(pool_info(first, new, self.pool_with.path))
            new = pooled(first, new)
        outcome = judge_result(new, self.baseline, self.drift)
        self.outcomes.append(outcome)
        self.executed.add(name)
        return outcome

    def verdict(self, selected: set[str]) -> RunVerdict:
        """The run's verdict; baseline entries that were selected but did not run are MISSING."""
        missing = set()
        if self.baseline is not None:
            missing = {n for n in self.baseline.benchmarks if n in selected and n not in self.executed}
        return gate(self.outcomes, missing)
