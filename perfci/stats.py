"""Small, dependency-free statistics shared by the timing and compare stages."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence


@functools.lru_cache(maxsize=64)
def normal_quantile(p: float) -> float:
    """Standard-normal quantile (inverse CDF) for 0 < p < 1, by bisection on math.erfc (no scipy)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def z_value(confidence: float) -> float:
    """Two-sided standard-normal quantile for ``confidence`` (e.g. 1.96 at 0.95)."""
    return normal_quantile(0.5 + confidence / 2.0)


def t_quantile(confidence: float, dof: int) -> float:
    """Two-sided Student-t quantile (e.g. 4.30 at 0.95 with 2 degrees of freedom), no scipy.

    Exact closed forms for 1 and 2 degrees of freedom; beyond, the Cornish-Fisher expansion around
    the normal quantile (within 1 % of the exact value from 3 degrees of freedom on).
    """
    if dof < 1:
        raise ValueError(f"dof must be at least 1, got {dof}")
    p = 0.5 + confidence / 2.0
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        a = 4.0 * p * (1.0 - p)
        return 2.0 * (p - 0.5) * math.sqrt(2.0 / a)
    z = normal_quantile(p)
    v = float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return _median_sorted(sorted(values))


def finite_median(values: Sequence[float]) -> float | None:
    """Median of the finite values, None when there are none."""
    finite = [float(v) for v in values if math.isfinite(v)]
    return median(finite) if finite else None


def _interval_sorted(ordered: Sequence[float], confidence: float) -> tuple[float, float]:
    """Distribution-free confidence interval of the median of sorted values, from order statistics.

    Uses the normal approximation to the binomial for the ranks; with fewer than 6 values the
    interval is the full range (the data cannot say more).
    """
    n = len(ordered)
    if n < 6:
        return ordered[0], ordered[-1]
    half_width = z_value(confidence) * math.sqrt(n) / 2.0
    lo = max(0, math.floor(n / 2.0 - half_width) - 1)
    hi = min(n - 1, math.ceil(n / 2.0 + half_width))
    return ordered[lo], ordered[hi]


def _median_sorted(ordered: Sequence[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def relative_median_halfwidth(values: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of the median's confidence interval, over the median (inf when undefined)."""
    if len(values) < 2:
        return math.inf
    ordered = sorted(values)  # once: this runs after every sampling batch
    lo, hi = _interval_sorted(ordered, confidence)
    mid = _median_sorted(ordered)
    if mid <= 0:
        return math.inf
    return (hi - lo) / (2.0 * mid)


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: the spread figure used across fresh processes."""
    mid = median(values)
    return (max(values) - min(values)) / mid if mid > 0 else math.inf


def loglog_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least-squares slope of log(y) on log(x) and its standard error; None when x does not vary or
    there are fewer than three points."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    n = len(lx)
    if n < 3:
        return None
    mx, my = sum(lx) / n, sum(ly) / n
    sxx = sum((x - mx) ** 2 for x in lx)
    if sxx <= 0.0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / sxx
    residual = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(lx, ly, strict=True)) / (n - 2)
    return slope, math.sqrt(residual / sxx)


def clock_sensitivity(samples: Sequence[float], clocks: Sequence[float]) -> tuple[float, float] | None:
    """How much the samples followed the clock they ran at: (effect, t) or None when it cannot be told.

    Samples taken at the same clock reading form one batch; over the batches, the least-squares slope
    of log(batch median) on log(clock) times the log-range of the clock is ``effect``, the fractional
    change of the samples explained by the clock's movement, and ``t`` is the slope over its standard
    error. A time that follows the clock fully (compute-bound, not normalised) has slope -1; one at a
    reference clock, or a memory-bound one, slope ~0. None with fewer than four batches, or when the
    clock did not move.
    """
    batches: dict[float, list[float]] = {}
    for value, clock in zip(samples, clocks, strict=True):
        if value > 0 and clock > 0:
            batches.setdefault(float(clock), []).append(value)
    if len(batches) < 4:
        return None
    fit = loglog_fit(list(batches), [median(v) for v in batches.values()])
    if fit is None:
        return None
    slope, se = fit
    effect = slope * (math.log(max(batches)) - math.log(min(batches)))
    return effect, (slope / se if se > 0 else math.copysign(math.inf, slope) if slope else 0.0)
