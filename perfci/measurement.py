"""What the timing stage returns: raw samples, how they were taken, and the card's state.

The raw per-call device times are kept as measured. Where the run is compute-bound on a GPU, the
samples are also expressed at a reference SM clock (``compared_samples_ms``: time x clock / reference),
which is what comparisons use, because the card's clocks are not locked and move between processes.
Every choice (timer, fallback, L2 state, normalisation, noise) is recorded with its reason.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from perfci import stats
from perfci.nvml import ClockSnapshot

MAX_STORED_SAMPLES = 1000


@dataclass(frozen=True)
class SamplingPolicy:
    """How long and how precisely to measure. All times in seconds unless named otherwise."""

    target_rel_ci: float = 0.005
    confidence: float = 0.95
    min_samples: int = 20
    max_samples: int = 5000
    min_time_s: float = 0.5
    max_time_s: float = 5.0
    warmup_min_s: float = 0.3
    warmup_max_s: float = 3.0
    warmup_tolerance: float = 0.01
    batch_time_s: float = 0.025
    replay_target_ms: float = 2.0
    max_calls_per_replay: int = 1000
    l2_flush: bool = False
    normalize: str = "auto"

    def __post_init__(self) -> None:
        if not 0 < self.target_rel_ci < 1:
            raise ValueError(f"target_rel_ci must be in (0, 1), got {self.target_rel_ci}")
        if self.min_samples < 2 or self.max_samples < self.min_samples:
            raise ValueError("need 2 <= min_samples <= max_samples")
        if self.max_time_s <= 0 or self.min_time_s < 0 or self.min_time_s > self.max_time_s:
            raise ValueError("need 0 <= min_time_s <= max_time_s and max_time_s > 0")
        if self.normalize not in ("auto", "sm_clock", "none"):
            raise ValueError(f"normalize must be auto, sm_clock or none, got {self.normalize!r}")


@dataclass(frozen=True)
class Measurement:
    timer: str
    device: str
    samples_ms: tuple[float, ...]
    calls_per_sample: int
    stop_reason: str
    rel_ci: float
    warmup_s: float
    warmup_settled: bool
    l2_flush: bool = False
    fallback_reason: str | None = None
    sample_sm_clock_mhz: tuple[float, ...] = ()
    clocks_before: ClockSnapshot | None = None
    clocks_after: ClockSnapshot | None = None
    throttle_reasons: tuple[str, ...] = ()
    noise_reasons: tuple[str, ...] = ()
    normalization: str = "none"
    normalization_reason: str = ""
    reference_sm_clock_mhz: float | None = None
    sampling_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def noisy(self) -> bool:
        return bool(self.noise_reasons)

    @functools.cached_property
    def median_ms(self) -> float:
        return stats.median(self.samples_ms)

    @functools.cached_property
    def compared_samples_ms(self) -> tuple[float, ...]:
        """Samples used by comparisons: at the reference SM clock when normalised, else raw."""
        if self.normalization != "sm_clock" or not self.reference_sm_clock_mhz:
            return self.samples_ms
        ref = self.reference_sm_clock_mhz
        return tuple(t * mhz / ref for t, mhz in zip(self.samples_ms, self.sample_sm_clock_mhz, strict=True))

    @functools.cached_property
    def compared_median_ms(self) -> float:
        if self.compared_samples_ms is self.samples_ms:
            return self.median_ms
        return stats.median(self.compared_samples_ms)

    @property
    def median_sm_clock_mhz(self) -> float | None:
        return stats.median(self.sample_sm_clock_mhz) if self.sample_sm_clock_mhz else None

    def details(self) -> dict[str, Any]:
        """How the samples were taken and the card's state: JSON-able, kept with the record."""
        clocks = self.median_sm_clock_mhz
        return {
            "device": self.device,
            "calls_per_sample": self.calls_per_sample,
            "n_samples": len(self.samples_ms),
            "rel_ci": round(self.rel_ci, 6),
            "stop_reason": self.stop_reason,
            "warmup_s": round(self.warmup_s, 3),
            "warmup_settled": self.warmup_settled,
            "sampling_s": round(self.sampling_s, 3),
            "l2_flush": self.l2_flush,
            "fallback_reason": self.fallback_reason,
            "normalization_reason": self.normalization_reason,
            "reference_sm_clock_mhz": self.reference_sm_clock_mhz,
            "median_sm_clock_mhz": round(clocks, 1) if clocks else None,
            "clock_source": self.extra.get("clock_source"),
            "sm_clock_range_mhz": (
                [min(self.sample_sm_clock_mhz), max(self.sample_sm_clock_mhz)]
                if self.sample_sm_clock_mhz
                else None
            ),
            "clocks_before": _snap(self.clocks_before),
            "clocks_after": _snap(self.clocks_after),
            "throttle_reasons": list(self.throttle_reasons),
        }


def thin(values: tuple[float, ...], limit: int = MAX_STORED_SAMPLES) -> tuple[float, ...]:
    """Keep at most ``limit`` samples, evenly spaced in time order (the median barely moves)."""
    if len(values) <= limit:
        return values
    step = len(values) / limit
    return tuple(values[int(i * step)] for i in range(limit))


def _snap(snapshot: ClockSnapshot | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "sm_clock_mhz": snapshot.sm_clock_mhz,
        "memory_clock_mhz": snapshot.memory_clock_mhz,
        "power_w": snapshot.power_w,
        "temperature_c": snapshot.temperature_c,
        "throttle_reasons": list(snapshot.throttle_reasons),
        "other_processes": snapshot.other_processes,
    }
