"""Warp-specialised persistent GEMM for Hopper in Gluon: ``C = A @ B``, bf16/fp16, B row-major.

The default for large GEMMs (``matmul.gluon_default``; H100, session 8: 1.00-1.04x cuBLAS at 4096^3, 8192^3 and
4096x14336x4096, 2-4 % ahead of the Triton kernel), and after the repack copy for a B whose row pitch is not a
multiple of 128 bytes.  For such a B it can also read the tiles through 16-byte ``cp.async`` copies (no repack),
but that measured slow (4000x5000x3000: 418 TFLOPS, L2-request-bound, against 669 through TMA on a padded pitch).

One program per SM loops over (BLOCK_M, BLOCK_N) output tiles in grouped order.  Partitions:

- the **producer** (default partition, 4 warps): per K step it waits for a free ring slot, starts the TMA
  copy of A's [BLOCK_M, BLOCK_K] tile (``a_ready``, byte-counted) and B's [BLOCK_K, BLOCK_N] tile, either as
  one more TMA copy (``B_TMA``) or as cp.async copies from every producer thread, each thread's completion
  arriving on ``b_ready`` (count 128);
- two **consumer** warpgroups, each owning BLOCK_M / 2 rows (or, for 64-row tiles, one owning all of them: the
  kernel counts its consumers by c_desc's box rows): asynchronous wgmma over the ring, one group in flight, the slot
  released (``empty``, one arrival a consumer) once the next group is issued; the tile's rows then go out
  through a TMA store (``EPI`` 0, staged in shared memory) or plain masked stores (``EPI`` 1: no staging
  buffer, room for a deeper ring; measured slower).

Tiles of a width that is not a power of two (Gluon's shapes are), 192 columns, are computed as BLOCK_N + BLOCK_N2
(128 + 64) columns: a second descriptor over B and one over C, a second ring buffer, accumulator and staging buffer,
two wgmma groups a K step (B by TMA, TMA stores, unclustered).

Ragged edges are fitted inside A and B (``FIT_M`` / ``FIT_N``, ``_origin``): the last tile row or column is moved to
end at M or N (below 128 rows each half of the rows, read as two 64-row boxes), recomputing rows or columns of its
neighbours, because the copy engine's zero fill of a box's rows past M costs more than reading them.  Where few tiles
run, K is split (``SPLIT``): each tile's chunks of K are work items of their own, their fp32 partials summed in chunk
order through a workspace by the warpgroup that completes the tile's rows.

With ``CLUSTER`` = 2 (B through TMA) the programs run in clusters of two CTAs (``kernels/_ptx_cluster.py`` adds what
Gluon cannot express to the PTX and launches the clusters): the two CTAs of a cluster take the output tiles of rows 2p
and 2p + 1 of one column of tiles at the same time, and each copies one half of their common B tile, which the copy
engine multicasts into both CTAs' ring slot, so a slot is free once both CTAs' consumers are done with it (``empty``
counts four arrivals).  Each B tile leaves L2 once for two tiles: for a B whose row pitch is not a multiple of 128
bytes, whose TMA rows straddle two 128-byte lines, that is what makes reading it directly (no repack copy) as fast as
the repack route's GEMM alone (H200, 4000x5000x3000: 199-202 us against 232-237 unclustered; kernels/NOTES.md,
session 30).
"""
# (no "from __future__ import annotations": Gluon needs the annotations at run time)

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# matmul_ws_kernel's PTX parameter holding b_desc (kernels/_ptx_cluster.py rewrites its copies): a 2-D descriptor is
# five parameters (the CUtensorMap, two sizes, two strides), and a_desc's come first
B_DESC_PARAM = 5


def consumer_rows(block_m: int) -> int:
    """The rows of c_desc's boxes (one consumer warpgroup's) for tiles of ``block_m`` rows: 64-row tiles have one
    consumer, 128-row tiles two; ``matmul_ws_kernel`` counts its consumers by them."""
    return block_m if block_m == 64 else block_m // 2


@gluon.jit
def _coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    group_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_m
    pid_n = (tile % per_group) // group_m
    return pid_m, pid_n


