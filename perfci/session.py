"""The state of one pytest session of perfci: one object, registered with the plugin manager."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfci.annotate import Ranges
from perfci.confirm import pool_info
from perfci.fingerprint import Fingerprint, slugify
from perfci.gate import BenchmarkOutcome, RunVerdict, environment_drift, gate, judge
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

    def pool(self, name: str, extra_info: dict[str, Any]) -> None:
        """In a confirmation pass, add the first pass's run median to this benchmark's record."""
        first = self.pool_with.benchmarks.get(name) if self.pool_with else None
        if first is None or self.pool_with is None:
            return
        extra_info["perfci"].update(pool_info(first, bench_from_info(name, extra_info), self.pool_with.path))

    def defers(self, outcome: BenchmarkOutcome) -> bool:
        """True when a failing outcome is left to the confirmation pass instead of failing its test."""
        return self.provisional and outcome.timing_failed and not outcome.structure_failed

    def deferred(self) -> tuple[BenchmarkOutcome, ...]:
        return tuple(o for o in self.outcomes if self.defers(o))

    def judge(self, name: str, settings: PerfSettings, extra_info: dict[str, Any]) -> BenchmarkOutcome:
        new = bench_from_info(name, extra_info)
        base = self.baseline.benchmarks.get(name) if self.baseline else None
        outcome = judge(new, base, compared=self.baseline is not None, forbid=settings.forbid,
                        expect=dict(settings.expect), threshold=settings.threshold, drift=self.drift,
                        known_bad=settings.known_bad)
        self.outcomes.append(outcome)
        self.executed.add(name)
        return outcome

    def verdict(self, selected: set[str]) -> RunVerdict:
        """The run's verdict; baseline entries that were selected but did not run are MISSING."""
        missing = set()
        if self.baseline is not None:
            missing = {n for n in self.baseline.benchmarks if n in selected and n not in self.executed}
        return gate(self.outcomes, missing)
