"""FlashAttention forward and backward in Triton.

fp16/bf16, head dims 64/128/256, causal (diagonal aligned bottom-right when q and kv lengths differ)
and non-causal, arbitrary lengths, grouped-query heads (Hq a multiple of Hkv), and the layouts
"bhld" (B, H, L, D) and "blhd" (B, L, H, D), read through strides, never copied.

Two load paths share one kernel body: on Hopper (compute capability >= 9) with 16-byte aligned
strides, tiles come through device-side tensor descriptors (TMA, out-of-range rows zero-filled);
elsewhere, and under the CPU interpreter, through masked pointer loads.  Scores use ``exp2`` with
``sm_scale * log2(e)`` folded into one multiply, and the causal diagonal / ragged tail runs in a
separate masked loop, so the main loop carries no masking.  Rows that see no key (causal with
Lq > Lk) give a zero output and ``lse = +inf`` (the FlashAttention convention).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels._checks import (
    LOG2E,
    AttnDims,
    autotuned_by_head_dim,
    check_attention,
    check_buffer,
    empty_like_layout,
    interpreting,
    launch,
    layout_strides,
    length_bucket,
    mma,
    tma_ok,
)

HEAD_DIMS: tuple[int, ...] = (64, 128, 256)


@triton.jit
def _load_kt(K, start_n, LK, skl, skd, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
             USE_TMA: tl.constexpr):
    """K tile transposed, [HEAD_DIM, BLOCK_N]; masked rows (keys >= LK) read as zero."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        k = K.load([start_n, 0]).T
    elif MASKED:
        k = tl.load(K + offs_n[None, :] * skl + offs_d[:, None] * skd, mask=offs_n[None, :] < LK, other=0.0)
    else:
        k = tl.load(K + offs_n[None, :] * skl + offs_d[:, None] * skd)
    return k


@triton.jit
def _load_rows(src, start, LEN, stride_l, stride_d, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr,
               MASKED: tl.constexpr, USE_TMA: tl.constexpr):
    """[BLOCK, HEAD_DIM] tile of rows ``start + arange(BLOCK)``; rows >= LEN read as zero."""
    if USE_TMA:
        t = src.load([start, 0])
    else:
        offs = start + tl.arange(0, BLOCK)
        ptrs = src + offs[:, None] * stride_l + tl.arange(0, HEAD_DIM)[None, :] * stride_d
        if MASKED:  # noqa: SIM108 (constexpr branch)
            t = tl.load(ptrs, mask=offs[:, None] < LEN, other=0.0)
        else:
            t = tl.load(ptrs)
    return t