@gluon.jit
def _tile(item, num_pid_m, num_pid_n, GROUP_M: gl.constexpr, CLUSTER: gl.constexpr):
    """(pid_m, pid_n) of this program's output tile in work item ``item`` (a tile, or with ``CLUSTER`` 2 a pair of
    tile rows in one tile column: the CTA of rank r takes row 2p + r)."""
    if CLUSTER == 1:
        return _coords(item, num_pid_m, num_pid_n, GROUP_M)
    else:
        pair_m, pid_n = _coords(item, gl.cdiv(num_pid_m, 2), num_pid_n, GROUP_M)
        return 2 * pair_m + gl.program_id(0) % 2, pid_n


@gluon.jit
def _items(num_pid_m, num_pid_n, CLUSTER: gl.constexpr, SPLIT: gl.constexpr):
    """(first, end, step) of this program's work items: tiles, or with ``CLUSTER`` 2 pairs of tiles, shared by the
    two CTAs of a cluster; with ``SPLIT`` > 1 each tile's SPLIT chunks of K (``_chunk``)."""
    return (gl.program_id(0) // CLUSTER, gl.cdiv(num_pid_m, CLUSTER) * num_pid_n * SPLIT,
            gl.num_programs(0) // CLUSTER)


@gluon.jit
def _chunk(item, k_tiles, KT_PER, SPLIT: gl.constexpr):
    """(tile, chunk, first K step, end K step) of work item ``item``: a tile's SPLIT chunks of KT_PER K steps are
    consecutive items (so they run at once on neighbouring programs)."""
    if SPLIT == 1:
        return item, 0, 0, k_tiles
    else:
        part = item % SPLIT
        kt0 = part * KT_PER
        return item // SPLIT, part, kt0, gl.minimum(kt0 + KT_PER, k_tiles)


@gluon.jit
def _origin(pid_m, pid_n, M, N, which: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_NT: gl.constexpr,
            FIT_M: gl.constexpr, FIT_N: gl.constexpr):
    """(first row, first column) of the ``which`` half's rows (BLOCK_M / 2) of tile (pid_m, pid_n).  FIT_M 1 (M >=
    BLOCK_M): the last tile row moved up to end at row M; 2 (M >= BLOCK_M / 2): each half moved up to end at M at
    most; FIT_N (N >= BLOCK_NT): the last tile column moved left to end at column N.  So no copy reaches past A's
    rows or B's columns (the copy engine's zero fill of a box's rows past M costs more than reading them; the moved
    tiles recompute rows or columns of their neighbours, bitwise the same values)."""
    ROWS: gl.constexpr = BLOCK_M // 2
    r = pid_m * BLOCK_M
    if FIT_M == 1:
        r = gl.minimum(r, M - BLOCK_M) + which * ROWS
    elif FIT_M == 2:
        r = gl.minimum(r + which * ROWS, M - ROWS)
    else:
        r = r + which * ROWS
    col = pid_n * BLOCK_NT
    if FIT_N:
        col = gl.minimum(col, N - BLOCK_NT)
    return r, col


@gluon.jit
def _producer(a_desc, b_desc, b2_desc, B, M, N, K, N8, SB8, a_s, b_s, b2_s, a_ready, b_ready, empty, num_pid_m,
              num_pid_n, GROUP_M: gl.constexpr, STAGES: gl.constexpr, B_TMA: gl.constexpr, CLUSTER: gl.constexpr,
              BLOCK_N2: gl.constexpr, FIT_M: gl.constexpr, FIT_N: gl.constexpr, KT_PER, SPLIT: gl.constexpr):
    # the default partition (4 warps)
    BLOCK_M: gl.constexpr = a_s.shape[1]
    BLOCK_K: gl.constexpr = a_s.shape[2]
    ROWS: gl.constexpr = BLOCK_M // 2
    BLOCK_N: gl.constexpr = b_s.shape[2]
    # 8 contiguous columns (16 bytes) per thread, a warp per row of 256 columns
    TPW_N: gl.constexpr = BLOCK_N // 8 if BLOCK_N // 8 < 32 else 32
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_N, TPW_N], [4, 1], [1, 0])
    rows = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, ld))
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ld))
    HALF_N: gl.constexpr = BLOCK_N // 2
    B2_BYTES: gl.constexpr = b2_desc.block_type.nbytes if BLOCK_N2 > 0 else 0
    B_TMA_BYTES: gl.constexpr = CLUSTER * b_desc.block_type.nbytes + B2_BYTES if B_TMA else 0
    A_BYTES: gl.constexpr = a_desc.block_type.nbytes * (2 if FIT_M == 2 else 1)  # FIT_M 2: two half boxes
    k_tiles = gl.cdiv(K, BLOCK_K)
    j = 0
    first, end, step = _items(num_pid_m, num_pid_n, CLUSTER, SPLIT)
    for item in range(first, end, step):
        tile, _, kt0, kt1 = _chunk(item, k_tiles, KT_PER, SPLIT)
        pid_m, pid_n = _tile(tile, num_pid_m, num_pid_n, GROUP_M, CLUSTER)
        off_m, off_n = _origin(pid_m, pid_n, M, N, 0, BLOCK_M, BLOCK_N + BLOCK_N2, FIT_M, FIT_N)
        if FIT_M == 2:
            off_m1, off_n = _origin(pid_m, pid_n, M, N, 1, BLOCK_M, BLOCK_N + BLOCK_N2, FIT_M, FIT_N)
        offs_n = off_n + cols
        n_ok = gl.expand_dims(offs_n < N8 * 8, 0)
        col_ptrs = B + gl.expand_dims(offs_n, 0)
        for kt in range(kt0, kt1):
            s = j % STAGES
            mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)  # a fresh barrier counts as phase 1 done
            # A by TMA; B by TMA too (with CLUSTER 2 this CTA's half, multicast, and the other CTA's half arrive
            # here) or by cp.async (counted on b_ready)
            mbarrier.expect(a_ready.index(s), A_BYTES + B_TMA_BYTES)
            if FIT_M == 2:
                tma.async_copy_global_to_shared(a_desc, [off_m, kt * BLOCK_K], a_ready.index(s),
                                                a_s.index(s).slice(0, ROWS, dim=0))
                tma.async_copy_global_to_shared(a_desc, [off_m1, kt * BLOCK_K], a_ready.index(s),
                                                a_s.index(s).slice(ROWS, ROWS, dim=0))
            else:
                tma.async_copy_global_to_shared(a_desc, [off_m, kt * BLOCK_K], a_ready.index(s), a_s.index(s))
            if not B_TMA:
                offs_k = kt * BLOCK_K + rows
                ptrs = col_ptrs + gl.expand_dims(offs_k.to(gl.int64) * (SB8 * 8), 1)
                mask = gl.expand_dims(offs_k < K, 1) & n_ok
                async_copy.async_copy_global_to_shared(b_s.index(s), ptrs, mask)
                # each thread's copies, once complete, count as one of the barrier's 128 arrivals
                async_copy.mbarrier_arrive(b_ready.index(s), increment_count=False)
            elif CLUSTER == 1:
                tma.async_copy_global_to_shared(b_desc, [kt * BLOCK_K, off_n], a_ready.index(s), b_s.index(s))
                if BLOCK_N2 > 0:  # the tile's last BLOCK_N2 columns, through their own descriptor and buffer
                    tma.async_copy_global_to_shared(b2_desc, [kt * BLOCK_K, off_n + BLOCK_N], a_ready.index(s),
                                                    b2_s.index(s))
            elif gl.program_id(0) % 2 == 0:
                tma.async_copy_global_to_shared(b_desc, [kt * BLOCK_K, off_n], a_ready.index(s),
                                                b_s.index(s).slice(0, HALF_N, dim=1))
            else:
                tma.async_copy_global_to_shared(b_desc, [kt * BLOCK_K, off_n + HALF_N], a_ready.index(s),
                                                b_s.index(s).slice(HALF_N, HALF_N, dim=1))
            j += 1


