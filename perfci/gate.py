"""Gate stage: one verdict per benchmark and one for the run, used by the pytest plugin and the CLI.

Timing: only SLOWER fails, and only for device times (a host wall-clock run on a machine without a
GPU is reported, never gated). Structure: any failed finding fails, on every machine, because
structure does not depend on noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from perfci.compare import DEFAULT_THRESHOLD, CompareSettings, Comparison, Sample, compare_samples
from perfci.errors import EXIT_INFRASTRUCTURE, EXIT_OK, EXIT_REGRESSION
from perfci.fingerprint import cross_card_sigma
from perfci.names import NameMatcher
from perfci.record import BenchmarkRecord, ResultFile
from perfci.rules import Finding, check_against_baseline, check_declared
from perfci.trace import KernelProfile
from perfci.units import format_time_ms
from perfci.verdicts import RANK, Verdict

DRIFT_FIELDS = ("driver", "cuda", "torch", "triton")


@dataclass(frozen=True)
class BenchmarkOutcome:
    name: str
    median_ms: float
    timer: str
    device_time: bool
    comparison: Comparison | None
    findings: tuple[Finding, ...]
    noise_reasons: tuple[str, ...] = ()
    drift: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. what a confirmation pass read (perfci.confirm)
    error: str | None = None  # the benchmark raised: its one-line error (verdict ERROR, fails)

    @property
    def timing_failed(self) -> bool:
        """SLOWER on device time (host times are never gated), or INVALID times on any timer."""
        if self.comparison is None:
            return False
        return self.comparison.verdict is Verdict.INVALID or (self.comparison.failed and self.device_time)

    @property
    def needs_confirmation(self) -> bool:
        """A device-time SLOWER or NOISY with no structural failure: what perfci run re-measures."""
        return (self.device_time and not self.structure_failed and self.error is None
                and self.comparison is not None and self.comparison.verdict in (Verdict.SLOWER, Verdict.NOISY))

    @property
    def structure_failed(self) -> bool:
        return any(f.failed for f in self.findings)

    @property
    def failed(self) -> bool:
        return self.error is not None or self.timing_failed or self.structure_failed

    @property
    def only_timing_failed(self) -> bool:
        """SLOWER on device time with no structural failure: what perfci run re-measures before failing."""
        return (self.comparison is not None and self.comparison.verdict is Verdict.SLOWER and self.device_time
                and not self.structure_failed)

    @property
    def verdict(self) -> Verdict:
        if self.error is not None:
            return Verdict.ERROR
        if self.structure_failed:
            return Verdict.STRUCTURE
        if self.comparison is None:
            return Verdict.UNCOMPARED
        return self.comparison.verdict

    def evidence(self) -> str:
        """Multi-line explanation shown in the failing test and in reports."""
        if self.error is not None:
            return f"perfci: {self.name} failed to run (ERROR): {self.error}"
        lines = [f"perfci: {self.name} regressed" if self.failed else f"perfci: {self.name}"]
        c = self.comparison
        if c is not None and c.ratio is not None:
            lines.append(
                f"  timing: {c.verdict} {c.change_pct:+.2f}% ({_levels(c)}; interval {(c.ratio_low - 1) * 100:+.2f}%..."
                f"{(c.ratio_high - 1) * 100:+.2f}%; threshold {c.min_effect:.1%})"
            )
        elif c is not None:
            lines.append(f"  timing: {c.verdict}")
        if c is not None:
            lines.extend(f"    {r}" for r in c.reasons)
        if not self.device_time:
            lines.append("  timing is host wall clock (no GPU): reported, not gated")
        for f in self.findings:
            mark = "FAIL" if f.failed else "info"
            lines.append(f"  structure [{mark}] {f.rule}: {f.message}")
        for reason in self.noise_reasons:
            lines.append(f"  noise: {reason}")
        for note in self.notes:
            lines.append(f"  {note}")
        if self.drift:
            lines.append("  environment drift vs baseline: " + "; ".join(self.drift))
        return "\n".join(lines)


@dataclass(frozen=True)
class RunVerdict:
    outcomes: tuple[BenchmarkOutcome, ...]
    missing: tuple[str, ...]
    problems: tuple[str, ...] = ()  # infrastructure trouble after the measurement (e.g. a missing profiler): exit 3

    @property
    def regressions(self) -> tuple[BenchmarkOutcome, ...]:
        return tuple(o for o in self.outcomes if o.failed)

    @property
    def status(self) -> str:
        """The run's state in words, as every headline says it."""
        if self.regressions:
            return f"REGRESSION ({len(self.regressions)} failing)"
        if self.problems:
            return f"no regression, but {len(self.problems)} infrastructure problem(s)"
        return "no regression"

    @property
    def noisy(self) -> tuple[BenchmarkOutcome, ...]:
        """Device-time benchmarks whose timing stayed NOISY (listed first after the regressions)."""
        return tuple(o for o in self.outcomes if o.device_time and not o.failed and o.verdict is Verdict.NOISY)

    @property
    def exit_code(self) -> int:
        if self.regressions:
            return EXIT_REGRESSION
        return EXIT_INFRASTRUCTURE if self.problems else EXIT_OK

    def exit_code_for(self, fail_on_noisy: bool) -> int:
        """The run's exit code under ``--fail-on-noisy`` (NOISY device-time benchmarks then fail: exit 1) or
        without it (:attr:`exit_code`): one rule for ``perfci run`` on one GPU and with ``--gpus``."""
        return EXIT_REGRESSION if fail_on_noisy and self.noisy else self.exit_code

    def counts(self) -> dict[str, int]:
        """Benchmarks per verdict, worst first (the one set of counts every output shows)."""
        counts: dict[Verdict, int] = {}
        for o in self.outcomes:
            counts[o.verdict] = counts.get(o.verdict, 0) + 1
        if self.missing:
            counts[Verdict.MISSING] = len(self.missing)
        return {str(v): counts[v] for v in sorted(counts, key=RANK.__getitem__)}


