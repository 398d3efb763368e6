"""The TMA split kernel's 64-row tiles above SMALL_M rows: ``rows_split_config`` picks them, K split and the fp32
partials summed by a second kernel (``matmul_splitk.matmul_splitk_tma`` with ``TMA_SPLIT_FUSED`` False), where they
fill the SMs in at least ROWS_MIN_CHUNKS K chunks; ``kernels.matmul.default_tma_route`` takes them there ahead of the
Gluon kernel's 64x64 tiles (the route before).

H200 session 45 call 1 (kernels/NOTES.md; power-capped steady state, B resident in L2): M 192-2048 x N 128-1024 x
K 4096 / 8192, 56 shapes.  Where this rule takes the split tiles (36 shapes), x the route before 1.06-1.41 (geometric
mean over all 56: 1.11): 384x128x8192 1.41, 192x256x8192 1.37, 1024x256x8192 1.37, 512x512x8192 1.34, 512x512x4096
1.20, 256x1024x8192 1.10, 2048x128x8192 1.06; where it leaves the route (fewer than 4 chunks, M = 192 at N = 1024),
the split tiles ran at 0.63-1.03x it.  Off that grid (calls 2-3, M 65-1536 x N 128-768 x K 4096-16384, the rule or
its pick forced): 1.04-1.50x where it takes them (320x384x14336 1.47, 256x512x16384 1.50, 144x256x8192 1.31,
80x128x4096 1.11, 65x256x8192 1.04), the same route elsewhere (0.96-1.04x: the spread between two timings of one route
there).  Up to 16 chunks since call 5 (ROWS_MAX_CHUNKS).  Call 6 (x the route before; x cuBLAS before ->
after): 512x512x8192 1.32 (0.79 -> 1.05), 256x256x16384 1.51 (0.69 -> 1.04), 128x128x16384 1.41 (0.85 -> 1.20),
128x512x14336 1.44 (0.81 -> 1.17), 512x128x28672 1.55 (0.57 -> 0.88), 2048x128x8192 1.05 (0.82 -> 0.86), 96x256x4096
1.11 (1.05 -> 1.16).  Two stages more since call 7 (ROWS_CONFIGS); as committed (call 8), x the route before (x
cuBLAS after): 512x512x16384 1.37 (0.73 -> 1.00), 512x512x8192 1.42 (1.18), 2048x128x8192 1.38 (1.11), 128x128x16384
1.53 (1.21), 320x768x14336 1.20 (0.87), 1024x128x4096 1.19 (1.20).  Not taken (call 4): the Gluon kernel's 128x128 /
128x64 tiles split 2-8 ways with these sums, 0.21-1.02x the rule at 14 shapes.
"""

from __future__ import annotations

from kernels._checks import cdiv
from kernels.matmul_splitk import narrow_chunks, tma_tiles

