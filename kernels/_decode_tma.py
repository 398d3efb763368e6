"""Decode (one query position, no GQA) through a TMA ring, in Gluon: the Hopper kernel for one chunk a head.

One program per (batch, head).  K and V are read as [BLOCK_N, D] boxes of a 2-D view of each cache (rows of its
row stride, the head's first row and column computed from its batch and head strides), so bhld or blhd caches and
views of longer buffers work (``decode_tma._view`` says which: head dim contiguous, 16-byte aligned base and row
stride, a batch stride that is a multiple of the row stride).  One ring of STAGES single tiles carries the
head's keys in chunks of CT tiles: a chunk's K tiles (their scores kept in shared memory, their max taken), then
its V tiles (P·V against that max, no rescale inside a chunk; the running output rescaled once a chunk).  Each of
a tile's BLOCK_N rows accumulates its own weighted V row; they are summed once at the end, so the loop has no
reduction across warps.  Rows past the key length (the next head's, or zero-filled past the view) get a score of
-inf and, unless the length is a multiple of the tile (``EVEN``), a V row of zeros.

``read_floor_kernel``: the same ring with nothing computed, the rate the TMA unit reaches on these bytes
(``decode.read_floor(..., tma=True)``).  Measured in ``kernels/NOTES.md``, session 19.
"""
# (no "from __future__ import annotations": Gluon needs the annotations at run time)

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def _head_origin(b, h, sb, sh, sl):
    # (row, column) of a head's first element in the 2-D view of rows of ``sl`` elements
    off = b.to(gl.int64) * sb + h.to(gl.int64) * sh
    return (off // sl).to(gl.int32), (off % sl).to(gl.int32)


@gluon.jit
def _issue_item(k_desc, v_desc, ring, ready, i, k_row, k_col, v_row, v_col, n_tiles, CT: gl.constexpr):
    # item i of the stream K[chunk 0], V[chunk 0], K[chunk 1], ... (CT tiles a chunk, the last one shorter)
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    slot = i % ring.shape[0]
    c = i // (2 * CT)
    w = i - c * 2 * CT
    nt = gl.minimum(n_tiles - c * CT, CT)
    mbarrier.expect(ready.index(slot), k_desc.block_type.nbytes)
    if w < nt:
        tma.async_copy_global_to_shared(k_desc, [k_row + (c * CT + w) * BLOCK_N, k_col], ready.index(slot),
                                        ring.index(slot))
    else:
        tma.async_copy_global_to_shared(v_desc, [v_row + (c * CT + w - nt) * BLOCK_N, v_col], ready.index(slot),
                                        ring.index(slot))


@gluon.jit
def _next_tile(k_desc, v_desc, ring, ready, i, k_row, k_col, v_row, v_col, n_tiles, layout: gl.constexpr,
               CT: gl.constexpr):
    STAGES: gl.constexpr = ring.shape[0]
    slot = i % STAGES
    mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
    x = ring.index(slot).load(layout)
    gl.thread_barrier()  # every warp has its copy of the slot before it is refilled
    if i + STAGES < 2 * n_tiles:
        _issue_item(k_desc, v_desc, ring, ready, i + STAGES, k_row, k_col, v_row, v_col, n_tiles, CT)
    return x


@gluon.jit
def decode_kv_kernel(q_ptr, o_ptr, k_desc, v_desc, LK, HEADS, sqb, sqh, sqd, sob, soh, sod, skb, skh, skl,
                     svb, svh, svl, qk_scale,
                     STAGES: gl.constexpr, NUM_WARPS: gl.constexpr, CT: gl.constexpr, EVEN: gl.constexpr):
    """q (B, HEADS, D) and o through strides; k_desc / v_desc over 2-D views (rows of skl / svl elements) with
    [BLOCK_N, D] boxes; qk_scale = softmax scale * log2(e)."""
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    TPW_D: gl.constexpr = D // 8 if D // 8 < 32 else 32  # 8 elements (16 bytes) a thread along a row
    L: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NUM_WARPS, 1], [1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, L)
    COLS: gl.constexpr = gl.SliceLayout(0, L)
    bh = gl.program_id(0)
    b = bh // HEADS
    h = bh % HEADS
    k_row, k_col = _head_origin(b, h, skb, skh, skl)
    v_row, v_col = _head_origin(b, h, svb, svh, svl)
    n_tiles = gl.cdiv(LK, BLOCK_N)
    ring = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    s_buf = gl.allocate_shared_memory(gl.float32, [CT, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    for i in gl.static_range(STAGES):
        if i < 2 * n_tiles:
            _issue_item(k_desc, v_desc, ring, ready, i, k_row, k_col, v_row, v_col, n_tiles, CT)
    offs_d = gl.arange(0, D, layout=COLS)
    offs_n = gl.arange(0, BLOCK_N, layout=ROWS)
    q = gl.load(q_ptr + b.to(gl.int64) * sqb + h.to(gl.int64) * sqh + offs_d * sqd).to(gl.float32) * qk_scale
    q2 = gl.expand_dims(q, 0)
    m_run = gl.max(gl.full([BLOCK_N], float("-inf"), gl.float32, ROWS), axis=0)
    den = gl.full([BLOCK_N], 0.0, gl.float32, ROWS)
    acc = gl.full([BLOCK_N, D], 0.0, gl.float32, L)
    i = 0
    for c in range(gl.cdiv(n_tiles, CT)):
        nt = gl.minimum(n_tiles - c * CT, CT)
        mx = gl.full([BLOCK_N], float("-inf"), gl.float32, ROWS)
        for t in range(nt):
            k = _next_tile(k_desc, v_desc, ring, ready, i, k_row, k_col, v_row, v_col, n_tiles, L, CT)
            ok = (c * CT + t) * BLOCK_N + offs_n < LK
            s = gl.where(ok, gl.sum(k.to(gl.float32) * q2, axis=1), float("-inf"))
            s_buf.index(t).store(s)
            mx = gl.maximum(mx, s)
            i += 1
        m_new = gl.maximum(m_run, gl.max(mx, axis=0))  # every chunk holds >= 1 key: finite
        alpha = gl.exp2(m_run - m_new)  # 0 for the first chunk
        den = den * alpha
        acc = acc * alpha
        m_run = m_new
        for t in range(nt):
            v = _next_tile(k_desc, v_desc, ring, ready, i, k_row, k_col, v_row, v_col, n_tiles, L, CT)
            p = gl.exp2(s_buf.index(t).load(ROWS) - m_run)
            den = den + p
            vf = v.to(gl.float32)
            if not EVEN:  # rows past LK may hold anything (p is 0 there, but 0 * nan is not)
                ok = (c * CT + t) * BLOCK_N + offs_n < LK
                vf = gl.where(gl.expand_dims(ok, 1), vf, 0.0)
            acc = acc + gl.expand_dims(p, 1) * vf
            i += 1
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    o = gl.sum(acc, axis=0) / gl.sum(den, axis=0)
    gl.store(o_ptr + b.to(gl.int64) * sob + h.to(gl.int64) * soh + offs_d * sod, o.to(o_ptr.dtype.element_ty))


@gluon.jit
def _issue_pair(k_desc, v_desc, k_s, v_s, ready, slot, row):
    mbarrier.expect(ready.index(slot), 2 * k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, 0], ready.index(slot), k_s.index(slot))
    tma.async_copy_global_to_shared(v_desc, [row, 0], ready.index(slot), v_s.index(slot))


@gluon.jit
def read_floor_kernel(k_desc, v_desc, ROWS, PER, STAGES: gl.constexpr):
    """Diagnostic: program p streams rows [p * PER, (p + 1) * PER) of the (ROWS, D) K and V through a ring of STAGES
    (K, V) tile pairs, nothing computed (each slot refilled as soon as it lands)."""
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    lo = gl.program_id(0) * PER
    n_tiles = gl.cdiv(gl.minimum(PER, ROWS - lo), BLOCK_N)
    k_s = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    for i in gl.static_range(STAGES):
        if i < n_tiles:
            _issue_pair(k_desc, v_desc, k_s, v_s, ready, i, lo + i * BLOCK_N)
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
        if j + STAGES < n_tiles:
            _issue_pair(k_desc, v_desc, k_s, v_s, ready, slot, lo + (j + STAGES) * BLOCK_N)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
