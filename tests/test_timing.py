"""The timing engine with a fake clock, and the wall timer on real code."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest

from perfci import stats
from perfci.errors import UsageError
from perfci.measurement import Measurement, SamplingPolicy
from perfci.normalize import choose_normalization
from perfci.timing import WallTimer, make_timer, run_engine, timer_label


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_batches(clock: FakeClock, times_ms):
    """run_batch over an iterator of per-call times; advances the fake clock by each call."""
    it = iter(times_ms)

    def run_batch(k: int) -> list[float]:
        out = [next(it) for _ in range(k)]
        clock.now += sum(out) / 1e3
        return out

    return run_batch


def test_warmup_waits_until_batch_medians_settle():
    clock = FakeClock()
    # the first 2000 calls speed up from 3 ms to 1 ms (clocks ramping up), then it is steady
    times = itertools.chain((3.0 - 2.0 * i / 2000 for i in range(2000)), itertools.repeat(1.0))
    policy = SamplingPolicy(warmup_min_s=0.0, warmup_max_s=100.0, batch_time_s=0.05, min_time_s=0.1)
    result = run_engine(fake_batches(clock, times), 1e-3, policy, clock)
    assert result.warmup_settled
    # every recorded sample is after the ramp
    assert set(result.samples_ms) == {1.0}
    assert result.warmup_s >= 2000 * 2.0 / 1e3  # the whole ramp was spent warming up


def test_warmup_cap_is_recorded_when_never_settling():
    clock = FakeClock()
    # batch medians alternate between 1 and 1.5 ms forever (batches of 5 calls)
    times = (1.0 + 0.5 * ((i // 5) % 2) for i in itertools.count())
    policy = SamplingPolicy(warmup_min_s=0.0, warmup_max_s=0.5, batch_time_s=0.005, min_time_s=0.0, max_time_s=0.5)
    result = run_engine(fake_batches(clock, times), 1e-3, policy, clock)
    assert not result.warmup_settled
    assert 0.5 <= result.warmup_s < 0.6


def test_stops_on_precision_once_min_time_reached():
    clock = FakeClock()
    rng = random.Random(2)
    times = (1.0 + rng.gauss(0, 0.001) for _ in itertools.count())
    policy = SamplingPolicy(warmup_min_s=0.0, min_time_s=0.2, max_time_s=10.0, target_rel_ci=0.005)
    result = run_engine(fake_batches(clock, times), 1e-3, policy, clock)
    assert result.stop_reason == "precision"
    assert result.rel_ci <= 0.005
    assert 0.2 <= result.sampling_s < 0.3


def test_noisy_samples_run_to_the_time_cap_and_keep_every_sample():
    clock = FakeClock()
    rng = random.Random(3)
    times = (rng.uniform(0.5, 1.5) for _ in itertools.count())
    policy = SamplingPolicy(warmup_min_s=0.0, warmup_max_s=0.05, min_time_s=0.0, max_time_s=0.3,
                            target_rel_ci=0.0001, max_samples=100000)
    result = run_engine(fake_batches(clock, times), 1e-3, policy, clock)
    assert result.stop_reason == "time_cap"
    assert result.rel_ci > 0.0001
    assert sum(result.batch_sizes) == len(result.samples_ms)
    assert math.isclose(sum(result.samples_ms) / 1e3, result.sampling_s, rel_tol=0.02)


def test_max_samples_caps_sampling():
    clock = FakeClock()
    policy = SamplingPolicy(warmup_min_s=0.0, min_time_s=0.0, max_time_s=100.0, min_samples=5, max_samples=50,
                            target_rel_ci=1e-9)
    rng = random.Random(4)
    result = run_engine(fake_batches(clock, (rng.uniform(1, 2) for _ in itertools.count())), 1e-3, policy, clock)
    assert result.stop_reason == "max_samples"
    assert len(result.samples_ms) == 50


def test_max_samples_holds_for_a_pipelined_runner_that_returns_the_batch_queued_before():
    """The CUDA timers queue batch i+1 before reading batch i, so a read batch has the earlier size."""
    clock = FakeClock()
    rng = random.Random(5)
    inner = fake_batches(clock, (rng.uniform(1, 2) for _ in itertools.count()))
    queued: list[int] = []

    def pipelined(k: int) -> list[float]:
        queued.append(k)
        return inner(queued[-2] if len(queued) > 1 else k)

    policy = SamplingPolicy(warmup_min_s=0.0, min_time_s=0.0, max_time_s=100.0, min_samples=5, max_samples=50,
                            target_rel_ci=1e-9, batch_time_s=0.012)
    result = run_engine(pipelined, 1e-3, policy, clock)
    assert result.stop_reason == "max_samples"
    assert len(result.samples_ms) == 50 == sum(result.batch_sizes)
    assert max(queued[1:]) > min(queued[1:])  # the last batch asked for fewer than the one read


def test_wall_timer_measures_real_sleep_and_is_labelled():
    import time

    policy = SamplingPolicy(warmup_min_s=0.0, warmup_max_s=0.05, min_time_s=0.05, max_time_s=0.3,
                            target_rel_ci=0.05, min_samples=5)
    m = WallTimer().measure(lambda: time.sleep(0.002), policy)
    assert m.timer == "wall" and "not device time" in timer_label(m)
    assert 1.9 <= m.median_ms <= 10.0
    assert m.normalization == "none"


def test_make_timer_choices():
    assert make_timer("auto", gpu_available=False).name == "wall"
    with pytest.raises(UsageError, match="needs a CUDA GPU"):
        make_timer("graph", gpu_available=False)
    with pytest.raises(UsageError, match="unknown timer"):
        make_timer("cuda", gpu_available=False)


def _measurement(samples, clocks=()) -> Measurement:
    return Measurement(timer="graph", device="cuda:0 test", samples_ms=tuple(samples), calls_per_sample=10,
                       stop_reason="precision", rel_ci=0.001, warmup_s=0.5, warmup_settled=True,
                       sample_sm_clock_mhz=tuple(clocks))


def test_normalisation_scales_compute_bound_samples_to_the_reference_clock():
    m = _measurement([2.0, 2.0, 2.2], clocks=[1000, 1000, 900])
    n = choose_normalization(m, SamplingPolicy(), bytes_moved=None, peak_bandwidth_gbps=3000,
                             reference_sm_clock_mhz=2000)
    assert n.normalization == "sm_clock"
    assert n.compared_samples_ms == pytest.approx((1.0, 1.0, 0.99))
    assert n.samples_ms == m.samples_ms  # raw kept


def test_normalisation_skips_memory_bound_and_unreadable_clocks():
    # 3 GB in 1.2 ms = 2500 GB/s, over half of a 3000 GB/s peak: memory-bound
    m = _measurement([1.2] * 5, clocks=[1500] * 5)
    n = choose_normalization(m, SamplingPolicy(), bytes_moved=3 * 10**9, peak_bandwidth_gbps=3000,
                             reference_sm_clock_mhz=2000)
    assert n.normalization == "none" and "memory-bound" in n.normalization_reason
    assert n.compared_samples_ms == m.samples_ms
    no_clock = choose_normalization(_measurement([1.0] * 5), SamplingPolicy(), bytes_moved=None,
                                    peak_bandwidth_gbps=None, reference_sm_clock_mhz=2000)
    assert no_clock.normalization == "none" and "NVML" in no_clock.normalization_reason


def test_summary_thins_samples_but_keeps_the_median():
    rng = random.Random(5)
    samples = [rng.uniform(1, 2) for _ in range(5000)]
    from perfci.record import record_from_measurement, record_to_info
    from perfci.settings import PerfSettings

    record = record_from_measurement("t", _measurement(samples), PerfSettings(), profile=None, flops=None,
                                     bytes_moved=None)
    info = record_to_info(record)
    assert len(record.compared_samples_ms) == len(info["compared_samples_ms"]) == 1000
    assert info["n_samples"] == 5000
    assert abs(stats.median(info["compared_samples_ms"]) - stats.median(samples)) < 0.06


def test_policy_validation():
    with pytest.raises(ValueError):
        SamplingPolicy(target_rel_ci=0)
    with pytest.raises(ValueError):
        SamplingPolicy(min_time_s=5, max_time_s=1)
    with pytest.raises(ValueError):
        SamplingPolicy(normalize="cycles")


def _batches(clocks_mhz, time_at_clock, per_batch=20, jitter=0.002, seed=3):
    """Samples in batches, each batch at one clock reading; time_at_clock(mhz) gives the batch's time."""
    rng = random.Random(seed)
    samples, clocks = [], []
    for mhz in clocks_mhz:
        for _ in range(per_batch):
            samples.append(time_at_clock(mhz) * (1 + rng.gauss(0, jitter)))
            clocks.append(mhz)
    return samples, clocks


