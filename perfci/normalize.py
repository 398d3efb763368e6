"""Normalisation stage: whether a device-time measurement is compared at a reference SM clock.

The card's clocks are never locked, so compute-bound work is compared at the card's max SM clock
(each sample x the SM clock read for its batch / reference); memory-bound work (declared bytes moving
at >= 50 % of peak DRAM bandwidth) and host times are compared as measured. Then the compared samples
are checked against the clock they ran at: a moving clock that they followed is noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from perfci import stats
from perfci.measurement import Measurement, SamplingPolicy
from perfci.nvml import SOFT_SLOWDOWNS
from perfci.timing import is_device_timer, throttled
from perfci.units import gbps

if TYPE_CHECKING:
    from perfci.fingerprint import Fingerprint


def measure_compared(timer: Any, fn: Callable[[], Any], policy: SamplingPolicy, fingerprint: Fingerprint, *,
                     bytes_moved: int | None = None) -> Measurement:
    """Measure ``fn`` with ``timer``, then choose how it is compared on this card (see choose_normalization)."""
    return choose_normalization(timer.measure(fn, policy), policy, bytes_moved=bytes_moved,
                                peak_bandwidth_gbps=fingerprint.peak_memory_bandwidth_gbps,
                                reference_sm_clock_mhz=fingerprint.max_sm_clock_mhz)


MEMORY_BOUND = "memory-bound"
CLOCK_EFFECT_LIMIT = 0.01  # compared times may follow a moving SM clock by at most this much (and t < 3)


def choose_normalization(measurement: Measurement, policy: SamplingPolicy, *, bytes_moved: int | None,
                         peak_bandwidth_gbps: float | None,
                         reference_sm_clock_mhz: float | None) -> Measurement:
    """Decide whether comparisons use time at a reference SM clock, and record why.

    Then check the compared samples against the clock each batch ran at: when the clock moved (a
    software thermal slowdown, power capping) and the compared times followed it by more than
    ``CLOCK_EFFECT_LIMIT`` (significantly), the measurement is NOISY with that evidence; when they
    did not (normalised compute-bound work, memory-bound kernels), the movement is only noted.
    """
    def keep(reason: str) -> Measurement:
        return replace(measurement, normalization="none", normalization_reason=reason)

    if not is_device_timer(measurement.timer):
        return keep("host wall clock")
    chosen = _normalized(measurement, policy, keep, bytes_moved=bytes_moved, peak_bandwidth_gbps=peak_bandwidth_gbps,
                         reference_sm_clock_mhz=reference_sm_clock_mhz)
    judged = _judge_clock(chosen)
    followed = [r for r in judged.noise_reasons if r not in chosen.noise_reasons and "times followed it" in r]
    if followed and policy.normalize == "auto" and reference_sm_clock_mhz and chosen.normalization_reason.startswith(
            MEMORY_BOUND):
        # the declared bytes said memory-bound, but the times themselves followed the SM clock: the kernel
        # is compute-bound at this size (seen on an H100: cuDNN attention at L512 moved -14..-21 % with the
        # clock). Compare it at the reference clock rather than call it NOISY.
        return _judge_clock(replace(
            measurement, normalization="sm_clock", reference_sm_clock_mhz=reference_sm_clock_mhz,
            normalization_reason=f"compared at {reference_sm_clock_mhz:.0f} MHz: {chosen.normalization_reason} by its "
            f"declared bytes, but {followed[0].split(', and ', 1)[-1]}, so the SM clock sets its speed"))
    return judged


def _normalized(measurement: Measurement, policy: SamplingPolicy, keep: Callable[[str], Measurement], *,
                bytes_moved: int | None, peak_bandwidth_gbps: float | None,
                reference_sm_clock_mhz: float | None) -> Measurement:
    """A device-time measurement with its normalisation chosen (before the clock check)."""
    if policy.normalize == "none":
        return keep("normalisation off (normalize='none')")
    if not measurement.sample_sm_clock_mhz or not reference_sm_clock_mhz:
        return keep("SM clock not readable through NVML")
    if policy.normalize == "auto" and bytes_moved and peak_bandwidth_gbps:
        achieved = gbps(bytes_moved, measurement.median_ms)
        if achieved >= 0.5 * peak_bandwidth_gbps:
            return keep(f"{MEMORY_BOUND} ({achieved:.0f} GB/s, {achieved / peak_bandwidth_gbps:.0%} of "
                        "peak): the SM clock does not set its speed")
    return replace(
        measurement, normalization="sm_clock", reference_sm_clock_mhz=reference_sm_clock_mhz,
        normalization_reason=f"compared at {reference_sm_clock_mhz:.0f} MHz (the card's max SM clock): "
        "time x measured clock / reference")


def _judge_clock(m: Measurement) -> Measurement:
    """NOISY if the compared samples are exposed to a moving SM clock; otherwise a note on what moved.

    Normalised samples are corrected batch by batch with the clock read in-band, so a software thermal
    slowdown or power capping is only noted (bench-detect on an H100 under sw_thermal_slowdown: the
    GEMM's raw times followed the clock with slope ~ -1, the normalised ones did not; stripping the
    throttle flag left 0 false alarms in 408 A/A comparisons). Samples that are not normalised are
    checked against the clock: NOISY when they followed it by more than ``CLOCK_EFFECT_LIMIT`` (t >= 3).
    """
    clocks = m.sample_sm_clock_mhz
    soft = sorted(set(m.throttle_reasons) & SOFT_SLOWDOWNS)
    if not clocks:
        if soft:  # no per-batch clock to tell its effect: cannot vouch for the times
            return replace(m, noise_reasons=(*m.noise_reasons, throttled(soft)))
        return m
    lo, hi = min(clocks), max(clocks)
    if hi <= 1.02 * lo and not soft:
        return m
    moved = f"SM clock {lo:.0f}-{hi:.0f} MHz during sampling" + (f" ({', '.join(soft)})" if soft else "")
    if m.normalization == "sm_clock":
        return replace(m, normalization_reason=f"{m.normalization_reason}; {moved}, corrected per batch")
    sens = stats.clock_sensitivity(m.samples_ms, clocks)  # not normalised: the compared samples are these
    if sens is None:
        if hi > 1.05 * lo:  # moved, and too few batches to tell whether the times followed
            return replace(m, noise_reasons=(*m.noise_reasons, f"{moved}; too few batches to tell its effect"))
        return replace(m, normalization_reason=f"{m.normalization_reason}; {moved}")
    effect, t = sens
    if abs(effect) > CLOCK_EFFECT_LIMIT and abs(t) >= 3.0:
        return replace(m, noise_reasons=(*m.noise_reasons, f"{moved}, and the times followed it "
                                         f"({effect:+.1%} across that range)"))
    return replace(m, normalization_reason=f"{m.normalization_reason}; {moved}, times unaffected ({effect:+.1%})")
