"""The statistical verdict for one benchmark: is the new build slower, faster, the same, or can't we tell?

Model
-----
Each side of a comparison is one fresh process's per-call device times of one benchmark. Work in logs,
so that ratios become differences. A process's location estimate ``m`` is

    log m = log T + b + w

with ``T`` the kernel's true time, ``b`` the *between-run* offset of that process (clocks, memory
placement, what ran before; standard deviation ``sigma_b``) and ``w`` the *within-run* error of the
estimate (standard error ``se_w``). Within a process the samples are tight, so ``se_w`` is tiny for
hundreds of samples, but ``sigma_b`` is not: a test that only looks at the samples (bootstrap,
Mann-Whitney, pytest-benchmark's compare) calls every between-process wobble significant. Here the
between-run term is an explicit noise floor, added in quadrature:

    r = log(new / base),   s^2 = sigma_b^2 (1/k_base + 1/k_new) + se_w(base)^2 + se_w(new)^2,
    interval exp(r -+ z s)

with ``z`` the two-sided normal quantile at ``confidence`` and ``k`` the fresh-process runs behind a
side's level: 1 for a plain run; for a baseline written from k runs, its level is the mean of the k
runs (the kept run's midmean carried by the ratio of the runs' mean log median to its own median), so
its between-run error is sigma_b / sqrt(k). The location is the *midmean* (mean of the
central half of the sorted samples), not the plain median: it equals the median of a symmetric core, is
as robust to the heavy right tail of GPU timings, and, unlike the median, resolves changes smaller than
the timer's tick (CUPTI timestamps step by 32 ns, 3.5 % of a 0.9 us kernel: on an H200, 8 fresh processes,
the midmeans of ~1 us kernels moved 0.1-0.2 % where the medians were stuck on one tick or jumped by one).
``se_w`` is the trimmed mean's closed-form standard error (winsorized standard deviation / (0.5 sqrt n)),
so the verdict is a pure function of the inputs: no random numbers. ``base_median_ms`` and
``new_median_ms`` report plain medians; ``ratio`` is the ratio of midmeans.

Spread and the noise floor
--------------------------
perfci's "spread" of a kernel is ``perfci.stats.spread`` of its per-run medians over fresh processes:
(max - min) / median, which over five runs is about 2.33 sigma_b (d2 = 2.326, the expected range of five
normal draws). ``noise_floor`` and ``min_noise_floor`` are spreads in that sense, ``noise_floor_ms`` an
absolute one. With no run medians, ``sigma_b = hypot(noise_floor, noise_floor_ms / level) / 2.326``.
When either side carries per-run medians (``Sample.run_medians_ms``, two or more), their pooled log
standard deviation (nu = runs - 1 degrees of freedom per side) replaces that default, taken at its
one-sided 80 % upper confidence bound (five runs: x 1.56), and never below ``min_noise_floor``: a kernel
shown to be steady gets a sharper test, one shown to be noisy a wider interval. With a single degree of
freedom (two run medians in all, e.g. a one-run baseline against a confirmed, pooled run: see
``perfci.confirm``) the upper bound would be 4x the observed spread, so there the default floor is used
unless the two runs disagree by more.

Rule
----
With e = ``effect_fraction`` * ``min_effect`` (0.75 * 3 % = 2.25 %):

* SLOWER  iff ratio_low > 1 (significant with the between-run floor included)  and  ratio >= 1 + e
* FASTER  iff ratio_high < 1                                                     and  ratio <= 1 / (1 + e)
* NOISY   iff a side is flagged noisy by the timing stage, has fewer than ``min_samples`` samples or
  non-finite / non-positive ones, or a within-run spread (IQR / median) above ``max_relative_spread``;
  or, when neither SLOWER nor FASTER holds, the interval's half-width z s exceeds ``min_effect``: the
  data cannot resolve a ``min_effect`` change, so "same" would be a guess
* SAME    otherwise;  NEW when there is no base, MISSING when there is no new measurement.

Only SLOWER fails. The significance gate (95 % two-sided: a one-sided 2.5 % error when the floor is
right) is a first filter; what keeps false alarms out is the effect gate ``e`` for steady kernels and,
in ``perfci run``, the confirmation of every SLOWER by a second fresh process (``perfci.confirm``).

Trade-off, and what the targets need
------------------------------------
Simulated (tests/test_compare.py's process model: lognormal jitter, a heavy right tail, rare outliers;
five-run baseline against one run, 2000-4000 trials, one pass): 3 % detected 100 % at 0.3 % spread,
99.9 % at 0.5 %, 93.8 % at 1 %, 56 % at 2 % (where 36 % of A/A pairs are NOISY instead); false
alarms 0.00 % per comparison up to 1 % spread, 0.30 % at 2 %. A one-run baseline (default floor,
``scripts/detect_sim.py``): 100 / 99.2 / 88.3 / 72.3 % detection, false alarms 0 / 0 / 0 / 3.3 %.

Why 0.75 and not lower: measured on an H100 (bench-detect, fresh processes), kernels whose five
baseline runs agreed within ~1 % had a sixth process land +1.9 %, +2.2 % and +2.3 % away (a process-
level offset that five runs do not reveal). With e = 1.86 % two of those were false alarms in two
408-comparison leave-one-out A/As; with e = 2.25 % none. Why 95 % and not 99 %: on a later H100
collection (the planted GEMM's processes spread 1.4 %, its +3 % measured +2.95 % at the reference
clock) five-run baselines caught the +3 % in 90.0 % of trials at 99 % and 98.3 % at 95 %; lowering
``e`` to 0.6 x threshold moved that by 0.6 points only, since the interval, not ``e``, was binding.
The first-pass false alarms did not change (one in 408 leave-one-out comparisons of the suite, a
ragged GEMM whose processes spread 12 %), and with confirmation there were none at 95 % (leave-two-
out over four suite collections of six, six, six and five runs: 7480 comparisons, 8 first-pass SLOWER). ``scripts/
detect_sim.py`` prints simulated rates next to pytest-benchmark's ``median:5%`` rule.

Earlier real data, with the earlier rule (e = 1.86 %, a several-run baseline's level from its kept run
only). H200, CUPTI per-call device times, 20 kernels of 0.9 us - 1.6 ms, 8 fresh processes, all 1120
ordered A/A pairs, default settings): 18 false SLOWER, all on two kernels (that 3 us GEMM, and a 175 us
GEMM whose within-run IQR is 10-15 %); a planted +3 % (re-quantized to 32 ns) was SLOWER in 1055 of the
1076 pairs not NOISY. With five baseline run medians: 0 false alarms in 300 pairs, +3 % caught 254 / 255.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfci import stats
from perfci.errors import BadInputError, UsageError
from perfci.stats import normal_quantile
from perfci.units import parse_fraction
from perfci.verdicts import Verdict

__all__ = [
    "DEFAULT_THRESHOLD",
    "CompareSettings",
    "Comparison",
    "Sample",
    "Verdict",
    "baseline_spread",
    "compare_samples",
    "normal_quantile",
]

D2_FIVE_RUNS = 2.326  # expected range of 5 standard-normal draws: spread over 5 runs ~ D2 * sigma
_TRIM = 0.25  # the location is the midmean: the mean of the central half of the sorted samples
_SIGMA_UPPER = 0.80  # observed run medians give sigma_b as this one-sided upper confidence bound
_MIN_DOF = 2  # below this many degrees of freedom the run medians only widen the default floor
DEFAULT_THRESHOLD = 0.03  # the slowdown that fails by default, everywhere (marker, options, files without one)
_THRESHOLD_FORMS = "a percentage such as '3%' or '2.5%', or a fraction such as 0.03 or '0.03' (0 < x < 1)"


def baseline_spread(run_medians_ms: Sequence[float]) -> float:
    """(max - min) / median of per-run medians: the spread figure ``noise_floor`` is expressed in."""
    if len(run_medians_ms) < 2:
        raise ValueError("spread needs at least two run medians")
    return stats.spread([float(v) for v in run_medians_ms])


def _float_tuple(values: Any, what: str) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)):
        raise BadInputError(f"{what} must be a sequence of numbers, got a string")
    try:
        return tuple(float(v) for v in values)
    except (TypeError, ValueError) as err:
        raise BadInputError(f"{what} must be a sequence of numbers ({err})") from None


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: one process's per-call device times of one benchmark, in ms."""

    samples_ms: tuple[float, ...]
    noisy: bool = False  # the timing stage marked it (clock drop, throttling, other process)
    noise_reasons: tuple[str, ...] = ()
    run_medians_ms: tuple[float, ...] = ()  # optional: per-run medians from repeated fresh-process runs

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples_ms", _float_tuple(self.samples_ms, "samples_ms"))
        object.__setattr__(self, "run_medians_ms", _float_tuple(self.run_medians_ms, "run_medians_ms"))
        object.__setattr__(self, "noise_reasons", tuple(str(r) for r in self.noise_reasons))
        object.__setattr__(self, "noisy", bool(self.noisy))