def _levels(c: Comparison) -> str:
    """The two locations the change is the ratio of (midmeans), then the plain medians when they differ."""
    text = ""
    if c.base_level_ms is not None and c.new_level_ms is not None:
        text = f"midmean {format_time_ms(c.base_level_ms)} -> {format_time_ms(c.new_level_ms)}; "
    medians = (format_time_ms(c.base_median_ms or math.nan), format_time_ms(c.new_median_ms or math.nan))
    return text + f"median {medians[0]} -> {medians[1]}"


def error_outcome(name: str, message: str) -> BenchmarkOutcome:
    """The outcome of a benchmark that raised instead of being measured: ERROR, which fails the run."""
    first = message.strip().splitlines()[0] if message.strip() else "raised"
    return BenchmarkOutcome(name=name, median_ms=math.nan, timer="", device_time=False, comparison=None,
                            findings=(), error=first[:300])


def missing_from(baseline: ResultFile | None, ran: Iterable[str], intended: Callable[[str], bool],
                 matcher: NameMatcher | None = None) -> set[str]:
    """The one MISSING rule: in the baseline, not run, although the run set out to run it (its paths,
    not deselected with -k/-m): a removed benchmark is MISSING, one left out on purpose is not. Names
    are matched across a rootdir change (``perfci.names``) and reported in this run's terms."""
    if baseline is None:
        return set()
    matcher = matcher or NameMatcher(baseline.benchmarks)
    matched = {matcher.lookup(name) for name in ran}  # also finds the rootdir shift, if any
    renamed = (matcher.to_new(n) for n in baseline.benchmarks if n not in matched)
    return {n for n in renamed if intended(n)}


def run_verdict(outcomes: Iterable[BenchmarkOutcome], missing: Iterable[str] = ()) -> RunVerdict:
    """The one verdict of a run, from its benchmark outcomes (pytest plugin and CLI alike)."""
    return RunVerdict(outcomes=tuple(outcomes), missing=tuple(sorted(missing)))