ROWS_SPLIT = True  # False: never (M > SMALL_M as before session 45)
# (BLOCK_N, BLOCK_K, num_warps, num_stages, host descriptors) of the candidate tiles, BLOCK_M 64: 64x64 on K steps of
# 128 (5 stages, 160 KB) and 64x128 on K steps of 64 (6 stages, 144 KB); one program an SM (one round), so the deeper
# rings cost no occupancy.  Two stages more than calls 1-6 ran (3 / 4) since call 7: 1.04-1.26x at all ten shapes
# timed (640x192x14336 1.24, 1024x256x16384 1.25, 512x512x16384 1.26, 512x512x8192 1.06, 384x128x8192 1.04; one more
# stage 1.05-1.19x; K steps of the other width 0.94-1.12x, 8 warps 0.82-1.04x, twice the chunks over two rounds
# 0.93-1.19x).  Each in ``matmul_splitk.narrow_chunks`` K chunks up to ROWS_MAX_CHUNKS (the most power-of-two chunks
# whose programs fit one round, at least NARROW_SPLIT_MIN_K_TILES (8) K steps a chunk, K >= NARROW_SPLIT_MIN_K
# (4096)).  16 chunks where they fit (session 45 call 5, M 128-512 x N 128-512, x 8 chunks: K 14336 on 64x128 tiles
# 1.01-1.13, K 16384 / 28672 on 64x64 ones 1.15-1.37 and 64x128 ones 1.03-1.21; at K 8192, where 64x128 tiles in 16
# chunks lost, 0.93-1.00, the tie rule below keeps 64x64 ones in 8)
ROWS_CONFIGS: tuple[tuple, ...] = ((64, 128, 4, 5, True), (128, 64, 4, 6, True))
ROWS_MAX_CHUNKS = 16
# Taken where the candidate with the most programs (tiles x chunks) splits K in ROWS_MIN_CHUNKS or more chunks: in 2
# chunks or unsplit, session 45 call 1 found them 0.63-1.03x the route (384x1024x8192 in 2 chunks of 64x128 tiles
# 0.81, 1024x512x4096 1.01).  Equal programs: the first candidate whose chunks hold at most ROWS_TIE_MAX_K_TILES K
# steps, else the last (K 4096: 64x64 tiles in 4 chunks 0.98-1.05x 64x128 ones in 8; K 8192: 0.82-0.93x).
ROWS_MIN_CHUNKS = 4
ROWS_TIE_MAX_K_TILES = 8
# From ROWS_MIN_M rows (SMALL_M + 1: every M the route asks about; session 45 calls 2-3, the pick forced at M 65-160 x
# N 128-512 x K 4096 / 8192: 1.04-1.19x the route) and ROWS_MIN_N columns, and past ROWS_WIDE_N columns from
# ROWS_WIDE_MIN_M rows (192x1024x4096 / 8192 in 4 chunks of 64x128 tiles 0.97 / 1.00x the Gluon kernel's tiles in 2
# chunks; 256x1024 1.07 / 1.10; session 44 call 3: 64-row tiles split 4 ways at 65x1024x4096 0.95-1.09x)
ROWS_MIN_M, ROWS_MIN_N = 65, 128
ROWS_WIDE_N, ROWS_WIDE_MIN_M = 512, 256


def rows_candidates(m: int, n: int, k: int, num_sms: int) -> list[tuple]:
    """Those of ROWS_CONFIGS whose BLOCK_N divides N (no tile column past N: 64x128 tiles at N = 192 lost 0.91-0.98x
    where the rule first took them, session 45 call 2), as ``matmul_splitk_tma`` configs: (chunks, BLOCK_N, BLOCK_K,
    warps, stages, host)."""
    return [(narrow_chunks(tma_tiles(m, n, bn), k, bk, num_sms, ROWS_MAX_CHUNKS), bn, bk, *rest)
            for bn, bk, *rest in ROWS_CONFIGS if n % bn == 0]


def rows_pick(m: int, n: int, k: int, num_sms: int) -> tuple | None:
    """The candidate with the most programs (ties: ROWS_TIE_MAX_K_TILES), whatever its chunk count; None where no
    BLOCK_N divides N."""
    cands = rows_candidates(m, n, k, num_sms)
    if not cands:
        return None
    programs = [tma_tiles(m, n, c[1]) * c[0] for c in cands]
    most = max(programs)
    tied = [c for c, p in zip(cands, programs, strict=True) if p == most]
    for c in tied:
        if cdiv(k, c[2]) // c[0] <= ROWS_TIE_MAX_K_TILES:
            return c
    return tied[-1]


def rows_split_config(m: int, n: int, k: int, num_sms: int) -> tuple | None:
    """The split 64-row tiles' config for ``c = a @ b`` (M x K times K x N, row-major, TMA-aligned, M > SMALL_M),
    or None where the route before stays (ROWS_SPLIT off, below ROWS_MIN_M rows or ROWS_MIN_N columns, past
    ROWS_WIDE_N columns below ROWS_WIDE_MIN_M rows, or fewer than ROWS_MIN_CHUNKS chunks)."""
    if not ROWS_SPLIT or m < ROWS_MIN_M or n < ROWS_MIN_N or (n > ROWS_WIDE_N and m < ROWS_WIDE_MIN_M):
        return None
    cfg = rows_pick(m, n, k, num_sms)
    return cfg if cfg is not None and cfg[0] >= ROWS_MIN_CHUNKS else None


__all__ = ["ROWS_CONFIGS", "rows_candidates", "rows_pick", "rows_split_config"]
