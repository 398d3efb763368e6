"""FlashAttention backward kernels: δ = rowsum(o·dO) pre-pass, dK/dV, dQ.

The dK/dV kernel owns one KV block per program and loops over every q head of its GQA group, so
there are no atomics and the results are deterministic; the dQ kernel owns one q row block.  S and
dP are computed in both (7 MMAs per tile pair instead of 5).  Padded head dims as in
``kernels/_attn_tiles.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels._attn_tiles import keep_mask, kv_bounds, load_rows, load_tile, row_desc, store_rows
from kernels._checks import mma


@triton.jit
def _bwd_preprocess(Out, DO, DELTA, sob, soh, sol, sod, sdb, sdh, sdl, sdd, HQ, LQ,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
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
    tl.store(DELTA + bh.to(tl.int64) * LQ + offs_m, delta, mask=offs_m < LQ)


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, sql, sqd, sdl, sdd, lo, hi, LQ, offs_n,
                diag, qk_scale, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                MASKED: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
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
        ds_t = p_t * (dp_t - delta[None, :])
        dk = mma(ds_t.to(q.dtype), q, dk, DOT_F32)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV,
                   sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd,
                   sdb, sdh, sdl, sdd, sdkb, sdkh, sdkl, sdkd, sdvb, sdvh, sdvl, sdvd,
                   HQ, HKV, GROUP, LQ, LK, qk_scale, sm_scale, TUNE_KEY, TMA_OK,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    n0 = tl.program_id(0) * BLOCK_N
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
    else:
        lo = 0
        split = 0
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        bh = b * HQ + h
        q_base = Q + b * sqb + h * sqh
        do_base = DO + b * sdb + h * sdh
        if USE_TMA:
            q_src = row_desc(q_base, LQ, sql, BLOCK_M, HEAD_DIM, BLOCK_D)
            do_src = row_desc(do_base, LQ, sdl, BLOCK_M, HEAD_DIM, BLOCK_D)
        else:
            q_src = q_base
            do_src = do_base
        lse_ptr = LSE + bh * LQ
        delta_ptr = DELTA + bh * LQ
        if CAUSAL:
            dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, sql, sqd, sdl, sdd, lo,
                                 tl.minimum(split, LQ), LQ, offs_n, diag, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_D,
                                 True, USE_TMA, DOT_F32)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, sql, sqd, sdl, sdd, split,
                             LQ, LQ, offs_n, diag, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_D, False, USE_TMA, DOT_F32)
    dk = dk * sm_scale
    store_rows(DK + b * sdkb + hk * sdkh, dk.to(DK.dtype.element_ty), n0, LK, sdkl, sdkd, BLOCK_N, HEAD_DIM, BLOCK_D)
    store_rows(DV + b * sdvb + hk * sdvh, dv.to(DV.dtype.element_ty), n0, LK, sdvl, sdvd, BLOCK_N, HEAD_DIM, BLOCK_D)


@triton.jit
def _dq_inner(dq, q, do, lse2, delta, k_src, v_src, skl, skd, svl, svd, lo, hi, LK, offs_m, diag, qk_scale,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr,
              CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = load_rows(k_src, start_n, LK, skl, skd, BLOCK_N, HEAD_DIM, BLOCK_D, True, USE_TMA)
        v = load_rows(v_src, start_n, LK, svl, svd, BLOCK_N, HEAD_DIM, BLOCK_D, True, USE_TMA)
        s = mma(q, tl.trans(k), None, DOT_F32)
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            p = tl.where(keep_mask(offs_m, offs_n, LK, diag, CAUSAL), p, 0.0)
        dp = mma(do, tl.trans(v), None, DOT_F32)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(k.dtype), k, dq, DOT_F32)
    return dq


@triton.jit
def _attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ,
                 sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd, sdb, sdh, sdl, sdd,
                 sdqb, sdqh, sdql, sdqd, HQ, GROUP, LQ, LK, qk_scale, sm_scale, TUNE_KEY, TMA_OK,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // HQ).to(tl.int64)
    h = (bh % HQ).to(tl.int64)
    hk = h // GROUP
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q_base = Q + b * sqb + h * sqh
    do_base = DO + b * sdb + h * sdh
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    if USE_TMA:
        q = row_desc(q_base, LQ, sql, BLOCK_M, HEAD_DIM, BLOCK_D).load([m0, 0])
        do = row_desc(do_base, LQ, sdl, BLOCK_M, HEAD_DIM, BLOCK_D).load([m0, 0])
        k_src = row_desc(k_base, LK, skl, BLOCK_N, HEAD_DIM, BLOCK_D)
        v_src = row_desc(v_base, LK, svl, BLOCK_N, HEAD_DIM, BLOCK_D)
    else:
        q = load_rows(q_base, m0, LQ, sql, sqd, BLOCK_M, HEAD_DIM, BLOCK_D, True, False)
        do = load_rows(do_base, m0, LQ, sdl, sdd, BLOCK_M, HEAD_DIM, BLOCK_D, True, False)
        k_src = k_base
        v_src = v_base
    row_ok = offs_m < LQ
    lse2 = tl.load(LSE + bh * LQ + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * LQ + offs_m, mask=row_ok, other=0.0)
    diag, split, hi = kv_bounds(m0, LQ, LK, BLOCK_M, BLOCK_N, CAUSAL)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dq = _dq_inner(dq, q, do, lse2, delta, k_src, v_src, skl, skd, svl, svd, 0, split, LK, offs_m, diag,
                   qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, False, CAUSAL, USE_TMA, DOT_F32)
    dq = _dq_inner(dq, q, do, lse2, delta, k_src, v_src, skl, skd, svl, svd, split, hi, LK, offs_m, diag,
                   qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, True, CAUSAL, USE_TMA, DOT_F32)
    dq = dq * sm_scale
    store_rows(DQ + b * sdqb + h * sdqh, dq.to(DQ.dtype.element_ty), m0, LQ, sdql, sdqd, BLOCK_M, HEAD_DIM, BLOCK_D)
