"""Timing stage: measure a callable's device time behind a ``Timer`` chosen by name.

- ``graph`` (default on GPU): N calls captured in one CUDA graph, replays timed with CUDA events,
  back to back in batches; no synchronisation inside the timed region. Falls back to ``event``,
  with the reason recorded, when capture fails (host syncs, capture-unsafe calls).
- ``event``: CUDA events around each call; optional L2 flush before each call (cold cache).
- ``wall``: host ``perf_counter`` (no GPU), labelled as such everywhere; on a GPU it synchronises
  after each call, because that mode requires it.

All timers share one adaptive engine: warm up until batch medians settle, then sample until the
median's relative confidence half-width is under the target (or a time/sample cap), keeping every
raw sample. The SM clock of every batch is read in-band by a tiny probe kernel
(``perfci.clockprobe``; NVML's reported clock when it cannot run), so that compute-bound work can be
compared at a reference clock. The timers are registered by name in ``TIMERS``: option choices,
marker help and the rule "host wall-clock times are never gated" (``device_time``) come from there.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from perfci import stats
from perfci.clockprobe import make_probe
from perfci.errors import UsageError
from perfci.jax_timer import JaxTimer
from perfci.measurement import Measurement, SamplingPolicy
from perfci.nvml import HARD_SLOWDOWNS, ClockSnapshot, Nvml

Clock = Callable[[], float]
BatchRunner = Callable[[int], list[float]]
NvtxRange = Callable[[], AbstractContextManager[None]]


class Timer(Protocol):
    name: str
    device_time: bool  # measures device time (host wall-clock times are reported, never gated)
    needs_gpu: bool
    help: str

    def measure(self, fn: Callable[[], Any], policy: SamplingPolicy) -> Measurement: ...


@dataclass(frozen=True)
class EngineResult:
    samples_ms: tuple[float, ...]
    batch_sizes: tuple[int, ...]  # samples in each sampling batch, in order
    stop_reason: str
    rel_ci: float
    warmup_s: float
    warmup_settled: bool
    sampling_s: float


def run_engine(run_batch: BatchRunner, sample_cost_s: float, policy: SamplingPolicy,
               clock: Clock = time.perf_counter,
               settle_value: Callable[[list[float]], float] | None = None) -> EngineResult:
    """Warm up, then sample adaptively. ``run_batch(k)`` returns k per-call times in ms.

    Warm-up ends when ``settle_value`` of successive batches (default: their median) agrees within
    ``warmup_tolerance``; the CUDA timers pass the median in SM cycles, so that a clock still
    sliding under a power cap (which normalisation accounts for) does not hold warm-up forever.
    """
    settle_value = settle_value or stats.median
    per_batch = max(1, min(policy.max_samples, int(policy.batch_time_s / max(sample_cost_s, 1e-9))))

    start = clock()
    previous: float | None = None
    settled_runs = 0
    settled = False
    while True:
        batch = run_batch(per_batch)
        current = settle_value(batch)
        elapsed = clock() - start
        if previous is not None and abs(current - previous) <= policy.warmup_tolerance * current:
            settled_runs += 1
        else:
            settled_runs = 0
        previous = current
        if elapsed >= policy.warmup_min_s and settled_runs >= 2:
            settled = True
            break
        if elapsed >= policy.warmup_max_s:
            break
    warmup_s = clock() - start

    samples: list[float] = []
    sizes: list[int] = []
    t_start = clock()
    rel_ci = math.inf
    while True:
        # a pipelined timer returns the batch it queued earlier, which may be larger than asked for here
        room = policy.max_samples - len(samples)
        batch = run_batch(min(per_batch, room))[:room]
        samples.extend(batch)
        sizes.append(len(batch))
        elapsed = clock() - t_start
        if len(samples) >= policy.min_samples:
            rel_ci = stats.relative_median_halfwidth(samples, policy.confidence)
        if len(samples) >= policy.max_samples:
            reason = "max_samples"
            break
        if elapsed >= policy.max_time_s:
            reason = "time_cap"
            break
        if (len(samples) >= policy.min_samples and elapsed >= policy.min_time_s
                and rel_ci <= policy.target_rel_ci):
            reason = "precision"
            break
    return EngineResult(tuple(samples), tuple(sizes), reason, rel_ci, warmup_s, settled,
                        clock() - t_start)


class WallTimer:
    """Host wall clock. On a GPU each call is followed by a synchronise (the mode requires it)."""

    name = "wall"
    device_time = False
    needs_gpu = False
    help = "host perf_counter (synchronising after each call on a GPU); the default without a GPU"
    label = "wall (host wall clock, not device time)"

    @classmethod
    def create(cls, *, gpu_available: bool, nvtx_range: NvtxRange = nullcontext) -> WallTimer:
        if gpu_available:
            import torch

            return cls(synchronize=torch.cuda.synchronize, device="cuda (host wall clock)", nvtx_range=nvtx_range)
        return cls(nvtx_range=nvtx_range)

    def __init__(self, clock: Clock = time.perf_counter, synchronize: Callable[[], None] | None = None,
                 device: str = "cpu", nvtx_range: NvtxRange = nullcontext) -> None:
        self._nvtx_range = nvtx_range
        self._clock = clock
        self._sync = synchronize
        self._device = device

    def measure(self, fn: Callable[[], Any], policy: SamplingPolicy) -> Measurement:
        clock, sync, nvtx_range = self._clock, self._sync, self._nvtx_range

        def run_batch(k: int) -> list[float]:
            out = []
            for _ in range(k):
                with nvtx_range():
                    t0 = clock()
                    fn()
                    if sync is not None:
                        sync()
                    out.append((clock() - t0) * 1e3)
            return out

        t0 = clock()
        fn()
        if sync is not None:
            sync()
        cost = max(clock() - t0, 1e-7)
        result = run_engine(run_batch, cost, policy, clock)
        noise = precision_noise(result, policy)
        return Measurement(
            timer="wall", device=self._device, samples_ms=result.samples_ms, calls_per_sample=1,
            stop_reason=result.stop_reason, rel_ci=result.rel_ci, warmup_s=result.warmup_s,
            warmup_settled=result.warmup_settled, noise_reasons=noise,
            normalization="none", normalization_reason="host wall clock", sampling_s=result.sampling_s,
        )


class _CudaTimerBase:
    """Shared by the CUDA timers: pipelined batches, per-batch SM clock, NVML state, noise."""

    name = ""
    device_time = True
    needs_gpu = True
    help = ""

    @classmethod
    def create(cls, *, gpu_available: bool, nvtx_range: NvtxRange = nullcontext) -> _CudaTimerBase:
        return cls(nvtx_range=nvtx_range)

    def __init__(self, device_index: int | None = None, nvtx_range: NvtxRange = nullcontext) -> None:
        import torch

        self._nvtx_range = nvtx_range
        self._torch = torch
        self._index = torch.cuda.current_device() if device_index is None else device_index
        self._nvml = Nvml.for_torch_device(self._index)
        self._device = f"cuda:{self._index} {torch.cuda.get_device_name(self._index)}"

    def _estimate_call_s(self, fn: Callable[[], Any], calls: int = 5) -> float:
        """Per-call device time after a few untimed calls (first calls pay for compilation, handles)."""
        torch = self._torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return max(start.elapsed_time(end) / 1e3 / calls, 1e-7)

    def _pipelined(self, name: str, enqueue: Callable[[int], list[tuple[Any, Any]]], calls: int, cost_s: float,
                   policy: SamplingPolicy, **kw: Any) -> Measurement:
        """Run the engine over batches that keep the GPU busy: batch i+1 is queued before batch i is read.

        ``enqueue(k)`` queues k timed regions and returns their (start, end) event pairs. Before each
        batch the in-band probe (or, without it, NVML while the GPU is busy) records the SM clock.
        """
        nvml = self._nvml
        probe, clock_source = make_probe(f"cuda:{self._index}")
        if probe is None and nvml is not None:
            clock_source += "; NVML-reported clock used"
        before = nvml.snapshot() if nvml else None
        snaps: list[ClockSnapshot] = []
        collected: list[float | None] = []  # SM clock of each batch, in order
        pending: list[Any] = []
        last_snapshot = [time.perf_counter()]

        def submit(k: int) -> tuple[int | None, list[tuple[Any, Any]], float | None]:
            slot = probe.enqueue() if probe is not None else None
            pairs = enqueue(k)
            mhz = nvml.sm_clock_mhz() if probe is None and nvml is not None else None
            return slot, pairs, mhz

        def run_batch(k: int) -> list[float]:
            if not pending:
                pending.append(submit(k))
            new = submit(k)
            slot, pairs, mhz = pending.pop()
            pairs[-1][1].synchronize()
            times = [start.elapsed_time(end) / calls for start, end in pairs]
            if slot is not None:
                mhz = probe.read([slot])[0]
            collected.append(mhz)
            pending.append(new)
            now = time.perf_counter()
            if nvml is not None and now - last_snapshot[0] > 0.5 and len(snaps) < 64:
                snap = nvml.snapshot()  # the GPU is busy with the queued batch meanwhile
                if snap is not None:
                    snaps.append(snap)
                last_snapshot[0] = now
            return times

        def in_cycles(batch: list[float]) -> float:
            mhz = collected[-1] if collected else None
            return stats.median(batch) * (mhz if mhz and math.isfinite(mhz) else 1.0)

        result = run_engine(run_batch, cost_s, policy, settle_value=in_cycles)
        for _, pairs, _ in pending:
            pairs[-1][1].synchronize()
        after = nvml.snapshot() if nvml else None
        sampled = collected[len(collected) - len(result.batch_sizes):]
        clocks: tuple[float, ...] = ()
        if sampled and all(m is not None and math.isfinite(m) for m in sampled):
            clocks = tuple(float(m) for n, m in zip(result.batch_sizes, sampled, strict=True) for _ in range(n))
        return self._finish(name, result, calls, policy, clocks, before, snaps, after,
                            clock_source=clock_source if clocks else "SM clock not read: " + clock_source, **kw)

    def _finish(self, name: str, result: EngineResult, calls: int, policy: SamplingPolicy, clocks: tuple[float, ...],
                before: ClockSnapshot | None, mid: list[ClockSnapshot], after: ClockSnapshot | None,
                clock_source: str, fallback: str | None = None, l2_flush: bool = False) -> Measurement:
        snaps = [s for s in [before, *mid, after] if s is not None]
        reasons_seen = tuple(sorted({r for s in snaps for r in s.throttle_reasons}))
        noise = list(precision_noise(result, policy))
        hard = sorted(set(reasons_seen) & HARD_SLOWDOWNS)
        if hard:  # the softer sw_thermal_slowdown is judged on its effect, in choose_normalization
            noise.append(throttled(hard))
        others = max((s.other_processes for s in snaps), default=0)
        if others:
            noise.append(f"{others} other process(es) held a CUDA context on this GPU during the measurement "
                         "(NVML lists running compute processes, busy or idle)")
        return Measurement(
            timer=name, device=self._device, samples_ms=result.samples_ms, calls_per_sample=calls,
            stop_reason=result.stop_reason, rel_ci=result.rel_ci, warmup_s=result.warmup_s,
            warmup_settled=result.warmup_settled, l2_flush=l2_flush, fallback_reason=fallback,
            sample_sm_clock_mhz=clocks, clocks_before=before, clocks_after=after,
            throttle_reasons=reasons_seen, noise_reasons=tuple(noise), sampling_s=result.sampling_s,
            extra={"clock_source": clock_source},
        )


class EventTimer(_CudaTimerBase):
    """CUDA events around each call; with ``l2_flush`` a buffer twice the L2 size is zeroed first."""

    name = "event"
    help = "CUDA events around each call; l2_flush=True zeroes twice the L2 before each call (cold cache)"

    def measure(self, fn: Callable[[], Any], policy: SamplingPolicy,
                fallback_reason: str | None = None) -> Measurement:
        torch = self._torch
        flush_buf = None
        if policy.l2_flush:
            l2 = getattr(torch.cuda.get_device_properties(self._index), "L2_cache_size", 0) or 64 * 2**20
            flush_buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=f"cuda:{self._index}")
        cost_s = self._estimate_call_s(fn)
        nvtx_range = self._nvtx_range

        def enqueue(k: int) -> list[tuple[Any, Any]]:
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(k)]
            for start, end in pairs:
                if flush_buf is not None:
                    flush_buf.zero_()
                with nvtx_range():
                    start.record()
                    fn()
                    end.record()
            return pairs

        return self._pipelined("event", enqueue, 1, cost_s, policy, fallback=fallback_reason,
                               l2_flush=policy.l2_flush)


class GraphTimer(_CudaTimerBase):
    """N calls captured in one CUDA graph; replays timed with events, back to back, GPU kept busy."""

    name = "graph"
    help = "N calls captured in one CUDA graph, replays timed back to back with CUDA events; the default on a GPU"

    def measure(self, fn: Callable[[], Any], policy: SamplingPolicy) -> Measurement:
        torch = self._torch
        if policy.l2_flush:
            raise UsageError("timer='graph' replays back to back and cannot flush L2 between calls",
                             hint="use timer='event' with l2_flush=True for cold-cache timing")
        call_s = self._estimate_call_s(fn)
        calls = int(min(policy.max_calls_per_replay, max(1, round(policy.replay_target_ms / 1e3 / call_s))))
        try:
            graph = self._capture(fn, calls)
        except Exception as exc:  # capture is refused by syncs, host reads, unsafe allocations...
            reason = f"CUDA graph capture failed: {type(exc).__name__}: {_first_line(exc)}"
            self._recover_from_failed_capture()
            return EventTimer(self._index, self._nvtx_range).measure(fn, policy, fallback_reason=reason)
        nvtx_range = self._nvtx_range

        def enqueue(k: int) -> list[tuple[Any, Any]]:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(k + 1)]
            events[0].record()
            for i in range(k):
                with nvtx_range():
                    graph.replay()
                events[i + 1].record()
            return list(itertools.pairwise(events))

        return self._pipelined("graph", enqueue, calls, call_s * calls, policy)

    def _recover_from_failed_capture(self) -> None:
        """Leave the process as a failed capture found it.

        A capture that fails never reaches its epilogue, so the CUDA RNG generators it registered
        stay in capture mode and the next ``torch.randn(device='cuda')`` raises. One small capture
        that succeeds runs the prologue/epilogue pair again and resets them.
        """
        torch = self._torch
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        with contextlib.suppress(Exception):
            scratch = torch.zeros(1, device=f"cuda:{self._index}")
            reset = torch.cuda.CUDAGraph()
            with torch.cuda.graph(reset):
                scratch.add_(1)
            torch.cuda.synchronize()

    def _capture(self, fn: Callable[[], Any], calls: int) -> Any:
        torch = self._torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        return graph


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def precision_noise(result: EngineResult, policy: SamplingPolicy) -> tuple[str, ...]:
    reasons = []
    if not result.warmup_settled:
        reasons.append(f"warm-up did not settle within {policy.warmup_max_s:g} s")
    if result.rel_ci > 4 * policy.target_rel_ci:
        reasons.append(
            f"median known only to +/-{result.rel_ci:.1%} after {len(result.samples_ms)} samples "
            f"({result.stop_reason})"
        )
    return tuple(reasons)


TIMERS: dict[str, Any] = {"graph": GraphTimer, "event": EventTimer, "wall": WallTimer, "jax": JaxTimer}
TIMER_NAMES = ("auto", *TIMERS)


def timers_help() -> str:
    """One line per timer, from the registry (option and marker help)."""
    return "; ".join(f"{name}: {cls.help}" for name, cls in TIMERS.items())


def is_device_timer(name: str) -> bool:
    """Whether the timer called ``name`` measures device time (a timer unknown here is assumed to)."""
    timer = TIMERS.get(name)
    return True if timer is None else bool(timer.device_time)


def timer_label(measurement: Measurement) -> str:
    """Short label for tables: the timer, whether it is device time, fallback and L2 state."""
    text = WallTimer.label if measurement.timer == WallTimer.name else measurement.timer
    if measurement.fallback_reason:
        text += " [fallback]"
    if measurement.l2_flush:
        text += " cold-L2"
    return text


def resolve_timer(name: str, *, gpu_available: bool, l2_flush: bool = False) -> str:
    """The registry name ``name`` stands for ('auto': graph on a GPU, event when L2 is flushed, wall on CPU)."""
    if name not in TIMER_NAMES:
        raise UsageError(f"unknown timer {name!r}", hint=f"choose one of {', '.join(TIMER_NAMES)}")
    if name == "auto":
        return ("event" if l2_flush else "graph") if gpu_available else "wall"
    return name


def make_timer(name: str, *, gpu_available: bool, l2_flush: bool = False,
               nvtx_range: NvtxRange = nullcontext) -> Timer:
    """The timer for ``name`` from the registry (see :func:`resolve_timer`)."""
    cls = TIMERS[resolve_timer(name, gpu_available=gpu_available, l2_flush=l2_flush)]
    if cls.needs_gpu and not gpu_available:
        raise UsageError(f"timer {cls.name!r} needs a CUDA GPU and none is visible",
                         hint="use timer='wall' or 'auto' on a machine without a GPU")
    return cls.create(gpu_available=gpu_available, nvtx_range=nvtx_range)


def throttled(reasons: list[str]) -> str:
    return "throttled: " + ", ".join(reasons)
