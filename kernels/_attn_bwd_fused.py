"""Fused FlashAttention backward kernels: 5 MMAs per (q block, KV block) pair instead of 7.

``_attn_bwd_fused`` owns one KV block per program (as ``_attn_bwd._attn_bwd_dkdv``: it loops over every
q head of its GQA group and every q row block) and computes, per tile pair, S^T = K Q^T, P^T, dV += P^T dO,
dP^T = V dO^T, dS^T, dK += dS^T Q **and** the partial dQ_i += dS K_j, which it adds into an fp32 scratch
``DQACC`` of shape (B * Hq, Lq, HEAD_DIM) -- either with relaxed ``tl.atomic_add`` (pointer path) or with a
TMA bulk reduce-add through a tensor descriptor (``DQ_TMA``, Hopper).  S and dP are computed once.

**Not deterministic**: the order in which the KV-block programs add into a dQ element varies from run
to run, so dq may differ in the last bits between runs (dk and dv are deterministic).  The 2-kernel scheme
of ``kernels/_attn_bwd.py`` stays selectable for bitwise-reproducible gradients.

``_bwd_pre_fused`` computes delta = rowsum(o * dO) and zeroes the scratch; ``_dq_post`` scales it by
sm_scale and writes dq in its dtype and layout.  ``STAGGER`` rotates the order in which a program walks
the q blocks (its start depends on its KV block), so the programs of one head do not all add into the
same dQ rows at the same moment.  ``DQ_SKIP`` (timing diagnostic only, dq left zero) leaves out the dQ
product and its accumulation.  Padded head dims as in ``kernels/_attn_tiles.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels._attn_tiles import load_rows, load_tile, row_desc, store_rows
from kernels._checks import mma


@triton.jit
def _bwd_pre_fused(Out, DO, DELTA, DQACC, sob, soh, sol, sod, sdb, sdh, sdl, sdd, HQ, LQ,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta = rowsum(o * dO) in fp32, and the dQ scratch rows of this block set to zero."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // HQ).to(tl.int64)
    h = (bh % HQ).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    o = load_tile(Out + b * sob + h * soh + offs_m[:, None] * sol + offs_d[None, :] * sod, offs_m[:, None], LQ,
                  offs_d[None, :], HEAD_DIM, BLOCK_D, True)
    do = load_tile(DO + b * sdb + h * sdh + offs_m[:, None] * sdl + offs_d[None, :] * sdd, offs_m[:, None], LQ,
                   offs_d[None, :], HEAD_DIM, BLOCK_D, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    row = bh.to(tl.int64) * LQ
    tl.store(DELTA + row + offs_m, delta, mask=offs_m < LQ)
    keep = (offs_m[:, None] < LQ) & (offs_d[None, :] < HEAD_DIM)
    tl.store(DQACC + (row + offs_m[:, None]) * HEAD_DIM + offs_d[None, :],
             tl.zeros([BLOCK_M, BLOCK_D], tl.float32), mask=keep)


@triton.jit
def _dq_post(DQACC, DQ, sdqb, sdqh, sdql, sdqd, HQ, LQ, sm_scale,
             HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """dq = sm_scale * scratch, in dq's dtype and layout."""
    m0 = tl.program_id(0) * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // HQ).to(tl.int64)
    h = (bh % HQ).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    keep = (offs_m[:, None] < LQ) & (offs_d[None, :] < HEAD_DIM)
    acc = tl.load(DQACC + (bh.to(tl.int64) * LQ + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], mask=keep, other=0.0)
    store_rows(DQ + b * sdqb + h * sdqh, (acc * sm_scale).to(DQ.dtype.element_ty), m0, LQ, sdql, sdqd, BLOCK_M,
               HEAD_DIM, BLOCK_D)


