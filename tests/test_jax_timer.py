"""The ``jax`` timer on the real JAX CPU backend (skipped when jax is not installed).

JAX's CPU backend dispatches asynchronously too, so the difference between blocking after every
call and perfci's method (many calls dispatched, one block per sample) shows on CPU: for a function
whose dispatch costs about as much as its work, blocking per call reads far more than the
amortised time; for a function whose work dwarfs dispatch, both agree (so perfci's samples do wait
for the work).
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import replace

import pytest

from perfci import timing
from perfci.jax_timer import JaxTimer, choose_timer, is_jax_callable, per_call_block_ms, record_details
from perfci.measurement import SamplingPolicy
from perfci.normalize import choose_normalization
from perfci.record import record_from_measurement
from perfci.settings import PerfSettings

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cpu]' to run these tests)")
jnp = pytest.importorskip("jax.numpy")

POLICY = SamplingPolicy(min_time_s=0.3, max_time_s=1.5, warmup_min_s=0.1, warmup_max_s=0.5)
ON_CPU = jax.default_backend() == "cpu"
HEAVY_N = 384 if ON_CPU else 8192  # a matmul whose work dwarfs one dispatch (~0.9 ms on 2 CPU cores)


@jax.jit
def small(x):
    return jnp.tanh(x) * 2 + 1


@jax.jit
def heavy(a):
    return a @ a


def test_registered_as_a_timer_and_device_time_follows_the_backend():
    assert timing.TIMERS["jax"] is JaxTimer
    assert "jax" in timing.TIMER_NAMES and "jax:" in timing.timers_help()
    # host time on the CPU backend (reported, never gated); device time on a GPU backend
    assert timing.is_device_timer("jax") is (not ON_CPU)
    assert JaxTimer().device_time is (not ON_CPU)
    assert isinstance(timing.make_timer("jax", gpu_available=False), JaxTimer)


def test_timing_module_does_not_import_jax():
    import subprocess

    code = "import sys, perfci.timing, perfci.jax_timer; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_auto_picks_jax_for_jax_callables_only():
    x = jnp.ones(8)
    assert choose_timer("auto", functools.partial(small, x)) == "jax"  # a jitted function
    assert choose_timer("auto", functools.partial(lambda v: v + 1, x)) == "jax"  # JAX array arguments
    assert choose_timer("auto", lambda: small(x), small(x)) == "jax"  # a closure, known by its result
    assert choose_timer("auto", lambda: 3, 3) == "auto"
    assert choose_timer("wall", functools.partial(small, x)) == "wall"  # an explicit timer is kept
    torch = pytest.importorskip("torch")
    t = torch.ones(3)
    assert not is_jax_callable(functools.partial(torch.add, t, t), t + t)


def test_measurement_records_the_method_compile_time_and_calls_per_sample():
    x = jnp.ones(1 << 14)
    m = JaxTimer().measure(functools.partial(small, x), POLICY)
    assert m.timer == "jax" and m.device.startswith(f"jax {jax.default_backend()}")
    assert m.calls_per_sample > 1 and len(m.samples_ms) >= POLICY.min_samples
    assert "one block_until_ready per sample" in m.extra["method"]
    assert m.extra["first_call_ms"] > 5 * m.median_ms  # trace + compile, kept out of the samples
    judged = choose_normalization(m, POLICY, bytes_moved=None, peak_bandwidth_gbps=None, reference_sm_clock_mhz=None)
    record = record_from_measurement("t::jax", judged, PerfSettings(), profile=None, flops=None, bytes_moved=None,
                                     details=record_details(judged))
    assert record.timer == "jax" and record.device_time is (not ON_CPU)
    assert record.details["method"] == m.extra["method"]
    assert record.details["per_call_block_ms"] > 0 and record.details["first_call_ms"] == m.extra["first_call_ms"]
    assert record_details(replace(m, timer="wall")) == {}


def test_samples_wait_for_the_work_when_work_dominates():
    a = jnp.ones((HEAVY_N, HEAVY_N))
    call = functools.partial(heavy, a)
    m = JaxTimer().measure(call, POLICY)
    blocked = min(per_call_block_ms(call, 50) for _ in range(3))
    print(f"{HEAVY_N}^2 matmul on {jax.default_backend()}: perfci jax {m.median_ms * 1e3:.1f} us, "
          f"block per call {blocked * 1e3:.1f} us")
    assert 0.75 < m.median_ms / blocked < 1.33  # not returning at dispatch: it waited for the matmuls


def test_block_per_call_over_reports_when_dispatch_is_comparable_to_the_work():
    x = jnp.ones(1 << 14)  # tanh of 16k floats: about as long as one dispatch on CPU, shorter on a GPU
    call = functools.partial(small, x)
    m = JaxTimer().measure(call, POLICY)
    blocked = min(per_call_block_ms(call, 200) for _ in range(3))
    print(f"16k tanh on {jax.default_backend()}: perfci jax {m.median_ms * 1e3:.2f} us, "
          f"block per call {blocked * 1e3:.2f} us ({blocked / m.median_ms:.2f}x)")
    assert blocked > 1.3 * m.median_ms  # 1.7-2.7x seen on 2 shared CPU cores


def test_measure_takes_about_the_policy_time():
    started = time.perf_counter()
    JaxTimer().measure(functools.partial(small, jnp.ones(64)), POLICY)
    assert time.perf_counter() - started < POLICY.warmup_max_s + POLICY.max_time_s + 2


def test_perf_measures_a_jitted_function_with_the_jax_timer(pytester):
    pytester.makepyfile(test_jx="""
        import jax
        import jax.numpy as jnp

        f = jax.jit(lambda x: jnp.tanh(x) * 2.0)
        X = jnp.ones((16384,))

        def test_tanh(perf):
            perf(f, X)
    """)
    res = pytester.runpytest_subprocess("--perfci-max-time=0.2", "--perfci-min-time=0.05", "--benchmark-json=r.json")
    res.assert_outcomes(passed=1)
    import json

    info = json.loads((pytester.path / "r.json").read_text())["benchmarks"][0]["extra_info"]["perfci"]
    assert info["timer"] == "jax" and "profile" not in info  # timed by dispatching and blocking once per sample
    assert info["median_ms"] > 0