@dataclass(frozen=True)
class Drift:
    """What differs between the baseline's machine and this one: software versions, and the card."""

    lines: tuple[str, ...] = ()
    card: str | None = None  # this machine's card (GPU UUID); None where not recorded
    file_cards: tuple[str, ...] = ()  # the cards the baseline file records
    file_cards_per_entry: bool = True  # False for a merged file: its card list is the union of its updates'
    model_sigma: float = 0.0  # this model's cross-card term (fingerprint.cross_card_sigma)

    def cross_card_sigma(self, base: BenchmarkRecord | None, new: BenchmarkRecord | None = None) -> float:
        """The cross-card term for one baseline entry: none where its run medians came from the card that
        measured ``new`` (its own card where a merged run recorded one, else this machine's) or from several
        cards (they carry the offsets), the model's where they came from another card or from cards not
        recorded. The entry's own card list decides; an entry without one (written before perfci recorded
        them) goes by the file's, except in a merged file, whose list is every update's."""
        card = new.cards[0] if new is not None and len(new.cards) == 1 else self.card
        if not card:
            return 0.0
        cards = base.cards if base is not None and base.cards else (
            self.file_cards if self.file_cards_per_entry else ())
        return 0.0 if card in cards or len(set(cards)) > 1 else self.model_sigma


def _cards(machine: Mapping[str, object]) -> tuple[str, ...]:
    """The cards a ``machine_info['perfci']`` record names: its list (a merged file's), else its one card."""
    listed = machine.get("cards") or [machine.get("card")]
    return tuple(str(c) for c in listed if c) if isinstance(listed, (list, tuple)) else ()


def environment_drift(base: Mapping[str, object], new: Mapping[str, object], *, merged: bool = False) -> Drift:
    """The drift of ``new``'s machine from the baseline's (both ``machine_info['perfci']`` records);
    ``merged``: the baseline file was merged from partial updates (its header's ``kept_from``)."""
    lines = [f"{k} {base.get(k)} -> {new.get(k)}" for k in DRIFT_FIELDS
             if base.get(k) is not None and new.get(k) is not None and base.get(k) != new.get(k)]
    card = str(new.get("card") or "") or None
    cards, new_cards = _cards(base), _cards(new)  # new_cards: each card of a merged run (perfci run --gpus)
    others = ", ".join(c for c in new_cards if c not in cards)
    if others:
        if not cards or len(cards) == 1:
            lines.append(f"card {cards[0] if cards else '(not recorded)'} -> {others}: baseline from another card")
        elif merged:
            lines.append(f"cards {cards[0]} and {len(cards) - 1} more -> {others}: baseline entries from other cards")
    return Drift(tuple(lines), card=card, file_cards=cards, file_cards_per_entry=not merged,
                 model_sigma=cross_card_sigma(str(new.get("slug") or "")) if card else 0.0)


def judge(new: BenchmarkRecord, base: BenchmarkRecord | None, *, compared: bool,
          drift: Drift = Drift()) -> BenchmarkOutcome:
    """The outcome of one benchmark: its declared rules, the baseline's structure, the timing verdict.

    ``known_bad`` names declared rules (forbid names or expect keys) that this benchmark is meant
    to break (a seeded bad variant in the suite): they must fire, and then they do not fail.
    """
    findings: list[Finding] = []
    profile = new.profile
    if new.forbid or new.expect:
        findings.extend(check_declared(profile or KernelProfile.missing("profiling was off"), new.forbid,
                                       new.expect_map))
    findings = _apply_known_bad(findings, new.known_bad)
    comparison = None
    if compared:
        if base is not None and base.profile is not None:
            findings.extend(check_against_baseline(profile or KernelProfile.missing("profiling was off"),
                                                   base.profile))
        card_sigma = drift.cross_card_sigma(base, new) if new.device_time else 0.0
        settings = CompareSettings(min_effect=new.threshold or DEFAULT_THRESHOLD, cross_card_sigma=card_sigma)
        comparison = _either_clock_model(base, new, settings,
                                         compare_samples(new.name, _sample(base, new), _sample(new, base), settings))
        if base is not None and base.compared_samples_ms and comparison.verdict is not Verdict.INVALID and (
                not all(math.isfinite(v) and v > 0 for v in base.compared_samples_ms)):
            comparison = replace(comparison, verdict=Verdict.INVALID,
                                 reasons=("the baseline entry has non-finite or non-positive times: re-make it",))
    return BenchmarkOutcome(name=new.name, median_ms=new.median_ms, timer=new.timer, device_time=new.device_time,
                            comparison=comparison, findings=tuple(findings), noise_reasons=new.noise_reasons,
                            drift=drift.lines)