@triton.jit
def _kv_bounds(m0, LQ, LK, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
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
def _keep(offs_m, offs_n, LK, diag, CAUSAL: tl.constexpr):
    """Scores that count: keys inside LK and, when causal, not after the query's diagonal."""
    keep = offs_n[None, :] < LK
    if CAUSAL:
        keep = keep & (offs_m[:, None] + diag >= offs_n[None, :])
    return keep


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, K, V, skl, skd, svl, svd, lo, hi, LK, offs_m, diag, qk_scale,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
               CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _load_kt(K, start_n, LK, skl, skd, BLOCK_N, HEAD_DIM, MASKED, USE_TMA)
        qk = mma(q, k, None, DOT_F32)
        v = _load_rows(V, start_n, LK, svl, svd, BLOCK_N, HEAD_DIM, MASKED, USE_TMA)
        if MASKED:
            keep = _keep(offs_m, start_n + tl.arange(0, BLOCK_N), LK, diag, CAUSAL)
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
              HQ, GROUP, LQ, LK, qk_scale, TUNE_KEY, TMA_OK,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
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
    offs_d = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        q = tl.make_tensor_descriptor(q_base, [LQ, HEAD_DIM], [sql, 1], [BLOCK_M, HEAD_DIM]).load([m0, 0])
        k_src = tl.make_tensor_descriptor(k_base, [LK, HEAD_DIM], [skl, 1], [BLOCK_N, HEAD_DIM])
        v_src = tl.make_tensor_descriptor(v_base, [LK, HEAD_DIM], [svl, 1], [BLOCK_N, HEAD_DIM])
    else:
        q = _load_rows(q_base, m0, LQ, sql, sqd, BLOCK_M, HEAD_DIM, True, False)
        k_src = k_base
        v_src = v_base
    diag, split, hi = _kv_bounds(m0, LQ, LK, BLOCK_M, BLOCK_N, CAUSAL)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, skl, skd, svl, svd, 0, split, LK, offs_m,
                               diag, qk_scale, BLOCK_N, HEAD_DIM, False, CAUSAL, USE_TMA, DOT_F32)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, skl, skd, svl, svd, split, hi, LK, offs_m,
                               diag, qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL, USE_TMA, DOT_F32)
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(empty, float("inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    tl.store(LSE + bh.to(tl.int64) * LQ + offs_m, lse, mask=offs_m < LQ)
    if USE_TMA:
        o_desc = tl.make_tensor_descriptor(o_base, [LQ, HEAD_DIM], [sol, 1], [BLOCK_M, HEAD_DIM])
        o_desc.store([m0, 0], out.to(Out.dtype.element_ty))
    else:
        tl.store(o_base + offs_m[:, None] * sol + offs_d[None, :] * sod, out.to(Out.dtype.element_ty),
                 mask=offs_m[:, None] < LQ)


@triton.jit
def _bwd_preprocess(Out, DO, DELTA, sob, soh, sol, sod, sdb, sdh, sdl, sdd, HQ, LQ,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // HQ).to(tl.int64)
    h = (bh % HQ).to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = offs_m[:, None] < LQ
    o = tl.load(Out + b * sob + h * soh + offs_m[:, None] * sol + offs_d[None, :] * sod, mask=mask, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdl + offs_d[None, :] * sdd, mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh.to(tl.int64) * LQ + offs_m, delta, mask=offs_m < LQ)


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, sql, sqd, sdl, sdd, lo, hi, LQ, offs_n,
                diag, qk_scale, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
                USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q = _load_rows(q_src, start_m, LQ, sql, sqd, BLOCK_M, HEAD_DIM, True, USE_TMA)
        lse2 = tl.load(lse_ptr + offs_m, mask=offs_m < LQ, other=0.0) * 1.4426950408889634
        s_t = mma(k, tl.trans(q), None, DOT_F32)
        p_t = tl.math.exp2(s_t * qk_scale - lse2[None, :])
        if MASKED:
            p_t = tl.where(offs_m[None, :] + diag >= offs_n[:, None], p_t, 0.0)
        do = _load_rows(do_src, start_m, LQ, sdl, sdd, BLOCK_M, HEAD_DIM, True, USE_TMA)
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
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    n0 = tl.program_id(0) * BLOCK_N
    bhk = tl.program_id(1)
    b = (bhk // HKV).to(tl.int64)
    hk = (bhk % HKV).to(tl.int64)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    if USE_TMA:
        k = tl.make_tensor_descriptor(k_base, [LK, HEAD_DIM], [skl, 1], [BLOCK_N, HEAD_DIM]).load([n0, 0])
        v = tl.make_tensor_descriptor(v_base, [LK, HEAD_DIM], [svl, 1], [BLOCK_N, HEAD_DIM]).load([n0, 0])
    else:
        k = _load_rows(k_base, n0, LK, skl, skd, BLOCK_N, HEAD_DIM, True, False)
        v = _load_rows(v_base, n0, LK, svl, svd, BLOCK_N, HEAD_DIM, True, False)
    diag = LK - LQ
    if CAUSAL:  # row blocks [lo, split) straddle the diagonal; rows from split on see the whole block
        lo = tl.maximum(n0 - diag, 0) // BLOCK_M * BLOCK_M
        split = tl.maximum(tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - diag, 0), BLOCK_M) * BLOCK_M, lo)
    else:
        lo = 0
        split = 0
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        bh = b * HQ + h
        q_base = Q + b * sqb + h * sqh
        do_base = DO + b * sdb + h * sdh
        if USE_TMA:
            q_src = tl.make_tensor_descriptor(q_base, [LQ, HEAD_DIM], [sql, 1], [BLOCK_M, HEAD_DIM])
            do_src = tl.make_tensor_descriptor(do_base, [LQ, HEAD_DIM], [sdl, 1], [BLOCK_M, HEAD_DIM])
        else:
            q_src = q_base
            do_src = do_base
        lse_ptr = LSE + bh * LQ
        delta_ptr = DELTA + bh * LQ
        if CAUSAL:
            dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, sql, sqd, sdl, sdd, lo,
                                 tl.minimum(split, LQ), LQ, offs_n, diag, qk_scale, BLOCK_M, HEAD_DIM, True,
                                 USE_TMA, DOT_F32)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, sql, sqd, sdl, sdd, split,
                             LQ, LQ, offs_n, diag, qk_scale, BLOCK_M, HEAD_DIM, False, USE_TMA, DOT_F32)
    dk = dk * sm_scale
    mask = offs_n[:, None] < LK
    tl.store(DK + b * sdkb + hk * sdkh + offs_n[:, None] * sdkl + offs_d[None, :] * sdkd,
             dk.to(DK.dtype.element_ty), mask=mask)
    tl.store(DV + b * sdvb + hk * sdvh + offs_n[:, None] * sdvl + offs_d[None, :] * sdvd,
             dv.to(DV.dtype.element_ty), mask=mask)