CLOCKS = [2000, 1950, 1890, 1820, 1760, 1700, 1760, 1850, 1980, 1720]


def test_clock_sensitivity_sees_times_that_follow_the_clock_and_ignores_ones_that_do_not():
    follow = stats.clock_sensitivity(*_batches(CLOCKS, lambda mhz: 2000.0 / mhz))
    flat = stats.clock_sensitivity(*_batches(CLOCKS, lambda mhz: 1.0))
    assert follow is not None and flat is not None
    assert follow[0] == pytest.approx(-math.log(2000 / 1700), rel=0.05) and follow[1] < -10
    assert abs(flat[0]) < 0.005
    assert stats.clock_sensitivity(*_batches([2000, 1900, 1800], lambda mhz: 1.0)) is None  # 3 batches
    assert stats.clock_sensitivity(*_batches([1900] * 6, lambda mhz: 1.0)) is None  # clock never moved


def test_a_thermal_slowdown_is_noted_not_noisy_when_the_clock_is_corrected_per_batch():
    samples, clocks = _batches(CLOCKS, lambda mhz: 2000.0 / mhz)  # compute-bound: time follows the clock
    m = replace(_measurement(samples, clocks), throttle_reasons=("sw_power_cap", "sw_thermal_slowdown"))
    n = choose_normalization(m, SamplingPolicy(), bytes_moved=None, peak_bandwidth_gbps=3000,
                             reference_sm_clock_mhz=2000)
    assert n.normalization == "sm_clock" and not n.noisy
    assert "1700-2000 MHz" in n.normalization_reason and "sw_thermal_slowdown" in n.normalization_reason
    assert max(n.compared_samples_ms) / min(n.compared_samples_ms) < 1.02  # the correction removed the clock


