"""The state of one pytest session of perfci: one object, created at the first ``perf`` benchmark.

It holds what every ``perf`` benchmark of the session shares (fingerprint, settings, the baseline
and its environment drift, NVTX ranges), judges each benchmark's record as it is measured (pooled
with its first-pass record in ``perfci run``'s confirmation pass), records the benchmarks that
raised, and gives the run's verdict. Nothing here is built in a session without ``perf`` tests.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfci.confirm import pooled
from perfci.errors import BadInputError
from perfci.fingerprint import Fingerprint, require_same_gpu, slugify
from perfci.gate import (
    BenchmarkOutcome,
    Drift,
    RunVerdict,
    environment_drift,
    error_outcome,
    judge,
    missing_from,
    run_verdict,
)
from perfci.names import NameMatcher
from perfci.ranges import Ranges
from perfci.record import BenchmarkRecord, ResultFile
from perfci.rules import Finding
from perfci.settings import PerfSettings
from perfci.trace import KernelProfile

# lines torch.profiler's C++ side (kineto) prints on stderr at every start and stop of a trace
_PROFILER_CHATTER = ("USDT:", "STAGE:")


@dataclass
class PerfSession:
    fingerprint: Fingerprint
    settings: PerfSettings
    baseline: ResultFile | None = None
    baseline_note: str = ""
    ranges: Ranges = field(default_factory=Ranges)
    outcomes: list[BenchmarkOutcome] = field(default_factory=list)
    executed: set[str] = field(default_factory=set)
    drift: Drift = field(default_factory=Drift)  # against the baseline's machine: one value for the whole session
    # perfci run's two passes (perfci.confirm): the first reports a timing-only SLOWER without failing
    # the test; the second pools each re-measured benchmark with its first-pass record
    provisional: bool = False
    pool_with: ResultFile | None = None
    require_baseline: bool = False  # --perfci-require-baseline: a benchmark without a baseline entry fails
    errors: dict[str, str] = field(default_factory=dict)  # node id -> one line: perf benchmarks that raised
    notes: dict[str, int] = field(default_factory=dict)  # one line per run (CPU mode, timing only), with a count
    variants: dict[str, str] = field(default_factory=dict)  # node id -> perf.variants' lines (time, compile, path)
    _matcher: NameMatcher | None = None
    _matched: set[str] = field(default_factory=set)  # baseline names some benchmark of this run matched

    @classmethod
    def from_options(cls, getoption: Callable[[str], Any], fingerprint: Fingerprint, *,
                     baselines: Path | None = None, compared: ResultFile | None = None,
                     pool_with: ResultFile | None = None) -> PerfSession:
        """The session for these pytest options (``getoption`` is ``config.getoption``).

        ``baselines``: the resolved ``--perfci-baselines`` directory; else ``compared``, the run
        pytest-benchmark loaded for ``--benchmark-compare``, is the baseline. ``pool_with``: the
        loaded ``--perfci-pool-with`` file (perfci run's confirmation pass).
        """
        session = cls(fingerprint=fingerprint, settings=PerfSettings.from_pytest_options(getoption),
                      provisional=bool(getoption("perfci_provisional")),
                      require_baseline=bool(getoption("perfci_require_baseline")), pool_with=pool_with)
        if baselines is not None:
            from perfci.baseline import load_or_empty

            session.set_baseline(*load_or_empty(baselines, fingerprint.slug))
        elif compared is not None:
            session.set_compared(compared)
        return session

    def set_baseline(self, baseline: ResultFile, note: str) -> None:
        self.baseline, self.baseline_note = baseline, note
        self.drift = environment_drift(baseline.fingerprint, self.fingerprint.machine_info(),
                                       merged=bool(baseline.header.get("kept_from")))
        self._matcher = NameMatcher(baseline.benchmarks)

    def set_compared(self, compared: ResultFile) -> None:
        """Judge against the run pytest-benchmark loaded (``--benchmark-compare``); refuse another GPU's."""
        require_same_gpu(compared.gpu, self.fingerprint.slug, first_what=f"the compared run {compared.path}",
                         second_what="this machine",
                         hint="compare with a run saved on this GPU model (--benchmark-compare=NNNN)")
        self.set_baseline(compared, f"compared with {compared.path} (--benchmark-compare)")
        has_perfci = bool(compared.fingerprint) or any(r.profile is not None or r.device_time
                                                       for r in compared.benchmarks.values())
        if compared.benchmarks and not has_perfci:
            self.note(f"{compared.path} holds no perfci data (saved without perfci): judged on timing only, "
                      "no structure check")

    def note(self, line: str) -> None:
        """A line for the run's summary, said once however many benchmarks it concerns."""
        self.notes[line] = self.notes.get(line, 0) + 1

    def kernel_profile(self, call: Callable[[], Any], test: str, settings: PerfSettings) -> KernelProfile:
        """The torch.profiler pass over ``call`` (inside its own NVTX range, ``<test> [profile]``)."""
        from perfci.trace import profile_call

        trace_path = None
        if settings.trace_dir is not None:
            trace_path = Path(settings.trace_dir) / f"{slugify(test)}.json"
        with self.ranges.range(f"{test} [profile]"), quiet_profiler_stderr():
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

    def base_record(self, name: str) -> BenchmarkRecord | None:
        """The baseline's entry for benchmark ``name``, matched across a rootdir change (perfci.names)."""
        if self.baseline is None or self._matcher is None:
            return None
        found = self._matcher.lookup(name)
        if found is None:
            return None
        self._matched.add(found)
        return self.baseline.benchmarks[found]

    def judge(self, record: BenchmarkRecord, extra: tuple[Finding, ...] = ()) -> BenchmarkOutcome:
        """The outcome of ``record``; ``extra``: findings of rules outside the gate (perf.variants')."""
        base = self.base_record(record.name)
        outcome = judge(record, base, compared=self.baseline is not None, drift=self.drift)
        if extra:
            outcome = replace(outcome, findings=(*outcome.findings, *extra))
        if base is None and self.require_baseline:
            where = self.baseline.path if self.baseline is not None else "(no baseline given)"
            outcome = replace(outcome, findings=(*outcome.findings, Finding(
                "require_baseline", f"no entry in the baseline {where} (--perfci-require-baseline)", None, True)))
        self.outcomes.append(outcome)
        self.executed.add(record.name)
        return outcome

    def record_error(self, name: str, message: str) -> None:
        """A ``perf`` benchmark raised (not a perfci regression): an ERROR outcome, and its line in the files."""
        if name in self.errors:
            return
        outcome = error_outcome(name, message)
        self.errors[name] = outcome.error or message
        self.outcomes = [o for o in self.outcomes if o.name != name]  # e.g. a teardown failure after measuring
        self.outcomes.append(outcome)
        self.executed.add(name)

    def unmatched_warning(self) -> str | None:
        """A loud line when a non-empty baseline matched none of this run's benchmarks."""
        if self.baseline is None or not self.baseline.benchmarks or self._matched:
            return None
        measured = [o for o in self.outcomes if o.error is None]
        if not measured:
            return None
        example = next(iter(self.baseline.benchmarks))
        return (f"perfci: WARNING: none of the {len(measured)} benchmark(s) of this run is in the baseline "
                f"{self.baseline.path} ({len(self.baseline.benchmarks)} benchmarks, e.g. {example}); nothing was "
                "compared. Check the path and the test ids (e.g. --perfci-baselines=DIR, with '=', keeps pytest's "
                "rootdir); --perfci-require-baseline makes this fail")

    def verdict(self, intended: Callable[[str], bool]) -> RunVerdict:
        """The run's verdict; ``intended`` says which baseline benchmarks the run set out to run."""
        return run_verdict(self.outcomes, missing_from(self.baseline, self.executed, intended))


def resolve_baselines(value: str, project_root: Path) -> Path:
    """``--perfci-baselines``: relative to the project root (not the cwd); it must exist."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = project_root / path
    path = Path(os.path.normpath(path))
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise BadInputError(f"--perfci-baselines {value}: {path} {what} (relative paths are taken from the project "
                            f"root {project_root})", hint="create it with `perfci baseline update`, or fix the path")
    return path


@contextlib.contextmanager
def quiet_profiler_stderr() -> Iterator[None]:
    """Drop kineto's ``USDT:``/``STAGE:`` lines from stderr during a profiler pass; every other line stays.

    They are written by C++ straight to file descriptor 2 at each trace start and stop (their log
    level cannot be raised above them without hiding kineto's errors too), so fd 2 is sent to a
    temporary file for the pass and what is not chatter is written back.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().splitlines(keepends=True)
                    if not line.lstrip().startswith(tuple(p.encode() for p in _PROFILER_CHATTER))]
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))