@dataclass(frozen=True)
class CompareSettings:
    """How a comparison decides. Spreads are (max - min) / median over fresh runs; see the module doc."""

    min_effect: float = DEFAULT_THRESHOLD  # fractional slowdown that must be caught (>= 95 % at <= 1 % spread)
    confidence: float = 0.95  # two-sided level of the reported interval and of the significance gate
    noise_floor: float = 0.01  # default between-run spread when no run medians are given
    max_relative_spread: float = 0.10  # within-run IQR / median beyond which a side is NOISY
    min_samples: int = 5
    min_noise_floor: float = 0.003  # observed run medians never push the floor below this spread
    noise_floor_ms: float = 1e-5  # absolute between-run spread (ms) added in quadrature: tiny kernels
    effect_fraction: float = 0.75  # SLOWER/FASTER need |change| >= effect_fraction * min_effect
    noisy_sigma: float = 0.03  # a side flagged noisy may be off by this much (log sd; its own IQR if larger)
    cross_card_sigma: float = 0.0  # log sd of card-to-card offsets when the sides come from two cards (0: one)

    def __post_init__(self) -> None:
        checks = [
            (0.0 < self.min_effect < 1.0, "min_effect must be a fraction in (0, 1)"),
            (0.5 < self.confidence < 1.0, "confidence must be in (0.5, 1)"),
            (0.0 <= self.noise_floor < 1.0, "noise_floor must be a fraction in [0, 1)"),
            (self.max_relative_spread > 0.0, "max_relative_spread must be > 0"),
            (int(self.min_samples) == self.min_samples and self.min_samples >= 2, "min_samples must be >= 2"),
            (0.0 <= self.min_noise_floor < 1.0, "min_noise_floor must be a fraction in [0, 1)"),
            (self.noise_floor_ms >= 0.0, "noise_floor_ms must be >= 0"),
            (0.0 < self.effect_fraction <= 1.0, "effect_fraction must be in (0, 1]"),
            (0.0 <= self.noisy_sigma < 1.0, "noisy_sigma must be in [0, 1)"),
            (0.0 <= self.cross_card_sigma < 1.0, "cross_card_sigma must be in [0, 1)"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message, hint=f"got {self!r}")

    @classmethod
    def from_threshold(cls, value: str | float) -> CompareSettings:
        """Settings with ``min_effect`` parsed from "3%", "2.5%", 0.03 or "0.03"."""
        if isinstance(value, bool):
            raise UsageError(f"bad regression threshold {value!r}", hint=f"use {_THRESHOLD_FORMS}")
        try:
            return cls(min_effect=parse_fraction(value, what="regression threshold"))
        except ValueError as exc:
            raise UsageError(str(exc), hint=f"use {_THRESHOLD_FORMS}") from None

    @property
    def z(self) -> float:
        return normal_quantile(0.5 + self.confidence / 2.0)


@dataclass(frozen=True)
class Comparison:
    name: str
    verdict: Verdict
    base_median_ms: float | None
    new_median_ms: float | None
    ratio: float | None  # new / base location (midmeans: see the module docstring)
    ratio_low: float | None  # interval of the ratio at `confidence`, between-run floor included
    ratio_high: float | None
    min_effect: float
    reasons: tuple[str, ...] = field(default=())
    base_level_ms: float | None = None  # the locations the ratio is taken of (midmeans, at the run mean for
    new_level_ms: float | None = None  # a several-run side): what "change" compares, beside the plain medians

    @property
    def change_pct(self) -> float | None:
        return None if self.ratio is None else (self.ratio - 1.0) * 100.0

    @property
    def failed(self) -> bool:
        return self.verdict in (Verdict.SLOWER, Verdict.INVALID)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict.value,
            "base_median_ms": self.base_median_ms,
            "new_median_ms": self.new_median_ms,
            "ratio": self.ratio,
            "ratio_low": self.ratio_low,
            "ratio_high": self.ratio_high,
            "min_effect": self.min_effect,
            "reasons": list(self.reasons),
            "base_level_ms": self.base_level_ms,
            "new_level_ms": self.new_level_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        try:
            def opt(key: str) -> float | None:
                return None if data.get(key) is None else float(data[key])

            reasons = data.get("reasons", ())
            if isinstance(reasons, str):
                raise TypeError("reasons must be a list of strings")
            return cls(
                name=str(data["name"]),
                verdict=Verdict.parse(data["verdict"]),
                base_median_ms=opt("base_median_ms"),
                new_median_ms=opt("new_median_ms"),
                ratio=opt("ratio"),
                ratio_low=opt("ratio_low"),
                ratio_high=opt("ratio_high"),
                min_effect=float(data["min_effect"]),
                reasons=tuple(str(r) for r in reasons),
                base_level_ms=opt("base_level_ms"),
                new_level_ms=opt("new_level_ms"),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise BadInputError(f"not a perfci comparison record ({err!r})") from None


@dataclass(frozen=True)
class _Side:
    """What the rule needs from one side."""

    median_ms: float  # plain median, for display
    level_ms: float  # midmean: the location the ratio is taken of
    se_within: float  # standard error of log(level) from the samples alone
    iqr_rel: float  # within-run (q75 - q25) / median
    run_logs: np.ndarray  # log run medians (may be empty)

    @property
    def runs(self) -> int:
        """Fresh-process runs the level stands for (1 without run medians)."""
        return max(1, int(self.run_logs.size))


def _summarise(sample: Sample) -> _Side:
    x = np.sort(np.asarray(sample.samples_ms, dtype=float))
    n = x.size
    g = int(n * _TRIM)
    level = float(x[g : n - g].mean())
    winsorized = np.clip(x, x[g], x[n - g - 1])
    se = float(winsorized.std(ddof=1)) / ((1.0 - 2.0 * _TRIM) * math.sqrt(n))
    q25, q50, q75 = np.quantile(x, [0.25, 0.5, 0.75])
    runs = np.asarray([m for m in sample.run_medians_ms if m > 0 and math.isfinite(m)], dtype=float)
    run_logs = np.log(runs)
    if run_logs.size >= 2:
        # several runs: their mean location, read on this run's midmean scale (its midmean / median
        # ratio carried over), so the between-run error of the level shrinks to sigma_b / sqrt(runs)
        level *= math.exp(float(run_logs.mean()) - math.log(float(q50)))
    return _Side(
        median_ms=float(q50),
        level_ms=level,
        se_within=se / level,
        iqr_rel=float((q75 - q25) / q50),
        run_logs=run_logs,
    )


def _chi2_quantile(p: float, dof: float) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (good to a few % for dof >= 1)."""
    c = 2.0 / (9.0 * dof)
    return dof * max(1.0 - c + normal_quantile(p) * math.sqrt(c), 1e-3) ** 3


def _between_sigma(base: _Side, new: _Side, settings: CompareSettings) -> tuple[float, str]:
    """sigma_b (log scale, one process) and a sentence saying where it came from."""
    ref_ms = math.sqrt(base.level_ms * new.level_ms)
    default_spread = math.hypot(settings.noise_floor, settings.noise_floor_ms / ref_ms)
    dof, sum_sq, counts = 0, 0.0, []
    for side in (base, new):
        if side.run_logs.size >= 2:
            dof += side.run_logs.size - 1
            sum_sq += float(np.sum((side.run_logs - side.run_logs.mean()) ** 2))
            counts.append(str(side.run_logs.size))
    if dof == 0:
        return default_spread / D2_FIVE_RUNS, f"default between-run spread {default_spread:.2%}"
    observed = math.sqrt(sum_sq / dof)
    if dof < _MIN_DOF:
        # one degree of freedom (two runs in all: a confirmed run against a one-run baseline) is too
        # little to estimate a spread from (its 80 % upper bound is 4x the observed one); the default
        # stands unless the two runs disagree by more
        sigma = max(default_spread / D2_FIVE_RUNS, observed)
        return sigma, (f"between-run spread {sigma * D2_FIVE_RUNS:.2%}: the default {default_spread:.2%} or the "
                       f"{'+'.join(counts)} run medians' {observed * D2_FIVE_RUNS:.2%}, whichever is larger")
    upper = observed * math.sqrt(dof / _chi2_quantile(1.0 - _SIGMA_UPPER, dof))
    sigma = max(upper, settings.min_noise_floor / D2_FIVE_RUNS)
    return sigma, (
        f"between-run spread {sigma * D2_FIVE_RUNS:.2%} from {'+'.join(counts)} run medians "
        f"(observed {observed * D2_FIVE_RUNS:.2%}, upper {_SIGMA_UPPER:.0%} bound used)"
    )


def _side_problems(label: str, sample: Sample, settings: CompareSettings) -> tuple[list[str], str | None]:
    """Why this side is noisy (its interval is widened), and why it cannot be used at all (or None)."""
    problems: list[str] = []
    if sample.noisy:
        why = "; ".join(sample.noise_reasons) or "no reason given"
        problems.append(f"{label} marked noisy by the timing stage ({why})")
    values = np.asarray(sample.samples_ms, dtype=float)
    if values.size and (not np.all(np.isfinite(values)) or np.any(values <= 0)):
        bad = int(np.sum(~np.isfinite(values) | (values <= 0)))
        return problems, f"{label} has {bad} non-finite, zero or negative time(s): the measurement is invalid"
    if values.size < settings.min_samples:
        return problems, f"{label} has {values.size} samples, fewer than the {settings.min_samples} needed"
    return problems, None


def compare_samples(
    name: str,
    base: Sample | None,
    new: Sample | None,
    settings: CompareSettings = CompareSettings(),  # frozen, so a shared default is safe
    *,
    seed: int = 0,
) -> Comparison:
    """Verdict for one benchmark; see the module docstring for the rule.

    Everything is closed-form (no resampling), so the result is a pure function of the inputs;
    ``seed`` is accepted for API stability and changes nothing.
    """
    del seed
    empty = {"ratio": None, "ratio_low": None, "ratio_high": None, "min_effect": settings.min_effect}
    if base is None and new is None:
        raise UsageError(f"benchmark {name!r}: nothing to compare (no base and no new measurement)")
    if base is None:
        assert new is not None
        med = stats.finite_median(new.samples_ms)
        return Comparison(name, Verdict.NEW, None, med, reasons=("no baseline for this benchmark",), **empty)
    if new is None:
        med = stats.finite_median(base.samples_ms)
        return Comparison(
            name, Verdict.MISSING, med, None, reasons=("benchmark not in the new run",), **empty
        )

    (base_problems, base_bad), (new_problems, new_bad) = (_side_problems("base", base, settings),
                                                          _side_problems("new", new, settings))
    problems = base_problems + new_problems
    if base_bad or new_bad:  # no statistics possible on this data
        meds = [stats.finite_median(s.samples_ms) for s in (base, new)]
        invalid = any("invalid" in (why or "") for why in (base_bad, new_bad))
        return Comparison(name, Verdict.INVALID if invalid else Verdict.NOISY, meds[0], meds[1],
                          reasons=tuple(problems + [w for w in (base_bad, new_bad) if w]), **empty)

    b, w = _summarise(base), _summarise(new)
    widen = 0.0  # extra variance of a side the timing stage flagged, or whose within-run spread is wild
    for label, side, flagged in (("base", b, bool(base_problems)), ("new", w, bool(new_problems))):
        wild = side.iqr_rel > settings.max_relative_spread
        if wild:
            problems.append(f"{label} within-run spread (IQR/median) {side.iqr_rel:.1%} exceeds "
                            f"{settings.max_relative_spread:.1%}")
        if flagged or wild:
            widen += max(settings.noisy_sigma, side.iqr_rel / 1.349) ** 2
    sigma_b, floor_note = _between_sigma(b, w, settings)
    log_ratio = math.log(w.level_ms / b.level_ms)
    s = math.sqrt(sigma_b**2 * (1.0 / b.runs + 1.0 / w.runs) + b.se_within**2 + w.se_within**2)
    z = settings.z
    ratio, low, high = math.exp(log_ratio), math.exp(log_ratio - z * s), math.exp(log_ratio + z * s)
    effect = settings.effect_fraction * settings.min_effect
    level = f"{settings.confidence * 100:g}%"
    summary = (
        f"{(ratio - 1):+.2%} (interval {low - 1:+.2%} .. {high - 1:+.2%} at {level}; {floor_note})"
    )

    def result(verdict: Verdict, *why: str, interval: tuple[float, float] = (low, high)) -> Comparison:
        return Comparison(
            name, verdict, b.median_ms, w.median_ms, ratio, interval[0], interval[1],
            settings.min_effect, tuple(why), b.level_ms, w.level_ms,
        )

    if problems:
        # noise widens the interval instead of ending the comparison: a change that clears the threshold
        # even then is real (a +25 % slowdown measured while something disturbed the GPU still fails)
        s_noisy = math.sqrt(s**2 + widen + settings.cross_card_sigma**2)
        wide = (math.exp(log_ratio - z * s_noisy), math.exp(log_ratio + z * s_noisy))
        noisy_summary = f"{ratio - 1:+.2%} (noise-widened interval {wide[0] - 1:+.2%} .. {wide[1] - 1:+.2%})"
        if wide[0] > 1.0 + settings.min_effect:
            return result(Verdict.SLOWER, f"slower by {noisy_summary}, beyond the {settings.min_effect:.1%} "
                          "threshold despite the noise", *problems, interval=wide)
        if wide[1] < 1.0 / (1.0 + settings.min_effect):
            return result(Verdict.FASTER, f"faster by {noisy_summary} despite the noise", *problems, interval=wide)
        return result(Verdict.NOISY, *problems, f"read {noisy_summary}", interval=wide)
    if settings.cross_card_sigma > 0.0:
        # the sides come from two cards of one model: their offset (measured per model) may explain the
        # change, so it must clear the card-widened interval too; it never makes a comparison NOISY
        s_card = math.sqrt(s**2 + settings.cross_card_sigma**2)
        card_low, card_high = math.exp(log_ratio - z * s_card), math.exp(log_ratio + z * s_card)
        offset = math.expm1(z * settings.cross_card_sigma)
        card_note = (f"baseline from another card: a card offset of up to {offset:.1%} is expected "
                     "(use --against REF, or re-make the baseline on this card)")
        if low > 1.0 and ratio >= 1.0 + effect and card_low <= 1.0:
            return result(Verdict.SAME, f"{summary}; within the cross-card offset", card_note)
        if high < 1.0 and ratio <= 1.0 / (1.0 + effect) and card_high >= 1.0:
            return result(Verdict.SAME, f"{summary}; within the cross-card offset", card_note)
        if low > 1.0 and ratio >= 1.0 + effect:
            return result(Verdict.SLOWER, f"slower by {summary}; beyond the cross-card offset too", card_note,
                          interval=(card_low, card_high))
    if low > 1.0 and ratio >= 1.0 + effect:
        return result(Verdict.SLOWER, f"slower by {summary}; flagged from +{effect:.2%}")
    if high < 1.0 and ratio <= 1.0 / (1.0 + effect):
        return result(Verdict.FASTER, f"faster by {summary}")
    if z * s > settings.min_effect:
        return result(
            Verdict.NOISY,
            f"cannot resolve a {settings.min_effect:.1%} change: interval half-width {z * s:.2%}",
            summary,
        )
    if low > 1.0 or high < 1.0:
        return result(Verdict.SAME, f"significant but below the {effect:.2%} flag level: {summary}")
    return result(Verdict.SAME, f"no significant change: {summary}")
