"""Warp-specialised FlashAttention forward for Hopper, written in Gluon (bf16/fp16, and fp8 e4m3).

Work items of (NC·64 query rows, batch·head), one head's row blocks after another; when causal an item is a
pair of row blocks, k and n_m - 1 - k (the heavier first), so every item has the same number of key tiles; with
``LPT`` (a grid of one program an item) the last batch·heads' row blocks are items of their own, heaviest first, so
that the grid's last wave is made of light ones.  With ``SHIFT`` (causal, row blocks that are not whole key tiles) the
row blocks start before row 0, so the consumers with no row of their own sit in the first, lightest row block.
A program loops over items ``pid, pid + grid, ...`` (persistent with one program per SM, or one item per
program), or with ``DYNAMIC`` (persistent) takes them in order from a grid-wide atomic ticket, whichever program is
free taking the next, with partitions sharing one K/V ring in shared memory:

- a **loader** warpgroup (the default partition; one thread issues) makes the TMA copies: each consumer's
  64-row Q tile (into its own buffer, refilled as soon as the consumer's last score MMA of a row block is
  done), K and V tiles into ``STAGES`` buffers, each with its own ready / empty mbarrier (K and V separately,
  so the scores of a tile can start before its V has landed); the ring runs on across row blocks, so the
  next one's keys load while the consumers finish the previous one;
- ``NC`` (2 or 3) **consumer** warpgroups, each owning 64 of the row block's query rows.  Per key tile j a
  consumer issues the scores ``S_j = Q K_j^T`` and the previous tile's ``O += P_{j-1} V_{j-1}`` as
  asynchronous wgmma, waits for S_j only, and runs the softmax of tile j while the P·V wgmma is still on
  the tensor cores; P goes to the P·V wgmma straight from registers.  The consumers interleave on the
  SM, so one's softmax overlaps another's matmuls; with ``PINGPONG`` they take turns (mbarriers) to issue
  their wgmma groups, in FlashAttention-3's manner.

exp2 with ``sm_scale * log2(e)`` folded into one multiply; keys beyond LK (zero-filled by TMA, or with ``PERM_K``
the next head's rows) and the
causal diagonal are masked only in the tiles that need it (a first tile with no full key tile before it
is run masked, which also covers row blocks that see no key: zero output, ``lse = +inf``); on key tiles narrower than
the row block (causal, no ping-pong) each consumer counts its tiles from its own rows (:func:`_own_tiles`): it skips
the last tiles wholly past its diagonal and runs fewer through the masked softmax.  Head dims that
are not a power of two run padded: descriptors of width HEAD_DIM with [rows, BLOCK_D] boxes (the copy
engine zero-fills the rest) and a clipped TMA store of the output, staged in its own buffer per consumer.
fp8: Q, K, V and P in e4m3 (wgmma k = 32; P carried between steps four values to a register, ``PACK_P``), V read
position-contiguous (``V_T``: the K-major B operand fp8 wgmma needs), the output in o_desc's type, scaled by
``o_scale``.  With ``ROWSUM_MMA`` the softmax's row sums come from the tensor cores (P times a tile of ones,
beside the P·V product) instead of FADDs.
"""
# (no "from __future__ import annotations": the aggregates below need their field types at run time)


from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.language.core import _aggregate as aggregate

ROWS: gl.constexpr = gl.constexpr(64)  # query rows per consumer warpgroup
# The softmax's kinds of key tile (its MASKED): every key kept; masked with the scale applied before the row maximum
# (two compares a score, causal); masked by one compare a score against its row's key bound, the scale fused as in
# the unmasked branch.  _mask_kind picks the masked one.
UNMASKED: gl.constexpr = gl.constexpr(0)
MASK_SCALED: gl.constexpr = gl.constexpr(1)
MASK_BOUND: gl.constexpr = gl.constexpr(2)
# fp8 (with PERM_K): P is carried from its softmax to the next step's P·V wgmma packed, four e4m3 values per 32-bit
# register (an int32 tensor of BLOCK_N / 4 columns: 16 registers a thread instead of 64 in fp32), packed once the
# previous P·V has completed (packing earlier rewrites registers that wgmma may still read, and ptxas then serialises
# every wgmma: C7513).  H100, session 13: d128 1-4 % faster without a mask, d64 8 %; outputs bitwise the same.
PACK_P: gl.constexpr = gl.constexpr(True)


@aggregate
class Smem:
    """Shared-memory buffers and mbarriers of one program (ready = filled by TMA, empty = released)."""
    # [NC * Q_BUFS, 64, BLOCK_D]: each consumer's Q tiles (Q_BUFS a consumer, the kernel's argument: :func:`_q_bufs`)
    q: gl.shared_memory_descriptor
    o: gl.shared_memory_descriptor  # [NC, 64, BLOCK_D]: each consumer's output tile, staged for the TMA store
    k: gl.shared_memory_descriptor  # [STAGES, BLOCK_N, BLOCK_D]
    v: gl.shared_memory_descriptor
    q_ready: gl.shared_memory_descriptor  # [NC * Q_BUFS, 1]
    q_empty: gl.shared_memory_descriptor
    k_ready: gl.shared_memory_descriptor  # [STAGES, 1]
    v_ready: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    turn: gl.shared_memory_descriptor  # [NC, 1]: consumer i may issue its next wgmma group (ping-pong)
    ones: gl.shared_memory_descriptor  # [NC, 8, BLOCK_N] of ones with ROWSUM_MMA (else a [1, 8, 32] stand-in)
    item: gl.shared_memory_descriptor  # [NC * Q_BUFS, 1] int32: with DYNAMIC, the item whose Q the buffer holds

    @gluon.constexpr_function
    def __init__(self, q, o, k, v, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, turn, ones, item):
        self.q, self.o, self.k, self.v = q, o, k, v
        self.q_ready, self.q_empty = q_ready, q_empty
        self.k_ready, self.v_ready, self.k_empty, self.v_empty = k_ready, v_ready, k_empty, v_empty
        self.turn = turn
        self.ones = ones
        self.item = item


