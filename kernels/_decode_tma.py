"""Decode (one query position) through a TMA ring, in Gluon: an experiment against the Triton kernel at one chunk a
head (``decode._decode_split`` with ``DIRECT``), where the suite's kv 2048 shape reads below 90 % of the copy rate.

One program per (batch, head), no GQA (a query head per kv head), K and V contiguous per head ((B, H, L, D),
L x D rows, as one (B * H * L, D) tensor for the descriptors).  STAGES tiles of BLOCK_N keys of K and of V are
in flight from the start (a byte-counted mbarrier a slot); each is read from shared memory into registers and its
slot refilled at once.  Each of the tile's BLOCK_N rows is its own online-softmax slot (keys r, r + BLOCK_N,
r + 2 BLOCK_N, ...: its running max, sum and weighted V row), so the loop has no reduction across warps; the
slots are merged once at the end.  ``read_floor_kernel``: the same ring with nothing computed, the rate the TMA
unit reaches on these bytes.
"""
# (no "from __future__ import annotations": Gluon needs the annotations at run time)

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def _issue(k_desc, v_desc, k_s, v_s, ready, slot, row):
    mbarrier.expect(ready.index(slot), 2 * k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, 0], ready.index(slot), k_s.index(slot))
    tma.async_copy_global_to_shared(v_desc, [row, 0], ready.index(slot), v_s.index(slot))


@gluon.jit
def decode_tma_kernel(q_ptr, o_ptr, k_desc, v_desc, LK, HEADS, sqb, sqh, sob, soh, qk_scale,
                      STAGES: gl.constexpr, NUM_WARPS: gl.constexpr, EVEN: gl.constexpr):
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    TPW_D: gl.constexpr = D // 8 if D // 8 < 32 else 32  # 8 elements (16 bytes) a thread along a row
    L: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NUM_WARPS, 1], [1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, L)
    COLS: gl.constexpr = gl.SliceLayout(0, L)
    bh = gl.program_id(0)
    b = bh // HEADS
    h = bh % HEADS
    row0 = bh * LK
    n_tiles = gl.cdiv(LK, BLOCK_N)
    k_s = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    v_s = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    for i in gl.static_range(STAGES):
        if i < n_tiles:
            _issue(k_desc, v_desc, k_s, v_s, ready, i, row0 + i * BLOCK_N)
    offs_d = gl.arange(0, D, layout=COLS)
    offs_n = gl.arange(0, BLOCK_N, layout=ROWS)
    q = gl.load(q_ptr + b.to(gl.int64) * sqb + h.to(gl.int64) * sqh + offs_d).to(gl.float32) * qk_scale
    q2 = gl.expand_dims(q, 0)
    m = gl.full([BLOCK_N], float("-inf"), gl.float32, ROWS)
    den = gl.full([BLOCK_N], 0.0, gl.float32, ROWS)
    acc = gl.full([BLOCK_N, D], 0.0, gl.float32, L)
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
        k = k_s.index(slot).load(L)
        v = v_s.index(slot).load(L)
        gl.thread_barrier()  # every warp has its copy of the slot before it is refilled
        if j + STAGES < n_tiles:
            _issue(k_desc, v_desc, k_s, v_s, ready, slot, row0 + (j + STAGES) * BLOCK_N)
        ok = j * BLOCK_N + offs_n < LK  # rows past LK are the next head's (or zero-filled past the end)
        s = gl.where(ok, gl.sum(k.to(gl.float32) * q2, axis=1), float("-inf"))
        m_new = gl.maximum(m, s)
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a slot with no key yet: exp2(-inf) = 0
        alpha = gl.exp2(m - m_use)
        p = gl.exp2(s - m_use)
        den = den * alpha + p
        vf = v.to(gl.float32)
        if not EVEN:  # rows past LK may hold anything (p is 0 there, but 0 * nan is not)
            vf = gl.where(gl.expand_dims(ok, 1), vf, 0.0)
        acc = acc * gl.expand_dims(alpha, 1) + gl.expand_dims(p, 1) * vf
        m = m_new
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    m_all = gl.max(m, axis=0)  # every head has >= 1 key, so some slot holds a finite max
    w = gl.exp2(m - m_all)
    total = gl.sum(den * w, axis=0)
    o = gl.sum(acc * gl.expand_dims(w, 1), axis=0) / total
    gl.store(o_ptr + b.to(gl.int64) * sob + h.to(gl.int64) * soh + offs_d, o.to(o_ptr.dtype.element_ty))


