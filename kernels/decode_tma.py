"""Host side of the Gluon decode kernel (``kernels/_decode_tma.py``): eligibility, routing, descriptors, launch.

``decode.decode_attention`` takes it ("auto", ``preferred``) on an sm_90 GPU where there are at least about as many
(batch, head) pairs as SMs (one program a head), no GQA, head dim 64, and each head's rows lie together in the cache
(bhld-like: what was timed).  At 8x16 heads, kv 2048, d64 it read 90.6-91.0 % of the copy rate where the Triton
kernel read 86.1-86.2 % (H100, graph-timed A/B), 90.1-90.3 % in the perf suite (``kernels/NOTES.md`` session 19).  At
head dim 128 it measured level with the Triton kernel (kv 8192: 176.3-177.5 against 177.5 us), so "auto" leaves those
to Triton; ``impl="gluon"`` runs it at head dims 64 and 128 wherever ``eligible``.
"""

from __future__ import annotations

import functools

import torch

from kernels._checks import GLUON_BUILD_ERRORS, cdiv, gluon_build_failed, gluon_runnable, gluon_status, layout_strides

try:  # Gluon ships with Triton >= 3.5; the kernel is written against the GPU machine's 3.6 API
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from kernels._decode_tma import decode_kv_kernel, read_floor_kernel
except Exception as exc:  # another Triton whose Gluon API differs
    decode_kv_kernel = read_floor_kernel = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None

ENABLED = True  # False: "auto" never takes the Gluon kernel
HEAD_DIMS: tuple[int, ...] = (64, 128)
AUTO_HEAD_DIMS: tuple[int, ...] = (64,)  # where "auto" takes it (measured faster; level at 128)
AUTO_MIN_PAIRS_PER_SM = 0.9  # (batch, head) pairs a SM at least: one program a head fills the GPU
# head dim -> (BLOCK_N, STAGES, warps, CT: tiles a chunk).  d64: session 19 call 7 (kv 2048: 3 or 4 stages 24.60-24.63
# us, 2 / 5 stages 25.37 / 25.00, 8 warps 24.95, chunks of 8 tiles 24.74, 64-key tiles 25.23-25.56); d128: call 4
# (kv 8192: 175.8-178.1 us over 64- and 128-key tiles, 3-6 stages)
CONFIGS: dict[int, tuple[int, int, int, int]] = {64: (128, 3, 4, 32), 128: (128, 4, 8, 32)}
_broken: list[str] = []


def _view(cache: torch.Tensor, layout: str) -> tuple[list[int], int, int, int] | None:
    """``([rows, width], batch stride, head stride, row stride)`` of the 2-D view whose [BLOCK_N, D] boxes hold
    each head's rows (row = offset // row stride, column = offset % row stride), spanning exactly the cache's
    first to last element; None where no such view exists (head dim not contiguous, unaligned, or a head's
    columns crossing a row)."""
    b, h, length, d = cache.shape if layout == "bhld" else (cache.shape[0], cache.shape[2], cache.shape[1],
                                                              cache.shape[3])
    sb, sh, sl, sd = layout_strides(cache, layout)
    sb, sh = (sb if b > 1 else 0), (sh if h > 1 else 0)  # a stride never stepped is any value
    esize = cache.element_size()
    if sd != 1 or sl < d or cache.data_ptr() % 16 or (sl * esize) % 16 or min(sb, sh, sl) < 0 or sb % sl:
        return None
    if head_major(cache, layout):
        width = d
    elif (h - 1) * sh + d <= sl:  # heads side by side in a row (blhd)
        width = (h - 1) * sh + d
    else:
        return None
    rows = ((b - 1) * sb + (h - 1) * sh + (length - 1) * sl) // sl + 1
    return ([rows, width], sb, sh, sl) if rows < 2**31 and sl < 2**31 else None


def views(k_cache: torch.Tensor, v_cache: torch.Tensor, layout: str) -> tuple[tuple, tuple] | None:
    """Both caches' ``_view``, or None where either has none."""
    kv = _view(k_cache, layout), _view(v_cache, layout)
    return None if None in kv else kv


