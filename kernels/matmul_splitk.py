"""Split-K GEMM for decode-sized products (M <= 64): ``C = A @ B`` with B's K range cut into SPLIT chunks.

With M this small the work is reading B once (memory-bound), and an (M, N) grid alone has too few
programs to keep every SM's loads in flight (N = 4096 in 64-column tiles: 64 programs on 132 SMs).
Each program here reduces one K chunk of one (BLOCK_M, BLOCK_N) tile into an fp32 workspace
(SPLIT, M, N); the last program of each tile to finish sums the chunks and casts (FUSED_DEFAULT),
or else a second kernel does, through pointer loads (kernels.matmul takes it only where the TMA route cannot run).
``matmul_splitk_tma`` is the tensor-descriptor (TMA) kernel for the same products, the default route: unsplit tiles
32, 64 or 128 columns wide (or split), A's box as many rows as M needs, for M <= SWAP_MAX_M the tile computed
transposed (on wgmma), A by pointer loads up to A_PTR_MAX_M, and through two overlapping windows of its first and last
rows where the box would be zero-filled for many rows past M (``a_windows``); where it splits K, its fp32 partials are
summed by a second kernel (``TMA_SPLIT_FUSED`` False since session 43; True: by each tile's last program).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._checks import (
    arrival_counters,
    cdiv,
    interpreting,
    mma,
    next_pow2,
    pow2_split,
    set_triton_allocator,
    tma_aligned,
)


@triton.jit
def _splitk_partial(A, B, W, M, N, K, K_PER, sam, sak, sbk, sbn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr,
                    C=None, LOCKS=None, SPLIT=1, scm=0, scn=0, FUSED: tl.constexpr = False):
    # FUSED: the last program of a tile to finish (a per-tile arrival counter) sums the SPLIT fp32 partials
    # from W and writes C, then resets its counter to 0 for the next call: no second kernel.
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    s = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = s * K_PER
    k_hi = tl.minimum(k_lo + K_PER, K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        a = tl.load(A + offs_m[:, None].to(tl.int64) * sam + offs_k[None, :] * sak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(B + offs_k[:, None].to(tl.int64) * sbk + offs_n[None, :] * sbn,
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = mma(a, b, acc, DOT_F32)
    tl.store(W + (s * M + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])
    if FUSED:
        tile = pid_m * tl.num_programs(0) + pid_n
        tl.debug_barrier()  # every thread's partial stored before the release below
        arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for t in range(SPLIT):
                total += tl.load(W + (t * M + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :],
                                 mask=m_ok[:, None] & n_ok[None, :], other=0.0, cache_modifier=".cg")
            tl.store(C + offs_m[:, None].to(tl.int64) * scm + offs_n[None, :] * scn, total.to(C.dtype.element_ty),
                     mask=m_ok[:, None] & n_ok[None, :])
            tl.atomic_xchg(LOCKS + tile, 0, sem="relaxed", scope="gpu")


@triton.jit
def _splitk_reduce(W, C, M, N, SPLIT: tl.constexpr, scm, scn, BLOCK: tl.constexpr):
    # C = the sum of W's SPLIT (M, N) fp32 planes, BLOCK elements a program (SPLIT a constexpr: every plane's load in
    # flight at once)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M * N
    acc = tl.zeros([BLOCK], tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(W + s * M * N + offs, mask=ok, other=0.0)
    m = offs // N
    n = offs % N
    tl.store(C + m.to(tl.int64) * scm + n * scn, acc.to(C.dtype.element_ty), mask=ok)


@triton.jit
def _a_tile(A, a_desc, M, K, sam, off_m, kt, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, A_PTR: tl.constexpr,
            A_WIN: tl.constexpr = False):
    # A's (BLOCK_M, BLOCK_K) tile at K tile kt: through its TMA box, or (A_PTR: A is the raw pointer) by masked loads,
    # so the box's rows past M are not zero-filled by the TMA unit; A_WIN: two windows of BLOCK_M / 2 rows, the first
    # and the last rows of A, through a rank-3 descriptor (2, BLOCK_M / 2, K) whose outer stride is M - BLOCK_M / 2
    # rows (overlapping, all in bounds)
    if A_WIN:
        return a_desc.load([0, 0, kt * BLOCK_K]).reshape([BLOCK_M, BLOCK_K])
    elif A_PTR:
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = kt * BLOCK_K + tl.arange(0, BLOCK_K)
        return tl.load(A + rows[:, None].to(tl.int64) * sam + cols[None, :],
                       mask=(rows[:, None] < M) & (cols[None, :] < K), other=0.0)
    else:
        return a_desc.load([off_m, kt * BLOCK_K])


@triton.jit
def _c_tile(C, M, N, scm, off_m, off_n, ROWS: tl.constexpr, COLS: tl.constexpr, A_WIN: tl.constexpr = False):
    # pointers into C of the (ROWS, COLS) tile at (off_m, off_n), and its in-bounds mask.  A_WIN (A read through two
    # windows, one program along M): tile row r < ROWS / 2 is row r, row r >= ROWS / 2 is row M - ROWS + r, masked
    # where the first window has it, so each row is stored once
    r = tl.arange(0, ROWS)
    rows = off_m + r
    if A_WIN:
        rows = tl.where(r < ROWS // 2, r, M - ROWS + r)
    cols = off_n + tl.arange(0, COLS)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if A_WIN:
        mask = mask & ((r < ROWS // 2) | (rows >= ROWS // 2))[:, None]
    return C + rows[:, None].to(tl.int64) * scm + cols[None, :], mask


@triton.jit
def _splitk_tma(A, B, W, C, LOCKS, M, N, K, KT_PER, sam, sbk, scm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
                HOST_DESC: tl.constexpr, DOT_F32: tl.constexpr, SWAP_AB: tl.constexpr = False,
                A_PTR: tl.constexpr = False, A2=None, BLOCK_M2: tl.constexpr = 0, A_WIN: tl.constexpr = False,
                FUSED: tl.constexpr = True):
    # Tensor-descriptor (TMA) version of _splitk_partial with the fused reduction: program (pid_n, pid_m, s)
    # reduces K tiles [s * KT_PER, (s + 1) * KT_PER) of one (BLOCK_M, BLOCK_N) tile.  SPLIT == 1: the tile is
    # written to C directly (an unsplit, non-persistent GEMM).  Otherwise the fp32 partial goes to W (SPLIT, M, N)
    # and the last program of the tile to arrive adds the other SPLIT - 1 partials to its own (all loads in
    # flight at once: SPLIT is a constexpr) and writes C.  HOST_DESC: A and B are host-built TensorDescriptors
    # (no descriptor written by every program at its start).  SWAP_AB: the tile is computed transposed, B's tile
    # (BLOCK_N rows) as the product's M side and A's (BLOCK_M, the small M) as its N side, so BLOCK_N >= 64 runs on
    # wgmma straight from shared memory whatever M is (else M < 64 runs on mma.sync through registers).  BLOCK_M2
    # (SWAP_AB, SPLIT == 1, one program along M): A's rows past BLOCK_M through a second box of BLOCK_M2 rows (A2),
    # so 48 rows take boxes of 32 + 16 rather than one of 64 zero-filled past M.  A_WIN (HOST_DESC, one program along
    # M): A is a rank-3 descriptor of two overlapping windows, its first and last BLOCK_M / 2 rows (_a_tile), the
    # tile's rows stored back to their rows of C (_c_tile).  FUSED False (SPLIT > 1): the partial stored only, summed
    # by _splitk_reduce after.
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    s = tl.program_id(2)
    if HOST_DESC or A_PTR:  # noqa: SIM108 (constexpr branch) a host-built descriptor, or the raw pointer (A_PTR)
        a_desc = A
    else:
        a_desc = tl.make_tensor_descriptor(A, [M, K], [sam, 1], [BLOCK_M, BLOCK_K])
    if HOST_DESC:
        b_desc = B
        a2_desc = A2
    else:
        b_desc = tl.make_tensor_descriptor(B, [K, N], [sbk, 1], [BLOCK_K, BLOCK_N])
        if BLOCK_M2 > 0:
            a2_desc = tl.make_tensor_descriptor(A, [M, K], [sam, 1], [BLOCK_M2, BLOCK_K])
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    kt_lo = s * KT_PER
    kt_hi = tl.minimum(kt_lo + KT_PER, tl.cdiv(K, BLOCK_K))
    if SWAP_AB:  # accumulated transposed: (BLOCK_N, BLOCK_M), and (BLOCK_N, BLOCK_M2) for the second box
        acc_t = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
        if BLOCK_M2 > 0:
            acc_t2 = tl.zeros([BLOCK_N, BLOCK_M2], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for kt in range(kt_lo, kt_hi):
        a = _a_tile(A, a_desc, M, K, sam, off_m, kt, BLOCK_M, BLOCK_K, A_PTR, A_WIN)
        b = b_desc.load([kt * BLOCK_K, off_n])
        if SWAP_AB:
            acc_t = mma(b.T, a.T, acc_t, DOT_F32)
            if BLOCK_M2 > 0:
                a2 = a2_desc.load([off_m + BLOCK_M, kt * BLOCK_K])
                acc_t2 = mma(b.T, a2.T, acc_t2, DOT_F32)
        else:
            acc = mma(a, b, acc, DOT_F32)
    if SWAP_AB:
        acc = acc_t.T
        if BLOCK_M2 > 0:  # the second box's rows, stored here (SPLIT == 1)
            c2_ptrs, mask2 = _c_tile(C, M, N, scm, off_m + BLOCK_M, off_n, BLOCK_M2, BLOCK_N)
            tl.store(c2_ptrs, acc_t2.T.to(C.dtype.element_ty), mask=mask2)
    c_ptrs, mask = _c_tile(C, M, N, scm, off_m, off_n, BLOCK_M, BLOCK_N, A_WIN)
    if SPLIT == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
    else:
        w_ptrs, _ = _c_tile(W, M, N, N, off_m, off_n, BLOCK_M, BLOCK_N, A_WIN)  # the tile in W's first (M, N) plane
        tl.store(w_ptrs + s.to(tl.int64) * M * N, acc, mask=mask)
        if FUSED:
            tile = pid_m * tl.num_programs(0) + pid_n
            tl.debug_barrier()  # every thread's partial stored before the release below
            arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:
                for t in tl.static_range(SPLIT):
                    others = mask & (tl.full([1, BLOCK_N], t, tl.int32) != s)  # its own partial is in acc
                    # t's plane: an int64 scalar whatever M is (M == 1 reaches the kernel as a constexpr int)
                    acc += tl.load(w_ptrs + tl.full([], t, tl.int64) * M * N, mask=others, other=0.0,
                                   cache_modifier=".cg")
                tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
                tl.atomic_xchg(LOCKS + tile, 0, sem="relaxed", scope="gpu")


# (BLOCK_N, BLOCK_K, num_warps, num_stages); BLOCK_M = next power of two >= M (>= 16)
SPLITK_CONFIG: tuple[int, int, int, int] = (64, 128, 4, 4)
# reduce in the last-arriving program instead of a second kernel (H100: 1x4096x4096 8.62 vs 8.96 us with the
# same tiles, 16x14336x4096 44.4 vs 44.5 us; kernels/NOTES.md 2026-11-24 session 5)
FUSED_DEFAULT = True
# matmul_splitk_tma's K-split partials summed by a second kernel (_splitk_reduce, REDUCE_BLOCK elements a program, every
# plane's load in flight), not by each tile's last program (True), whose arrival atomic and lone reads of the other
# partials cost more than a launch.  H200 session 43 (calls 4-5), same tiles and split: 1.07-1.14x the fused sum
# (64x512x14336 in 8 chunks 7.11 us against 9.29), 256 elements a program another 1-9 % (6.68 us; cuBLAS 7.02); the
# transposed tiles (M <= 48) 1.13-1.36x.
TMA_SPLIT_FUSED = False
REDUCE_BLOCK = 256
_LOCKS: dict[tuple[torch.device, int], torch.Tensor] = {}  # per-tile arrival counters, a buffer per (device, stream)


def choose_split(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, num_sms: int) -> int:
    """About two programs per SM, each chunk at least 4 K tiles (H100, 1x4096x4096: split 4 ran 8.9 us,
    split 8 12.1 us, split 16 13.8 us)."""
    tiles = cdiv(m, block_m) * cdiv(n, block_n)
    want = max(1, round(2 * num_sms / tiles))
    return max(1, min(want, k // (4 * block_k), 32))


def matmul_splitk(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, num_sms: int, *,
                  split: int | None = None, config: tuple[int, int, int, int] | None = None,
                  fused: bool | None = None) -> torch.Tensor:
    """``c = a @ b`` through the split-K kernels (inputs already validated by ``kernels.matmul.matmul``)."""
    m, k = a.shape
    n = b.shape[1]
    bn, bk, warps, stages = config or ((16, 16, 4, 1) if interpreting() else SPLITK_CONFIG)
    bm = max(16, next_pow2(m))
    split = split or choose_split(m, n, k, bm, bn, bk, num_sms)
    k_per = cdiv(cdiv(k, split), bk) * bk
    split = cdiv(k, k_per)  # every chunk non-empty
    work = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    extra = {} if interpreting() else {"num_warps": warps, "num_stages": stages}
    grid = (cdiv(n, bn), cdiv(m, bm), split)
    fused = (FUSED_DEFAULT if fused is None else fused) and split > 1
    if fused:
        extra.update(C=c, LOCKS=arrival_counters(_LOCKS, a.device, grid[0] * grid[1]), SPLIT=split,
                     scm=c.stride(0), scn=c.stride(1), FUSED=True)
    _splitk_partial[grid](
        a, b, work, m, n, k, k_per, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, DOT_F32=interpreting(), **extra)
    if not fused:
        sum_partials(work, c, 1024)
    return c


def sum_partials(work: torch.Tensor, c: torch.Tensor, block: int | None = None) -> None:
    """``c`` = the sum of ``work``'s (split, M, N) fp32 planes, through ``_splitk_reduce`` (``block`` elements a
    program, default REDUCE_BLOCK): the second kernel of the split GEMMs (the TMA kernel's, the Gluon kernel's, the
    pointer path's) where their programs do not sum the partials themselves."""
    split, m, n = work.shape
    block = block or REDUCE_BLOCK
    _splitk_reduce[(cdiv(m * n, block),)](work, c, m, n, split, c.stride(0), c.stride(1), BLOCK=block)


# The TMA kernel's narrow tiles for SWAP_MAX_M < M <= 64 (16 < M before session 15; matmul_splitk_tma): (split,
# BLOCK_N, BLOCK_K, num_warps, num_stages, host descriptors); BLOCK_M = the next power of two >= M, 16 to 64 (session
# 14; 64 before).  None: the TMA route off (M > 16 through the persistent kernel, M <= 16 through split-K).
# H100, 64x4096x4096 (kernels/NOTES.md session 6, call 1): unsplit 64x32 tiles with host-built descriptors
# 8.8 us vs 12.4 (persistent kernel) and cuBLAS 8.4; the same tiles with in-kernel descriptors 11.5; every
# split (2-8, 64-256 columns) slower (10.7-36.7).
SPLITK_TMA_CONFIG: tuple | None = (1, 32, 128, 4, 6, True)
# Its unsplit tiles' K split where they leave SMs idle and K is at least NARROW_SPLIT_MIN_K (``default_tma_split``):
# the largest power of two up to NARROW_SPLIT_MAX whose programs stay within one wave, each chunk at least
# NARROW_SPLIT_MIN_K_TILES K tiles (kernels/NOTES.md).  H200 session 42 (calls 7-8, fused sums, x unsplit):
# 64x1024x4096 in 4 chunks 1.21, 64x1024x14336 2.17, 64x2048x4096 in 2 1.11; 64x1024x2048 in 2 0.93 (hence the K
# bound).  Session 43, the partials summed by a second kernel (TMA_SPLIT_FUSED): up to 8 chunks (64x512x14336 6.68 us
# against 8.86 in 4, cuBLAS 7.02), and where 64-column tiles split as these make at least as many programs,
# MID_SPLIT_CONFIG's (``narrow_split_config``: A read half as often; 64x1024x14336 in 8 chunks of 64 columns 8.23 us
# against 9.19 in 4 of 32, cuBLAS 9.75).
NARROW_SPLIT_MAX, NARROW_SPLIT_MIN_K_TILES, NARROW_SPLIT_MIN_K = 8, 8, 4096
# (BLOCK_N, BLOCK_K, num_warps, num_stages, host descriptors) of those 64-column split tiles; None: never
MID_SPLIT_CONFIG: tuple | None = (64, 128, 4, 4, True)
# Wider unsplit tiles, widest first, for any M <= 64 (ahead of split-K and of SPLITK_TMA_CONFIG's narrow tiles):
# taken when they fill at least WIDE_MIN_FILL of the waves they make (tiles / (waves x SMs)).  Session 14 (A's box
# fitted to M; kernels/NOTES.md, calls 3-5), graph-timed, H100 / H200 against the previous default: 16x14336x4096 in
# 112 128-column tiles 40.8 / 28.6 us against 43.2 / 35.8 (cuBLAS 46.1 / 29.8), 16x11008 (86 tiles, 0.65 of a wave)
# 31.6 / 22.9 against 35.5 / 30.0 (the persistent kernel), 16x28672 (224 tiles, two waves) 80.9 / 56.1 against
# 83.9 / 70.4, 16x8192 in 128 64-column tiles 24.8 / 18.3 against split-K's 26.8 / 20.1, 16x6144 (96 of them)
# 19.5 / 13.1 against 23.2 / 15.8; at 16x4096 (64 such tiles) split-K stayed ahead (9.2 against 11.9 us, H100).
# Since session 15 these tiles are computed transposed for M <= SWAP_MAX_M (swapped_tma_config).
WIDE_TMA_CONFIGS: tuple[tuple, ...] = ((1, 128, 128, 4, 4, True), (1, 64, 128, 4, 6, True))
WIDE_MIN_FILL = 0.65
# The largest M that kernels.matmul sends to split-K (kernels.matmul.use_splitk, where the TMA route cannot run).
SPLITK_MAX_M = 16
# Where nothing above applies (M > SWAP_MAX_M past one wave of narrow tiles; for M <= SWAP_MAX_M the second step of
# swapped_tma_config), the first of WIDE_TMA_CONFIGS filling at least LAST_RESORT_MIN_FILL of its waves (session 14,
# before the tiles were transposed, calls 13-14, H100 / H200 against the persistent kernel:
# 16x10240x8192 in 80 128-column tiles, 0.61 of a wave, 56.8 / 41.1 against 62.2 / 52.1 us, 1x10240x8192 56.4 / 40.6
# against 67.8 / 61.7, 16x9216x4096 (72 tiles, 0.55) 27.3 / 20.9 against 30.6 / 26.6, 64x10240x8192 58.7 / 41.7
# against 59.7 / 44.1, 32x5120x4096 in 80 64-column tiles 18.0 / 17.6 against 22.2 / 19.4).  Against split-K it
# kept WIDE_MIN_FILL then (16x5120x4096: 12.9 against 14.8 us on the H100 but 12.2 against 10.7 on the H200); the
# transposed tiles ran it in 11.6 / 8.1 us in session 15 (calls 6 / 4), split-K 14.9 / 11.0.
LAST_RESORT_MIN_FILL = 0.5
# Session 15 (kernels/NOTES.md, calls 2-5): for M <= SWAP_MAX_M the tiles are computed transposed (SWAP_AB: wgmma
# from shared memory, B's tile the product's M side) and that route replaces split-K and the narrow tiles.  H100,
# graph-timed, x cuBLAS with B resident in L2 between replays / streamed from DRAM (the call cycling over copies of
# B), against the previous default: 32x4096x4096 (64 64-column tiles) 1.01 / 1.03 against 0.70 / 0.99, 8x4096 0.94 /
# 1.02 against 0.92 / 0.88 (split-K), 1x4096 1.08 / 1.03 against 1.04 / 0.91, 32x5120 1.12 / 1.01 against 0.76 /
# 0.92, 16x4096x512 1.11 / 1.04 against 0.53 / 0.71 (the persistent kernel).  Above M = 48 the unswapped tiles stayed
# ahead then (at 128 programs of 32 columns against 64 of 64): 56x4096 0.87 against 0.82, 64x4096 0.96 against 0.85.
# Session 47 (H200 GPU-66983945, calls 6 and 8, B resident in L2): at 49 <= M <= 55, where A's 64-row box would be
# zero-filled for 9-15 rows and the transposed tiles read A through its two windows (a_windows; session 18), they ran
# 1.03-1.34x the unswapped tiles: 49 / 50 / 52 / 54 / 55 x 4096 x 4096 0.80 / 0.75 / 0.76 / 0.75 / 0.78 -> 0.95 / 0.99
# / 1.02 / 0.98 / 1.00x cuBLAS, 49x4096x14336 0.88 -> 1.01, 49x6144x4096 0.93 -> 1.02, 52x5120x4096 0.80 -> 0.88,
# 49x2048x4096 (split 4) 1.11 -> 1.19, 49x14336x4096 level (0.99).  At 56-59 (8 or fewer rows zero-filled, no
# windows) mixed: 56x4096 1.08, 57 0.97, 58 1.07, 59 0.97, 57x4096x14336 1.03, 59x6144 1.00 (and session 15's H100 56
# above): the rule stops at 55.
SWAP_MAX_M = 55
# A read by masked pointer loads (cp.async) instead of its TMA box up to this M (A's box 16 rows: those past M,
# zero-filled by the TMA unit, cost; H100 / H200 1x4096x4096 8.16 / 7.65 us against 9.90 / 8.19 with the box,
# 8x4096 8.54 / 7.65 against 8.93 / 7.68).  Larger M mixed: 20x4096 9.21 against 10.15 us on the H100 but 9.29
# against 8.41 on the H200, 40x4096 13.31 against 13.13 / 13.74 against 11.18.
A_PTR_MAX_M = 8
# num_stages of the swapped 64-column tiles when their K is split (swap_split: no more tiles than a quarter of the
# SMs, N <= 2112 on 132)
SWAP_SPLIT_STAGES = 4
# at most this many K chunks (SPLIT is a constexpr: the reducing program unrolls one load per chunk; 57 chunks at
# BLOCK_M 64 spilled 3.8 KB in an offline sm_90 build, 16-33 none)
SWAP_MAX_SPLIT = 16
# Where K is split, beyond half the SMs up to a whole wave if each chunk keeps at least this many K tiles
# (``swap_split``; session 43, the partials summed by a second kernel: TMA_SPLIT_FUSED).  H200 call 7, x half the SMs
# (x cuBLAS after): 16x2048x14336 4 chunks 1.28 (0.84 -> 1.08), 32x1024x14336 8 chunks 1.25 (1.24), 40x1024x8192
# 1.18, 32x2048x4096 1.16, 8x1024x8192 1.21, 1x2048x4096 1.19 (1.48), 4x2048x8192 1.32.  None: half the SMs at most.
SWAP_WAVE_MIN_K_TILES: int | None = 8
# 32 < M <= this, the tile transposed and unsplit: A through two TMA boxes of 32 and 16 rows instead of one of 64
# zero-filled past M (session 15, calls 10-11, x cuBLAS hot / cold, H100 / H200: 33x4096x4096 0.75 / 0.97 against
# 0.57 / 0.90, 0.97 / 1.22 against 0.76 / 1.00; 40x4096 0.82 / 0.97 against 0.69 / 1.00, 0.99 / 1.21 against 0.94 /
# 1.17; 40x5120 0.99 / 0.99 against 0.79 / 0.96, 0.86 / 0.99 against 0.65 / 0.86).  At M = 48 (16 zero-filled rows)
# mixed: 48x4096 0.76 / 0.98 against 0.70 / 1.02 on the H100, 1.03 / 1.20 against 1.07 / 1.24 on the H200.  0: off.
A_TWO_BOXES_MAX_M = 40
# Transposed tiles through TMA where A's boxes would be zero-filled for more than A_WINDOWS_MIN_ZERO_ROWS rows past M
# (``a_windows``): A read as two windows of half the box's rows, A's first and last rows, through one rank-3
# descriptor with an overlapping outer stride, so no row of the box is past M (``_splitk_tma``'s A_WIN; session 18).
# x the boxes' speed hot / cold, H100 GPU-6561e1c2 (call 7): 20x4096x4096 1.07 / 1.00, 23x4096 1.06 / 1.00, 33x4096
# 1.03 / 1.04 (33x3072 1.00 / 0.99), 47x4096 1.20 / 1.00, 48x4096 1.08 / 1.00, 33x2048 (K split 2) 1.25 / 1.05; at
# M = 40 against two boxes (8 rows zero-filled) 0.95-0.98 / 0.97-1.04 at K = 4096 (1.02 at 40x4096x14336 and
# 40x14336x4096).  H200 GPU-9d6edd73 (call 6): 20x5120 1.14 / 1.01, 33x4096 1.10 / 1.04, 47x5120 1.26 / 1.15, 48x4096
# 1.07 / 1.01, M = 40 0.97-1.12; unsplit at M = 9, 12, 24 (7, 4, 8 rows) 0.96-1.01 (24x2048, K split 2: 1.05 / 1.03,
# not taken: the rule counts rows, not splits).
A_WINDOWS = True
A_WINDOWS_MIN_ZERO_ROWS = 8


def two_a_boxes(m: int, split: int) -> bool:
    """Whether the box route reads A through two boxes, 32 and 16 rows (unsplit, 32 < M <= A_TWO_BOXES_MAX_M)."""
    return split == 1 and 32 < m <= min(48, A_TWO_BOXES_MAX_M)


def box_rows_zero_filled(m: int, split: int) -> int:
    """Rows of A's TMA boxes past M on the box route: one box of ``box_rows`` rows, or 32 + 16 (``two_a_boxes``)."""
    return (48 if two_a_boxes(m, split) else box_rows(m)) - m


def a_windows(m: int, split: int = 1) -> bool:
    """Whether the transposed TMA tiles read A through two windows (``A_WINDOWS``; A through its TMA box, above
    A_PTR_MAX_M): where the boxes would be zero-filled for more than A_WINDOWS_MIN_ZERO_ROWS rows past M (unsplit,
    17 <= M <= 23, 33 <= M <= 39 and 41 <= M <= 55; split, 17 <= M <= 23 and 33 <= M <= 55; the transposed tiles
    run up to M = SWAP_MAX_M).  Never where M is at most half the box (the second window's outer stride M - box / 2
    would not be positive)."""
    return (A_WINDOWS and m > A_PTR_MAX_M and 2 * m > box_rows(m)
            and box_rows_zero_filled(m, split) > A_WINDOWS_MIN_ZERO_ROWS)


def tma_splitk_ok(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """Row-major A, B, C with 16-byte aligned pitches (B's descriptor is [K, N])."""
    return tma_aligned(a, b, c)


def tma_tiles(m: int, n: int, block_n: int) -> int:
    """Output tiles of the TMA kernel's configs for M <= 64 (one 64-row box along M, ``block_n`` columns)."""
    return cdiv(m, 64) * cdiv(n, block_n)


def narrow_chunks(tiles: int, k: int, block_k: int, num_sms: int, most: int | None = None) -> int:
    """K chunks of the TMA kernel's split tiles at M > SWAP_MAX_M: the largest power of two up to ``most`` (default
    NARROW_SPLIT_MAX; 1 where K < NARROW_SPLIT_MIN_K) whose programs fit one wave, chunks of NARROW_SPLIT_MIN_K_TILES
    K tiles or more."""
    most = (most or NARROW_SPLIT_MAX) if k >= NARROW_SPLIT_MIN_K else 1
    return pow2_split(tiles, cdiv(k, block_k), num_sms, most, NARROW_SPLIT_MIN_K_TILES)


def default_tma_split(m: int, n: int, k: int, num_sms: int) -> int:
    """Split count of the default TMA split-K path (SPLITK_TMA_CONFIG's split, cut so the programs stay one wave
    and every chunk has >= 4 K tiles), or 0 when that leaves fewer than 2 chunks (``default_tma_config``'s last
    resort instead, else the persistent kernel; a split-1 config: 0 past one wave of its tiles, else as many chunks as
    NARROW_SPLIT_MAX, NARROW_SPLIT_MIN_K_TILES and NARROW_SPLIT_MIN_K allow)."""
    if SPLITK_TMA_CONFIG is None:
        return 0
    want, bn, bk = SPLITK_TMA_CONFIG[:3]
    tiles = tma_tiles(m, n, bn)
    if want == 1:  # one tile per program, one wave; K split where the tiles leave SMs idle (NARROW_SPLIT_MAX)
        return 0 if tiles > num_sms else narrow_chunks(tiles, k, bk, num_sms)
    split = min(want, num_sms // tiles, cdiv(k, bk) // 4)
    return split if split >= 2 else 0


def wide_tma_config(m: int, n: int, num_sms: int, min_fill: float = WIDE_MIN_FILL) -> tuple | None:
    """The first of WIDE_TMA_CONFIGS whose tiles fill at least ``min_fill`` of the waves they make, else None."""
    for cfg in WIDE_TMA_CONFIGS:
        tiles = tma_tiles(m, n, cfg[1])
        if tiles >= min_fill * cdiv(tiles, num_sms) * num_sms:
            return cfg
    return None


def box_rows(m: int) -> int:
    """Rows of A's TMA box (BLOCK_M): the next power of two >= M, 16 to 64."""
    return max(16, min(64, next_pow2(m)))


def swapped_tma_config(m: int, n: int, k: int, num_sms: int) -> tuple:
    """The default config for M <= SWAP_MAX_M: WIDE_TMA_CONFIGS' tiles computed transposed (SWAP_AB), the first
    filling WIDE_MIN_FILL of its waves, else LAST_RESORT_MIN_FILL, else the 64-column ones, their K split where
    they are no more than a quarter of the SMs (``swap_split``); A by pointer loads up to M = A_PTR_MAX_M
    (``matmul_splitk_tma`` reads A through two boxes, 32 and 16 rows, at 32 < M <= A_TWO_BOXES_MAX_M unsplit, and
    through two overlapping windows where ``a_windows``)."""
    cfg = wide_tma_config(m, n, num_sms) or wide_tma_config(m, n, num_sms, LAST_RESORT_MIN_FILL)
    split = 1
    if cfg is None:
        cfg = WIDE_TMA_CONFIGS[-1]
        split = swap_split(n, k, cfg[1], cfg[2], num_sms)
    _, bn, bk, warps, stages, host = cfg[:6]
    if split > 1:
        stages = SWAP_SPLIT_STAGES
    return (split, bn, bk, warps, stages, host, True, m <= A_PTR_MAX_M)


def swap_split(n: int, k: int, block_n: int, block_k: int, num_sms: int) -> int:
    """K chunks for ``tiles`` = cdiv(n, block_n) tiles: as many as keep the programs within half the SMs, each
    chunk at least 4 K tiles, at most SWAP_MAX_SPLIT (1 at N = 4096 on 132 SMs: 64 tiles; 2 at N = 2048); where that
    splits, the largest power of two whose programs fit one wave with chunks of SWAP_WAVE_MIN_K_TILES K tiles if more
    (4 at N = 2048, K = 4096)."""
    tiles, k_tiles = cdiv(n, block_n), cdiv(k, block_k)
    split = max(1, min(num_sms // (2 * tiles), k_tiles // 4, SWAP_MAX_SPLIT))
    if split > 1 and SWAP_WAVE_MIN_K_TILES:  # where K is split already: not at 64 tiles (hot / cold, session 19)
        split = max(split, pow2_split(tiles, k_tiles, num_sms, SWAP_MAX_SPLIT, SWAP_WAVE_MIN_K_TILES))
    return split


def default_tma_config(m: int, n: int, k: int, num_sms: int) -> tuple | None:
    """The TMA kernel's config for an M <= 64 product on the default path.  M <= SWAP_MAX_M: always
    ``swapped_tma_config``'s.  Larger M: ``wide_tma_config``'s; else SPLITK_TMA_CONFIG (with
    ``default_tma_split``'s split) where that applies; else, instead of the persistent kernel, the first of
    WIDE_TMA_CONFIGS that fills at least LAST_RESORT_MIN_FILL of its waves (where the narrow tiles run past one
    wave, the 64-column ones fill more than half of theirs, so narrow tiles never need this step).  None: the
    persistent kernel, and always when SPLITK_TMA_CONFIG is None (the TMA route off)."""
    if SPLITK_TMA_CONFIG is None:
        return None
    if m <= SWAP_MAX_M:
        return swapped_tma_config(m, n, k, num_sms)
    wide = wide_tma_config(m, n, num_sms)
    if wide is not None:
        return wide
    split = default_tma_split(m, n, k, num_sms)
    if split:
        return narrow_split_config(m, n, k, num_sms, split)
    return wide_tma_config(m, n, num_sms, LAST_RESORT_MIN_FILL)


def narrow_split_config(m: int, n: int, k: int, num_sms: int, split: int) -> tuple:
    """SPLITK_TMA_CONFIG's tiles in ``split`` chunks (``default_tma_split``), or MID_SPLIT_CONFIG's 64-column tiles
    where those, split as the narrow ones are (``pow2_split``), make at least as many programs and more than one
    chunk (M > SWAP_MAX_M)."""
    narrow = (split, *SPLITK_TMA_CONFIG[1:])
    if split < 2 or MID_SPLIT_CONFIG is None:
        return narrow
    tiles = tma_tiles(m, n, MID_SPLIT_CONFIG[0])
    mid = narrow_chunks(tiles, k, MID_SPLIT_CONFIG[1], num_sms)
    more = mid >= 2 and tiles * mid >= tma_tiles(m, n, SPLITK_TMA_CONFIG[1]) * split
    return (mid, *MID_SPLIT_CONFIG) if more else narrow


def matmul_splitk_tma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: tuple, *,
                      fused: bool | None = None) -> torch.Tensor:
    """``c = a @ b`` through ``_splitk_tma`` (inputs validated by ``kernels.matmul.matmul``; ``tma_splitk_ok``).
    ``config`` = (split, BLOCK_N, BLOCK_K, num_warps, num_stages, host descriptors) as SPLITK_TMA_CONFIG, then
    optionally swap (the tile computed transposed: ``_splitk_tma``'s SWAP_AB, on wgmma where BLOCK_N >= 64) and
    a_ptr (A by masked pointer loads instead of its TMA box: A_PTR).  Swapped, unsplit, through TMA and 32 < M <=
    A_TWO_BOXES_MAX_M: A's rows through boxes of 32 and 16 rows (BLOCK_M2).  Swapped, through host descriptors, where
    ``a_windows``: A through two overlapping windows of its first and last rows (A_WIN) instead.  ``fused`` (default
    TMA_SPLIT_FUSED; split > 1): the partials summed by each tile's last program, else by a second kernel
    (``_splitk_reduce``)."""
    m, k = a.shape
    n = b.shape[1]
    split, bn, bk, warps, stages, host, *rest = config
    swap, a_ptr = (bool(x) for x in (*rest, False, False)[:2])
    interp = interpreting()
    # A's box as many rows as M needs (16, 32 or 64; below 64 and unswapped the product runs on mma.sync): a 64-row
    # box zero-filled beyond M cost 5-28 % at M <= 32 (session 14: 16x14336x4096 28.6 against 35.8 us on an H200,
    # 40.8 against 43.2 on an H100; 1x14336 28.3 against 39.0 / 40.1 against 41.9; 32x4096x4096 12.1 against 16.6)
    if interp:
        bn, bk = min(bn, 32), min(bk, 16)
    k_tiles = cdiv(k, bk)
    kt_per = cdiv(k_tiles, max(1, split))
    split = cdiv(k_tiles, kt_per)  # every chunk non-empty
    # transposed, through A's TMA box: two overlapping windows of A's rows where its boxes would be zero-filled for
    # many rows past M (A_WINDOWS), else at 32 < M <= A_TWO_BOXES_MAX_M unsplit boxes of 32 and 16 rows, not one of 64
    win = swap and bool(host) and not a_ptr and a_windows(m, split)
    bm2 = 16 if swap and not a_ptr and not win and two_a_boxes(m, split) else 0
    bm = 32 if bm2 else box_rows(m)
    if win:  # one program along M, both windows inside A (_c_tile's window rows ignore off_m)
        assert bm // 2 < m <= bm, (m, bm)
    grid = (cdiv(n, bn), cdiv(m, bm + bm2), split)
    work = torch.empty((split, m, n), dtype=torch.float32, device=a.device) if split > 1 else c
    fused = (TMA_SPLIT_FUSED if fused is None else fused) or split == 1
    locks = arrival_counters(_LOCKS, a.device, grid[0] * grid[1]) if split > 1 and fused else c
    if host:
        from triton.tools.tensor_descriptor import TensorDescriptor

        if win:
            half = bm // 2
            da = TensorDescriptor(a, [2, half, k], [(m - half) * a.stride(0), a.stride(0), 1], [2, half, bk])
        else:
            da = a if a_ptr else TensorDescriptor(a, [m, k], [a.stride(0), 1], [bm, bk])
        db = TensorDescriptor(b, [k, n], [b.stride(0), 1], [bk, bn])
        da2 = TensorDescriptor(a, [m, k], [a.stride(0), 1], [bm2, bk]) if bm2 else None
    else:
        set_triton_allocator()
        da, db, da2 = a, b, None
    extra = {} if interp else {"num_warps": warps, "num_stages": stages}
    _splitk_tma[grid](da, db, work, c, locks, m, n, k, kt_per, a.stride(0), b.stride(0), c.stride(0),
                      BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split, HOST_DESC=bool(host),
                      DOT_F32=interp, SWAP_AB=swap, A_PTR=a_ptr, A2=da2, BLOCK_M2=bm2, A_WIN=win, FUSED=fused,
                      **extra)
    if not fused:
        sum_partials(work, c)
    return c


__all__ = ["SPLITK_CONFIG", "SPLITK_TMA_CONFIG", "WIDE_TMA_CONFIGS", "box_rows", "choose_split", "default_tma_config",
           "default_tma_split", "matmul_splitk", "matmul_splitk_tma", "narrow_chunks", "narrow_split_config",
           "sum_partials", "swap_split", "swapped_tma_config", "tma_tiles", "wide_tma_config"]