@gluon.jit
def read_floor_kernel(k_desc, v_desc, ROWS, PER, STAGES: gl.constexpr):
    """Diagnostic: program p streams rows [p * PER, (p + 1) * PER) of the (ROWS, D) K and V through the ring, nothing
    computed (each slot refilled as soon as it lands)."""
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
            _issue(k_desc, v_desc, k_s, v_s, ready, i, lo + i * BLOCK_N)
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
        if j + STAGES < n_tiles:
            _issue(k_desc, v_desc, k_s, v_s, ready, slot, lo + (j + STAGES) * BLOCK_N)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))


@gluon.jit
def _issue_item(k_desc, v_desc, ring, ready, i, row0, n_tiles, CT: gl.constexpr):
    # item i of the stream K[chunk 0], V[chunk 0], K[chunk 1], ... (CT tiles a chunk, the last one shorter)
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    slot = i % ring.shape[0]
    c = i // (2 * CT)
    w = i - c * 2 * CT
    nt = gl.minimum(n_tiles - c * CT, CT)
    mbarrier.expect(ready.index(slot), k_desc.block_type.nbytes)
    if w < nt:
        tma.async_copy_global_to_shared(k_desc, [row0 + (c * CT + w) * BLOCK_N, 0], ready.index(slot),
                                        ring.index(slot))
    else:
        tma.async_copy_global_to_shared(v_desc, [row0 + (c * CT + w - nt) * BLOCK_N, 0], ready.index(slot),
                                        ring.index(slot))


@gluon.jit
def _next_tile(k_desc, v_desc, ring, ready, i, row0, n_tiles, layout: gl.constexpr, CT: gl.constexpr):
    STAGES: gl.constexpr = ring.shape[0]
    slot = i % STAGES
    mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
    x = ring.index(slot).load(layout)
    gl.thread_barrier()  # every warp has its copy of the slot before it is refilled
    if i + STAGES < 2 * n_tiles:
        _issue_item(k_desc, v_desc, ring, ready, i + STAGES, row0, n_tiles, CT)
    return x


@gluon.jit
def decode_kv_kernel(q_ptr, o_ptr, k_desc, v_desc, LK, HEADS, sqb, sqh, sob, soh, qk_scale,
                     STAGES: gl.constexpr, NUM_WARPS: gl.constexpr, CT: gl.constexpr, EVEN: gl.constexpr):
    """Two passes a chunk of CT tiles: its K tiles (scores into shared memory, their max), then its V tiles (P·V
    against that max, no rescale inside a chunk); one ring of single tiles carries K and V in that order."""
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    TPW_D: gl.constexpr = D // 8 if D // 8 < 32 else 32
    L: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NUM_WARPS, 1], [1, 0])
    ROWS: gl.constexpr = gl.SliceLayout(1, L)
    COLS: gl.constexpr = gl.SliceLayout(0, L)
    bh = gl.program_id(0)
    b = bh // HEADS
    h = bh % HEADS
    row0 = bh * LK
    n_tiles = gl.cdiv(LK, BLOCK_N)
    ring = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, D], k_desc.layout)
    s_buf = gl.allocate_shared_memory(gl.float32, [CT, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    for i in gl.static_range(STAGES):
        if i < 2 * n_tiles:
            _issue_item(k_desc, v_desc, ring, ready, i, row0, n_tiles, CT)
    offs_d = gl.arange(0, D, layout=COLS)
    offs_n = gl.arange(0, BLOCK_N, layout=ROWS)
    q = gl.load(q_ptr + b.to(gl.int64) * sqb + h.to(gl.int64) * sqh + offs_d).to(gl.float32) * qk_scale
    q2 = gl.expand_dims(q, 0)
    m_run = gl.max(gl.full([BLOCK_N], float("-inf"), gl.float32, ROWS), axis=0)
    den = gl.full([BLOCK_N], 0.0, gl.float32, ROWS)
    acc = gl.full([BLOCK_N, D], 0.0, gl.float32, L)
    i = 0
    for c in range(gl.cdiv(n_tiles, CT)):
        nt = gl.minimum(n_tiles - c * CT, CT)
        mx = gl.full([BLOCK_N], float("-inf"), gl.float32, ROWS)
        for t in range(nt):
            k = _next_tile(k_desc, v_desc, ring, ready, i, row0, n_tiles, L, CT)
            ok = (c * CT + t) * BLOCK_N + offs_n < LK  # rows past LK are the next head's (or zero-filled)
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
            v = _next_tile(k_desc, v_desc, ring, ready, i, row0, n_tiles, L, CT)
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
    gl.store(o_ptr + b.to(gl.int64) * sob + h.to(gl.int64) * soh + offs_d, o.to(o_ptr.dtype.element_ty))
