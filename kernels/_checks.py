"""Shared input validation, Triton helpers and autotune/launch plumbing for the kernels.

Validation runs on the host before any launch: a bad input raises ``ValueError`` naming the
violated constraint, so no kernel ever sees it.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import warnings
from dataclasses import dataclass

import torch
import triton
import triton.errors
import triton.language as tl

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)
LAYOUTS: tuple[str, ...] = ("bhld", "blhd")
LOG2E = 1.4426950408889634


def softmax_scale(head_dim: int, sm_scale: float | None) -> float:
    """The softmax scale: 1 / sqrt(head_dim) by default.  Every kernel takes a row's maximum of the raw scores and
    scales it (the scale folded into the exponential's argument), which is the maximum of the scaled scores only for
    a scale >= 0: a negative or non-finite ``sm_scale`` is a ValueError (negate q for a negative one)."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = float(sm_scale)
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"sm_scale must be a finite number >= 0, got {sm_scale} (for a negative scale, negate q and "
                         f"pass its absolute value)")
    return scale


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def check_device(*tensors: torch.Tensor) -> None:
    """All tensors on one device; CUDA, or CPU only under the Triton interpreter."""
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(str(d) for d in devices)}")
    dev = next(iter(devices))
    if dev.type == "cuda":
        return
    if dev.type == "cpu" and interpreting():
        return
    raise ValueError(
        f"inputs must be CUDA tensors (CPU only with TRITON_INTERPRET=1), got device '{dev}'"
    )


def check_dtype(*tensors: torch.Tensor, allowed: tuple[torch.dtype, ...] = SUPPORTED_DTYPES) -> torch.dtype:
    """All tensors share one dtype from ``allowed``; returns it."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ValueError(f"all inputs must share one dtype, got {sorted(str(d) for d in dtypes)}")
    dt = next(iter(dtypes))
    if dt not in allowed:
        raise ValueError(f"dtype must be one of {[str(a) for a in allowed]}, got {dt}")
    return dt


@dataclass(frozen=True)
class AttnDims:
    """Problem sizes of one attention call, independent of the memory layout."""

    batch: int
    heads_q: int
    heads_kv: int
    len_q: int
    len_k: int
    head_dim: int

    @property
    def group(self) -> int:
        return self.heads_q // self.heads_kv


def split_layout(t: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    """(batch, heads, length, head_dim) of a 4-D tensor in ``layout``."""
    if layout == "bhld":
        b, h, seq, d = t.shape
    else:
        b, seq, h, d = t.shape
    return b, h, seq, d


def layout_strides(t: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    """Element strides (batch, head, position, dim) of a 4-D tensor in ``layout``."""
    s = t.stride()
    if layout == "bhld":
        return s[0], s[1], s[2], s[3]
    return s[0], s[2], s[1], s[3]


def dim_position_view(t: torch.Tensor, layout: str) -> torch.Tensor:
    """(B, H, D, L) view of a 4-D tensor in ``layout``: for one stored position-contiguous (length stride 1),
    the last stride is 1, as a tensor descriptor reads it."""
    return t.transpose(2, 3) if layout == "bhld" else t.permute(0, 2, 3, 1)


def empty_like_layout(b: int, h: int, seq: int, d: int, layout: str, like: torch.Tensor) -> torch.Tensor:
    shape = (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def check_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str,
    head_dims: tuple[int, ...],
    dtypes: tuple[torch.dtype, ...] = SUPPORTED_DTYPES,
) -> AttnDims:
    """Validate q/k/v of an attention call and return its sizes."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D ({layout}), got shape {tuple(t.shape)}")
    check_dtype(q, k, v, allowed=dtypes)
    check_device(q, k, v)
    bq, hq, lq, dq = split_layout(q, layout)
    bk, hk, lk, dk = split_layout(k, layout)
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if bq != bk:
        raise ValueError(f"q and k must have the same batch size, got {bq} and {bk}")
    if dq != dk:
        raise ValueError(f"q and k must have the same head dim, got {dq} and {dk}")
    if dq not in head_dims:
        raise ValueError(f"head dim must be one of {describe_dims(head_dims)}, got {dq}")
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hk})")
    return AttnDims(bq, hq, hk, lq, lk, dq)


def describe_dims(dims: tuple[int, ...]) -> str:
    """``16, 24, ..., 256 (multiples of 8)`` for an arithmetic run of head dims, else the tuple."""
    if len(dims) > 3 and all(b - a == dims[1] - dims[0] for a, b in itertools.pairwise(dims)):
        return f"{dims[0]}, {dims[1]}, ..., {dims[-1]} (multiples of {dims[1] - dims[0]})"
    return str(dims)


def padded_dim(head_dim: int) -> int:
    """Power-of-two tile width (>= 16) that a head dim runs at; the extra columns are masked / zero-filled."""
    return max(16, next_pow2(head_dim))


