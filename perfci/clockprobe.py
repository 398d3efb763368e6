"""In-band SM clock probe: the clock the GPU really ran at, read on the GPU between samples.

A one-program Triton kernel spins a fixed number of SM cycles, reading ``%clock64`` (SM cycles) and
``%globaltimer`` (nanoseconds) at both ends; cycles over nanoseconds is the effective SM clock at
that moment, power capping and thermal slowdown included. It is enqueued on the stream between
timed regions (never inside one), so it costs a few microseconds of GPU time per batch and no
host synchronisation. Without Triton or a GPU the probe is unavailable and NVML's reported clock
is used instead.
"""

from __future__ import annotations

import functools
from typing import Any

# ~50 us at 2 GHz, 0.2 % of a 25 ms batch. Shorter spins read erratically: on an H100, with 20000 cycles
# the probe read 1808-1967 MHz around a copy that NVML put at 1965 (spread of time x clock 2.44 % against
# 0.31 % with 100000 cycles; scripts/clock_probe_check.py, docs/measurements/clock_probe_check_h100.log)
SPIN_CYCLES = 100_000

_kernel: Any = None


def _build_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def clock_probe(out_ptr, slot, SPIN: tl.constexpr):
        t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        c0 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        c1 = c0
        while c1 - c0 < SPIN:
            c1 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False,
                                           pack=1)
        t1 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        tl.store(out_ptr + 2 * slot, c1 - c0)
        tl.store(out_ptr + 2 * slot + 1, t1 - t0)

    return clock_probe


class ClockProbe:
    """Enqueue probes into slots of a device buffer; read them after the stream has passed them."""

    def __init__(self, device: str, slots: int = 8192, spin_cycles: int = SPIN_CYCLES) -> None:
        global _kernel
        import torch

        if _kernel is None:
            _kernel = _build_kernel()
        self._slots = slots
        self._spin = int(spin_cycles)
        self._buf = torch.zeros(2 * slots, dtype=torch.int64, device=device)
        # each probe's result is copied to pinned host memory right behind it on the stream, so reading
        # it later is a host read: no GPU work queued behind the next batch, no stall of the pipeline
        self._host = torch.zeros(2 * slots, dtype=torch.int64, pin_memory=True)
        self._next = 0
        # compile and check once, now
        slot = self.enqueue()
        torch.cuda.synchronize()
        mhz = self.read([slot])[0]
        if not (100.0 <= mhz <= 5000.0):
            raise RuntimeError(f"clock probe read an implausible {mhz:.0f} MHz")

    def enqueue(self) -> int:
        slot = self._next % self._slots
        self._next += 1
        _kernel[(1,)](self._buf, slot, SPIN=self._spin, num_warps=1)
        self._host[2 * slot : 2 * slot + 2].copy_(self._buf[2 * slot : 2 * slot + 2], non_blocking=True)
        return slot

    def read(self, slots: list[int]) -> list[float]:
        """MHz for each slot (call after the stream passed them, e.g. after an event sync): a host read."""
        pairs = self._host.view(-1, 2)[slots].tolist()
        return [cycles / ns * 1e3 if ns > 0 else float("nan") for cycles, ns in pairs]


@functools.cache
def make_probe(device: str) -> tuple[ClockProbe | None, str]:
    """The probe for ``device`` (built and checked once per process), or None and why it is unavailable.

    Reusing one probe is safe: slots are read only after the stream has passed them, and the ring of
    slots is far larger than the batches a measurement keeps in flight.
    """
    try:
        return ClockProbe(device), "in-band clock probe (%clock64 / %globaltimer)"
    except Exception as exc:  # no triton, no compiler, an old GPU...
        return None, f"clock probe unavailable ({type(exc).__name__}: {str(exc)[:120]})"
