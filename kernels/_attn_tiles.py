"""Tile loads, stores and causal bounds shared by the attention kernels.

Head dims that are not a power of two run with a padded power-of-two tile width ``BLOCK_D``: the
columns ``HEAD_DIM .. BLOCK_D - 1`` are read as zero (masked pointer loads, or tensor descriptors of
width ``HEAD_DIM`` whose out-of-range box elements the copy engine zero-fills) and never stored, so
they add nothing to q·k or p·v and nothing is copied in memory.  ``HEAD_DIM == BLOCK_D`` compiles
the same code as before, without the column mask.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_tile(ptrs, offs_r, LEN, offs_d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASK_ROWS: tl.constexpr):
    """Masked pointer load of a [rows, BLOCK_D] (or its transpose, through ``ptrs``) tile.

    ``offs_r`` / ``offs_d`` come already broadcast to the tile's shape ([R, 1] and [1, D], or
    [1, R] and [D, 1] for a transposed tile)."""
    if MASK_ROWS:
        if HEAD_DIM == BLOCK_D:
            t = tl.load(ptrs, mask=offs_r < LEN, other=0.0)
        else:
            t = tl.load(ptrs, mask=(offs_r < LEN) & (offs_d < HEAD_DIM), other=0.0)
    elif HEAD_DIM == BLOCK_D:
        t = tl.load(ptrs)
    else:
        t = tl.load(ptrs, mask=offs_d < HEAD_DIM, other=0.0)
    return t


@triton.jit
def load_kt(K, start_n, LK, skl, skd, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
            MASKED: tl.constexpr, USE_TMA: tl.constexpr):
    """K tile transposed, [BLOCK_D, BLOCK_N]; keys >= LK and padded columns read as zero."""
    if USE_TMA:
        k = K.load([start_n, 0]).T
    else:
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        k = load_tile(K + offs_n[None, :] * skl + offs_d[:, None] * skd, offs_n[None, :], LK, offs_d[:, None],
                      HEAD_DIM, BLOCK_D, MASKED)
    return k


@triton.jit
def load_rows(src, start, LEN, stride_l, stride_d, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
              BLOCK_D: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr):
    """[BLOCK, BLOCK_D] tile of rows ``start + arange(BLOCK)``; rows >= LEN and padded columns read as zero."""
    if USE_TMA:
        t = src.load([start, 0])
    else:
        offs = start + tl.arange(0, BLOCK)
        offs_d = tl.arange(0, BLOCK_D)
        t = load_tile(src + offs[:, None] * stride_l + offs_d[None, :] * stride_d, offs[:, None], LEN,
                      offs_d[None, :], HEAD_DIM, BLOCK_D, MASKED)
    return t


@triton.jit
def load_v(src, start, LEN, stride_l, stride_d, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
           BLOCK_D: tl.constexpr, MASKED: tl.constexpr, USE_TMA: tl.constexpr, V_T: tl.constexpr):
    """V tile [BLOCK, BLOCK_D]; with ``V_T`` the cache is stored position-contiguous (stride_l == 1) and
    the tensor descriptor (shape [HEAD_DIM, LEN]) is read transposed (fp8 MMAs want V K-major)."""
    if USE_TMA and V_T:
        t = src.load([0, start]).T
    else:
        t = load_rows(src, start, LEN, stride_l, stride_d, BLOCK, HEAD_DIM, BLOCK_D, MASKED, USE_TMA)
    return t


@triton.jit
def store_rows(dst, tile, start, LEN, stride_l, stride_d, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
               BLOCK_D: tl.constexpr):
    """Store the first HEAD_DIM columns of rows ``start + arange(BLOCK)`` that are < LEN."""
    offs = start + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    ptrs = dst + offs[:, None] * stride_l + offs_d[None, :] * stride_d
    if HEAD_DIM == BLOCK_D:
        tl.store(ptrs, tile, mask=offs[:, None] < LEN)
    else:
        tl.store(ptrs, tile, mask=(offs[:, None] < LEN) & (offs_d[None, :] < HEAD_DIM))


@triton.jit
def row_desc(base, LEN, stride_l, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Tensor descriptor over a (LEN, HEAD_DIM) row-major slab with [BLOCK, BLOCK_D] boxes (zero-filled
    beyond LEN rows and HEAD_DIM columns)."""
    return tl.make_tensor_descriptor(base, [LEN, HEAD_DIM], [stride_l, 1], [BLOCK, BLOCK_D])


@triton.jit
def kv_bounds(m0, LQ, LK, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Key range of the row block at m0: full unmasked blocks in [0, split), masked ones in [split, hi)
    (causal diagonal, ragged tail); ``diag`` = LK - LQ aligns the causal mask bottom-right."""
    diag = LK - LQ
    full_n = LK // BLOCK_N * BLOCK_N
    if CAUSAL:
        hi = tl.maximum(tl.minimum(m0 + BLOCK_M + diag, LK), 0)
        split = tl.minimum(tl.maximum(m0 + diag + 1, 0) // BLOCK_N * BLOCK_N, full_n)
    else:
        hi = LK
        split = full_n
    return diag, split, hi


@triton.jit
def keep_mask(offs_m, offs_n, LK, diag, CAUSAL: tl.constexpr):
    """Scores that count: keys inside LK and, when causal, not after the query's diagonal."""
    keep = offs_n[None, :] < LK
    if CAUSAL:
        keep = keep & (offs_m[:, None] + diag >= offs_n[None, :])
    return keep