def check_buffer(name: str, t: torch.Tensor, shape: tuple, dtype: torch.dtype, device: torch.device,
                 contiguous: bool = False) -> None:
    """A caller-provided output buffer must have exactly this shape, dtype and device."""
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype or t.device != device:
        raise ValueError(f"{name} must be {tuple(shape)} {dtype} on {device}, got {tuple(t.shape)} {t.dtype} "
                         f"on {t.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


@functools.cache
def sm_count(device: torch.device, cpu_default: int) -> int:
    """Streaming multiprocessors of a CUDA device (looked up once), else ``cpu_default``."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return cpu_default


def tma_ok(*tensors: torch.Tensor) -> bool:
    """True when every tensor can be read through a Hopper tensor descriptor (TMA).

    Needs: CUDA device of compute capability >= 9 with the shared memory our configs use (``tma_capable``), last
    stride 1, 16-byte aligned base pointer and 16-byte multiples for all other strides; never in Triton's
    interpreter.
    """
    if interpreting() or any(t.device.type != "cuda" for t in tensors) or not tma_aligned(*tensors):
        return False
    return bool(tensors) and tma_capable(tensors[0].device)


# Shared memory a block may opt into that the TMA kernels' configs assume (H100 / H200: 227 KB; they use up to
# ~213 KB).  Consumer GPUs of compute capability >= 9 (sm_120: 99 KB) hold too little and take the pointer kernels.
TMA_MIN_SMEM_BYTES = 200 * 1024


@functools.cache
def tma_capable(device: torch.device) -> bool:
    """A CUDA device of compute capability >= 9 (tensor descriptors) with at least TMA_MIN_SMEM_BYTES of shared
    memory a block (where torch reports it; else data-centre parts, compute capability 9.x or 10.x)."""
    major = torch.cuda.get_device_capability(device)[0]
    if major < 9:
        return False
    optin = getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", None)
    return optin >= TMA_MIN_SMEM_BYTES if optin is not None else major in (9, 10)


def tma_aligned(*tensors: torch.Tensor) -> bool:
    """The layout half of ``tma_ok`` (any device, also under the interpreter): last stride 1, 16-byte aligned
    base pointer and 16-byte multiples for all other strides."""
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1]) for t in tensors)


def gluon_runnable(device: torch.device, kernel, broken: list[str], enabled: bool = True) -> bool:
    """A Gluon kernel of ours can run on ``device``: switched on, imported with this Triton (``kernel`` not
    None), not failed to build in this process (``broken`` empty), and an sm_90 GPU (not the interpreter)."""
    return (enabled and kernel is not None and not broken and not interpreting() and device.type == "cuda"
            and torch.cuda.get_device_capability(device) == (9, 0))


# what a Gluon launch raises when the kernel cannot be built or loaded here (front end, ptxas, too much shared
# memory: all TritonError) or PTX / driver refusals (RuntimeError); CUDA errors among them are re-raised
GLUON_BUILD_ERRORS: tuple[type[Exception], ...] = (triton.errors.TritonError, RuntimeError)


def gluon_build_failed(exc: Exception, broken: list[str], what: str, fallback: str) -> None:
    """A Gluon launch raised ``exc``: a CUDA error is re-raised (a launch failure); a compile or PTX error is kept
    in ``broken`` (the kernel stays off in this process) and said once as a RuntimeWarning naming ``fallback``."""
    if "CUDA error" in str(exc):
        raise exc
    lines = [line for line in str(exc).splitlines() if line.strip()]
    broken.append(f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}")
    warnings.warn(f"the {what} does not build with Triton {triton.__version__} here ({broken[0]}); using "
                  f"{fallback}", RuntimeWarning, stacklevel=4)


def gluon_status(kernel, import_error: str | None, broken: list[str], enabled: bool, switch: str) -> str:
    """One line for reports: whether a Gluon kernel is available and why not (``switch``: its on/off flag)."""
    if kernel is None:
        return f"unavailable ({import_error})"
    if broken:
        return f"disabled after a build failure ({broken[0]})"
    return "enabled" if enabled else f"disabled ({switch} = False)"


def set_triton_allocator() -> None:
    """Device-side tensor descriptors need a global scratch allocator; install a torch-backed one."""

    def _alloc(size: int, alignment: int, stream: int | None) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device="cpu" if interpreting() else "cuda")

    triton.set_allocator(_alloc)


def arrival_counters(cache: dict[tuple[torch.device, int], torch.Tensor], device: torch.device, n: int) -> torch.Tensor:
    """At least ``n`` int32 arrival counters on ``device`` for the current stream, kept in ``cache`` (zero between
    calls: the program that finishes a group resets its own counter).  One buffer per stream: two kernels counting
    in one buffer at once, on two streams, would take each other's arrivals for their own (one stream's kernels run
    in order, so they can share)."""
    cuda = device.type == "cuda"
    key = (device, torch.cuda.current_stream(device).cuda_stream if cuda else 0)
    t = cache.get(key)
    if t is not None and t.numel() >= n:
        return t
    capturing = cuda and torch.cuda.is_current_stream_capturing()
    if capturing:
        # In a CUDA graph capture an allocation comes from the graph's pool and its zero-fill runs only when the graph
        # replays: such a buffer must not serve eager calls.  Take one made outside the capture for this device (its
        # users then run in one graph, or in order), else one for this graph alone, not kept.
        t = next((b for (dev, _), b in cache.items() if dev == device and b.numel() >= n), None)
        if t is not None:
            return t
    t = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
    if not capturing:
        cache[key] = t
    return t


def pow2_split(items: int, k_steps: int, slots: int, max_split: int, min_chunk_steps: int) -> int:
    """K split for ``items`` work items of ``k_steps`` K steps each: the largest power of two up to ``max_split``
    whose pieces (items x split) still fit ``slots`` and whose chunks keep at least ``min_chunk_steps`` steps (1:
    unsplit)."""
    split = 1
    while 2 * split <= max_split and 2 * split * items <= slots and k_steps >= 2 * split * min_chunk_steps:
        split *= 2
    return split


def cdiv(x: int, y: int) -> int:
    """Ceiling division for host code: ``triton.cdiv`` is a constexpr function whose every host call unwraps its
    arguments through an import (about 2.5-3.5 us a call), which the GEMM routing rules paid dozens of times a call and
    the attention and decode hosts a few times a launch."""
    return -(-x // y)


def next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def length_bucket(n: int) -> int:
    """Autotune key: lengths bucketed to powers of two so odd lengths reuse tuned configs."""
    return min(next_pow2(max(n, 1)), 1 << 17)


@triton.jit
def mma(a, b, acc, DOT_F32: tl.constexpr):
    """``tl.dot(a, b, acc)``; with ``DOT_F32`` the operands are upcast to float32 first.

    DOT_F32 is set only under the CPU interpreter: Triton 3.9's interpreter multiplies bf16 operands
    as raw uint16 bit patterns, so it needs float32 operands to compute the right product.
    """
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        return tl.dot(a, b, acc)


# --- autotuning and launch plumbing for the attention kernels ------------------------------------------
# Under the CPU interpreter: small tiles, BLOCK_M != BLOCK_N so the diagonal loops see uneven tiles.
INTERPRET_CONFIG: tuple[int, int, int, int] = (32, 16, 4, 1)


def to_config(c: tuple) -> triton.Config:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, USE_TMA) -> triton.Config."""
    return triton.Config({"BLOCK_M": c[0], "BLOCK_N": c[1], "USE_TMA": bool(c[4])}, num_warps=c[2], num_stages=c[3])


