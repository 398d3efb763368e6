"""FlashAttention forward kernel (bf16/fp16, and fp8 e4m3 with per-tensor scales).

One program per (BLOCK_M query rows, batch·head); K/V streamed in BLOCK_N tiles.  Scores use ``exp2``
with ``sm_scale * log2(e)`` (times the fp8 descales of q and k) folded into one multiply; the causal
diagonal and the ragged tail run in a separate masked loop, so the main loop carries no masking;
causal row blocks run heaviest first.  fp8: p is rounded to e4m3 for the p·v MMA (values in [0, 1]),
the v descale is applied once to the output.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels._attn_tiles import keep_mask, kv_bounds, load_kt, load_rows, load_v, row_desc, store_rows
from kernels._checks import mma


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, K, V, skl, skd, svl, svd, lo, hi, LK, offs_m, diag, qk_scale,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr,
               CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, V_T: tl.constexpr, DOT_F32: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = load_kt(K, start_n, LK, skl, skd, BLOCK_N, HEAD_DIM, BLOCK_D, MASKED, USE_TMA)
        qk = mma(q, k, None, DOT_F32)
        v = load_v(V, start_n, LK, svl, svd, BLOCK_N, HEAD_DIM, BLOCK_D, MASKED, USE_TMA, V_T)
        if MASKED:
            keep = keep_mask(offs_m, start_n + tl.arange(0, BLOCK_N), LK, diag, CAUSAL)
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # row with no key yet: keep p = 0
            p = tl.math.exp2(qk - m_use[:, None])
        else:  # scale folded into the exp2 argument: one FMA per score
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_use = m_new
            p = tl.math.exp2(qk * qk_scale - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], DOT_F32)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, Out, LSE,
              sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd, sob, soh, sol, sod,
              HQ, GROUP, LQ, LK, qk_scale, v_scale, TUNE_KEY, TMA_OK,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr, V_T: tl.constexpr = False):
    pid_m = tl.program_id(0)
    if CAUSAL:  # heaviest row blocks first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // HQ).to(tl.int64)
    h = (bh % HQ).to(tl.int64)
    hk = h // GROUP
    q_base = Q + b * sqb + h * sqh
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    o_base = Out + b * sob + h * soh
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    if USE_TMA:
        q = row_desc(q_base, LQ, sql, BLOCK_M, HEAD_DIM, BLOCK_D).load([m0, 0])
        k_src = row_desc(k_base, LK, skl, BLOCK_N, HEAD_DIM, BLOCK_D)
        if V_T:
            v_src = tl.make_tensor_descriptor(v_base, [HEAD_DIM, LK], [svd, 1], [BLOCK_D, BLOCK_N])
        else:
            v_src = row_desc(v_base, LK, svl, BLOCK_N, HEAD_DIM, BLOCK_D)
    else:
        q = load_rows(q_base, m0, LQ, sql, sqd, BLOCK_M, HEAD_DIM, BLOCK_D, True, False)
        k_src = k_base
        v_src = v_base
    diag, split, hi = kv_bounds(m0, LQ, LK, BLOCK_M, BLOCK_N, CAUSAL)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, skl, skd, svl, svd, 0, split, LK, offs_m, diag,
                               qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, False, CAUSAL, USE_TMA, V_T, DOT_F32)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, skl, skd, svl, svd, split, hi, LK, offs_m, diag,
                               qk_scale, BLOCK_N, HEAD_DIM, BLOCK_D, True, CAUSAL, USE_TMA, V_T, DOT_F32)
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (v_scale / l_safe)[:, None]
    lse = tl.where(empty, float("inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    tl.store(LSE + bh.to(tl.int64) * LQ + offs_m, lse, mask=offs_m < LQ)
    if USE_TMA:
        row_desc(o_base, LQ, sol, BLOCK_M, HEAD_DIM, BLOCK_D).store([m0, 0], out.to(Out.dtype.element_ty))
    else:
        store_rows(o_base, out.to(Out.dtype.element_ty), m0, LQ, sol, sod, BLOCK_M, HEAD_DIM, BLOCK_D)