@triton.jit
def _fused_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, dq_dst, sql, sqd, sdl, sdd, lo, n_iter, shift,
                 LQ, offs_n, diag, qk_scale, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                 MASKED: tl.constexpr, USE_TMA: tl.constexpr, DQ_TMA: tl.constexpr, DQ_SKIP: tl.constexpr,
                 DOT_F32: tl.constexpr):
    """``n_iter`` q row blocks from ``lo``, visited from block ``shift`` on (cyclically)."""
    offs_d = tl.arange(0, BLOCK_D)
    for it in range(0, n_iter):
        blk = it + shift
        blk = tl.where(blk >= n_iter, blk - n_iter, blk)
        start_m = tl.multiple_of(lo + blk * BLOCK_M, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = load_rows(q_src, start_m, LQ, sql, sqd, BLOCK_M, HEAD_DIM, BLOCK_D, True, USE_TMA)
        lse2 = tl.load(lse_ptr + offs_m, mask=offs_m < LQ, other=0.0) * 1.4426950408889634
        s_t = mma(k, tl.trans(q), None, DOT_F32)
        p_t = tl.math.exp2(s_t * qk_scale - lse2[None, :])
        if MASKED:
            p_t = tl.where(offs_m[None, :] + diag >= offs_n[:, None], p_t, 0.0)
        do = load_rows(do_src, start_m, LQ, sdl, sdd, BLOCK_M, HEAD_DIM, BLOCK_D, True, USE_TMA)
        dv = mma(p_t.to(do.dtype), do, dv, DOT_F32)
        delta = tl.load(delta_ptr + offs_m, mask=offs_m < LQ, other=0.0)
        dp_t = mma(v, tl.trans(do), None, DOT_F32)
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = mma(ds_t, q, dk, DOT_F32)
        if not DQ_SKIP:  # DQ_SKIP: timing diagnostic only, no dQ at all
            dq = mma(tl.trans(ds_t), k, None, DOT_F32)  # keys >= LK are zero rows of k: they add nothing
            if DQ_TMA:
                dq_dst.atomic_add([start_m, 0], dq)  # TMA reduce-add; rows >= LQ and columns >= HEAD_DIM clipped
            else:
                ptrs = dq_dst + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
                tl.atomic_add(ptrs, dq, mask=(offs_m[:, None] < LQ) & (offs_d[None, :] < HEAD_DIM), sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_fused(Q, K, V, DO, LSE, DELTA, DK, DV, DQACC,
                    sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd,
                    sdb, sdh, sdl, sdd, sdkb, sdkh, sdkl, sdkd, sdvb, sdvh, sdvl, sdvd,
                    HQ, HKV, GROUP, LQ, LK, qk_scale, sm_scale, TUNE_KEY, TMA_OK,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DQ_TMA: tl.constexpr, STAGGER: tl.constexpr,
                    DOT_F32: tl.constexpr, DQ_SKIP: tl.constexpr = False):
    pid_n = tl.program_id(0)
    n0 = pid_n * BLOCK_N
    bhk = tl.program_id(1)
    b = (bhk // HKV).to(tl.int64)
    hk = (bhk % HKV).to(tl.int64)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    if USE_TMA:
        k = row_desc(k_base, LK, skl, BLOCK_N, HEAD_DIM, BLOCK_D).load([n0, 0])
        v = row_desc(v_base, LK, svl, BLOCK_N, HEAD_DIM, BLOCK_D).load([n0, 0])
    else:
        k = load_rows(k_base, n0, LK, skl, skd, BLOCK_N, HEAD_DIM, BLOCK_D, True, False)
        v = load_rows(v_base, n0, LK, svl, svd, BLOCK_N, HEAD_DIM, BLOCK_D, True, False)
    diag = LK - LQ
    if CAUSAL:  # row blocks [lo, split) straddle the diagonal; rows from split on see the whole block
        lo = tl.maximum(n0 - diag, 0) // BLOCK_M * BLOCK_M
        split = tl.maximum(tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - diag, 0), BLOCK_M) * BLOCK_M, lo)
        split = tl.minimum(split, tl.cdiv(LQ, BLOCK_M) * BLOCK_M)
        lo = tl.minimum(lo, split)
    else:
        lo = 0
        split = 0
    n_full = tl.maximum(tl.cdiv(LQ - split, BLOCK_M), 0)
    shift = 0
    if STAGGER:
        shift = pid_n % tl.maximum(n_full, 1)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        bh = b * HQ + h
        q_base = Q + b * sqb + h * sqh
        do_base = DO + b * sdb + h * sdh
        dq_base = DQACC + bh * LQ * HEAD_DIM
        if USE_TMA:
            q_src = row_desc(q_base, LQ, sql, BLOCK_M, HEAD_DIM, BLOCK_D)
            do_src = row_desc(do_base, LQ, sdl, BLOCK_M, HEAD_DIM, BLOCK_D)
        else:
            q_src = q_base
            do_src = do_base
        if DQ_TMA:
            dq_dst = tl.make_tensor_descriptor(dq_base, [LQ, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, BLOCK_D])
        else:
            dq_dst = dq_base
        lse_ptr = LSE + bh * LQ
        delta_ptr = DELTA + bh * LQ
        if CAUSAL:
            dk, dv = _fused_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, dq_dst, sql, sqd, sdl, sdd, lo,
                                  (split - lo) // BLOCK_M, 0, LQ, offs_n, diag, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_D,
                                  True, USE_TMA, DQ_TMA, DQ_SKIP, DOT_F32)
        dk, dv = _fused_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, dq_dst, sql, sqd, sdl, sdd, split,
                              n_full, shift, LQ, offs_n, diag, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_D, False, USE_TMA,
                              DQ_TMA, DQ_SKIP, DOT_F32)
    dk = dk * sm_scale
    store_rows(DK + b * sdkb + hk * sdkh, dk.to(DK.dtype.element_ty), n0, LK, sdkl, sdkd, BLOCK_N, HEAD_DIM, BLOCK_D)
    store_rows(DV + b * sdvb + hk * sdvh, dv.to(DV.dtype.element_ty), n0, LK, sdvl, sdvd, BLOCK_N, HEAD_DIM, BLOCK_D)