def eligible(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, layout: str,
             group: int, head_dim: int) -> tuple[tuple, tuple] | None:
    """The caches' ``views`` where the Gluon kernel can run these inputs (sm_90, fp16/bf16, no GQA, head dim 64 or
    128, both caches with a 2-D view), else None."""
    if not (gluon_runnable(q.device, decode_kv_kernel, _broken) and group == 1 and head_dim in HEAD_DIMS
            and q.dtype in (torch.float16, torch.bfloat16) and k_cache.dtype == v_cache.dtype == q.dtype
            and out.dtype == q.dtype):
        return None
    return views(k_cache, v_cache, layout)


def head_major(cache: torch.Tensor, layout: str) -> bool:
    """Each head's rows lie together (bhld-like: the head stride a multiple of the row stride), as timed."""
    _, sh, sl, _ = layout_strides(cache, layout)
    heads = cache.shape[1] if layout == "bhld" else cache.shape[2]
    return heads == 1 or (sl > 0 and sh % sl == 0)


def preferred(group: int, head_dim: int, pairs: int, num_sms: int, rows_together: bool) -> bool:
    """Where "auto" takes the Gluon kernel (given ``eligible``): no GQA, head dim 64, at least
    AUTO_MIN_PAIRS_PER_SM (batch, head) ``pairs`` a SM, each head's rows together in both caches."""
    return (ENABLED and group == 1 and head_dim in AUTO_HEAD_DIMS and pairs >= AUTO_MIN_PAIRS_PER_SM * num_sms
            and rows_together)


@functools.cache
def _smem_layout(block_n: int, d: int, dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for([block_n, d], gl.bfloat16 if dtype == torch.bfloat16 else gl.float16)


def _descriptor(cache: torch.Tensor, view: tuple, block_n: int):
    shape, sb, sh, sl = view
    d = cache.shape[-1]
    return TensorDescriptor(cache, shape, [sl, 1], [block_n, d], _smem_layout(block_n, d, cache.dtype)), (sb, sh, sl)


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, layout: str,
           kv_views: tuple[tuple, tuple], batch: int, heads: int, len_k: int, qk_scale: float,
           config: tuple[int, int, int, int] | None = None) -> bool:
    """``out`` = decode attention through the Gluon kernel (``kv_views``: what ``eligible`` returned; ``len_k`` >=
    1); False (nothing written) where it does not build here.  ``qk_scale``: softmax scale * log2(e)."""
    d = q.shape[-1]
    block_n, stages, warps, ct = config or CONFIGS[d]
    k_desc, ks = _descriptor(k_cache, kv_views[0], block_n)
    v_desc, vs = _descriptor(v_cache, kv_views[1], block_n)
    sq, so = layout_strides(q, layout), layout_strides(out, layout)
    try:
        decode_kv_kernel[(batch * heads,)](q, out, k_desc, v_desc, len_k, heads, sq[0], sq[1], sq[3], so[0], so[1],
                                           so[3], *ks, *vs, qk_scale, STAGES=stages, NUM_WARPS=warps, CT=ct,
                                           EVEN=len_k % block_n == 0, num_warps=warps)
    except GLUON_BUILD_ERRORS as exc:  # compile, ptxas or resource errors: not a launch failure
        gluon_build_failed(exc, _broken, "Gluon decode kernel", "the Triton kernel")
        return False
    return True


def read_floor(k_cache: torch.Tensor, v_cache: torch.Tensor, programs: int, block_n: int = 128,
               stages: int = 3) -> None:
    """Diagnostic (``decode.read_floor(..., tma=True)``): stream contiguous K and V caches once through the TMA
    ring with ``programs`` programs, nothing computed."""
    if not gluon_runnable(k_cache.device, read_floor_kernel, []):
        raise RuntimeError(f"the TMA read floor needs the Gluon kernel on an sm_90 GPU ({status()})")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("the TMA read floor reads contiguous K and V caches")
    d = k_cache.shape[-1]
    rows = k_cache.numel() // d
    smem = _smem_layout(block_n, d, k_cache.dtype)
    k_desc, v_desc = (TensorDescriptor(t.reshape(rows, d), [rows, d], [d, 1], [block_n, d], smem)
                      for t in (k_cache, v_cache))
    per = cdiv(cdiv(rows, programs), block_n) * block_n
    read_floor_kernel[(cdiv(rows, per),)](k_desc, v_desc, rows, per, STAGES=stages, num_warps=4)


def status() -> str:
    """One line for reports: whether the Gluon decode kernel is available and why not."""
    return gluon_status(decode_kv_kernel, IMPORT_ERROR, _broken, ENABLED, "decode_tma.ENABLED")
