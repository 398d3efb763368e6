"""Warp-specialised FlashAttention forward for Hopper, written in Gluon (bf16/fp16).

One program per (128 query rows, batch·head), three partitions sharing one K/V ring in shared memory:

- a **loader** warp issues the TMA copies: the two 64-row Q tiles once, then K and V tiles into
  ``STAGES`` buffers, each with its own ready / empty mbarrier (K and V separately, so the scores of a
  tile can start before its V has landed);
- two **consumer** warpgroups (the default partition and a 4-warp worker), each owning 64 of the 128
  query rows.  Per KV tile j a consumer issues the scores ``S_j = Q K_j^T`` and the previous tile's
  ``O += P_{j-1} V_{j-1}`` as asynchronous wgmma, waits for S_j only, and runs the softmax of tile j
  while the P·V wgmma is still on the tensor cores; P goes to the P·V wgmma straight from registers.
  The two consumers interleave on the SM, so one's softmax overlaps the other's matmuls.

exp2 with ``sm_scale * log2(e)`` folded into one multiply; keys beyond LK (zero-filled by TMA) and the
causal diagonal are masked only in the tiles that need it (the first tile is always run masked, which
also covers row blocks that see no key: zero output, ``lse = +inf``).  Head dims that are not a power of
two run padded: descriptors of width HEAD_DIM with [rows, BLOCK_D] boxes (the copy engine zero-fills
the rest) and a clipped TMA store of the output.  Causal row blocks run heaviest first.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ROWS: gl.constexpr = gl.constexpr(64)  # query rows per consumer warpgroup


@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty,
            m0, n_tiles, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [m0, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [m0 + ROWS, 0], q_bar, q_smem.index(1))
    for j in range(n_tiles):
        s = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(k_empty.index(s), ph ^ 1)  # a fresh barrier counts as phase 1 complete
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [j * BLOCK_N, 0], k_ready.index(s), k_bufs.index(s))
        mbarrier.wait(v_empty.index(s), ph ^ 1)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [j * BLOCK_N, 0], v_ready.index(s), v_bufs.index(s))


@gluon.jit
def _scores(q_s, k_bufs, k_ready, j, s_zero, STAGES: gl.constexpr):
    s = j % STAGES
    mbarrier.wait(k_ready.index(s), (j // STAGES) & 1)
    return warpgroup_mma(q_s, k_bufs.index(s).permute((1, 0)), s_zero, use_acc=False, is_async=True)


@gluon.jit
def _softmax(s, m_i, l_i, rows, start_n, LK, diag, qk_scale, p_layout: gl.constexpr, BLOCK_N: gl.constexpr,
             MASKED: gl.constexpr, CAUSAL: gl.constexpr, dtype: gl.constexpr):
    """Online-softmax step on the scores of one tile: returns (P as an MMA operand, alpha, m, l)."""
    if MASKED:
        cols = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        keep = gl.expand_dims(cols, 0) < LK
        if CAUSAL:
            keep = keep & (gl.expand_dims(rows, 1) + diag >= gl.expand_dims(cols, 0))
        s = gl.where(keep, s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: p = 0, alpha finite
        p = gl.exp2(s - gl.expand_dims(m_use, 1))
    else:
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        m_use = m_new
        p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, 1)
    return gl.convert_layout(p.to(dtype), p_layout), alpha, m_new, l_i


@gluon.jit
def _steps(o, p, m_i, l_i, lo, hi, q_s, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, s_zero, rows, LK,
           diag, qk_scale, o_layout: gl.constexpr, p_layout: gl.constexpr, BLOCK_N: gl.constexpr,
           STAGES: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr):
    """Tiles lo..hi-1: S_j and O += P_{j-1} V_{j-1} in flight together, softmax of S_j under the P·V."""
    for j in range(lo, hi):
        s_tok = _scores(q_s, k_bufs, k_ready, j, s_zero, STAGES)
        prev = (j - 1) % STAGES
        mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
        o_tok = warpgroup_mma(p, v_bufs.index(prev), o, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s_tok,))
        mbarrier.arrive(k_empty.index(j % STAGES), count=1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, rows, j * BLOCK_N, LK, diag, qk_scale, p_layout, BLOCK_N,
                                      MASKED, CAUSAL, p.dtype)
        o = warpgroup_mma_wait(0, deps=(o_tok,))
        mbarrier.arrive(v_empty.index(prev), count=1)
        o = o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    return o, p, m_i, l_i


@gluon.jit
def _consumer(which: gl.constexpr, o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty,
              v_empty, m0, bh, LQ, LK, n_full, n_tiles, qk_scale, BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    r0 = m0 + which * ROWS
    rows = r0 + gl.arange(0, ROWS, layout=row_layout)
    diag = LK - LQ
    q_s = q_smem.index(which)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    o = gl.zeros([ROWS, BLOCK_D], gl.float32, o_layout)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([ROWS], gl.float32, row_layout)

    mbarrier.wait(q_bar, 0)
    s = warpgroup_mma_wait(0, deps=(_scores(q_s, k_bufs, k_ready, 0, s_zero, STAGES),))
    mbarrier.arrive(k_empty.index(0), count=1)
    p, _, m_i, l_i = _softmax(s, m_i, l_i, rows, 0, LK, diag, qk_scale, p_layout, BLOCK_N, True, CAUSAL, dtype)
    o, p, m_i, l_i = _steps(o, p, m_i, l_i, 1, n_full, q_s, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                            s_zero, rows, LK, diag, qk_scale, o_layout, p_layout, BLOCK_N, STAGES, False, CAUSAL)
    o, p, m_i, l_i = _steps(o, p, m_i, l_i, gl.maximum(n_full, 1), n_tiles, q_s, k_bufs, v_bufs, k_ready, v_ready,
                            k_empty, v_empty, s_zero, rows, LK, diag, qk_scale, o_layout, p_layout, BLOCK_N, STAGES,
                            True, CAUSAL)
    last = (n_tiles - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((n_tiles - 1) // STAGES) & 1)
    o = warpgroup_mma_wait(0, deps=(warpgroup_mma(p, v_bufs.index(last), o, is_async=True),))
    mbarrier.arrive(v_empty.index(last), count=1)

    empty = l_i == 0.0
    l_safe = gl.where(empty, 1.0, l_i)
    lse = gl.where(empty, float("inf"), (m_i + gl.log2(l_safe)) * 0.6931471805599453)
    gl.store(LSE + bh.to(gl.int64) * LQ + rows, lse, mask=rows < LQ)
    o = o / gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout)), 1)
    q_s.store(o.to(dtype))  # Q is no longer read: its buffer stages the output for the TMA store
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [r0, 0], q_s)
    tma.store_wait(0)


@gluon.jit
def _consumer1(o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0, bh, LQ, LK,
               n_full, n_tiles, qk_scale, BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr,
               CAUSAL: gl.constexpr):
    _consumer(1, o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0, bh, LQ, LK,
              n_full, n_tiles, qk_scale, BLOCK_N, BLOCK_D, STAGES, CAUSAL)


@gluon.jit
def _consumer0(o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0, bh, LQ, LK,
               n_full, n_tiles, qk_scale, BLOCK_N: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr,
               CAUSAL: gl.constexpr):
    _consumer(0, o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0, bh, LQ, LK,
              n_full, n_tiles, qk_scale, BLOCK_N, BLOCK_D, STAGES, CAUSAL)


@gluon.jit
def attn_fwd_ws(Q, K, V, Out, LSE, sqb, sqh, sql, skb, skh, skl, svb, svh, svl, sob, soh, sol,
                HQ, GROUP, LQ, LK, qk_scale,
                HEAD_DIM: gl.constexpr, BLOCK_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_m = gl.program_id(0)
    if CAUSAL:  # heaviest row blocks first
        pid_m = gl.num_programs(0) - 1 - pid_m
    bh = gl.program_id(1)
    b = (bh // HQ).to(gl.int64)
    h = (bh % HQ).to(gl.int64)
    hk = h // GROUP
    m0 = pid_m * (2 * ROWS)

    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_D], dtype)
    q_desc = tma.make_tensor_descriptor(Q + b * sqb + h * sqh, [LQ, HEAD_DIM], [sql, 1], [ROWS, BLOCK_D], q_layout)
    o_desc = tma.make_tensor_descriptor(Out + b * sob + h * soh, [LQ, HEAD_DIM], [sol, 1], [ROWS, BLOCK_D],
                                        q_layout)
    k_desc = tma.make_tensor_descriptor(K + b * skb + hk * skh, [LK, HEAD_DIM], [skl, 1], [BLOCK_N, BLOCK_D],
                                        kv_layout)
    v_desc = tma.make_tensor_descriptor(V + b * svb + hk * svh, [LK, HEAD_DIM], [svl, 1], [BLOCK_N, BLOCK_D],
                                        kv_layout)

    # Key tiles: [0, n_full) need no mask, [n_full, n_tiles) do (causal diagonal, ragged tail); at least one.
    diag = LK - LQ
    full_n = LK // BLOCK_N * BLOCK_N
    if CAUSAL:
        hi = gl.maximum(gl.minimum(m0 + 2 * ROWS + diag, LK), 0)
        split = gl.minimum(gl.maximum(m0 + diag + 1, 0) // BLOCK_N * BLOCK_N, full_n)
    else:
        hi = LK
        split = full_n
    n_full = split // BLOCK_N
    n_tiles = gl.maximum(gl.cdiv(hi, BLOCK_N), 1)

    q_smem = gl.allocate_shared_memory(dtype, [2, ROWS, BLOCK_D], q_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], kv_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # released by both consumers
        mbarrier.init(v_empty.index(i), count=2)

    # The loader is the default partition (4 warps, one issues the copies): in Triton 3.6 a reduction in
    # the default partition fails to compile ("not in a context with ttg.num-warps"), in a worker it does not.
    gl.warp_specialize([
        (_loader, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0,
                   n_tiles, BLOCK_N, STAGES)),
        (_consumer0, (o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0, bh, LQ,
                      LK, n_full, n_tiles, qk_scale, BLOCK_N, BLOCK_D, STAGES, CAUSAL)),
        (_consumer1, (o_desc, LSE, q_smem, k_bufs, v_bufs, q_bar, k_ready, v_ready, k_empty, v_empty, m0, bh, LQ,
                      LK, n_full, n_tiles, qk_scale, BLOCK_N, BLOCK_D, STAGES, CAUSAL)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
