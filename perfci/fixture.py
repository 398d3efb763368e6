"""The ``perf`` object a test receives: measure device time, profile once, feed pytest-benchmark.

``perf`` is built on pytest-benchmark's ``benchmark`` fixture: the device-time samples are replayed
through ``benchmark.pedantic`` with a ``DeviceClock`` as that fixture's timer (set through
pytest-benchmark's own ``@pytest.mark.benchmark(timer=...)``), so every pytest-benchmark option
(autosave, compare, compare-fail, json, histogram) works unchanged on device times.
"""

from __future__ import annotations

import contextlib
import functools
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from perfci.errors import InfrastructureError, RegressionError, UsageError
from perfci.jax_timer import choose_timer, record_details
from perfci.normalize import measure_compared
from perfci.record import display_extra, record_from_measurement, record_to_info
from perfci.timing import make_timer, timer_label
from perfci.units import format_bytes

if TYPE_CHECKING:
    from perfci.measurement import Measurement
    from perfci.rules import Finding
    from perfci.session import PerfSession
    from perfci.settings import PerfSettings
    from perfci.trace import KernelProfile


class DeviceClock:
    """A pytest-benchmark timer that reads device time: each ``step`` advances it by one sample."""

    __name__ = "perfci.DeviceClock"

    def __init__(self) -> None:
        self._now_s = 0.0
        self._pending: deque[float] = deque()

    def __call__(self) -> float:
        return self._now_s

    def load(self, samples_ms: tuple[float, ...]) -> None:
        self._pending = deque(t / 1e3 for t in samples_ms)

    def step(self) -> None:
        self._now_s += self._pending.popleft()


class OutOfMemory(InfrastructureError):
    """CUDA ran out of memory in a benchmark; the message has the shapes and the memory state."""