@aggregate
class Problem:
    """Sizes and the work-tile order, the same in every partition."""
    HQ: gl.tensor
    GROUP: gl.tensor
    LQ: gl.tensor
    LK: gl.tensor
    n_m: gl.tensor  # row blocks per head
    n_items: gl.tensor  # work items: row blocks (pairs of them when causal) x batch·heads
    # with LPT (causal, one program an item): the first n_pair_items items are pairs of the first batch·heads; the
    # rest are the last lpt_heads batch·heads' row blocks one at a time, heaviest first across those heads
    n_pair_items: gl.tensor
    lpt_heads: gl.tensor
    BLOCK_N: gl.constexpr
    NC: gl.constexpr
    CAUSAL: gl.constexpr
    PERM_K: gl.constexpr  # K read through a rank-5 descriptor, keys in the order of _perm_key
    # the softmax's row sums by the tensor cores: each step's P times an all-ones [BLOCK_N, 8] tile in shared
    # memory, an asynchronous wgmma beside the P·V one into a [64, 8] fp32 accumulator rescaled with O, instead of
    # 62 FADDs a thread (the sums then of P as rounded for the P·V product: for 16-bit inputs only, as e4m3's
    # rounding puts fp8's lse off; attention_ws.rowsum_mma)
    ROWSUM_MMA: gl.constexpr
    # every key tile of a row block through one loop of the masked softmax (one copy of its code a consumer instead
    # of the unmasked and masked first steps and loops): only where _skips (the short causal configs)
    ONE_LOOP: gl.constexpr
    LPT: gl.constexpr  # the causal items end in single row blocks, heaviest first (n_pair_items, lpt_heads)
    # causal row blocks start at row0 (<= 0, a multiple of 64; attention_ws.first_row), so that the consumers with no
    # row before LQ sit in the first, lightest row block, not in the last, heaviest one: a consumer whose rows all lie
    # before row 0 loads no Q, stores nothing and keeps no key
    SHIFT: gl.constexpr
    row0: gl.tensor

    @gluon.constexpr_function
    def __init__(self, HQ, GROUP, LQ, LK, n_m, n_items, n_pair_items, lpt_heads, BLOCK_N, NC, CAUSAL, PERM_K,
                 ROWSUM_MMA, ONE_LOOP, LPT, SHIFT, row0):
        self.HQ, self.GROUP, self.LQ, self.LK, self.n_m, self.n_items = HQ, GROUP, LQ, LK, n_m, n_items
        self.n_pair_items, self.lpt_heads = n_pair_items, lpt_heads
        self.BLOCK_N, self.NC, self.CAUSAL = gl.constexpr(BLOCK_N), gl.constexpr(NC), gl.constexpr(CAUSAL)
        self.PERM_K, self.ROWSUM_MMA = gl.constexpr(PERM_K), gl.constexpr(ROWSUM_MMA)
        self.ONE_LOOP, self.LPT = gl.constexpr(ONE_LOOP), gl.constexpr(LPT)
        self.SHIFT, self.row0 = gl.constexpr(SHIFT), row0

    @gluon.jit
    def sides(self, u):
        """Row blocks in work item u: causal items pair row block k with n_m - 1 - k (equal work: k + 1 and
        n_m - k key tiles), so items weigh the same; the middle block of an odd count is alone, and so is each of
        LPT's single row blocks."""
        if self.CAUSAL:
            alone = 2 * (u % gl.cdiv(self.n_m, 2)) + 1 == self.n_m
            if self.LPT:
                alone = alone | (u >= self.n_pair_items)
            return gl.where(alone, 1, 2)
        else:
            return gl.to_tensor(1)

    @gluon.jit
    def tile(self, u, side):
        """Row block ``side`` of work item u -> (b, h, kv head, first row, batch·head, unmasked key tiles,
        key tiles)."""
        # neighbouring programs share one head's K/V in L2; the heavier row block of a causal pair first
        if self.CAUSAL:
            n_pairs = gl.cdiv(self.n_m, 2)
            bh = u // n_pairs
            k = u % n_pairs
            pid_m = gl.where(side == 0, self.n_m - 1 - k, k)
            if self.LPT:  # single row blocks: lpt_heads of one height, then those one lower, ...
                r = gl.maximum(u - self.n_pair_items, 0)
                lpt = gl.maximum(self.lpt_heads, 1)
                single = u >= self.n_pair_items
                bh = gl.where(single, self.n_pair_items // n_pairs + r % lpt, bh)
                pid_m = gl.where(single, self.n_m - 1 - r // lpt, pid_m)
        else:
            bh = u // self.n_m
            pid_m = u % self.n_m
        m0 = pid_m * (self.NC * ROWS)
        if self.SHIFT:
            m0 += self.row0
        split, hi = self.key_bounds(m0, self.NC * ROWS)
        h = bh % self.HQ
        return (bh // self.HQ, h, h // self.GROUP, m0, bh, split // self.BLOCK_N,
                gl.maximum(gl.cdiv(hi, self.BLOCK_N), 1))

    @gluon.jit
    def key_bounds(self, r0, n_rows: gl.constexpr):
        """(split, hi) of query rows r0 .. r0 + n_rows - 1: key tiles [0, split / BLOCK_N) need no mask, the rest up
        to cdiv(hi, BLOCK_N) (at least one) do (causal diagonal, ragged tail).  The rule of _attn_tiles.kv_bounds (a
        Triton function, which Gluon code cannot call); :func:`tile` asks it for a row block, :func:`_own_tiles` for
        a consumer's rows."""
        diag = self.LK - self.LQ
        full_n = self.LK // self.BLOCK_N * self.BLOCK_N
        if self.CAUSAL:
            hi = gl.maximum(gl.minimum(r0 + n_rows + diag, self.LK), 0)
            split = gl.minimum(gl.maximum(r0 + diag + 1, 0) // self.BLOCK_N * self.BLOCK_N, full_n)
        else:
            hi = self.LK
            split = full_n
        return split, hi


@gluon.constexpr_function
def _q_bufs(sm, pb):
    """Q buffers a consumer (the kernel's ``Q_BUFS``)."""
    return sm.q.shape[0] // pb.NC


ITEM_LAYOUT: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])  # a posted item, read by a whole warpgroup


@gluon.constexpr_function
def _acc_layout(n, dtype):
    """A consumer warpgroup's wgmma accumulator layout, N = ``n`` columns, K steps of 32 bytes of ``dtype`` (16
    elements for 16-bit operands, 32 for fp8)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                     instr_shape=[16, n, 256 // dtype.primitive_bitwidth])


@gluon.jit
def _posted_item(sm: Smem, which: gl.constexpr, it, Q_BUFS: gl.constexpr):
    """Consumer ``which``'s work item of Q phase ``it`` under DYNAMIC: the loader posts it beside the Q buffer (the
    buffer's q_ready phase completes after the write: the loader's arrive releases it); n_items when none is left."""
    qi = which * Q_BUFS + it % Q_BUFS
    mbarrier.wait(sm.q_ready.index(qi), (it // Q_BUFS) & 1)
    return gl.max(sm.item.index(qi).load(ITEM_LAYOUT), 0)


@gluon.jit
def _load_item(q_desc, k_desc, v_desc, sm: Smem, pb: Problem, u, j, it, STAGES: gl.constexpr, V_T: gl.constexpr,
               DYNAMIC: gl.constexpr):
    """Load work item u's Q tiles and K/V tiles (ring position j, Q buffer phase it): -> (j, it) after it."""
    BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = pb.BLOCK_N
    Q_BUFS: gl.constexpr = _q_bufs(sm, pb)
    for side in range(pb.sides(u)):
        b, h, hk, m0, _, _, n_tiles = pb.tile(u, side)
        for i in gl.static_range(pb.NC):
            qi = i * Q_BUFS + it % Q_BUFS
            mbarrier.wait(sm.q_empty.index(qi), ((it // Q_BUFS) & 1) ^ 1)
            if DYNAMIC:  # the consumer reads it once this Q buffer's phase completes
                sm.item.index(qi).store(gl.full([1], u, gl.int32, ITEM_LAYOUT))
                gl.thread_barrier()
            if pb.SHIFT and m0 + (i + 1) * ROWS <= 0:  # rows before row 0: no copy, a plain arrive
                mbarrier.arrive(sm.q_ready.index(qi), count=1)
            else:
                mbarrier.expect(sm.q_ready.index(qi), q_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(q_desc, [b, h, m0 + i * ROWS, 0], sm.q_ready.index(qi),
                                                sm.q.index(qi).reshape([1, 1, ROWS, BLOCK_D]))
        for n in range(n_tiles):
            s = j % STAGES
            ph = (j // STAGES) & 1
            mbarrier.wait(sm.k_empty.index(s), ph ^ 1)  # a fresh barrier counts as phase 1 complete
            mbarrier.expect(sm.k_ready.index(s), k_desc.block_type.nbytes)
            if pb.PERM_K:  # (key / 16 over batch·kv heads·keys, t1, q, t0, dim): see _perm_key
                g0 = ((b * (pb.HQ // pb.GROUP) + hk) * pb.LK + n * BLOCK_N) // 16
                tma.async_copy_global_to_shared(k_desc, [g0, 0, 0, 0, 0], sm.k_ready.index(s),
                                                sm.k.index(s).reshape([BLOCK_N // 16, 2, 4, 2, BLOCK_D]))
            else:
                tma.async_copy_global_to_shared(k_desc, [b, hk, n * BLOCK_N, 0], sm.k_ready.index(s),
                                                sm.k.index(s).reshape([1, 1, BLOCK_N, BLOCK_D]))
            mbarrier.wait(sm.v_empty.index(s), ph ^ 1)
            mbarrier.expect(sm.v_ready.index(s), v_desc.block_type.nbytes)
            if V_T:  # (batch, head, dim, position) tiles: V stored position-contiguous
                tma.async_copy_global_to_shared(v_desc, [b, hk, 0, n * BLOCK_N], sm.v_ready.index(s),
                                                sm.v.index(s).reshape([1, 1, BLOCK_D, BLOCK_N]))
            else:
                tma.async_copy_global_to_shared(v_desc, [b, hk, n * BLOCK_N, 0], sm.v_ready.index(s),
                                                sm.v.index(s).reshape([1, 1, BLOCK_N, BLOCK_D]))
            j += 1
        it += 1
    return j, it


@gluon.jit
def _loader(q_desc, k_desc, v_desc, sm: Smem, pb: Problem, STAGES: gl.constexpr, V_T: gl.constexpr, TICKET,
            DYNAMIC: gl.constexpr):
    # Rank-4 (batch, head, position, dim) descriptors with [1, 1, rows, BLOCK_D] boxes (K's rank 5 with PERM_K,
    # see _perm_key): the 2-D buffers are viewed as such for the copy.
    j = 0  # K/V ring position, continued across work tiles
    it = 0  # work tiles done by this program: the Q buffers' phase
    if DYNAMIC:  # the next item from the ticket (one thread's atomic, broadcast), posted beside its Q tiles
        Q_BUFS: gl.constexpr = _q_bufs(sm, pb)
        u = gl.atomic_add(TICKET, 1)
        while u < pb.n_items:
            j, it = _load_item(q_desc, k_desc, v_desc, sm, pb, u, j, it, STAGES, V_T, DYNAMIC)
            u = gl.atomic_add(TICKET, 1)
        # no item left: tell the consumers (n_items as the item), then the last program resets the ticket
        for i in gl.static_range(pb.NC):
            qi = i * Q_BUFS + it % Q_BUFS
            mbarrier.wait(sm.q_empty.index(qi), ((it // Q_BUFS) & 1) ^ 1)
            sm.item.index(qi).store(gl.full([1], pb.n_items, gl.int32, ITEM_LAYOUT))
            gl.thread_barrier()
            mbarrier.arrive(sm.q_ready.index(qi), count=1)
        if gl.atomic_add(TICKET + 1, 1) == gl.num_programs(0) - 1:  # every other program has taken its last ticket
            gl.atomic_xchg(TICKET, 0)
            gl.atomic_xchg(TICKET + 1, 0)
    else:
        for u in range(gl.program_id(0), pb.n_items, gl.num_programs(0)):
            j, it = _load_item(q_desc, k_desc, v_desc, sm, pb, u, j, it, STAGES, V_T, DYNAMIC)


@gluon.jit
def _turn_wait(sm: Smem, which: gl.constexpr, g, PINGPONG: gl.constexpr):
    """Ping-pong: wait until it is this consumer's turn to issue its g-th wgmma group (consumer 0 first, then
    1, ..., round robin), so one consumer's softmax runs while the next one's matmuls occupy the tensor cores."""
    if PINGPONG:
        if which == 0:
            mbarrier.wait(sm.turn.index(which), (g & 1) ^ 1)  # a fresh barrier counts as phase 1 complete
        else:
            mbarrier.wait(sm.turn.index(which), g & 1)


@gluon.jit
def _turn_pass(sm: Smem, which: gl.constexpr, NC: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(sm.turn.index((which + 1) % NC), count=1)


@gluon.jit
def _scores(q_s, k_bufs, k_ready, j, s_zero, STAGES: gl.constexpr):
    s = j % STAGES
    mbarrier.wait(k_ready.index(s), (j // STAGES) & 1)
    return warpgroup_mma(q_s, k_bufs.index(s).permute((1, 0)), s_zero, use_acc=False, is_async=True)


@gluon.jit
def _perm_key(j):
    """The key held in row j of a ``PERM_K`` K tile: within each 16 keys, row 8·t1 + 2·q + t0 holds key
    4·q + 2·t1 + t0.  The fp8 scores' accumulator then holds, per thread, the four consecutive keys that the
    P·V wgmma's fp8 A operand takes from it (its k_width of 4), so P needs no exchange between threads."""
    return (j & ~15) | (((j >> 1) & 3) << 2) | (((j >> 3) & 1) << 1) | (j & 1)


# ROWSUM_MMA == ROWSUM_CODES (fp8 with K read permuted; attention_ws.forward's fast_exp): P's e4m3 code straight
# from the score, without an exponential: 2^x * 2^8 (x = s * scale - m <= 0, m a multiple of 1/8) has the e4m3 code
# 8 x + 120 when the mantissa's bits are read as linear in the exponent's fraction (1 + f for 2^f, up to 6.1 % high).
# Two FMA-pipe instructions a score (_codes): y = (8 x + 120) / 128 saturated to [0, 1] by one fma.sat (codes below 0,
# P under 2^-15 of the row's maximum, masked scores and NaN become 0), then y * 128 + 1.5 * 2^23, whose unit in the
# last place is 1, leaves the code rounded to the nearest in the float's low byte: the value within -4.2 / +10.8 % of
# 2^x for x >= -14 (exact rounding: +-6.25 %), 4.0 % high on average.  The row sums are those P (a wgmma by a tile of
# ones, a fresh accumulator each tile, added in fp32), so the output's normalisation matches its products; the lse
# takes out the 2^8 and the average 4.0 % (tests/kernels/test_attention.py checks these figures).  The row maxima are
# folded by halves first (_row_max_tree) and the output's rescale is skipped by a warp none of whose rows' maxima
# moved (_rescale_moved, BLOCK_D 128): with the exponentials gone the consumers wait on the ALU pipe (the maxima, the
# byte permutes) and on their own instructions' latency (kernels/NOTES.md, session 34).
ROWSUM_CODES = gl.constexpr(2)
EXP_CODE_ONE = gl.constexpr(120.0)  # the e4m3 code of 2^8, P at its row's maximum
EXP_FLOOR = gl.constexpr(12582912.0)  # 1.5 * 2^23: the float whose low byte is the code
EXP_LSE_BIAS = gl.constexpr(8.0 + 0.05755)  # log2(2^8 * 1.0407): 1.0407 = the mean of (1 + f) / 2^f over f in [0, 1)


@gluon.jit
def _max_eighths(m_i, max8):
    """ROWSUM_CODES: the running row maximum with a tile's, ``max8`` (8x its scaled scores' maximum), rounded up to a
    multiple of 1/8, so that the codes' bias is an exact float."""
    return gl.maximum(m_i, gl.ceil(max8) * 0.125)


@gluon.jit
def _fold_max(x):
    """The halves of x's columns folded by an elementwise maximum: in the wgmma accumulator's layout columns c and
    c + N/2 sit in one thread (N/2 a multiple of 8), so no data moves between threads."""
    M: gl.constexpr = x.shape[0]
    N: gl.constexpr = x.shape[1]
    a, b = x.reshape([M, 2, N // 2]).permute((0, 2, 1)).split()
    return gl.maximum(a, b)


@gluon.jit
def _row_max_tree(x):
    """ROWSUM_CODES: row maxima of a wgmma accumulator, folded by halves down to 8 columns first (up to 128 columns:
    a tree of depth log2 instead of one chain over a thread's columns of a row), then reduced as gl.max does."""
    row_layout: gl.constexpr = gl.SliceLayout(1, x.type.layout)
    for _ in gl.static_range(4):
        if x.shape[1] >= 16:
            x = _fold_max(x)
    return gl.convert_layout(gl.max(x, 1), row_layout, assert_trivial=True)


@gluon.jit
def _codes(s, scale8, m_use):
    """ROWSUM_CODES: P's e4m3 codes in the floats' low bytes from the scores ``s``, ``scale8`` (8x their scale to
    log2 units) and the row maxima ``m_use``: y = sat((8 (s * scale - m) + 120) / 128), then y * 128 + 1.5 * 2^23."""
    bias = gl.expand_dims((EXP_CODE_ONE - 8.0 * m_use) * 0.0078125, 1)
    a = gl.full(bias.shape, 0.0078125, gl.float32, bias.type.layout) * scale8
    y = gl.inline_asm_elementwise("fma.rn.sat.f32 $0, $1, $2, $3;", "=r,r,r,r", [s, a, bias], dtype=gl.float32,
                                  is_pure=True, pack=1)
    return y * 128.0 + EXP_FLOOR


@gluon.jit
def _warp_rows_moved(alpha):
    """ROWSUM_CODES: per row (alpha in the 64-row wgmma accumulator's row layout: two rows a thread, each warp 16 of
    them), 1.0 where some row of this thread's warp has alpha != 1 (its maximum moved: vote.any over the warp's 32
    threads, all of which run it), else 0.0: the same in all of a warp's threads."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p, q; setp.ne.f32 p, $2, 0f3F800000; setp.ne.f32 q, $3, 0f3F800000; or.pred p, p, q; "
        "vote.sync.any.pred p, p, -1; selp.f32 $0, 0f3F800000, 0f00000000, p; mov.b32 $1, $0; }",
        "=r,=r,r,r", [alpha], dtype=gl.float32, is_pure=True, pack=2)


# _rescale_moved's asm: RESCALE_PACK values of O multiplied in place by their rows' alpha behind one warp-uniform
# branch on the moved flag (operands: the outputs, O tied to them, alpha, the flag)
RESCALE_PACK = gl.constexpr(32)
_RESCALE_ASM = gl.constexpr(
    f"{{ .reg .pred p; setp.ne.f32 p, ${3 * RESCALE_PACK.value}, 0f00000000; @!p bra.uni SKIP${{:uid}}; "
    + " ".join(f"mul.f32 ${i}, ${i}, ${2 * RESCALE_PACK.value + i};" for i in range(RESCALE_PACK.value))
    + " SKIP${:uid}: }")
_RESCALE_CONSTRAINTS = gl.constexpr(",".join(["=r"] * RESCALE_PACK.value + [str(i) for i in range(RESCALE_PACK.value)]
                                             + ["r"] * (2 * RESCALE_PACK.value)))


@gluon.jit
def _rescale_moved(o, alpha, o_layout: gl.constexpr):
    """ROWSUM_CODES at BLOCK_D 128: O * alpha, skipped by a warp whose rows' maxima none moved (alpha all 1: most
    tiles once the maxima, rounded up to eighths, have settled).  Per warp, as a thread's O rows are its warp's;
    at BLOCK_D 64 on three consumers it measured slower (ptxas spills there, kernels/NOTES.md session 34)."""
    a = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    moved = gl.expand_dims(gl.convert_layout(_warp_rows_moved(alpha), gl.SliceLayout(1, o_layout)), 1)
    return gl.inline_asm_elementwise(_RESCALE_ASM, _RESCALE_CONSTRAINTS, [o, a, moved], dtype=gl.float32,
                                     is_pure=True, pack=RESCALE_PACK)


@gluon.jit
def _with_tile_sums(l_i, l_t, ROWSUM_MMA: gl.constexpr):
    """The row sums' accumulator after a P·ones wgmma gave ``l_t``: for ``ROWSUM_CODES`` that tile's sums alone,
    added to ``l_i`` in fp32; else ``l_t`` is the accumulator itself."""
    if ROWSUM_MMA == ROWSUM_CODES:
        return l_i + l_t
    else:
        return l_t


@gluon.jit
def _softmax(s, m_i, l_i, rows, start_n, LK, diag, qk_scale, p_layout: gl.constexpr, BLOCK_N: gl.constexpr,
             MASKED: gl.constexpr, CAUSAL: gl.constexpr, dtype: gl.constexpr, PERM_K: gl.constexpr,
             ROWSUM_MMA: gl.constexpr):
    """Online-softmax step on the scores of one tile: returns (P in the P·V operand's layout: in the input type
    for 16-bit inputs, fp32 for fp8, which :func:`_p_operand` packs at the wgmma, alpha, m, l).  ``MASKED``: one
    of ``UNMASKED``, ``MASK_SCALED``, ``MASK_BOUND`` (:func:`_mask_kind`).  With ``PERM_K`` the tile's keys sit in
    K's buffer in the order of :func:`_perm_key`.  With ``ROWSUM_MMA`` l is the row sums' wgmma accumulator, left
    to :func:`_steps`."""
    if MASKED != UNMASKED:  # the tile's key offsets
        cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        if PERM_K:
            cols = _perm_key(cols)
    if MASKED == MASK_SCALED:
        cols = start_n + cols
        keep = gl.expand_dims(cols, 0) < LK
        if CAUSAL:
            keep = keep & (gl.expand_dims(rows, 1) + diag >= gl.expand_dims(cols, 0))
        s = gl.where(keep, s * qk_scale, float("-inf"))
        codes = ROWSUM_MMA == ROWSUM_CODES
        m_new = _max_eighths(m_i, _row_max_tree(s) * 8.0) if codes else gl.maximum(m_i, gl.max(s, 1))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: p = 0, alpha finite
        p = _codes(s, 8.0, m_use) if codes else gl.exp2(s - gl.expand_dims(m_use, 1))
    else:  # the scale fused into the exponent; MASK_BOUND first masks, so a tile keeping every key gets these bits
        if MASKED == MASK_BOUND:  # one compare a score, against its row's key bound (the columns are constants)
            gl.static_assert(CAUSAL, "MASK_BOUND is for the short causal configs (_mask_kind)")
            lim = gl.minimum(rows + (diag + 1 - start_n), LK - start_n)
            s = gl.where(gl.expand_dims(cols, 0) < gl.expand_dims(lim, 1), s, float("-inf"))
        if ROWSUM_MMA == ROWSUM_CODES:
            m_new = _max_eighths(m_i, _row_max_tree(s) * (8.0 * qk_scale))
        else:
            m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
        m_use = m_new
        if MASKED == MASK_BOUND:  # a row with no key yet: p = 0, alpha finite
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        if ROWSUM_MMA == ROWSUM_CODES:
            p = _codes(s, 8.0 * qk_scale, m_use)
        else:
            p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m_i - m_use)
    if not ROWSUM_MMA:
        l_i = l_i * alpha + gl.sum(p, 1)
    if dtype.primitive_bitwidth == 8:  # fp32 P, packed to fp8 next to its use by _p_operand
        if PERM_K:  # each thread already holds its A-operand keys: a renaming of registers
            ROWS_: gl.constexpr = p.shape[0]
            p = p.reshape([ROWS_, BLOCK_N // 16, 2, 4, 2]).permute((0, 1, 3, 2, 4)).reshape([ROWS_, BLOCK_N])
            p = gl.convert_layout(p, p_layout, assert_trivial=True)
        else:
            p = gl.convert_layout(p, p_layout)
    else:
        p = gl.convert_layout(_to_16bit(p, dtype), p_layout)
    return p, alpha, m_new, l_i


@gluon.jit
def _to_16bit(p, dtype: gl.constexpr):
    """P in the 16-bit input type, rounded as ``p.to(dtype)``, two values a conversion (``cvt.rn.bf16x2.f32``).

    From ``p.to(dtype)`` (one ``cvt.rn.bf16.f32`` a value) ptxas packs each pair the other way round and swaps its
    halves back (a PRMT a register, 32 a 128-key step) before the P·V wgmma; packed here, no swap is left (session
    35, H200: 2-8 % faster at 128-key tiles, outputs bitwise the same)."""
    return gl.inline_asm_elementwise(_cvt_pair(dtype), "=r,r,r", [p], dtype=dtype.value, is_pure=True, pack=2)


@gluon.constexpr_function
def _cvt_pair(dtype):
    """The PTX converting two fp32 values ($2 high, $1 low) to one register of the 16-bit type ``dtype``."""
    return f"cvt.rn.{'bf16' if dtype == gl.bfloat16 else 'f16'}x2.f32 $0, $2, $1;"


@gluon.constexpr_function
def _packs_p(dtype, perm_k):
    """Whether P is carried packed (``PACK_P``): fp8 with K read permuted, each thread then holding its P·V operand
    keys."""
    return dtype.primitive_bitwidth == 8 and bool(perm_k) and bool(PACK_P)


@gluon.jit
def _carried_p(p, dtype: gl.constexpr, PERM_K: gl.constexpr, ROWSUM_MMA: gl.constexpr = False):
    """P as carried to the next step's P·V wgmma: packed by :func:`_pack_p` where :func:`_packs_p`."""
    if _packs_p(dtype, PERM_K):
        if ROWSUM_MMA == ROWSUM_CODES:
            return _pack_codes(p)
        else:
            return _pack_p(p)
    else:
        gl.static_assert(ROWSUM_MMA != ROWSUM_CODES, "P's codes are carried packed")
        return p


@gluon.jit
def _pack_codes(p):
    """ROWSUM_CODES: the low bytes of four floats [rows, n] (their e4m3 codes) -> int32 [rows, n / 4], as
    :func:`_pack_p` (three byte permutes a word)."""
    R: gl.constexpr = p.shape[0]
    N: gl.constexpr = p.shape[1]
    w = gl.inline_asm_elementwise(
        "{ .reg .b32 a, b; prmt.b32 a, $4, $5, 0x0040; prmt.b32 b, $6, $7, 0x0040; prmt.b32 $0, a, b, 0x5410; "
        "mov.b32 $1, $0; mov.b32 $2, $0; mov.b32 $3, $0; }",
        "=r,=r,=r,=r,r,r,r,r", [p], dtype=gl.int32, is_pure=True, pack=4)
    return gl.reduce(w.reshape([R, N // 4, 4]), 2, _first)


@gluon.jit
def _first(a, b):
    """A reduction's combine that keeps one operand: right only where every operand is equal (``_pack_p``)."""
    return a


@gluon.jit
def _pack_p(p):
    """fp32 P [rows, n] in the P·V operand's layout (four consecutive keys per thread) -> int32 [rows, n / 4], four
    e4m3 values a register: one conversion pair per four values; the asm writes the packed word to all four outputs
    and the reduction keeps the first (no instruction)."""
    R: gl.constexpr = p.shape[0]
    N: gl.constexpr = p.shape[1]
    w = gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $5, $4; cvt.rn.satfinite.e4m3x2.f32 hi, $7, $6; "
        "mov.b32 $0, {lo, hi}; mov.b32 $1, $0; mov.b32 $2, $0; mov.b32 $3, $0; }",
        "=r,=r,=r,=r,r,r,r,r", [p], dtype=gl.int32, is_pure=True, pack=4)
    return gl.reduce(w.reshape([R, N // 4, 4]), 2, _first)


@gluon.jit
def _unpack_p(w, p_layout: gl.constexpr):
    """:func:`_pack_p`'s int32 [rows, n / 4] -> e4m3 [rows, n] in ``p_layout`` (a renaming of registers)."""
    R: gl.constexpr = w.shape[0]
    N: gl.constexpr = w.shape[1] * 4
    w4 = gl.expand_dims(w, 2).broadcast_to([R, N // 4, 4]).reshape([R, N])
    w4 = gl.convert_layout(w4, p_layout, assert_trivial=True)
    # no instruction: the output is the input register (a mov there would define the wgmma's A registers inside
    # its pipeline stage, and ptxas would serialise the wgmma groups: C7513)
    return gl.inline_asm_elementwise("", "=r,0,r,r,r", [w4], dtype=gl.float8e4nv, is_pure=True, pack=4)


@gluon.jit
def _p_operand(p, dtype: gl.constexpr, p_layout: gl.constexpr, PERM_K: gl.constexpr):
    """P as the P·V wgmma's A operand: fp8 arrives packed (``PACK_P``: only renamed here) or in fp32 and is packed
    here, four values per register by one conversion pair (a loop-carried fp8 tensor would be carried as separate
    bytes and re-packed)."""
    if _packs_p(dtype, PERM_K):
        op = _unpack_p(p, p_layout)
    elif dtype.primitive_bitwidth == 8:
        op = gl.inline_asm_elementwise("cvt.rn.satfinite.e4m3x2.f32 $0, $2, $1;", "=h,r,r", [p],
                                       dtype=gl.float8e4nv, is_pure=True, pack=2)
    else:
        op = p
    return op


@gluon.jit
def _v_tile(v_bufs, s, V_T: gl.constexpr):
    """Ring buffer s of V as the P·V wgmma's B operand ([BLOCK_N, BLOCK_D]); a position-contiguous
    ([BLOCK_D, BLOCK_N]) tile is read K-major, the layout fp8 wgmma requires."""
    if V_T:
        return v_bufs.index(s).permute((1, 0))
    else:
        return v_bufs.index(s)


@gluon.jit
def _pv(p_op, v_tile, o, l_i, ones, ROWSUM_MMA: gl.constexpr):
    """Issue O += P·V (asynchronous), with ``ROWSUM_MMA`` after l += P·ones (so that waiting for all groups but
    one leaves only the P·V in flight): (O's token, l's token, or l unchanged)."""
    if ROWSUM_MMA == ROWSUM_CODES:  # this tile's sums alone (fp8 wgmma accumulates with less than fp32 precision)
        l_i = warpgroup_mma(p_op, ones.permute((1, 0)), gl.zeros_like(l_i),
                            use_acc=False, is_async=True)
    elif ROWSUM_MMA:
        l_i = warpgroup_mma(p_op, ones.permute((1, 0)), l_i, is_async=True)
    return warpgroup_mma(p_op, v_tile, o, is_async=True), l_i


@gluon.jit
def _steps(o, p, m_i, l_i, j0, g0, lo, hi, n_last, sm, which: gl.constexpr, qi, s_zero, rows, LK, diag, qk_scale,
           o_layout: gl.constexpr, p_layout: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
           MASKED: gl.constexpr, CAUSAL: gl.constexpr, V_T: gl.constexpr, NC: gl.constexpr,
           PINGPONG: gl.constexpr, PERM_K: gl.constexpr, ROWSUM_MMA: gl.constexpr):
    """Key tiles lo..hi-1 (ring positions j0 + n, wgmma groups g0 + n): S_n and O += P_{n-1} V_{n-1} in flight
    together, the softmax of S_n under the P·V; the Q buffer is released after score MMA ``n_last`` - 1, this
    consumer's last of the row block."""
    for n in range(lo, hi):
        j = j0 + n
        _turn_wait(sm, which, g0 + n, PINGPONG)
        s_tok = _scores(sm.q.index(qi), sm.k, sm.k_ready, j, s_zero, STAGES)
        prev = (j - 1) % STAGES
        mbarrier.wait(sm.v_ready.index(prev), ((j - 1) // STAGES) & 1)
        o_tok, l_tok = _pv(_p_operand(p, sm.q.dtype, p_layout, PERM_K), _v_tile(sm.v, prev, V_T), o, l_i,
                           sm.ones.index(which), ROWSUM_MMA)
        _turn_pass(sm, which, NC, PINGPONG)
        if ROWSUM_MMA:
            s, l_t = warpgroup_mma_wait(1, deps=(s_tok, l_tok))
            l_i = _with_tile_sums(l_i, l_t, ROWSUM_MMA)
        else:
            s = warpgroup_mma_wait(1, deps=(s_tok,))
        mbarrier.arrive(sm.k_empty.index(j % STAGES), count=1)
        if n == n_last - 1:
            mbarrier.arrive(sm.q_empty.index(qi), count=1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, rows, n * BLOCK_N, LK, diag, qk_scale, p_layout, BLOCK_N,
                                      MASKED, CAUSAL, sm.q.dtype, PERM_K, ROWSUM_MMA)
        o = warpgroup_mma_wait(0, deps=(o_tok,))
        mbarrier.arrive(sm.v_empty.index(prev), count=1)
        p = _carried_p(p, sm.q.dtype, PERM_K, ROWSUM_MMA)  # after the wait: P_{n-1}'s registers are free
        if ROWSUM_MMA == ROWSUM_CODES and o.shape[1] == 128:
            o = _rescale_moved(o, alpha, o_layout)
        else:
            o = o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        if ROWSUM_MMA:
            l_i = l_i * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, l_i.type.layout)), 1)
    return o, p, m_i, l_i


@gluon.constexpr_function
def _skips(pb, pingpong):
    """Whether consumers skip the key tiles wholly past their rows' diagonal (:func:`_own_tiles`): with a causal mask,
    key tiles narrower than the row block, two consumers (three, whose 128-key tiles are narrower than their 192-row
    block, were not timed with it), and no ping-pong turns (which every consumer takes for every tile)."""
    return bool(pb.CAUSAL) and not bool(pingpong) and pb.NC == 2 and pb.BLOCK_N < pb.NC * ROWS


@gluon.constexpr_function
def _mask_kind(pb, pingpong):
    """The masked tiles' softmax: ``MASK_BOUND`` where :func:`_skips` (the short causal configs: H100, kernels/NOTES.md
    session 25, +0.8-7.4 % at L512-1024, the same bits as the unmasked branch on a tile that keeps every key), else
    ``MASK_SCALED`` (``MASK_BOUND`` measured 1.5-3.8 % slower there at L4096, also where no tile is masked: the
    other configs' code changed and was not profiled; two builds of one kernel differed by up to 2.2 % in these A/B
    runs)."""
    return MASK_BOUND if _skips(pb, pingpong) else MASK_SCALED


@gluon.jit
def _own_tiles(pb: Problem, r0, n_full, n_tiles, PINGPONG: gl.constexpr):
    """(unmasked key tiles, key tiles) of this consumer's 64 rows (from r0), else the row block's ``n_full`` and
    ``n_tiles``.  Where :func:`_skips`, the row block's last tiles may lie wholly past the diagonal of the first
    consumer's rows, and those are skipped (their P would be all zeros: that alone leaves the result bitwise the
    same), and the later consumer's rows need no mask on some tiles the row block's first rows do (fewer tiles through
    the masked softmax: with ``MASK_SCALED``, whose unfused scale rounds differently, not bitwise the row block's count;
    the configs that skip take ``MASK_BOUND``, which gives a tile keeping every key the unmasked bits)."""
    if _skips(pb, PINGPONG):
        split, hi = pb.key_bounds(r0, ROWS)  # Problem.tile asked for the whole row block's, from m0
        n_own = gl.minimum(gl.maximum(gl.cdiv(hi, pb.BLOCK_N), 1), n_tiles)
        return gl.minimum(split // pb.BLOCK_N, n_own), n_own
    else:
        return n_full, n_tiles


@gluon.jit
def _release_skipped(sm: Smem, j0, n_own, n_tiles, STAGES: gl.constexpr):
    """Release the ring slots of the tiles :func:`_own_tiles` skipped, each once it has landed (so that an early
    release can never count towards the slot's previous use, which another consumer may still be reading)."""
    for n in range(n_own, n_tiles):
        j = j0 + n
        mbarrier.wait(sm.k_ready.index(j % STAGES), (j // STAGES) & 1)
        mbarrier.arrive(sm.k_empty.index(j % STAGES), count=1)
        mbarrier.wait(sm.v_ready.index(j % STAGES), (j // STAGES) & 1)
        mbarrier.arrive(sm.v_empty.index(j % STAGES), count=1)


@gluon.jit
def _consume_item(which: gl.constexpr, o_desc, LSE, sm: Smem, pb: Problem, qk_scale, o_scale, u, j0, it, s_zero,
                  STAGES: gl.constexpr, V_T: gl.constexpr, PINGPONG: gl.constexpr):
    """This consumer's rows of work item u (K/V ring position j0, Q buffer phase it): -> (j0, it) after it."""
    BLOCK_N: gl.constexpr = pb.BLOCK_N
    NC: gl.constexpr = pb.NC
    BLOCK_D: gl.constexpr = o_desc.block_type.shape[3]
    CAUSAL: gl.constexpr = pb.CAUSAL
    dtype: gl.constexpr = sm.q.dtype  # of Q, K, V and P (16-bit, or fp8 e4m3)
    s_layout: gl.constexpr = _acc_layout(BLOCK_N, dtype)
    o_layout: gl.constexpr = _acc_layout(BLOCK_D, dtype)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout,
                                                 k_width=32 // dtype.primitive_bitwidth)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    l_layout: gl.constexpr = _acc_layout(8, dtype)
    ROWSUM_MMA: gl.constexpr = pb.ROWSUM_MMA
    Q_BUFS: gl.constexpr = _q_bufs(sm, pb)
    MASK: gl.constexpr = _mask_kind(pb, PINGPONG)
    ONE_LOOP: gl.constexpr = pb.ONE_LOOP
    gl.static_assert(not ONE_LOOP or MASK == MASK_BOUND, "ONE_LOOP is for the short causal configs (_skips) only")
    LQ = pb.LQ
    LK = pb.LK
    diag = LK - LQ
    o_s = sm.o.index(which)
    for side in range(pb.sides(u)):
        b, h, _, m0, bh, n_full, n_tiles = pb.tile(u, side)
        r0 = m0 + which * ROWS
        n_full, n_own = _own_tiles(pb, r0, n_full, n_tiles, PINGPONG)
        rows = r0 + gl.arange(0, ROWS, layout=row_layout)
        o = gl.zeros([ROWS, BLOCK_D], gl.float32, o_layout)
        m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
        l_i = gl.zeros([ROWS, 8], gl.float32, l_layout) if ROWSUM_MMA else gl.zeros([ROWS], gl.float32, row_layout)

        # wgmma turns: S_0 alone, (S_n, P_{n-1} V_{n-1}) for n >= 1, the last P V alone (with ROWSUM_MMA each
        # P·V preceded by its P·ones, in the same turn); n_tiles + 1 per row block, numbered g0 + n (the ping-pong
        # turns of all consumers follow the same numbering; without turns a consumer that skips tiles, _own_tiles,
        # issues n_own + 1 of them)
        g0 = j0 + it
        qi = which * Q_BUFS + it % Q_BUFS
        q_s = sm.q.index(qi)
        mbarrier.wait(sm.q_ready.index(qi), (it // Q_BUFS) & 1)
        _turn_wait(sm, which, g0, PINGPONG)
        s_tok = _scores(q_s, sm.k, sm.k_ready, j0, s_zero, STAGES)
        _turn_pass(sm, which, NC, PINGPONG)
        s = warpgroup_mma_wait(0, deps=(s_tok,))
        mbarrier.arrive(sm.k_empty.index(j0 % STAGES), count=1)
        if n_own == 1:  # Q is read by no further score MMA of this row block
            mbarrier.arrive(sm.q_empty.index(qi), count=1)
        # with ONE_LOOP every tile goes through the masked softmax: no unmasked copy of the first step or loop
        if not ONE_LOOP and n_full > 0:  # the first key tile needs no mask
            p, _alpha0, m_i, l_i = _softmax(s, m_i, l_i, rows, 0, LK, diag, qk_scale, p_layout, BLOCK_N, UNMASKED,
                                            CAUSAL, dtype, pb.PERM_K, ROWSUM_MMA)
        else:  # diagonal, ragged tail, or no key at all for some rows
            p, _alpha0, m_i, l_i = _softmax(s, m_i, l_i, rows, 0, LK, diag, qk_scale, p_layout, BLOCK_N, MASK,
                                            CAUSAL, dtype, pb.PERM_K, ROWSUM_MMA)
        p = _carried_p(p, dtype, pb.PERM_K, ROWSUM_MMA)
        if not ONE_LOOP:
            o, p, m_i, l_i = _steps(o, p, m_i, l_i, j0, g0, 1, n_full, n_own, sm, which, qi, s_zero, rows, LK,
                                    diag, qk_scale, o_layout, p_layout, BLOCK_N, STAGES, UNMASKED, CAUSAL, V_T,
                                    NC, PINGPONG, pb.PERM_K, ROWSUM_MMA)
        o, p, m_i, l_i = _steps(o, p, m_i, l_i, j0, g0, 1 if ONE_LOOP else gl.maximum(n_full, 1), n_own, n_own, sm,
                                which, qi, s_zero, rows, LK, diag, qk_scale, o_layout, p_layout, BLOCK_N, STAGES,
                                MASK, CAUSAL, V_T, NC, PINGPONG, pb.PERM_K, ROWSUM_MMA)
        last = (j0 + n_own - 1) % STAGES
        mbarrier.wait(sm.v_ready.index(last), ((j0 + n_own - 1) // STAGES) & 1)
        _turn_wait(sm, which, g0 + n_tiles, PINGPONG)
        o_tok, l_tok = _pv(_p_operand(p, dtype, p_layout, pb.PERM_K), _v_tile(sm.v, last, V_T), o, l_i,
                           sm.ones.index(which), ROWSUM_MMA)
        _turn_pass(sm, which, NC, PINGPONG)
        if ROWSUM_MMA:
            o, l_t = warpgroup_mma_wait(0, deps=(o_tok, l_tok))
            l_i = gl.convert_layout(gl.max(_with_tile_sums(l_i, l_t, ROWSUM_MMA), 1), row_layout)  # 8 equal columns
        else:
            o = warpgroup_mma_wait(0, deps=(o_tok,))
        mbarrier.arrive(sm.v_empty.index(last), count=1)
        if _skips(pb, PINGPONG):
            _release_skipped(sm, j0, n_own, n_tiles, STAGES)

        empty = l_i == 0.0
        l_safe = gl.where(empty, 1.0, l_i)
        lse_bias: gl.constexpr = EXP_LSE_BIAS if ROWSUM_MMA == ROWSUM_CODES else 0.0  # codes: 2^8, 4 % high
        lse = gl.where(empty, float("inf"), (m_i + gl.log2(l_safe) - lse_bias) * 0.6931471805599453)
        if pb.SHIFT:  # rows before row 0 too: one unsigned compare
            gl.store(LSE + bh.to(gl.int64) * LQ + rows, lse, mask=rows.to(gl.uint32) < LQ.to(gl.uint32))
        else:
            gl.store(LSE + bh.to(gl.int64) * LQ + rows, lse, mask=rows < LQ)
        o = o * gl.expand_dims(gl.convert_layout(o_scale / l_safe, gl.SliceLayout(1, o_layout)), 1)
        if not pb.SHIFT or r0 + ROWS > 0:  # no TMA copy before row 0 (a first try's stopped: illegal instruction)
            tma.store_wait(0)  # the previous row block's output has left o_s
            o_s.store(o.to(o_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc, [b, h, r0, 0], o_s.reshape([1, 1, ROWS, BLOCK_D]))
        j0 += n_tiles
        it += 1
    return j0, it


@gluon.jit
def _consumer(which: gl.constexpr, o_desc, LSE, sm: Smem, pb: Problem, qk_scale, o_scale, STAGES: gl.constexpr,
              V_T: gl.constexpr, PINGPONG: gl.constexpr, DYNAMIC: gl.constexpr):
    BLOCK_N: gl.constexpr = pb.BLOCK_N
    dtype: gl.constexpr = sm.q.dtype  # of Q, K, V and P (16-bit, or fp8 e4m3)
    Q_BUFS: gl.constexpr = _q_bufs(sm, pb)
    if pb.ROWSUM_MMA:  # this consumer's B operand of ones for the row sums
        ones_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
        sm.ones.index(which).store(gl.full([8, BLOCK_N], 1.0, gl.float32, ones_layout).to(dtype))
        fence_async_shared()
    s_layout: gl.constexpr = _acc_layout(BLOCK_N, dtype)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    j0 = 0  # K/V ring position of the row block's first key tile
    it = 0  # row blocks done by this program: the Q buffers' phase
    if DYNAMIC:
        u = _posted_item(sm, which, it, Q_BUFS)
        while u < pb.n_items:
            j0, it = _consume_item(which, o_desc, LSE, sm, pb, qk_scale, o_scale, u, j0, it, s_zero, STAGES, V_T,
                                   PINGPONG)
            u = _posted_item(sm, which, it, Q_BUFS)
    else:
        for u in range(gl.program_id(0), pb.n_items, gl.num_programs(0)):
            j0, it = _consume_item(which, o_desc, LSE, sm, pb, qk_scale, o_scale, u, j0, it, s_zero, STAGES, V_T,
                                   PINGPONG)
    tma.store_wait(0)


@gluon.jit
def _consumer0(o_desc, LSE, sm: Smem, pb: Problem, qk_scale, o_scale, STAGES: gl.constexpr, V_T: gl.constexpr,
               PINGPONG: gl.constexpr, DYNAMIC: gl.constexpr):
    _consumer(0, o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)


@gluon.jit
def _consumer1(o_desc, LSE, sm: Smem, pb: Problem, qk_scale, o_scale, STAGES: gl.constexpr, V_T: gl.constexpr,
               PINGPONG: gl.constexpr, DYNAMIC: gl.constexpr):
    _consumer(1, o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)


@gluon.jit
def _consumer2(o_desc, LSE, sm: Smem, pb: Problem, qk_scale, o_scale, STAGES: gl.constexpr, V_T: gl.constexpr,
               PINGPONG: gl.constexpr, DYNAMIC: gl.constexpr):
    _consumer(2, o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)


@gluon.jit
def attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, LSE, HQ, GROUP, LQ, LK, n_items, n_pair_items, lpt_heads, qk_scale,
                o_scale, row0, TICKET, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, NC: gl.constexpr,
                CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr, V_T: gl.constexpr, PINGPONG: gl.constexpr,
                PERM_K: gl.constexpr, ROWSUM_MMA: gl.constexpr = False, Q_BUFS: gl.constexpr = 1,
                ONE_LOOP: gl.constexpr = False, LPT: gl.constexpr = False, SHIFT: gl.constexpr = False,
                DYNAMIC: gl.constexpr = False, LIGHT_PTX: gl.constexpr = 0):
    """q/k/o_desc: host tensor descriptors over (B, H, L, HEAD_DIM) with [1, 1, rows, BLOCK_D] boxes (64 rows for q and
    o, BLOCK_N for k); v_desc the same as k's, or with ``V_T`` over (B, H, HEAD_DIM, L) with [1, 1, BLOCK_D,
    BLOCK_N] boxes (V stored position-contiguous: required for fp8).  Q/K/V fp16, bf16 or fp8 e4m3 (P is rounded to
    their type for the P·V product); the output of o_desc's type (fp8 inputs: bf16, fp16 or fp32) is multiplied by
    ``o_scale`` (the fp8 V descale; 1.0 otherwise).  LSE (B, HQ, LQ) float32; NC consumer warpgroups; ``n_items``
    work items over the grid: cdiv(LQ, NC * 64) row blocks per batch·head, or cdiv(that, 2) pairs of them when
    causal; with ``LPT`` (causal, one program an item) the first ``n_pair_items`` are such pairs and the rest the
    last ``lpt_heads`` batch·heads' row blocks singly, heaviest first across those heads (the hardware hands
    programs to SMs in order: a longest-first schedule for the tail of the grid; else the two are ignored).
    ``ROWSUM_MMA``: the softmax's row sums by wgmma (``Problem.ROWSUM_MMA``), or ``ROWSUM_CODES`` (fp8 with
    ``PERM_K``): P's e4m3 codes without exponentials, its row sums by wgmma a tile at a time added in fp32.
    ``Q_BUFS``: Q buffers a consumer; with two the loader loads the next row block's Q, then its first K/V tiles,
    while the consumers still work on the current one, instead of waiting for their last score product of it (32 KB
    more shared memory at BLOCK_D 128).  ``ONE_LOOP``: ``Problem.ONE_LOOP`` (the short causal configs only).
    ``SHIFT`` (causal only): the row blocks start at ``row0`` (``Problem.SHIFT``). ``DYNAMIC``: the grid is
    persistent and its programs take their items in order from a grid-wide ticket, TICKET (int32 [2], zero before
    the launch and again after it: the program that finishes last resets it), so the items, in their order (pairs,
    then LPT's single row blocks heaviest first), go to whichever program is free: a list schedule without a
    program's start and end per item; else TICKET is not read.  ``LIGHT_PTX`` (non-zero: the version of
    ``kernels/_ptx_barriers.py``, whose rewrite then builds this kernel through ``attention_ws``): the consumers'
    warpgroup barriers before their slot releases and mbarrier waits removed from the PTX."""
    dtype: gl.constexpr = q_desc.dtype
    BLOCK_D: gl.constexpr = q_desc.block_type.shape[3]
    # to_tensor: Triton passes integer arguments equal to 1 as constants
    pb = Problem(gl.to_tensor(HQ), gl.to_tensor(GROUP), gl.to_tensor(LQ), gl.to_tensor(LK),
                 gl.to_tensor(gl.cdiv(LQ, NC * ROWS)), gl.to_tensor(n_items), gl.to_tensor(n_pair_items),
                 gl.to_tensor(lpt_heads), BLOCK_N, NC, CAUSAL, PERM_K, ROWSUM_MMA, ONE_LOOP, LPT, CAUSAL and SHIFT,
                 gl.to_tensor(row0))
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_D], dtype)
    o_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_D], o_desc.dtype)
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_D], dtype)
    if V_T:
        v_buf = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_D, BLOCK_N],
                                          gl.NVMMASharedLayout.get_default_for([BLOCK_D, BLOCK_N], dtype))
    else:
        v_buf = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], k_layout)
    bar: gl.constexpr = mbarrier.MBarrierLayout()
    sm = Smem(gl.allocate_shared_memory(dtype, [NC * Q_BUFS, ROWS, BLOCK_D], q_layout),
              gl.allocate_shared_memory(o_desc.dtype, [NC, ROWS, BLOCK_D], o_layout),
              gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], k_layout),
              v_buf,
              gl.allocate_shared_memory(gl.int64, [NC * Q_BUFS, 1], bar),
              gl.allocate_shared_memory(gl.int64, [NC * Q_BUFS, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar),
              gl.allocate_shared_memory(gl.int64, [NC, 1], bar),
              gl.allocate_shared_memory(dtype, [NC if ROWSUM_MMA else 1, 8, BLOCK_N if ROWSUM_MMA else 32],
                                        gl.NVMMASharedLayout.get_default_for([8, BLOCK_N if ROWSUM_MMA else 32],
                                                                             dtype)),
              gl.allocate_shared_memory(gl.int32, [NC * Q_BUFS, 1], gl.SwizzledSharedLayout(1, 1, 1, [0])))
    for i in gl.static_range(NC):  # in this order Q_BUFS 1 builds the SASS of the kernel before Q_BUFS existed
        for t in gl.static_range(Q_BUFS):
            mbarrier.init(sm.q_ready.index(i * Q_BUFS + t), count=1)
            mbarrier.init(sm.q_empty.index(i * Q_BUFS + t), count=1)
        mbarrier.init(sm.turn.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(sm.k_ready.index(i), count=1)
        mbarrier.init(sm.v_ready.index(i), count=1)
        mbarrier.init(sm.k_empty.index(i), count=NC)  # released by every consumer
        mbarrier.init(sm.v_empty.index(i), count=NC)

    # The loader is the default partition (4 warps, one issues the copies): in Triton 3.6 a reduction in
    # the default partition fails to compile ("not in a context with ttg.num-warps"), in a worker it does not.
    if NC == 2:
        gl.warp_specialize([
            (_loader, (q_desc, k_desc, v_desc, sm, pb, STAGES, V_T, TICKET, DYNAMIC)),
            (_consumer0, (o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)),
            (_consumer1, (o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)),
        ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_loader, (q_desc, k_desc, v_desc, sm, pb, STAGES, V_T, TICKET, DYNAMIC)),
            (_consumer0, (o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)),
            (_consumer1, (o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)),
            (_consumer2, (o_desc, LSE, sm, pb, qk_scale, o_scale, STAGES, V_T, PINGPONG, DYNAMIC)),
        ], [4, 4, 4], [CONSUMER_REGS, CONSUMER_REGS, CONSUMER_REGS])
