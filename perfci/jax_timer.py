"""The ``jax`` timer: JAX callables timed with their asynchronous dispatch kept.

JAX returns from a call as soon as the work is queued. Blocking after every call
(``block_until_ready`` per call, the usual recipe) times dispatch + execution + the wake-up with
nothing overlapped, which over-reports whenever dispatch costs about as much as the work. This
timer compiles and warms up outside the samples, then dispatches ``calls`` calls back to back and
blocks once per sample, on the last call's output (a device runs its computations in dispatch
order): a sample is ``calls`` calls' time divided by ``calls``. The next sample is
queued before the current one is waited for, so the device never idles between samples and a
sample is the span between two completions (the device's time when it is the bottleneck, the
dispatch time when the host is).

Device time on a GPU/TPU backend; on the CPU backend it is host time and, like the ``wall`` timer,
reported and never gated (``JaxTimer.device_time`` follows ``jax.default_backend()``). jax is
imported only when a JAX callable is measured.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from perfci import stats
from perfci.measurement import Measurement, SamplingPolicy

NvtxRange = Callable[[], AbstractContextManager[None]]
METHOD = ("{calls} calls dispatched back to back, one block_until_ready per sample, the next sample queued "
          "before waiting (amortised per-call time); compile and warm-up outside the samples")
PER_CALL_PROBES = 50  # calls timed the usual way (block after each) for comparison, kept in the record


def backend() -> str | None:
    """JAX's default backend ('cpu', 'gpu', 'tpu'), or None when jax is not imported (never imports it)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        return str(jax.default_backend())
    except Exception:  # a broken backend set-up is not a timing question
        return None


class _DeviceTimeByBackend(type):
    """``JaxTimer.device_time`` on the class: true on an accelerator backend (read where results are recorded)."""

    @property
    def device_time(cls) -> bool:
        return backend() not in (None, "cpu")


class JaxTimer(metaclass=_DeviceTimeByBackend):
    """Amortised per-call time of a JAX callable (see the module docstring)."""

    name = "jax"
    needs_gpu = False
    help = ("JAX callables: N calls dispatched back to back, one block_until_ready per sample (amortised "
            "per-call time, dispatch overlapped); device time on a GPU backend, host time on CPU")

    @classmethod
    def create(cls, *, gpu_available: bool, nvtx_range: NvtxRange = nullcontext) -> JaxTimer:
        return cls(nvtx_range=nvtx_range)

    def __init__(self, clock: Callable[[], float] = time.perf_counter, nvtx_range: NvtxRange = nullcontext) -> None:
        self._clock = clock
        self._nvtx_range = nvtx_range

    @property
    def device_time(self) -> bool:
        return type(self).device_time  # type: ignore[no-any-return]

    def measure(self, fn: Callable[[], Any], policy: SamplingPolicy) -> Measurement:
        import jax

        from perfci.timing import precision_noise, run_engine

        clock, block, nvtx_range = self._clock, jax.block_until_ready, self._nvtx_range
        started = clock()
        block(fn())  # trace + compile + first run
        first_call_s = clock() - started
        for _ in range(3):
            out = fn()
        block(out)
        per_call = per_call_block_ms(fn, PER_CALL_PROBES, clock)
        estimate_s = _amortised_s(fn, 10, clock)
        calls = int(min(policy.max_calls_per_replay, max(1, round(policy.replay_target_ms / 1e3 / estimate_s))))

        def dispatch() -> Any:
            # only the last output is kept: earlier ones are freed as a loop would free them, and one
            # device runs its computations in dispatch order, so the last one done means all are done
            out = None
            with nvtx_range():
                for _ in range(calls):
                    out = fn()
            return out

        state: dict[str, Any] = {}

        def run_batch(k: int) -> list[float]:
            if "queued" not in state:
                state["queued"] = dispatch()
                block(state["queued"])
                state["done_at"] = clock()
                state["queued"] = dispatch()
            times = []
            for _ in range(k):
                waiting = state["queued"]
                state["queued"] = dispatch()  # queued before waiting: the device stays busy
                block(waiting)
                now = clock()
                times.append((now - state["done_at"]) * 1e3 / calls)
                state["done_at"] = now
            return times

        result = run_engine(run_batch, estimate_s * calls, policy, clock)
        block(state.get("queued"))
        kind = backend() or "?"
        devices = jax.devices()
        return Measurement(
            timer=self.name, device=f"jax {kind} ({devices[0].device_kind if devices else '?'})",
            samples_ms=result.samples_ms, calls_per_sample=calls, stop_reason=result.stop_reason,
            rel_ci=result.rel_ci, warmup_s=result.warmup_s, warmup_settled=result.warmup_settled,
            noise_reasons=precision_noise(result, policy), normalization="none",
            normalization_reason="JAX backend: no SM clock read" if kind != "cpu" else "host wall clock (JAX CPU)",
            sampling_s=result.sampling_s,
            extra={"method": METHOD.format(calls=calls), "jax_backend": kind,
                   "first_call_ms": round(first_call_s * 1e3, 3), "per_call_block_ms": round(per_call, 6)},
        )


def _amortised_s(fn: Callable[[], Any], calls: int, clock: Callable[[], float]) -> float:
    import jax

    out = None
    started = clock()
    for _ in range(calls):
        out = fn()
    jax.block_until_ready(out)
    return max((clock() - started) / calls, 1e-7)


def per_call_block_ms(fn: Callable[[], Any], calls: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The usual recipe, for comparison: median of ``calls`` calls each followed by ``block_until_ready``."""
    import jax

    times = []
    for _ in range(calls):
        started = clock()
        jax.block_until_ready(fn())
        times.append((clock() - started) * 1e3)
    return stats.median(times)


RECORDED = ("method", "jax_backend", "first_call_ms", "per_call_block_ms")


def record_details(measurement: Measurement) -> dict[str, Any]:
    """What a ``jax`` measurement adds to its record's details (how it was timed, compile time, what
    blocking per call read); {} for other timers. The fixture passes it to ``record_from_measurement``."""
    if measurement.timer != JaxTimer.name:
        return {}
    return {key: measurement.extra[key] for key in RECORDED if key in measurement.extra}


# --- choosing the timer -------------------------------------------------------------------------


def is_jax_callable(fn: Callable[..., Any], result: Any = None) -> bool:
    """Whether ``fn`` is JAX work: a jitted function, JAX arrays among its (partial) arguments, or a
    JAX array in what it returned. False whenever jax has not been imported (it is never imported here)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    array = jax.Array
    target, args = fn, []
    while isinstance(target, functools.partial):
        args.extend(target.args)
        args.extend(target.keywords.values())
        target = target.func
    if type(target).__module__.split(".", 1)[0] in ("jax", "jaxlib"):  # jax.jit(f): a PjitFunction
        return True
    if any(isinstance(a, array) for a in args):
        return True
    try:
        leaves = jax.tree_util.tree_leaves(result)
    except Exception:  # an object jax cannot flatten is not a JAX result
        return False
    return any(isinstance(leaf, array) for leaf in leaves)


def choose_timer(name: str, fn: Callable[..., Any], result: Any = None) -> str:
    """``'jax'`` for a JAX callable when the timer is ``'auto'``; ``name`` otherwise (then
    :func:`perfci.timing.make_timer` resolves it as before)."""
    return "jax" if name == "auto" and is_jax_callable(fn, result) else name