class Perf:
    """What a test gets as ``perf``. Call it once: ``out = perf(fn, *args, **kwargs)``."""

    def __init__(self, benchmark: Any, clock: DeviceClock, settings: PerfSettings,
                 session: Callable[[], PerfSession], test: str, *, range_pass: bool = False) -> None:
        self.flops: float | None = None
        self.bytes: int | None = None
        self._benchmark = benchmark
        self._clock = clock
        self._settings = settings
        self._session = session  # built at the first call: the first torch import and CUDA call of the session
        self._test = test
        self._range_pass = range_pass  # --perfci-range-pass: the one call of a disabled benchmark inside its range
        self._used = False

    @property
    def settings(self) -> PerfSettings:
        return self._settings

    @property
    def extra_info(self) -> dict[str, Any]:
        return self._benchmark.extra_info

    def forbid(self, *names: str) -> None:
        """Structural rules for this benchmark: 'copy', 'cast', 'sync', 'math_sdpa', ..."""
        try:
            self._settings = self._settings.add_forbid(*names)
        except UsageError as exc:
            raise UsageError(f"{self._test}: {exc.message}", hint=exc.hint) from None

    def expect(self, **expected: Any) -> None:
        """Expectations: sdpa_backend=, max_kernels=, max_syncs=, max_copy_bytes=, ..."""
        try:
            self._settings = self._settings.add_expect(expected)
        except UsageError as exc:
            raise UsageError(f"{self._test}: {exc.message}", hint=exc.hint) from None

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not callable(fn):
            raise UsageError(f"{self._test}: perf(fn, *args) needs a callable first, got "
                             f"{type(fn).__name__}", hint="pass the function, not its result: perf(f, x)")
        if self._used:
            raise UsageError(f"{self._test}: perf(...) can be called once per test",
                             hint="parametrize the test to measure several functions")
        self._used = True
        self._check_numbers()
        call = functools.partial(fn, *args, **kwargs)
        if self._benchmark.disabled:  # --benchmark-disable, xdist: run once, through pytest-benchmark (no warning)
            return self._once(call)
        session = self._session()
        settings = self._machine_settings(session)
        with session.ranges.range(self._test), _oom_guard(self._test, args, kwargs):
            result = call()
            timer_name = choose_timer(settings.timer, call, result)  # a JAX callable gets the jax timer under auto
            timer = make_timer(timer_name, gpu_available=session.fingerprint.gpu_available,
                               l2_flush=settings.policy.l2_flush,
                               nvtx_range=session.ranges.factory(self._test))
            measurement = measure_compared(timer, call, settings.policy, session.fingerprint, bytes_moved=self.bytes)
            # torch.profiler sees no JAX work: a JAX benchmark is timed, not profiled
            profile = (session.kernel_profile(call, self._test, settings)
                       if settings.torch_profile and timer_name != "jax" else None)

        self._judge(session, settings, measurement, profile=profile, details=record_details(measurement))
        return result

    def variants(self, faster_than: Mapping[str, str] | None = None, **variants: Callable[[], Any]
                 ) -> dict[str, Any]:
        """Several variants of one computation on the same inputs (``eager=f, compiled=torch.compile(f)``):
        each one's first call (compilation) timed apart, then measured with one timer and profiled; the
        record is the first variant's, every variant's time, compile time and path (Inductor-generated
        kernels against library calls, SDPA backend) are in its details. ``faster_than={"compiled":
        "eager"}`` fails unless the variant is measurably faster; each variant's path is compared with
        the baseline's. Returns the variants' runs by name (``perfci.variants.VariantRun``)."""
        from perfci.variants import (
            baseline_profiles,
            check_against_baseline_variants,
            check_faster_than,
            measure_variants,
            parse_faster_than,
            parse_variants,
            summary,
        )

        try:
            fns = parse_variants(variants)
            rules = parse_faster_than(faster_than, tuple(fns))
        except UsageError as exc:
            raise UsageError(f"{self._test}: {exc.message}", hint=exc.hint) from None
        if self._used:
            raise UsageError(f"{self._test}: perf(...) or perf.variants(...) can be called once per test",
                             hint="parametrize the test to measure several things")
        self._used = True
        if self._benchmark.disabled:
            # one pedantic call for all (pytest-benchmark's fixture runs once per test)
            return self._once(lambda: {name: fn() for name, fn in fns.items()})
        session = self._session()
        settings = self._machine_settings(session)
        gpu = session.fingerprint.gpu_available
        with session.ranges.range(self._test):
            timer = make_timer(settings.timer, gpu_available=gpu, l2_flush=settings.policy.l2_flush,
                               nvtx_range=session.ranges.factory(self._test))
            synchronize = None
            if gpu:
                import torch

                synchronize = torch.cuda.synchronize
            runs = measure_variants(
                fns, timer=timer, policy=settings.policy, synchronize=synchronize,
                profile=(lambda name, fn: session.kernel_profile(fn, f"{self._test}[{name}]", settings))
                if settings.torch_profile else None)
        base = session.base_record(self._benchmark.fullname)
        extra = check_faster_than(runs, rules, threshold=settings.threshold, gated=timer.device_time)
        if base is not None and isinstance(base.details.get("variants"), Mapping):
            extra += check_against_baseline_variants(runs, baseline_profiles(base.details["variants"]))
        lines = session.variants[self._benchmark.fullname] = summary(runs)
        first = runs[0]
        self._judge(session, settings, first.measurement, profile=first.profile,
                    details={"variants": {r.name: r.to_dict() for r in runs}}, extra=extra,
                    footer=f"\n  variants:\n{lines}")
        return {r.name: r for r in runs}

    def _judge(self, session: PerfSession, settings: PerfSettings, measurement: Measurement, *,
               profile: KernelProfile | None, details: dict[str, Any], extra: tuple[Finding, ...] = (),
               footer: str = "") -> None:
        """Record ``measurement`` (pooled with its first-pass record in a confirmation pass), hand its
        samples to pytest-benchmark, judge it, and fail the test on a regression not left to perfci run."""
        record = session.pool(record_from_measurement(
            self._benchmark.fullname, measurement, settings, profile=profile, flops=self.flops, bytes_moved=self.bytes,
            details={"gpu": session.fingerprint.slug, "nvtx": session.ranges.backend, **details}))
        self._benchmark.extra_info.update(display_extra(record, timer_label(measurement)))
        self._benchmark.extra_info["perfci"] = record_to_info(record)
        self._clock.load(measurement.samples_ms)
        self._benchmark.pedantic(self._clock.step, rounds=len(measurement.samples_ms), iterations=1)
        outcome = session.judge(record, extra)
        if outcome.failed and not session.defers(outcome):
            raise RegressionError(outcome.evidence() + footer)

    def _machine_settings(self, session: PerfSession) -> PerfSettings:
        """This test's settings for this machine; options a CPU cannot honour are noted once per run."""
        settings, skipped = self._settings.for_machine(session.fingerprint.gpu_available)
        for what in skipped:
            session.note(f"CPU mode: {what} skipped (needs a GPU)")
        return settings

    def _once(self, fn: Callable[[], Any]) -> Any:
        """A disabled benchmark's one call; inside the benchmark's NVTX range in an Nsight pass (the
        profilers select and group kernels by that range), else nothing of perfci is started."""
        with self._session().ranges.range(self._test) if self._range_pass else contextlib.nullcontext():
            return self._benchmark.pedantic(fn, rounds=1, iterations=1)

    def _check_numbers(self) -> None:
        for name in ("flops", "bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or value < 0):
                raise UsageError(f"{self._test}: perf.{name} must be a non-negative number, got {value!r}")


class _oom_guard:
    """Turn a CUDA out-of-memory error into a message with the shapes and the memory state."""

    def __init__(self, test: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._test, self._args, self._kwargs = test, args, kwargs

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None:
            return False
        import torch

        oom = getattr(torch.cuda, "OutOfMemoryError", ())
        if not (oom and isinstance(exc, oom)):
            return False
        shapes = [f"{tuple(a.shape)} {str(a.dtype).replace('torch.', '')}"
                  for a in (*self._args, *self._kwargs.values()) if isinstance(a, torch.Tensor)]
        free, total = torch.cuda.mem_get_info()
        allocated = torch.cuda.memory_allocated()
        torch.cuda.empty_cache()
        raise OutOfMemory(
            f"{self._test}: CUDA out of memory with inputs [{', '.join(shapes)}]; allocated "
            f"{format_bytes(allocated)}, free {format_bytes(free)} of {format_bytes(total)}",
            hint="use smaller shapes for this GPU or skip the case by memory",
        ) from exc