def table_for(table: dict[int, list[tuple]], head_dim: int) -> list[tuple]:
    """Candidates of a head dim: its own entry, else the entry of the smallest tuned dim >= its padded width."""
    if head_dim in table:
        return table[head_dim]
    wider = [d for d in table if d >= padded_dim(head_dim)]
    return table[min(wider)] if wider else []


def autotuned_by_head_dim(kernel, table: dict[int, list[tuple]], keys: list[str]):
    """Autotuner whose candidates are ``table[HEAD_DIM]`` (read at tuning time, so the table can be
    edited), minus the USE_TMA entries when the kernel's ``TMA_OK`` argument is 0."""

    def prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
        d = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        tma = bool(named_args.get("TMA_OK", kwargs.get("TMA_OK")))
        kept = [to_config(c) for c in table_for(table, d) if tma or not c[4]]
        return kept or [to_config((64, 64, 4, 2, False))]

    configs = [to_config(c) for c in sorted({c for cs in table.values() for c in cs})]
    # cache_results: the choice is stored in the Triton cache, so later processes on this machine reuse it
    # instead of re-picking among near-equal configs (a different pick per process is between-run noise
    # that the regression gate would have to absorb); a changed kernel or config list re-tunes
    return triton.autotune(configs, key=keys, prune_configs_by={"early_config_prune": prune},
                           cache_results=True)(kernel)


def launch(tuned, raw, grid_fn, args: tuple, consts: dict, config: tuple | None, use_tma: bool) -> None:
    """Launch through the autotuner on GPU, or with one fixed config (interpreter / explicit).

    ``config`` = (BLOCK_M, BLOCK_N, num_warps, num_stages); ``use_tma`` applies to it.
    """
    if config is None and interpreting():
        config = INTERPRET_CONFIG
    set_triton_allocator()
    if config is None:
        tuned[lambda meta: grid_fn(meta["BLOCK_M"], meta["BLOCK_N"])](*args, **consts)
    else:
        bm, bn, w, s = config[:4]
        raw[grid_fn(bm, bn)](*args, **consts, USE_TMA=use_tma, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
