"""Warp-specialised FlashAttention backward for Hopper, written in Gluon (bf16/fp16, head dims 64 and 128).

One program per (key block of ``NC * 64`` keys, batch·kv head); it walks every query row block (64 rows) of
every query head of its GQA group, so dK and dV are summed in registers and written once (deterministic).
Partitions:

- a **loader** warpgroup (the default partition; one thread issues) makes the TMA copies: the program's K and
  V block once, then per row block the Q and dO tiles into a ``STAGES``-deep ring (ready mbarriers per tile,
  one empty mbarrier per stage released by every consumer);
- ``NC`` **consumer** warpgroups, each owning 64 of the block's keys.  Per row block a consumer issues
  ``S^T = K_w Q^T`` and ``dP^T = V_w dO^T`` as asynchronous wgmma, computes ``P^T = exp2(S^T c - lse)``
  under the dP^T product, then ``dS^T = P^T (dP^T - delta)``, issues ``dV_w += P^T dO`` with P^T from
  registers, writes dS^T to shared memory (its 64 key rows of a [NC*64, 64] tile, two buffers, for dQ) and
  issues ``dK_w += dS^T Q`` with dS^T from registers too (``DS_RS``; from the shared tile without it), so that
  product reads only Q from shared memory, whose bandwidth the step's products share (dV is issued once dS^T is
  formed: fewer registers live at once; the other consumer's products keep the tensor cores busy meanwhile).
  With ``KV_RS`` (head dim 64) a consumer loads its K_w and V_w rows into registers once, the A operands of
  S^T and dP^T every step (session 20, H100: 1.4-4.4 % faster; at head dim 128 they would spill).  lse and
  delta enter as the start values of the S^T and dP^T accumulators (-lse / sm_scale, -delta; the causal mask
  as -inf there), so neither stays in registers in the columns' layout (the next row block's, one value per
  thread, are carried).  Once every consumer's rows of dS^T are in (an mbarrier), dQ of the row block is ``dS K``: at
  head dim 128 each consumer computes 64 of its columns over all the block's keys; at head dim 64 one
  consumer computes it, taking turns by row block.  The dQ part (fp32) is staged in shared memory and
  added into an fp32 scratch ``(B*Hq, Lq, D)`` by a TMA bulk reduce-add (``cp.reduce.async.bulk.tensor``),
  which runs while the consumer goes on; ``kernels/attention_bwd_ws.py`` zeroes the scratch before and scales
  and casts it after (dq is therefore not bitwise deterministic: the order of the adds varies).

With ``PREP`` the kernel does the pre-pass's work (delta, the dQ scratch zeroed) for all but the first ``ahead`` kv
heads (the host's pre-pass does those): each program's loader, one chunk of rows after each Q/dO issue once its ring
is full, prepares its key block's share of the kv head ``ahead`` heads after its own and counts it done (a release
add a thread); each program takes its index from a start-order ticket and waits in its prologue for its own head's
count (acquire), its consumers then fence the async proxy before their reduce-adds.  A program waits only on
programs that started before it, so none can wait on one that never starts.

Rows beyond Lq and keys beyond Lk arrive as zeros from the copy engine.  A query row beyond Lq has lse = +inf
(so P = 0).  A key beyond Lk is masked through the accumulators' start values (S^T from -inf, dP^T from 0):
unmasked, its zero K row would give P = exp(-lse), which overflows fp16 for a row with lse below about -11;
its dK / dV rows are not stored.  The causal diagonal is masked the same way, in the row blocks that straddle
it.  The consumers load each row block's lse and delta one step ahead.  dK is scaled by sm_scale
here, dQ in the post-pass.
"""
# (no "from __future__ import annotations": the aggregates below need their field types at run time)

from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.core import _aggregate as aggregate

from kernels._attn_bwd_ws_prep import (  # VEC: a row block's lse / delta, compact
    VEC,
    Prep,
    _prep_chunk,
    _prep_chunks,
    _prep_release,
    _proxy_fence,
    _wait_prepared,
)

