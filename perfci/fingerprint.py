"""This machine's GPU fingerprint: what a result was measured on, and the key of its baselines.

Results and baselines are keyed by the GPU model slug (``NVIDIA_H100_80GB_HBM3``); the versions of
the driver, CUDA, torch and triton travel in ``machine_info`` so that a compare can show drift.
Without a GPU the key is ``cpu-<arch>`` and every output says the numbers are CPU wall times.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import platform
import re
from dataclasses import asdict, dataclass
from typing import Any

from perfci.errors import BadInputError
from perfci.nvml import Nvml


@dataclass(frozen=True)
class Fingerprint:
    gpu_available: bool
    name: str
    slug: str
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str = ""
    triton: str | None = None
    power_limit_w: float | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    peak_memory_bandwidth_gbps: float | None = None
    card: str | None = None  # this card's identity (its GPU UUID): cards of one model differ by 2-4 %

    @property
    def baseline_key(self) -> str:
        return self.slug

    def machine_info(self) -> dict[str, Any]:
        """The ``machine_info['perfci']`` block written into every result file."""
        return asdict(self)

    @classmethod
    def recorded(cls, info: dict[str, Any]) -> Fingerprint | None:
        """The fingerprint a result file recorded, or None (a plain pytest-benchmark file has none)."""
        if not info.get("slug"):
            return None
        try:
            return cls(**{k: info[k] for k in cls.__dataclass_fields__ if k in info})
        except TypeError:  # a partial record (hand-made or from another version): no fingerprint to show
            return None

    def describe(self) -> str:
        if not self.gpu_available:
            return f"no GPU: CPU mode ({self.name}); times are host wall-clock"
        parts = [self.name]
        if self.sm_count:
            parts.append(f"{self.sm_count} SMs")
        if self.memory_bytes:
            parts.append(f"{self.memory_bytes / 2**30:.0f} GiB")
        if self.compute_capability:
            parts.append(f"sm_{self.compute_capability.replace('.', '')}")
        return ", ".join(parts)


def require_same_gpu(first: str | None, second: str | None, *, first_what: str, second_what: str,
                     hint: str = "compare two runs of one GPU model") -> None:
    """The one GPU-model guard: timings of two GPU models are never compared (unknown sides pass)."""
    if first and second and first != second:
        raise BadInputError(f"{first_what} was measured on {first}, {second_what} is {second}: "
                            "refusing to compare across GPU models", hint=hint)


def slugify(text: str) -> str:
    """A file-name-safe slug: letters, digits, '.', '-' and '_' only (unicode letters folded away)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip()).strip("_.")
    return slug or "unnamed"


def _versions() -> tuple[str, str | None, str | None]:
    import torch

    # read triton's version without importing it: triton.jit decides at import time whether its
    # own helpers run in the interpreter (TRITON_INTERPRET), which a test session may set later
    try:
        triton_version: str | None = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton_version = None
    return torch.__version__, torch.version.cuda, triton_version


@functools.lru_cache(maxsize=1)
def detect() -> Fingerprint:
    """Fingerprint the current CUDA device (torch's current device), or the CPU."""
    import torch

    torch_version, cuda_version, triton_version = _versions()
    if not torch.cuda.is_available():
        cpu = platform.processor() or platform.machine()
        return Fingerprint(
            gpu_available=False,
            name=f"CPU {cpu}",
            slug=f"cpu-{slugify(platform.machine())}",
            torch=torch_version,
            triton=triton_version,
        )
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    nvml = Nvml.for_torch_device(index)
    static = nvml.static_info() if nvml else {}
    return Fingerprint(
        gpu_available=True,
        name=props.name,
        slug=slugify(props.name),
        sm_count=props.multi_processor_count,
        memory_bytes=props.total_memory,
        l2_bytes=getattr(props, "L2_cache_size", None),
        compute_capability=f"{props.major}.{props.minor}",
        driver=static.get("driver"),
        cuda=cuda_version,
        torch=torch_version,
        triton=triton_version,
        power_limit_w=static.get("power_limit_w"),
        max_sm_clock_mhz=static.get("max_sm_clock_mhz"),
        max_memory_clock_mhz=static.get("max_memory_clock_mhz"),
        peak_memory_bandwidth_gbps=static.get("peak_memory_bandwidth_gbps"),
        card=_card_id(props),
    )


def _card_id(props: Any) -> str | None:
    """The card's UUID as NVML spells it (``GPU-...``), or None when the driver does not say."""
    uuid = str(getattr(props, "uuid", "") or "")
    if not uuid:
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


# Card-to-card offsets of one GPU model: the largest |offset| of a benchmark's median seen between two
# cards with the same tree and autotune cache (docs/measurements/cross_card_h100.log: 5 runs x 68
# benchmarks on one H100 against a 6-run baseline from another: +4.28 % at most, GQA decode +3.5-3.9 %
# in every run). H200: cuBLAS's 1x4096x4096 GEMV +6.68 %, +6.84 % and +6.13 % on three fresh cards against
# the baseline's card; of the other 49 library benchmarks on the second card 45 read SAME, within 3.1 % (44
# within 1.3 %), 4 NOISY (docs/measurements/gate_h200_s47_*: the library code is torch's, on every tree).
# Other models use the H100's figure until measured.
CROSS_CARD_OFFSETS = {"NVIDIA_H100_80GB_HBM3": 0.0428, "NVIDIA_H200": 0.0684}
DEFAULT_CROSS_CARD_OFFSET = CROSS_CARD_OFFSETS["NVIDIA_H100_80GB_HBM3"]


def cross_card_sigma(slug: str | None) -> float:
    """The log standard deviation that puts the model's largest measured card offset at the 95 % edge."""
    offset = CROSS_CARD_OFFSETS.get(slug or "", DEFAULT_CROSS_CARD_OFFSET)
    return math.log1p(offset) / 1.96