def _apply_known_bad(findings: list[Finding], known_bad: tuple[str, ...]) -> list[Finding]:
    if not known_bad:
        return findings
    out = list(findings)
    for name in known_bad:
        rules = {f"forbid:{name}", f"expect:{name}"}
        hits = [i for i, f in enumerate(out) if f.failed and f.rule in rules]
        if not hits:
            out.append(Finding("known_bad", f"this variant is declared known-bad for {name!r} but perfci did not "
                               "flag it", None, True))
        for i in hits:
            f = out[i]
            out[i] = replace(f, failed=False, message=f"(known-bad, flagged as expected) {f.message}")
    return out


def _sample(side: BenchmarkRecord | None, other: BenchmarkRecord | None) -> Sample | None:
    if side is None:
        return None
    reasons = list(side.noise_reasons)
    if other is not None and other.normalization != side.normalization:
        reasons.append(f"normalisation differs ({other.normalization} vs {side.normalization})")
    return Sample(samples_ms=side.compared_samples_ms, noisy=bool(reasons), noise_reasons=tuple(reasons),
                  run_medians_ms=side.run_medians_ms)


def _as_measured(side: BenchmarkRecord, other: BenchmarkRecord) -> Sample:
    """``side``'s sample as measured: a record compared at the reference SM clock scaled back by its median's
    factor (``median_ms / compared_median_ms``: reference / its clock), its run medians alike."""
    factor = side.median_ms / side.compared_median_ms if side.normalization == "sm_clock" and (
        side.compared_median_ms and side.median_ms > 0) else 1.0
    plain = _sample(side, other)
    assert plain is not None
    return replace(plain, samples_ms=tuple(v * factor for v in plain.samples_ms),
                   run_medians_ms=tuple(v * factor for v in plain.run_medians_ms))


def _either_clock_model(base: BenchmarkRecord | None, new: BenchmarkRecord,
                        settings: CompareSettings, comparison: Comparison) -> Comparison:
    """Where one side was compared at the reference SM clock and the other as measured, the change must hold
    as measured too: a kernel whose time does not follow the clock (cuDNN attention at L512 on an H200: 112 us
    at 1678 MHz, 111 us at 1980) otherwise reads +18 % SLOWER against a baseline made at a capped clock. SLOWER
    or FASTER that the as-measured times do not repeat is NOISY, with both readings."""
    if base is None or base.normalization == new.normalization or comparison.verdict not in (
            Verdict.SLOWER, Verdict.FASTER):
        return comparison
    measured = compare_samples(new.name, _as_measured(base, new), _as_measured(new, base), settings)
    if measured.verdict is comparison.verdict:
        return comparison
    return replace(comparison, verdict=Verdict.NOISY, reasons=(
        f"the baseline was compared {_how(base)} and this run {_how(new)}: "
        f"{comparison.verdict.value} {comparison.change_pct:+.2f}% that way, {measured.verdict.value} "
        f"{measured.change_pct or 0.0:+.2f}% with both as measured; which holds depends on how the clock sets "
        "its speed (re-make the entry at the card's max clock, or mark it normalize='none' or 'sm_clock')",
        *comparison.reasons))


def _how(record: BenchmarkRecord) -> str:
    return "at the reference SM clock" if record.normalization == "sm_clock" else "as measured"


def judge_files(new: ResultFile, base: ResultFile | None) -> RunVerdict:
    """The verdict of a result file against a baseline (``perfci compare``, ``perfci run``). Names are
    matched across a rootdir change (``perfci.names``), as in the pytest plugin."""
    drift = Drift() if base is None else environment_drift(base.fingerprint, new.fingerprint,
                                                           merged=bool(base.header.get("kept_from")))
    matcher = NameMatcher(base.benchmarks) if base is not None else None  # one for the run: one rootdir shift
    outcomes = []
    for record in new.benchmarks.values():
        found = matcher.lookup(record.name) if matcher is not None else None
        entry = base.benchmarks[found] if base is not None and found is not None else None
        outcomes.append(judge(record, entry, compared=base is not None, drift=drift))
    outcomes += [error_outcome(name, message) for name, message in new.errors.items() if name not in new.benchmarks]
    return run_verdict(outcomes, missing_from(base, [o.name for o in outcomes], new.intended, matcher))
