"""NVML readings (through ``pynvml`` from nvidia-ml-py): clocks, power, temperature, throttling.

Every reading is optional: without NVML (no driver, no package) the callers get ``None`` and record
that the clocks were not read. Nothing here changes the card's settings.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

# throttle ("clocks event") reason bits, from nvml.h
_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# reasons that mean the card was slowed by something other than the work itself: the hardware slowdowns
# (clocks cut by half or more, external power brake) make a measurement NOISY outright; the software
# thermal slowdown only lowers the SM clock, which the per-batch clock sees
HARD_SLOWDOWNS = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
SOFT_SLOWDOWNS = frozenset({"sw_thermal_slowdown"})


def decode_reasons(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in _REASONS.items() if mask & bit)


@dataclass(frozen=True)
class ClockSnapshot:
    """One reading of the card's state."""

    sm_clock_mhz: int
    memory_clock_mhz: int
    power_w: float | None
    temperature_c: int | None
    throttle_reasons: tuple[str, ...]
    other_processes: int


class Nvml:
    """A handle on one GPU through NVML. Create with :meth:`for_torch_device`."""

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self._nvml = pynvml
        self._handle = handle

    @classmethod
    def for_torch_device(cls, index: int) -> Nvml | None:
        """The handle for torch's device ``index``, looked up once per process (None without NVML)."""
        return _open(index)

    @classmethod
    def _lookup(cls, index: int) -> Nvml | None:
        try:
            import pynvml
            import torch

            pynvml.nvmlInit()
            props = torch.cuda.get_device_properties(index)
        except Exception:
            return None
        # the same physical GPU as torch's device, whatever CUDA_VISIBLE_DEVICES renumbered: by UUID, else
        # by PCI address, else by the visible-devices index
        lookups = [(pynvml.nvmlDeviceGetHandleByUUID, key) for key in _uuid_keys(props)]
        if pci := _pci_address(props):
            lookups.append((pynvml.nvmlDeviceGetHandleByPciBusId, pci))
        lookups.append((pynvml.nvmlDeviceGetHandleByIndex, _nvml_index(index)))
        for lookup, key in lookups:
            try:
                return cls(pynvml, lookup(key))
            except Exception:
                continue
        return None

    def _try(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, fn)(self._handle, *args)
        except Exception:
            return None

    def static_info(self) -> dict[str, Any]:
        n = self._nvml
        info: dict[str, Any] = {}
        try:
            driver = n.nvmlSystemGetDriverVersion()
            info["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:
            pass
        limit = self._try("nvmlDeviceGetPowerManagementLimit")
        info["power_limit_w"] = limit / 1000.0 if limit else None
        info["max_sm_clock_mhz"] = self._try("nvmlDeviceGetMaxClockInfo", n.NVML_CLOCK_SM)
        mem_clock = self._try("nvmlDeviceGetMaxClockInfo", n.NVML_CLOCK_MEM)
        info["max_memory_clock_mhz"] = mem_clock
        bus_bits = self._try("nvmlDeviceGetMemoryBusWidth")
        if mem_clock and bus_bits:
            # double data rate: two transfers per memory clock
            info["peak_memory_bandwidth_gbps"] = round(2 * mem_clock * 1e6 * bus_bits / 8 / 1e9, 1)
        return info

    def sm_clock_mhz(self) -> int | None:
        return self._try("nvmlDeviceGetClockInfo", self._nvml.NVML_CLOCK_SM)

    def snapshot(self) -> ClockSnapshot | None:
        n = self._nvml
        sm = self._try("nvmlDeviceGetClockInfo", n.NVML_CLOCK_SM)
        if sm is None:
            return None
        mem = self._try("nvmlDeviceGetClockInfo", n.NVML_CLOCK_MEM) or 0
        power_mw = self._try("nvmlDeviceGetPowerUsage")
        temp = self._try("nvmlDeviceGetTemperature", n.NVML_TEMPERATURE_GPU)
        mask = self._try("nvmlDeviceGetCurrentClocksEventReasons")
        if mask is None:
            mask = self._try("nvmlDeviceGetCurrentClocksThrottleReasons") or 0
        procs = self._try("nvmlDeviceGetComputeRunningProcesses") or []
        me = os.getpid()
        others = sum(1 for p in procs if getattr(p, "pid", me) != me)
        return ClockSnapshot(
            sm_clock_mhz=int(sm),
            memory_clock_mhz=int(mem),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temperature_c=temp,
            throttle_reasons=decode_reasons(int(mask)),
            other_processes=others,
        )


@functools.cache
def _open(index: int) -> Nvml | None:
    return Nvml._lookup(index)


def _uuid_keys(props: Any) -> list[str]:
    """NVML's spelling of torch's device UUID ("GPU-" + the UUID; MIG devices carry their own prefix)."""
    uuid = str(getattr(props, "uuid", "") or "")
    if not uuid:
        return []
    return [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", uuid]


def _pci_address(props: Any) -> str | None:
    """The "domain:bus:device.0" address NVML looks GPUs up by (torch gives the three numbers)."""
    try:
        domain, bus, device = (int(getattr(props, f"pci_{k}_id")) for k in ("domain", "bus", "device"))
    except (AttributeError, TypeError, ValueError):
        return None
    return f"{domain:08x}:{bus:02x}:{device:02x}.0"


def _nvml_index(torch_index: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if torch_index < len(entries) and entries[torch_index].isdigit():
            return int(entries[torch_index])
    return torch_index