ROWS: gl.constexpr = gl.constexpr(64)  # query rows per step; also keys per consumer warpgroup


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA bulk reduce-add of shared ``src`` into the global tile at ``coord`` (not exported by Triton 3.6's
    Gluon; the op exists in its builder)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@aggregate
class Smem:
    """Shared buffers and mbarriers of one program."""
    k: gl.shared_memory_descriptor  # [BLOCK_N, BLOCK_D]
    v: gl.shared_memory_descriptor
    q: gl.shared_memory_descriptor  # [STAGES, 64, BLOCK_D]
    do: gl.shared_memory_descriptor
    ds: gl.shared_memory_descriptor  # [2, BLOCK_N, 64]: dS^T of a row block (keys x queries)
    # [NC, 64, DQ_W] fp32, or [NC, 64, DQ_W / 32, 32] (dq_box): each consumer's dQ part,
    # staged for the reduce-add
    dq: gl.shared_memory_descriptor
    kv_ready: gl.shared_memory_descriptor  # [1, 1]
    q_ready: gl.shared_memory_descriptor  # [STAGES, 1]
    do_ready: gl.shared_memory_descriptor
    qd_empty: gl.shared_memory_descriptor  # [STAGES, 1], count NC
    ds_ready: gl.shared_memory_descriptor  # [2, 1], count NC
    ds_free: gl.shared_memory_descriptor  # [2, 1], count NC

    @gluon.constexpr_function
    def __init__(self, k, v, q, do, ds, dq, kv_ready, q_ready, do_ready, qd_empty, ds_ready, ds_free):
        self.k, self.v, self.q, self.do, self.ds, self.dq = k, v, q, do, ds, dq
        self.kv_ready, self.q_ready, self.do_ready, self.qd_empty = kv_ready, q_ready, do_ready, qd_empty
        self.ds_ready, self.ds_free = ds_ready, ds_free


@aggregate
class Problem:
    """Sizes and this program's work, the same in every partition."""
    HQ: gl.tensor
    HKV: gl.tensor
    GROUP: gl.tensor
    LQ: gl.tensor
    LK: gl.tensor
    b: gl.tensor
    hk: gl.tensor
    n0: gl.tensor  # first key of the block
    lo: gl.tensor  # first query row block (a multiple of 64) that sees any key of the block
    split: gl.tensor  # row blocks [lo, split) straddle the causal diagonal, [split, LQ) see the whole block
    NC: gl.constexpr
    CAUSAL: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, HQ, HKV, GROUP, LQ, LK, b, hk, n0, lo, split, NC, CAUSAL):
        self.HQ, self.HKV, self.GROUP, self.LQ, self.LK = HQ, HKV, GROUP, LQ, LK
        self.b, self.hk, self.n0, self.lo, self.split = b, hk, n0, lo, split
        self.NC, self.CAUSAL = gl.constexpr(NC), gl.constexpr(CAUSAL)