def test_unnormalised_times_are_noisy_only_when_they_followed_the_moving_clock():
    flat, clocks = _batches(CLOCKS, lambda mhz: 1.0)  # memory-bound: the SM clock does not set its speed
    m = choose_normalization(_measurement(flat, clocks), SamplingPolicy(), bytes_moved=3 * 10**9,
                             peak_bandwidth_gbps=3000, reference_sm_clock_mhz=2000)
    assert m.normalization == "none" and not m.noisy and "times unaffected" in m.normalization_reason
    follow, clocks = _batches(CLOCKS, lambda mhz: 2000.0 / mhz)
    off = choose_normalization(_measurement(follow, clocks), SamplingPolicy(normalize="none"), bytes_moved=None,
                               peak_bandwidth_gbps=3000, reference_sm_clock_mhz=2000)
    assert off.noisy and any("followed it" in r for r in off.noise_reasons)


def test_a_thermal_slowdown_without_a_clock_reading_is_noisy():
    m = replace(_measurement([1.0] * 20), throttle_reasons=("sw_thermal_slowdown",))
    n = choose_normalization(m, SamplingPolicy(), bytes_moved=None, peak_bandwidth_gbps=3000,
                             reference_sm_clock_mhz=2000)
    assert n.noisy and "throttled: sw_thermal_slowdown" in n.noise_reasons


def test_declared_memory_bound_work_whose_times_follow_the_clock_is_compared_at_the_reference_clock():
    # declared bytes put it at >= 50 % of peak bandwidth, but its time scales with 1 / SM clock (cuDNN
    # attention at L512 on an H100 did): compute-bound in fact, so normalised rather than NOISY
    follow, clocks = _batches(CLOCKS, lambda mhz: 2000.0 / mhz)
    n = choose_normalization(_measurement(follow, clocks), SamplingPolicy(), bytes_moved=3 * 10**9,
                             peak_bandwidth_gbps=3000, reference_sm_clock_mhz=2000)
    assert n.normalization == "sm_clock" and not n.noisy
    assert "declared bytes" in n.normalization_reason and "followed" in n.normalization_reason
    assert max(n.compared_samples_ms) / min(n.compared_samples_ms) < 1.02
