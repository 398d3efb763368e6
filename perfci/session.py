"""The state of one pytest session of perfci: one object, kept in the pytest config's stash.

It holds what every ``perf`` benchmark of the session shares (fingerprint, settings, the baseline
and its environment drift, NVTX ranges), judges each benchmark's record as it is measured (pooled
with its first-pass record in ``perfci run``'s confirmation pass), and gives the run's verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfci.baseline import load_or_empty
from perfci.confirm import pooled
from perfci.fingerprint import Fingerprint, slugify
from perfci.gate import BenchmarkOutcome, RunVerdict, environment_drift, judge_result, missing_from, run_verdict
from perfci.ranges import Ranges
from perfci.record import BenchmarkRecord, ResultFile, load_results
from perfci.settings import PerfSettings
from perfci.trace import KernelProfile


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
    # the test; the second pools each re-measured benchmark with its first-pass record
    provisional: bool = False
    pool_with: ResultFile | None = None

    @classmethod
    def from_options(cls, getoption: Callable[[str], Any], fingerprint: Fingerprint) -> PerfSession:
        """The session for these pytest options (``getoption`` is ``config.getoption``)."""
        pool_with = getoption("perfci_pool_with")
        session = cls(fingerprint=fingerprint, settings=PerfSettings.from_pytest_options(getoption),
                      provisional=bool(getoption("perfci_provisional")),
                      pool_with=load_results(Path(pool_with), "first-pass result file") if pool_with else None)
        root = getoption("perfci_baselines")
        if root:
            session.set_baseline(*load_or_empty(Path(root), fingerprint.slug))
        return session

    def set_baseline(self, baseline: ResultFile, note: str) -> None:
        self.baseline, self.baseline_note = baseline, note
        self.drift = environment_drift(baseline.fingerprint, self.fingerprint.machine_info())

    def kernel_profile(self, call: Callable[[], Any], test: str, settings: PerfSettings) -> KernelProfile:
        """The torch.profiler pass over ``call`` (inside its own NVTX range, ``<test> [profile]``)."""
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

    def pool(self, record: BenchmarkRecord) -> BenchmarkRecord:
        """In a confirmation pass, ``record`` pooled with its first-pass record; else ``record``."""
        first = self.pool_with.benchmarks.get(record.name) if self.pool_with is not None else None
        if first is None or self.pool_with is None:
            return record
        return pooled(first, record, self.pool_with.path)

    def judge(self, record: BenchmarkRecord) -> BenchmarkOutcome:
        outcome = judge_result(record, self.baseline, self.drift)
        self.outcomes.append(outcome)
        self.executed.add(record.name)
        return outcome

    def verdict(self, intended: Callable[[str], bool]) -> RunVerdict:
        """The run's verdict; ``intended`` says which baseline benchmarks the run set out to run."""
        return run_verdict(self.outcomes, missing_from(self.baseline, self.executed, intended))