@gluon.jit
def _loader(q_desc, k_desc, v_desc, do_desc, sm: Smem, pb: Problem, pr: Prep, STAGES: gl.constexpr):
    BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    mbarrier.expect(sm.kv_ready.index(0), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [pb.b, pb.hk, pb.n0, 0], sm.kv_ready.index(0),
                                    sm.k.reshape([1, 1, BLOCK_N, BLOCK_D]))
    tma.async_copy_global_to_shared(v_desc, [pb.b, pb.hk, pb.n0, 0], sm.kv_ready.index(0),
                                    sm.v.reshape([1, 1, BLOCK_N, BLOCK_D]))
    n_prep = 0
    if pr.PREP:  # the later head's preparation, a chunk after each Q/dO issue once the ring is full
        n_prep = _prep_chunks(pr, pb, BLOCK_D)
    done = 0
    t = 0
    for g in range(pb.GROUP):
        h = pb.hk * pb.GROUP + g
        for m0 in range(pb.lo, pb.LQ, ROWS):
            s = t % STAGES
            mbarrier.wait(sm.qd_empty.index(s), ((t // STAGES) & 1) ^ 1)  # a fresh barrier counts as phase 1 done
            mbarrier.expect(sm.q_ready.index(s), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [pb.b, h, m0, 0], sm.q_ready.index(s),
                                            sm.q.index(s).reshape([1, 1, ROWS, BLOCK_D]))
            mbarrier.expect(sm.do_ready.index(s), do_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(do_desc, [pb.b, h, m0, 0], sm.do_ready.index(s),
                                            sm.do.index(s).reshape([1, 1, ROWS, BLOCK_D]))
            t += 1
            if pr.PREP:  # noqa: SIM102 (a compile-time test, then run-time ones)
                if t >= STAGES:  # noqa: SIM102
                    if done < n_prep:
                        _prep_chunk(pr, pb, done, BLOCK_D)
                        done += 1
                        if done == n_prep:
                            _prep_release(pr, pb)
    if pr.PREP:  # what the loop left (few row blocks), and the count if the loop did not give it
        for c in range(done, n_prep):
            _prep_chunk(pr, pb, c, BLOCK_D)
        if done < n_prep or n_prep == 0:
            _prep_release(pr, pb)


@gluon.jit
def _rows(LSE, DELTA, bh, m0, LQ, valid):
    """lse and delta of query rows m0.. of (batch, head) bh, one per thread (rows beyond LQ, or not ``valid``:
    +inf and 0)."""
    r = m0 + gl.arange(0, ROWS, layout=VEC)
    ok = (r < LQ) & valid
    off = bh.to(gl.int64) * LQ + r
    return gl.load(LSE + off, mask=ok, other=float("inf")), gl.load(DELTA + off, mask=ok, other=0.0)


def dq_box(width: int, rows: bool) -> tuple[int, ...]:
    """The dQ scratch's reduce-add box for a consumer's part of ``width`` columns: [1, 64, width], or with ``rows``
    [1, 64, width / 32, 32], the part as 128-byte rows of 32 columns side by side (the scratch viewed as
    (B*Hq, Lq, D / 32, 32): ``attention_bwd_ws.dq_descriptor``)."""
    return (1, ROWS.value, width // 32, 32) if rows else (1, ROWS.value, width)


@gluon.constexpr_function
def _dq_width(staging):
    """dQ's columns in the staging buffers [NC, 64, DQ_W] or [NC, 64, DQ_W / 32, 32] (the dims past the rows
    multiplied)."""
    width = 1
    for n in list(staging)[2:]:
        width *= int(n.value if hasattr(n, "value") else n)
    return width


@gluon.constexpr_function
def _prepend(n, shape):
    """``shape`` with a leading dim ``n``: the staging buffers' shape from a box's, a buffer's box from its shape."""
    return [int(n)] + [int(d.value if hasattr(d, "value") else d) for d in shape]


@gluon.jit
def _step(k_a, v_a, dk, dv, lse_v, delta_v, t, m0, bh, bh_end, LSE, DELTA, dq_desc, sm: Smem, pb: Problem,
          which: gl.constexpr, qk_scale, inv_scale, s_layout: gl.constexpr, a_layout: gl.constexpr,
          dq_layout: gl.constexpr, STAGES: gl.constexpr, DQ_SPLIT: gl.constexpr, DQ_SKIP: gl.constexpr,
          DS_RS: gl.constexpr):
    """One query row block (ring position t): dK/dV of this consumer's keys, and its share of dQ.  lse_v /
    delta_v are this block's lse and delta, loaded a step ahead; the next block's (the first of the next head,
    up to ``bh_end``, after the last row block) are loaded here and returned (loaded where they are used, their
    latency stalled every step: session 9, call 1)."""
    NC: gl.constexpr = pb.NC
    DQ_W: gl.constexpr = _dq_width(sm.dq.shape)
    dtype: gl.constexpr = sm.q.dtype
    s = t % STAGES
    ph = (t // STAGES) & 1
    buf = t % 2
    ph2 = (t // 2) & 1
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    cols = m0 + gl.arange(0, ROWS, layout=col_layout)
    # the accumulators start at -lse / sm_scale and -delta: P^T = exp2(qk_scale * acc), dP^T - delta = acc, so
    # neither vector stays live in the columns' layout (rows beyond LQ: lse = +inf, P = 0)
    s_zero = gl.zeros([ROWS, ROWS], gl.float32, s_layout)
    neg_lse = gl.convert_layout(lse_v, col_layout) * -inv_scale
    neg_delta = -gl.convert_layout(delta_v, col_layout)
    # the next row block's (the next head of the group's after the last one), loaded while this one runs
    nm0 = m0 + ROWS
    nbh = bh
    if nm0 >= pb.LQ:
        nm0 = pb.lo
        nbh = bh + 1
    lse_v, delta_v = _rows(LSE, DELTA, nbh, nm0, pb.LQ, nbh < bh_end)
    # keys beyond LK: S^T starts at -inf there (P^T = 0, so dS^T = 0 too).  The per-key select (dP^T's too, not
    # needed for the mask) gives each accumulator register its own value, so no copy of a shared value lands
    # between wgmma's fence and the dP^T product, which made ptxas wait for the S^T product there (C7517)
    keys = pb.n0 + which * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    key_ok = gl.expand_dims(keys < pb.LK, 1)
    st_init = gl.where(key_ok, s_zero + gl.expand_dims(neg_lse, 0), float("-inf"))
    # causal: row blocks before split straddle the diagonal (query row m sees key n if m + LK - LQ >= n), masked
    # through the accumulator's start (S^T + -inf gives P^T = 0)
    if pb.CAUSAL:  # noqa: SIM102 (a compile-time test, then a run-time one)
        if m0 < pb.split:
            keep = gl.expand_dims(cols, 0) + (pb.LK - pb.LQ) >= gl.expand_dims(keys, 1)
            st_init = gl.where(keep, st_init, float("-inf"))
    dpt_init = gl.where(key_ok, s_zero + gl.expand_dims(neg_delta, 0), 0.0)
    mbarrier.wait(sm.q_ready.index(s), ph)
    st_tok = warpgroup_mma(k_a, sm.q.index(s).permute((1, 0)), st_init, is_async=True)
    mbarrier.wait(sm.do_ready.index(s), ph)
    dpt_tok = warpgroup_mma(v_a, sm.do.index(s).permute((1, 0)), dpt_init, is_async=True)
    st = warpgroup_mma_wait(1, deps=(st_tok,))
    pt = gl.exp2(st * qk_scale)
    dpt = warpgroup_mma_wait(0, deps=(dpt_tok,))
    dst = (pt * dpt).to(dtype)
    p_op = gl.convert_layout(pt.to(dtype), a_layout)
    dv_tok = warpgroup_mma(p_op, sm.do.index(s), dv, is_async=True)

    # this consumer's rows of dS^T into the shared tile, for the dQ product of every consumer
    mbarrier.wait(sm.ds_free.index(buf), ph2 ^ 1)
    ds_w = sm.ds.index(buf).slice(which * ROWS, ROWS, dim=0)
    ds_w.store(dst)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(sm.ds_ready.index(buf), count=1)
    if DS_RS:  # dS^T from registers (as P^T for dV): the product reads only Q from shared memory
        dk_tok = warpgroup_mma(gl.convert_layout(dst, a_layout), sm.q.index(s), dk, is_async=True)
    else:
        dk_tok = warpgroup_mma(ds_w, sm.q.index(s), dk, is_async=True)

    if DQ_SKIP:  # timing diagnostic: no dQ product, no reduce-add (dq comes out zero)
        mine = False
        k_cols = sm.k.slice(0, DQ_W, dim=1)
    elif DQ_SPLIT:  # every consumer: DQ_W of dQ's columns, over all the block's keys
        mine = True
        k_cols = sm.k.slice(which * DQ_W, DQ_W, dim=1)
    else:  # one consumer per row block, in turn
        mine = t % NC == which
        k_cols = sm.k
    if mine:
        mbarrier.wait(sm.ds_ready.index(buf), ph2)
        dq_zero = gl.zeros([ROWS, DQ_W], gl.float32, dq_layout)
        dq_tok = warpgroup_mma(sm.ds.index(buf).permute((1, 0)), k_cols, dq_zero, use_acc=False, is_async=True)
        dq, dv, dk = warpgroup_mma_wait(0, deps=(dq_tok, dv_tok, dk_tok))
        mbarrier.arrive(sm.qd_empty.index(s), count=1)
        mbarrier.arrive(sm.ds_free.index(buf), count=1)
        dq_s = sm.dq.index(which)
        tma.store_wait(0)  # the previous reduce-add has read dq_s
        gl.thread_barrier()
        col0 = 0
        if DQ_SPLIT:
            col0 = which * DQ_W
        if len(sm.dq.shape) == 4:  # 128-byte rows of 32 columns, a row's parts side by side (dq_box)
            dq = dq.reshape([ROWS, DQ_W // 32, 32])
            coord = [bh, m0, col0 // 32, 0]
        else:
            coord = [bh, m0, col0]
        dq_s.store(dq)
        fence_async_shared()
        gl.thread_barrier()
        _tma_reduce_add(dq_desc, coord, dq_s.reshape(_prepend(1, dq_s.shape)))
    else:
        dv, dk = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok))
        mbarrier.arrive(sm.qd_empty.index(s), count=1)
        mbarrier.arrive(sm.ds_free.index(buf), count=1)
    return dk, dv, lse_v, delta_v


@gluon.jit
def _consumer(which: gl.constexpr, dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm: Smem,
              pb: Problem, PREP: gl.constexpr, qk_scale, sm_scale, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
              DQ_SPLIT: gl.constexpr, DQ_SKIP: gl.constexpr, DS_RS: gl.constexpr, KV_RS: gl.constexpr):
    BLOCK_D: gl.constexpr = sm.q.shape[2]
    DQ_W: gl.constexpr = _dq_width(sm.dq.shape)
    dtype: gl.constexpr = sm.q.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, ROWS, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_D, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, DQ_W, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dk = gl.zeros([ROWS, BLOCK_D], gl.float32, acc_layout)
    dv = gl.zeros([ROWS, BLOCK_D], gl.float32, acc_layout)
    mbarrier.wait(sm.kv_ready.index(0), 0)
    # this consumer's keys of K and V, the A operands of S^T and dP^T every step: with KV_RS held in registers for
    # the whole program (no spill at head dim 64; at 128 they spill), else read from shared memory by each product
    k_a = sm.k.slice(which * ROWS, ROWS, dim=0)
    v_a = sm.v.slice(which * ROWS, ROWS, dim=0)
    if KV_RS:
        s_a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
        k_a = k_a.load(s_a_layout)
        v_a = v_a.load(s_a_layout)
    inv_scale = 1.0 / sm_scale
    bh0 = pb.b * pb.HQ + pb.hk * pb.GROUP
    bh_end = bh0 + pb.GROUP  # this program's query heads: bh0 .. bh_end - 1
    if PREP:  # the kernel's prologue waited for this head's preparation: the TMA reduce-adds come after it
        _proxy_fence()
    lse_v, delta_v = _rows(LSE, DELTA, bh0, pb.lo, pb.LQ, True)  # GROUP >= 1: bh0 is one of its heads
    t = 0
    for g in range(pb.GROUP):
        bh = bh0 + g
        for m0 in range(pb.lo, pb.LQ, ROWS):
            dk, dv, lse_v, delta_v = _step(k_a, v_a, dk, dv, lse_v, delta_v, t, m0, bh, bh_end, LSE, DELTA, dq_desc,
                                           sm, pb, which, qk_scale, inv_scale, s_layout, a_layout, dq_layout, STAGES,
                                           DQ_SPLIT, DQ_SKIP, DS_RS)
            t += 1
    tma.store_wait(0)
    # dK (scaled), dV of this consumer's 64 keys, stored from registers (rows beyond LK left out)
    keys = pb.n0 + which * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
    dims = gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, acc_layout))
    keep = gl.expand_dims(keys < pb.LK, 1) & gl.expand_dims(dims < HEAD_DIM, 0)
    b = pb.b.to(gl.int64)
    hk = pb.hk.to(gl.int64)
    rows64 = gl.expand_dims(keys.to(gl.int64), 1)
    dims2 = gl.expand_dims(dims, 0)
    gl.store(DK + b * sdkb + hk * sdkh + rows64 * sdkl + dims2, (dk * sm_scale).to(dtype), mask=keep)
    gl.store(DV + b * sdvb + hk * sdvh + rows64 * sdvl + dims2, dv.to(dtype), mask=keep)


@gluon.jit
def _consumer0(dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm: Smem, pb: Problem,
               PREP: gl.constexpr, qk_scale,
               sm_scale, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, DQ_SPLIT: gl.constexpr,
               DQ_SKIP: gl.constexpr, DS_RS: gl.constexpr, KV_RS: gl.constexpr):
    _consumer(0, dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm, pb, PREP, qk_scale, sm_scale,
              HEAD_DIM, STAGES, DQ_SPLIT, DQ_SKIP, DS_RS, KV_RS)


@gluon.jit
def _consumer1(dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm: Smem, pb: Problem,
               PREP: gl.constexpr, qk_scale,
               sm_scale, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, DQ_SPLIT: gl.constexpr,
               DQ_SKIP: gl.constexpr, DS_RS: gl.constexpr, KV_RS: gl.constexpr):
    _consumer(1, dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm, pb, PREP, qk_scale, sm_scale,
              HEAD_DIM, STAGES, DQ_SPLIT, DQ_SKIP, DS_RS, KV_RS)


@gluon.jit
def attn_bwd_ws(q_desc, k_desc, v_desc, do_desc, dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl,
                HQ, HKV, GROUP, LQ, LK, n_kb, n_tail, qk_scale, sm_scale, OUT, DO, DQACC, SYNC, sob, soh, sol, sdob,
                sdoh, sdol, ahead, PREP: gl.constexpr, HEAD_DIM: gl.constexpr,
                STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_SPLIT: gl.constexpr, DQ_SKIP: gl.constexpr,
                CONSUMER_REGS: gl.constexpr, DS_RS: gl.constexpr, KV_RS: gl.constexpr, LIGHT_PTX: gl.constexpr = 0):
    """q/do_desc: (B, Hq, Lq, D) descriptors with [1, 1, 64, BLOCK_D] boxes; k/v_desc: (B, Hkv, Lk, D) with
    [1, 1, 2*64, BLOCK_D] boxes; dq_desc: the fp32 scratch (B*Hq, Lq, D), zeroed, with [1, 64, DQ_W] boxes, or
    viewed as (B*Hq, Lq, D / 32, 32) with [1, 64, DQ_W / 32, 32] boxes (``attention_bwd_ws.DQ_ROWS_HEAD_DIMS``)
    (DQ_W = BLOCK_D / 2 with DQ_SPLIT, else BLOCK_D).  LSE (natural log) and DELTA = rowsum(o dO): (B, Hq, Lq)
    fp32.  DK/DV: pointers with element strides (dim stride 1).  Grid: n_kb key blocks x B x Hkv programs, in
    (batch·kv head, key block) order, except the last ``n_tail`` kv heads' programs, which come in (key block,
    head) order: under a causal mask a key block's work falls with its index, and the hardware starts programs
    in grid order as SMs free up, so the last programs to start are then the lightest of those heads, not the
    heaviest of the last head (the dQ scratch rows that programs running together add into stay few).
    ``DQ_SKIP`` (a timing diagnostic only: dq comes out zero) leaves out the dQ product and its reduce-add.  With
    ``PREP``: OUT / DO (o and dO, unit dim stride, batch / head / position strides sob.. / sdob..), DQACC (the fp32
    scratch as a pointer), SYNC (int32, zeroed: the start ticket, then a count per kv head) and ``ahead`` (the kv
    heads the host's pre-pass prepared; each program prepares the head that many after its own).  ``LIGHT_PTX``
    (non-zero: the version of ``kernels/_ptx_barriers.py``, whose rewrite then builds this kernel through
    ``attention_bwd_ws``): the consumers' warpgroup barriers before their slot releases and mbarrier waits removed from
    the PTX."""
    NC: gl.constexpr = 2
    dtype: gl.constexpr = q_desc.dtype
    BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    DQ_BOX: gl.constexpr = dq_desc.block_type.shape[1:]  # [64, DQ_W] or [64, DQ_W / 32, 32]
    if PREP:  # noqa: SIM108 (the programs' order of start: every program waited on has started, no deadlock)
        pid = gl.atomic_add(SYNC, 1)
    else:
        pid = gl.program_id(0)
    n_bhk = gl.num_programs(0) // n_kb
    bulk = (n_bhk - n_tail) * n_kb
    r = gl.maximum(pid - bulk, 0)  # the tail's programs: heaviest key blocks first across its heads
    tail = gl.maximum(gl.to_tensor(n_tail), 1)
    kb = gl.where(pid < bulk, pid % n_kb, r // tail)
    bhk = gl.where(pid < bulk, pid // n_kb, n_bhk - tail + r % tail)
    n0 = kb * BLOCK_N
    # to_tensor: Triton passes integer arguments equal to 1 as constants
    LQ_t = gl.to_tensor(LQ)
    LK_t = gl.to_tensor(LK)
    diag = LK_t - LQ_t
    if CAUSAL:
        lo = gl.maximum(n0 - diag, 0) // ROWS * ROWS
        split = gl.maximum(gl.cdiv(gl.maximum(n0 + BLOCK_N - 1 - diag, 0), ROWS) * ROWS, lo)
    else:
        lo = gl.to_tensor(0)
        split = gl.to_tensor(0)
    HKV_t = gl.to_tensor(HKV)
    pb = Problem(gl.to_tensor(HQ), HKV_t, gl.to_tensor(GROUP), LQ_t, LK_t, bhk // HKV_t, bhk % HKV_t, n0, lo, split,
                 NC, CAUSAL)
    pr = Prep(OUT, DO, DELTA, DQACC, SYNC, gl.to_tensor(sob), gl.to_tensor(soh), gl.to_tensor(sol),
              gl.to_tensor(sdob), gl.to_tensor(sdoh), gl.to_tensor(sdol), gl.to_tensor(ahead), gl.to_tensor(n_kb), kb,
              PREP)
    if PREP:  # this head's delta and zeroed dQ rows (past the pre-pass's heads), by programs started earlier
        _wait_prepared(pr, pb)
    tile_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_D], dtype)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, ROWS], dtype)
    dq_s_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(DQ_BOX, gl.float32)
    bar: gl.constexpr = mbarrier.MBarrierLayout()
    sm = Smem(gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_D], kv_layout),
              gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_D], kv_layout),
              gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_D], tile_layout),
              gl.allocate_shared_memory(dtype, [STAGES, ROWS, BLOCK_D], tile_layout),
              gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROWS], ds_layout),
              gl.allocate_shared_memory(gl.float32, _prepend(NC, DQ_BOX), dq_s_layout),
              gl.allocate_shared_memory(gl.int64, [1, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [2, 1], bar),
              gl.allocate_shared_memory(gl.int64, [2, 1], bar))
    mbarrier.init(sm.kv_ready.index(0), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(sm.q_ready.index(i), count=1)
        mbarrier.init(sm.do_ready.index(i), count=1)
        mbarrier.init(sm.qd_empty.index(i), count=NC)
    for i in gl.static_range(2):
        mbarrier.init(sm.ds_ready.index(i), count=NC)
        mbarrier.init(sm.ds_free.index(i), count=NC)
    gl.warp_specialize([
        (_loader, (q_desc, k_desc, v_desc, do_desc, sm, pb, pr, STAGES)),
        (_consumer0, (dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm, pb, PREP, qk_scale, sm_scale,
                      HEAD_DIM, STAGES, DQ_SPLIT, DQ_SKIP, DS_RS, KV_RS)),
        (_consumer1, (dq_desc, LSE, DELTA, DK, DV, sdkb, sdkh, sdkl, sdvb, sdvh, sdvl, sm, pb, PREP, qk_scale, sm_scale,
                      HEAD_DIM, STAGES, DQ_SPLIT, DQ_SKIP, DS_RS, KV_RS)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