@gluon.jit
def _consumer(which: gl.constexpr, c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready,
              empty, num_pid_m, num_pid_n, GROUP_M: gl.constexpr, STAGES: gl.constexpr, B_TMA: gl.constexpr,
              EPI: gl.constexpr, CLUSTER: gl.constexpr, BLOCK_N2: gl.constexpr, FIT_M: gl.constexpr,
              FIT_N: gl.constexpr, W, LOCKS, KT_PER, SPLIT: gl.constexpr, FUSED: gl.constexpr):
    BLOCK_M: gl.constexpr = a_s.shape[1]
    BLOCK_K: gl.constexpr = a_s.shape[2]
    BLOCK_N: gl.constexpr = b_s.shape[2]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]  # BLOCK_M / 2, or BLOCK_M with one consumer
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    k_tiles = gl.cdiv(K, BLOCK_K)
    j = 0
    first, end, step = _items(num_pid_m, num_pid_n, CLUSTER, SPLIT)
    for item in range(first, end, step):
        tile, part, kt0, kt1 = _chunk(item, k_tiles, KT_PER, SPLIT)
        pid_m, pid_n = _tile(tile, num_pid_m, num_pid_n, GROUP_M, CLUSTER)
        r0, off_n = _origin(pid_m, pid_n, M, N, which, BLOCK_M, BLOCK_N + BLOCK_N2, FIT_M, FIT_N)
        acc = gl.zeros([ROWS, BLOCK_N], gl.float32, acc_layout)
        if BLOCK_N2 > 0:  # the tile's last BLOCK_N2 columns
            acc2 = gl.zeros([ROWS, BLOCK_N2], gl.float32, gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N2, 16]))
        for kt in range(kt0, kt1):
            s = j % STAGES
            ph = (j // STAGES) & 1
            mbarrier.wait(a_ready.index(s), ph)
            if not B_TMA:
                mbarrier.wait(b_ready.index(s), ph)
                fence_async_shared()  # B was written through the generic proxy (cp.async); wgmma reads async
            a = a_s.index(s).slice(which * ROWS, ROWS, dim=0)
            acc = warpgroup_mma(a, b_s.index(s), acc, is_async=True)
            if BLOCK_N2 > 0:  # two groups a step: keep this step's in flight, the previous step's done
                acc2 = warpgroup_mma(a, b2_s.index(s), acc2, is_async=True)
                acc, acc2 = warpgroup_mma_wait(2, deps=(acc, acc2))
            else:
                acc = warpgroup_mma_wait(1, deps=(acc,))
            if kt > kt0:
                mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
            j += 1
        if BLOCK_N2 > 0:
            acc, acc2 = warpgroup_mma_wait(0, deps=(acc, acc2))
        else:
            acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
        if SPLIT > 1:  # (EPI 1) this chunk's fp32 partial into W; FUSED: the warpgroup whose arrival completes its
            # rows' SPLIT chunks sums them in chunk order (the same sum whichever arrives last) and stores the rows
            # (else the host's second kernel sums W)
            offs_m = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
            offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
            mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
            w_ptrs = W + gl.expand_dims(offs_m.to(gl.int64) * N, 1) + gl.expand_dims(offs_n, 0)
            plane = gl.cast(M, gl.int64) * N  # (M may reach the kernel as a constexpr: M == 1)
            gl.store(w_ptrs + part * plane, acc, mask=mask)
            if FUSED:
                gl.thread_barrier()  # the warpgroup's partial stored before its release below
                lock = LOCKS + (tile * 2 + which)
                if gl.atomic_add(lock, 1, sem="acq_rel", scope="gpu") == SPLIT - 1:
                    acc = gl.zeros([ROWS, BLOCK_N], gl.float32, acc_layout)
                    for t in gl.static_range(SPLIT):
                        acc += gl.load(w_ptrs + t * plane, mask=mask, other=0.0, cache_modifier=".cg")
                    ptrs = C + gl.expand_dims(offs_m.to(gl.int64) * scm, 1) + gl.expand_dims(offs_n, 0)
                    gl.store(ptrs, acc.to(c_desc.dtype), mask=mask)
                    gl.atomic_xchg(lock, 0, sem="relaxed", scope="gpu")  # zero again for the next call
        elif EPI == 0:
            c = acc.to(c_desc.dtype)
            tma.store_wait(0)  # the previous tile has left the staging buffers
            c_s.index(which).store(c)
            if BLOCK_N2 > 0:
                c2_s.index(which).store(acc2.to(c_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [r0, off_n], c_s.index(which))
            if BLOCK_N2 > 0:
                tma.async_copy_shared_to_global(c2_desc, [r0, off_n + BLOCK_N], c2_s.index(which))
        else:
            c = acc.to(c_desc.dtype)
            offs_m = r0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
            offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
            ptrs = C + gl.expand_dims(offs_m.to(gl.int64) * scm, 1) + gl.expand_dims(offs_n, 0)
            gl.store(ptrs, c, mask=gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0))
    if EPI == 0:
        tma.store_wait(0)


@gluon.jit
def _consumer0(c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty, num_pid_m,
               num_pid_n, GROUP_M: gl.constexpr, STAGES: gl.constexpr, B_TMA: gl.constexpr, EPI: gl.constexpr,
               CLUSTER: gl.constexpr, BLOCK_N2: gl.constexpr, FIT_M: gl.constexpr, FIT_N: gl.constexpr, W, LOCKS,
               KT_PER, SPLIT: gl.constexpr, FUSED: gl.constexpr):
    _consumer(0, c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty, num_pid_m,
              num_pid_n, GROUP_M, STAGES, B_TMA, EPI, CLUSTER, BLOCK_N2, FIT_M, FIT_N, W, LOCKS, KT_PER, SPLIT, FUSED)


@gluon.jit
def _consumer1(c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty, num_pid_m,
               num_pid_n, GROUP_M: gl.constexpr, STAGES: gl.constexpr, B_TMA: gl.constexpr, EPI: gl.constexpr,
               CLUSTER: gl.constexpr, BLOCK_N2: gl.constexpr, FIT_M: gl.constexpr, FIT_N: gl.constexpr, W, LOCKS,
               KT_PER, SPLIT: gl.constexpr, FUSED: gl.constexpr):
    _consumer(1, c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty, num_pid_m,
              num_pid_n, GROUP_M, STAGES, B_TMA, EPI, CLUSTER, BLOCK_N2, FIT_M, FIT_N, W, LOCKS, KT_PER, SPLIT, FUSED)


@gluon.jit
def matmul_ws_kernel(a_desc, b_desc, c_desc, B, C, M, N, K, N8, SB8, scm, b2_desc, c2_desc, W, LOCKS, KT_PER,
                     BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, B_TMA: gl.constexpr,
                     EPI: gl.constexpr, CONSUMER_REGS: gl.constexpr, CLUSTER: gl.constexpr = 1,
                     CLUSTER_PTX: gl.constexpr = 0, BLOCK_N2: gl.constexpr = 0, FIT_M: gl.constexpr = 0,
                     FIT_N: gl.constexpr = False, SPLIT: gl.constexpr = 1, LIGHT_PTX: gl.constexpr = 0,
                     FUSED: gl.constexpr = True):
    """a_desc: host descriptor over A (M, K) with [BLOCK_M, BLOCK_K] boxes; c_desc over C (M, N) with
    [BLOCK_M / 2, BLOCK_N] boxes (two consumer warpgroups) or, for BLOCK_M 64, [64, BLOCK_N] (one; FIT_M 0 or
    1); b_desc over B (K, N) with [BLOCK_K, BLOCK_N] boxes (read only with ``B_TMA``;
    otherwise B is read through the pointer ``B``, row stride SB8 * 8 elements, N8 * 8 == N columns).  C also as
    a pointer with row stride ``scm`` for ``EPI`` 1.  ``CLUSTER`` 2 (``B_TMA``, ``EPI`` 0; b_desc's boxes
    [BLOCK_K, BLOCK_N / 2]): compiled and launched through ``kernels/_ptx_cluster.py`` only, an even number of
    programs; ``CLUSTER_PTX``: that rewrite's version (a new one compiles anew).  ``BLOCK_N2`` > 0 (``B_TMA``, ``EPI``
    0, ``CLUSTER`` 1): output tiles of BLOCK_N + BLOCK_N2 columns (Gluon's shapes are powers of two: 192 as 128 + 64),
    the last BLOCK_N2 through b2_desc's [BLOCK_K, BLOCK_N2] and c2_desc's [BLOCK_M / 2, BLOCK_N2] boxes, a second
    buffer and accumulator (b2_desc and c2_desc are not read otherwise).  ``FIT_M`` 1 (M >= BLOCK_M): the last tile
    row moved up to end at row M; 2 (M >= BLOCK_M / 2; a_desc's boxes [BLOCK_M / 2, BLOCK_K], two a step): each half
    row moved up to end at M at most; ``FIT_N`` (N >= the tile's columns, B by TMA): the last tile column moved left to
    end at column N (``_origin``).  ``SPLIT`` > 1 (``EPI`` 1, ``CLUSTER`` 1, ``BLOCK_N2`` 0): each tile's K steps in
    SPLIT chunks of ``KT_PER`` (the last one shorter, none empty), each a work item, their fp32 partials through ``W``
    (SPLIT x M x N) and, with ``FUSED``, summed by the warpgroup that completes a tile's rows (counted in ``LOCKS``,
    two int32 a tile, zero between calls); without, by the host's second kernel (``matmul_splitk.sum_partials``).
    ``LIGHT_PTX`` (``CLUSTER`` 1): the version of ``kernels/_ptx_barriers.py``, whose rewrite
    then builds this kernel without the consumers' warpgroup barriers before their slot releases (read nowhere in the
    kernel: the host's ``_matmul_gluon.LIGHT_TILES``)."""
    gl.static_assert(CLUSTER == 1 or (B_TMA and EPI == 0), "CLUSTER 2 reads B by TMA and stores by TMA")
    gl.static_assert(BLOCK_N2 == 0 or (B_TMA and EPI == 0 and CLUSTER == 1), "BLOCK_N2: B by TMA, TMA stores")
    gl.static_assert(SPLIT == 1 or (EPI == 1 and CLUSTER == 1 and BLOCK_N2 == 0), "SPLIT: plain stores, unclustered")
    dtype: gl.constexpr = a_desc.dtype
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0] * (2 if FIT_M == 2 else 1)
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    CONSUMERS: gl.constexpr = BLOCK_M // ROWS
    gl.static_assert(CONSUMERS == 2 or (CONSUMERS == 1 and FIT_M != 2), "one consumer: FIT_M 0 or 1")
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N + BLOCK_N2)
    a_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    if EPI == 0:
        c_s = gl.allocate_shared_memory(dtype, [2, ROWS, BLOCK_N], c_desc.layout)
    else:
        c_s = gl.allocate_shared_memory(dtype, [2, 8, BLOCK_N], c_desc.layout)  # unused
    if BLOCK_N2 > 0:
        b2_s = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N2], b2_desc.layout)
        c2_s = gl.allocate_shared_memory(dtype, [2, ROWS, BLOCK_N2], c2_desc.layout)
    else:  # unused
        b2_s = b_s
        c2_s = c_s
    bar: gl.constexpr = mbarrier.MBarrierLayout()
    a_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    b_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar)
    for i in gl.static_range(STAGES):
        mbarrier.init(a_ready.index(i), count=1)
        mbarrier.init(b_ready.index(i), count=128)  # one cp.async arrival per producer thread
        mbarrier.init(empty.index(i), count=CONSUMERS * CLUSTER)  # released by every consumer (of both CTAs)
    # (the partitions written out twice: Gluon 3.6 builds them only from literals, not from a list or an argument
    # tuple held in a variable)
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_producer, (a_desc, b_desc, b2_desc, B, M, N, K, N8, SB8, a_s, b_s, b2_s, a_ready, b_ready, empty,
                         num_pid_m, num_pid_n, GROUP_M, STAGES, B_TMA, CLUSTER, BLOCK_N2, FIT_M, FIT_N, KT_PER,
                         SPLIT)),
            (_consumer0, (c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty,
                          num_pid_m, num_pid_n, GROUP_M, STAGES, B_TMA, EPI, CLUSTER, BLOCK_N2, FIT_M, FIT_N, W,
                          LOCKS, KT_PER, SPLIT, FUSED)),
            (_consumer1, (c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty,
                          num_pid_m, num_pid_n, GROUP_M, STAGES, B_TMA, EPI, CLUSTER, BLOCK_N2, FIT_M, FIT_N, W,
                          LOCKS, KT_PER, SPLIT, FUSED)),
        ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
    else:  # one consumer warpgroup owns the tile's BLOCK_M (64) rows
        gl.warp_specialize([
            (_producer, (a_desc, b_desc, b2_desc, B, M, N, K, N8, SB8, a_s, b_s, b2_s, a_ready, b_ready, empty,
                         num_pid_m, num_pid_n, GROUP_M, STAGES, B_TMA, CLUSTER, BLOCK_N2, FIT_M, FIT_N, KT_PER,
                         SPLIT)),
            (_consumer0, (c_desc, c2_desc, C, M, N, K, scm, a_s, b_s, b2_s, c_s, c2_s, a_ready, b_ready, empty,
                          num_pid_m, num_pid_n, GROUP_M, STAGES, B_TMA, EPI, CLUSTER, BLOCK_N2, FIT_M, FIT_N, W,
                          LOCKS, KT_PER, SPLIT, FUSED)),
        ], [4], [CONSUMER_REGS])