@triton.jit
def _dq_inner(dq, q, do, lse2, delta, k_src, v_src, skl, skd, svl, svd, lo, hi, LK, offs_m, diag, qk_scale,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              USE_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = _load_rows(k_src, start_n, LK, skl, skd, BLOCK_N, HEAD_DIM, True, USE_TMA)
        v = _load_rows(v_src, start_n, LK, svl, svd, BLOCK_N, HEAD_DIM, True, USE_TMA)
        s = mma(q, tl.trans(k), None, DOT_F32)
        p = tl.math.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            p = tl.where(_keep(offs_m, offs_n, LK, diag, CAUSAL), p, 0.0)
        dp = mma(do, tl.trans(v), None, DOT_F32)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(k.dtype), k, dq, DOT_F32)
    return dq


@triton.jit
def _attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ,
                 sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd, sdb, sdh, sdl, sdd,
                 sdqb, sdqh, sdql, sdqd, HQ, GROUP, LQ, LK, qk_scale, sm_scale, TUNE_KEY, TMA_OK,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
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
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + b * sqb + h * sqh
    do_base = DO + b * sdb + h * sdh
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    if USE_TMA:
        q = tl.make_tensor_descriptor(q_base, [LQ, HEAD_DIM], [sql, 1], [BLOCK_M, HEAD_DIM]).load([m0, 0])
        do = tl.make_tensor_descriptor(do_base, [LQ, HEAD_DIM], [sdl, 1], [BLOCK_M, HEAD_DIM]).load([m0, 0])
        k_src = tl.make_tensor_descriptor(k_base, [LK, HEAD_DIM], [skl, 1], [BLOCK_N, HEAD_DIM])
        v_src = tl.make_tensor_descriptor(v_base, [LK, HEAD_DIM], [svl, 1], [BLOCK_N, HEAD_DIM])
    else:
        q = _load_rows(q_base, m0, LQ, sql, sqd, BLOCK_M, HEAD_DIM, True, False)
        do = _load_rows(do_base, m0, LQ, sdl, sdd, BLOCK_M, HEAD_DIM, True, False)
        k_src = k_base
        v_src = v_base
    row_ok = offs_m < LQ
    lse2 = tl.load(LSE + bh * LQ + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + bh * LQ + offs_m, mask=row_ok, other=0.0)
    diag, split, hi = _kv_bounds(m0, LQ, LK, BLOCK_M, BLOCK_N, CAUSAL)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    dq = _dq_inner(dq, q, do, lse2, delta, k_src, v_src, skl, skd, svl, svd, 0, split, LK, offs_m, diag,
                   qk_scale, BLOCK_N, HEAD_DIM, False, CAUSAL, USE_TMA, DOT_F32)
    dq = _dq_inner(dq, q, do, lse2, delta, k_src, v_src, skl, skd, svl, svd, split, hi, LK, offs_m, diag,
                   qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL, USE_TMA, DOT_F32)
    dq = dq * sm_scale
    tl.store(DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdql + offs_d[None, :] * sdqd,
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


# --- configurations -------------------------------------------------------------------------------
# Hopper-tuned per head dim (kernels/tune.py sweeps, kernels/NOTES.md); the autotuner picks one per
# (length bucket, TMA eligibility, head dim, causal).  USE_TMA entries are skipped when tensor descriptors
# can't be used, so every list keeps pointer-load entries too.  (BLOCK_M, BLOCK_N, warps, stages, USE_TMA)
FWD_CONFIGS: dict[int, list[tuple]] = {
    64: [(128, 128, 4, 3, True), (128, 64, 4, 3, True), (128, 64, 4, 3, False), (128, 128, 4, 3, False)],
    128: [(128, 128, 8, 3, False), (128, 64, 8, 3, False), (128, 128, 8, 3, True)],
    256: [(64, 64, 4, 2, True), (64, 64, 4, 2, False), (128, 64, 8, 2, False)],
}
DKDV_CONFIGS: dict[int, list[tuple]] = {
    64: [(64, 64, 4, 3, True), (64, 64, 4, 3, False), (64, 128, 8, 3, False)],
    128: [(64, 128, 8, 2, True), (64, 128, 8, 3, True), (64, 128, 8, 2, False)],
    256: [(32, 64, 4, 2, False), (64, 64, 8, 2, False)],
}
DQ_CONFIGS: dict[int, list[tuple]] = {
    64: [(128, 64, 8, 3, False), (64, 64, 4, 3, False), (128, 64, 8, 3, True)],
    128: [(128, 64, 8, 3, True), (128, 64, 8, 3, False), (128, 128, 8, 2, True)],
    256: [(64, 32, 4, 2, False), (64, 64, 8, 2, False)],
}
_TABLES = {"fwd": FWD_CONFIGS, "dkdv": DKDV_CONFIGS, "dq": DQ_CONFIGS}

_KEYS = ["TUNE_KEY", "TMA_OK", "HEAD_DIM", "CAUSAL"]


_attn_fwd_tuned = autotuned_by_head_dim(_attn_fwd, FWD_CONFIGS, _KEYS)
_attn_bwd_dkdv_tuned = autotuned_by_head_dim(_attn_bwd_dkdv, DKDV_CONFIGS, _KEYS)
_attn_bwd_dq_tuned = autotuned_by_head_dim(_attn_bwd_dq, DQ_CONFIGS, _KEYS)


def set_configs(kind: str, head_dim: int, configs: list[tuple]) -> None:
    """Replace the autotuner's candidates for ("fwd" | "dkdv" | "dq", head_dim); used by kernels/tune.py."""
    _TABLES[kind][head_dim] = list(configs)
    for tuner in (_attn_fwd_tuned, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned):
        tuner.cache.clear()


def attention_path(*tensors: torch.Tensor) -> str:
    """``"hopper"`` when the Hopper configs may use tensor descriptors (TMA) for these tensors (the
    autotuner then chooses between TMA and cp.async pointer loads per shape), else ``"pointer"``."""
    return "hopper" if tma_ok(*tensors) else "pointer"


def attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
    *,
    config: tuple[int, int, int, int] | None = None,
    use_tma: bool | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward pass without autograd; returns ``(out, lse)``, lse float32 of shape (B, Hq, Lq), natural log.

    ``out``/``lse`` may be given preallocated (any strides for ``out``; ``lse`` contiguous).
    ``config`` = (BLOCK_M, BLOCK_N, num_warps, num_stages) bypasses the autotuner; ``use_tma``
    forces the load path (with ``config``) or restricts the autotuner to pointer loads (False).
    """
    dims = check_attention(q, k, v, layout, HEAD_DIMS)
    scale = 1.0 / math.sqrt(dims.head_dim) if sm_scale is None else float(sm_scale)
    lse_shape = (dims.batch, dims.heads_q, dims.len_q)
    if out is None:
        out = empty_like_layout(dims.batch, dims.heads_q, dims.len_q, dims.head_dim, layout, q)
    check_buffer("out", out, tuple(q.shape), q.dtype, q.device)
    if lse is None:
        lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    check_buffer("lse", lse, lse_shape, torch.float32, q.device, contiguous=True)
    if out.numel() == 0:
        return out, lse
    if dims.len_k == 0:  # nothing to attend to: zero output, lse = +inf; no launch
        out.zero_()
        lse.fill_(float("inf"))
        return out, lse
    eligible = attention_path(q, k, v) == "hopper"
    tma_ok_arg = int(eligible if use_tma is None else use_tma)
    args = (q, k, v, out, lse, *layout_strides(q, layout), *layout_strides(k, layout), *layout_strides(v, layout),
            *layout_strides(out, layout), dims.heads_q, dims.group, dims.len_q, dims.len_k, scale * LOG2E,
            length_bucket(max(dims.len_q, dims.len_k)), tma_ok_arg)
    consts = {"HEAD_DIM": dims.head_dim, "CAUSAL": bool(causal), "DOT_F32": interpreting()}
    grid = lambda bm, bn: (triton.cdiv(dims.len_q, bm), dims.batch * dims.heads_q)
    launch(_attn_fwd_tuned, _attn_fwd, grid, args, consts, config, bool(tma_ok_arg))
    return out, lse


def attention_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
    *,
    configs: tuple[tuple[int, int, int, int] | None, tuple[int, int, int, int] | None] = (None, None),
    use_tma: bool | None = None,
    dq: torch.Tensor | None = None,
    dk: torch.Tensor | None = None,
    dv: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of attention, from the forward's output and log-sum-exp.

    ``dq``/``dk``/``dv`` may be given preallocated; ``configs`` = (dkdv config, dq config).
    """
    dims = check_attention(q, k, v, layout, HEAD_DIMS)
    for name, t in (("grad_out", do), ("out", out)):
        if tuple(t.shape) != tuple(q.shape) or t.device != q.device:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)} and device, got {tuple(t.shape)}")
    check_buffer("lse", lse, (dims.batch, dims.heads_q, dims.len_q), torch.float32, q.device, contiguous=True)
    if do.dtype != q.dtype:
        do = do.to(q.dtype)
    scale = 1.0 / math.sqrt(dims.head_dim) if sm_scale is None else float(sm_scale)
    dq = torch.empty_like(q, memory_format=torch.contiguous_format) if dq is None else dq
    dk = torch.empty_like(k, memory_format=torch.contiguous_format) if dk is None else dk
    dv = torch.empty_like(v, memory_format=torch.contiguous_format) if dv is None else dv
    for name, t, ref in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        check_buffer(name, t, tuple(ref.shape), ref.dtype, ref.device)
    if dims.len_q == 0 or dims.len_k == 0 or dims.batch == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = torch.empty_like(lse)
    pre_bm = 64
    _bwd_preprocess[(triton.cdiv(dims.len_q, pre_bm), dims.batch * dims.heads_q)](
        out, do, delta, *layout_strides(out, layout), *layout_strides(do, layout), dims.heads_q, dims.len_q,
        HEAD_DIM=dims.head_dim, BLOCK_M=pre_bm)
    eligible = attention_path(q, k, v, do) == "hopper"
    tma_ok_arg = int(eligible if use_tma is None else use_tma)
    sq, sk, sv, sd, sdk, sdv = (layout_strides(t, layout) for t in (q, k, v, do, dk, dv))
    qk_scale = scale * LOG2E
    key = length_bucket(max(dims.len_q, dims.len_k))
    consts = {"HEAD_DIM": dims.head_dim, "CAUSAL": bool(causal), "DOT_F32": interpreting()}
    launch(_attn_bwd_dkdv_tuned, _attn_bwd_dkdv,
            lambda bm, bn: (triton.cdiv(dims.len_k, bn), dims.batch * dims.heads_kv),
            (q, k, v, do, lse, delta, dk, dv, *sq, *sk, *sv, *sd, *sdk, *sdv,
             dims.heads_q, dims.heads_kv, dims.group, dims.len_q, dims.len_k, qk_scale, scale, key, tma_ok_arg),
            consts, configs[0], bool(tma_ok_arg))
    launch(_attn_bwd_dq_tuned, _attn_bwd_dq,
            lambda bm, bn: (triton.cdiv(dims.len_q, bm), dims.batch * dims.heads_q),
            (q, k, v, do, lse, delta, dq, *sq, *sk, *sv, *sd, *layout_strides(dq, layout),
             dims.heads_q, dims.group, dims.len_q, dims.len_k, qk_scale, scale, key, tma_ok_arg),
            consts, configs[1], bool(tma_ok_arg))
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """``torch.autograd.Function`` wrapping the Triton forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, sm_scale: float | None, layout: str):  # type: ignore[override]
        out, lse = attention_forward(q, k, v, causal, sm_scale, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.sm_scale, ctx.layout = causal, sm_scale, layout
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(grad_out, q, k, v, out, lse, ctx.causal, ctx.sm_scale, ctx.layout)
        return dq, dk, dv, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
) -> torch.Tensor:
    """Attention ``softmax(q k^T * sm_scale) v`` with autograd support.

    q: (B, Hq, Lq, D) for layout "bhld" or (B, Lq, Hq, D) for "blhd"; k, v: same with Hkv heads
    and Lk positions, Hq a multiple of Hkv.  ``sm_scale`` defaults to 1/sqrt(D).  Returns a tensor
    of q's shape in the same layout.  Use :func:`attention_forward` to also get the log-sum-exp.
    """
    return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, layout)  # attention_forward checks the inputs


__all__ = [
    "HEAD_DIMS",
    "AttnDims",
    "FlashAttentionFunction",
    "attention_backward",
    "attention_forward",
    "attention_path",
    "flash_attention",
    "set_configs",
]
