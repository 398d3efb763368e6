"""Host side of the warp-specialised Gluon GEMM (``kernels/_matmul_ws.py``): eligibility, descriptors, launch.

The default for large GEMMs, and for a row-major B whose row pitch is not a multiple of 128 bytes in clusters of two
CTAs (``cluster=True``: B read by TMA, each tile multicast to both CTAs; ``matmul.MISALIGNED_B`` "ws-mc"); also
through cp.async copies (``misaligned_b="ws"``), and selectable for any eligible product (``ws=`` config).
"""

from __future__ import annotations

import torch

from kernels import _ptx_barriers, _ptx_cluster
from kernels import matmul_splitk as _sk
from kernels._checks import (
    GLUON_BUILD_ERRORS,
    arrival_counters,
    cdiv,
    gluon_build_failed,
    gluon_runnable,
    gluon_status,
    pow2_split,
    sm_count,
    tma_aligned,
)

try:  # Gluon ships with Triton >= 3.5; the kernel is written against the GPU machine's 3.6 API
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from kernels._matmul_ws import B_DESC_PARAM, consumer_rows, matmul_ws_kernel
except Exception as exc:  # another Triton whose Gluon API differs
    matmul_ws_kernel = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, EPI): EPI 0 = TMA store staged in shared memory (3 stages fit),
# 1 = plain stores from registers (4 stages fit).  BLOCK_M is split between the two consumer warpgroups.
WS_CONFIG: tuple = (128, 256, 64, 8, 3, 0)
# The kernel's narrow tiles, taken over WS_CONFIG's by default where they fill the SMs' rounds better
# (default_config): 128x128 tiles run at about NARROW_EFFICIENCY of the 128x256 tiles' rate at the same fill (H200,
# kernels/NOTES.md session 37 call 10, steady state: 1024x4096x4096, 256 narrow tiles in 1.94 rounds against 128 wide
# ones in 0.97, 0.92x; 4096x1024x4096 0.93x; 2048x2048x8192 0.94x); 2048x3072x2048 and 1536x4096x4096 (192 wide
# tiles, 1.45 rounds) ran 1.09 / 1.08x faster on them, 1024x2048x2048 1.62x.  Call 11, this rule x the wide tiles:
# 2048x3072x2048 1.12, 1536x4096x4096 1.12, 3072^3 1.07.
WS_NARROW_CONFIG: tuple = (128, 128, 64, 8, 4, 0)
NARROW_EFFICIENCY = 0.92
# 128x64 tiles on an 8-stage ring (213 KB of shared memory), for the products whose 128x128 tiles leave many SMs
# idle (H200, session 38 calls 1-2, steady state, x the 128x128 tiles: 128x4096x4096 1.72, 256x4096x4096 1.47,
# 1024x1024x4096 1.45, 512x1024x4096 1.69, 1024^3 1.36; 0.96-1.01x cuBLAS at M 128-256, N = K = 4096).  At equal fill
# they run at 0.87-0.93x the 128x128 tiles' rate (1024x2048x2048 0.90, 512x4096x4096 0.87, 128x14336x4096 0.93,
# 2048x3072x2048 0.88), about 0.80 of the wide tiles'; over several rounds less (call 9, against 128x192 tiles:
# 1280x4096x4096 0.70, 2048x2560x2560 0.75, 2304x2048x2048 0.77), hence SLIM_EFFICIENCY.  8 stages over 6: 0.98-1.11x
# (call 2).
WS_SLIM_CONFIG: tuple = (128, 64, 64, 8, 8, 0)
SLIM_EFFICIENCY = 0.72
# 128x192 tiles (128 + 64 columns: WS_SPLIT_BLOCK_N) on a 4-stage ring, B by TMA: cuBLAS's at 768-1536 x 4096 x 4096
# (132 tiles a round at N = 4096).  H200, session 38 call 6b, steady state, x the shipped tiles: 768x4096x4096 1.13
# (x cuBLAS 0.86 -> 0.97), 3072^3 1.10 (0.91 -> 1.00), 1536x4096x4096 1.03, 2048x3072x2048 1.03; where the wide tiles
# fill the rounds they lose (4096^3 0.89, 6144x4096x4096 0.96, 8192^3 0.99); 3 stages 5-29 % slower than 4.  At
# more than a round their rate is 0.96-0.97 of the wide tiles' (8192^3, 4096^3), at one 0.85 (768x4096x4096).
WS_MID_CONFIG: tuple = (128, 192, 64, 8, 4, 0)
MID_EFFICIENCY = 0.94
# 64x64 tiles on an 8-stage ring (148 KB), one consumer warpgroup a CTA: cuBLAS's tiles at 65-128 rows, taken where
# B is read by TMA and their tiles fit one round (default_config); K split where they fill at most half the SMs and
# K has at least HALF_SPLIT_MIN_K_STEPS steps (default_split).  H200, steady
# state, x the 128x64 tiles (two consumers, half the CTAs; in 4 chunks of K where those fill at most a quarter of the
# SMs): session 40 call 1 (12 stages, unsplit) 65-128 x 4096 x 4096 1.08-1.25 (12.0 us at every M there; x cuBLAS
# 0.82-1.24), 128x4096x1024 1.08; 96x14336x4096 (3.4 rounds) 0.78, 192 / 256 x 4096 x 4096 (1.5 / 1.9 rounds) 0.71; in
# clusters of two CTAs sharing B's tile (as cuBLAS's at 127 rows) 0.88-0.95x unclustered (not kept).  Call 2: 8
# stages 1.03-1.04x 12; 96x4352x4096 (136 tiles) 0.70.  Call 4, K split (chunks of at least 16 steps, the items in one
# round): 16-32 tiles in 4 chunks 1.21-1.34 (100 / 65 / 128 x 1024 x 4096, 80 / 128 x 1024 x 8192, 96x512x4096), 48-64
# tiles in 2 chunks 1.07-1.11 (96 x 1536 / 2048 x 4096, 128x2048x4096); at 32 K steps unsplit best (100x1024x2048
# 1.35, 2 / 4 chunks 1.25 / 1.24).
# Since session 41 at any M where they fit one round: session 41 call 2, x session 40's rule (128x64 tiles, half as
# many; in 4 chunks of K at 16-32 of them): 512x1024x4096 1.11 (x cuBLAS 0.75 -> 0.83), 512x512x8192 (2 chunks)
# 1.14, 256x1024x8192 1.05 (-> 1.01), 256x512x4096 (4 chunks) 1.23, 384x1024x4096 1.12, 256x2048x4096 1.11,
# 200x2048x1024 1.14, 1024x512x1024 1.12, 1024 / 640 x 512 x 4096 1.11 / 1.12, 300x1024x4096 1.12 (-> 0.97),
# 4096x128x4096 1.19, 4096x128x1024 1.20, 2048x256x4096 1.24; bitwise the same output where unsplit.
# Since session 42 with K steps of 128 on a 5-stage ring (160 KB of 32 KB stages): half the consumer's ready waits,
# wgmma waits and slot releases for the same wgmma work (session 41: its chain alone, no copies, 121 ns a 64-wide K
# step against cuBLAS's 111 for its whole kernel).  H200, session 42 calls 1-3, steady state, x the 64-wide steps at
# 8 stages (the same K chunks): 65 / 96 / 104 / 127 / 128 x 4096 x 4096 1.14 / 1.12 / 1.14 / 1.12 / 1.12 (x cuBLAS
# at 104: 0.86 -> 0.98), 384x1024x4096 1.12, 256x2048x4096 1.13, 300x1024x4096 1.16, 640x512x4096 1.15, 100x1024x2048
# 1.16, 128x4096x1024 1.11, 256x1024x8192 (2 chunks) 1.14 (x cuBLAS 1.00 -> 1.14), 96x2048x4096 (2) 1.12, 65 / 100 x
# 1024 x 4096 (4) 1.07, 128x1024x8192 (4) 1.06, 1024x512x1024 1.04, 4096x128x1024 1.04, 512x512x8192 (2) 1.01,
# 2048x256x4096 1.01, 4096x128x4096 1.00; bitwise the same output where unsplit.  At 6 stages (192 KB) 0.94-1.18
# (512x512x8192 0.94, 4096x128x4096 0.97-1.00), at 4 0.87-1.08; K split by default_split's rule in 64-wide steps (in
# 128-wide ones fewer chunks: 0.93-0.98 at 16-32 tiles).  As routed (call 4, x session 41's route; x cuBLAS before ->
# after): 96 / 128 x 2048 x 4096 1.16 / 1.14 (0.85 -> 0.99, 0.98 -> 1.11), 96x1536x4096 1.16, 104x4096x4096 1.14
# (0.81 -> 0.92), 512x1024x4096 1.11 (0.86 -> 0.95), 256x1024x8192 1.14 (-> 1.10), 300x1024x4096 1.13 (-> 1.11),
# 80x1024x8192 1.09, 65x1024x4096 1.07, 512x512x8192 1.00, 256x512x4096 1.01, 4096x128x4096 0.99; GEMM GPU tests
# 527 passed (call 4), 531 on the committed rules (call 9).
WS_HALF_CONFIG: tuple = (64, 64, 128, 8, 5, 0)
HALF_MAX_M = 128
# K split where they fill at most half the SMs and K has at least HALF_SPLIT_MIN_K_STEPS[0] (64-wide) steps, or [1]
# where they fill more than a quarter: session 42 call 3, 128-wide K steps, x K in 2 chunks at 64 tiles, unsplit:
# 96 / 128 x 2048 x 4096 1.03 / 1.01, 4096x64x4096 1.06; at 16-32 tiles 4 chunks stay ahead (x unsplit 1.03-1.14).
# Call 4 as routed, x the same tiles split at 64 steps there: 96 x 1536 / 2048 x 4096 1.03 / 1.03, 128x2048x4096
# 1.02, 4096x64x4096 1.07.  [0] up to HALF_SPLIT_LOW_FILL of the SMs (a quarter until session 44): with the partials
# summed by the second kernel (SPLIT_FUSED), at 36-48 tiles and 64 K steps 2 chunks x unsplit (session 44 call 10):
# 96 / 80 / 128 x 1536 x 4096 1.07 / 1.10 / 1.08, 192x1024x4096 1.13, 256x768x4096 1.13, 128x1280x4096 1.14,
# 320x512x4096 1.18, 2560x64x4096 1.13, 576x256x4096 1.17, 2304x64x4096 1.20; at 64 tiles mixed (call 5-6: 96x2048x4096
# 1.01-1.02, 512x512x4096 0.97, 4096x64x4096 0.91).
HALF_SPLIT_MIN_K_STEPS = (64, 128)
HALF_SPLIT_LOW_FILL = 0.375
# and 64x128 tiles (8 stages, unsplit) where the 64x64 ones take more than a round and those fit one: H200, session
# 40 call 7, steady state, x the 128x64 tiles (one tile row, unsplit): 96 x 4352 / 5120 / 6144 / 7168 / 8192 x 4096
# 1.01 / 1.02 / 1.03 / 1.05 / 1.11 (x cuBLAS 0.98 at 8192), 65x8192x4096 1.12, 128x8192x4096 1.04, 80x8448x4096
# 1.07, 96x8192x1024 1.07, 128x8192x8192 1.11, 96x6144x8192 1.06; bitwise the same output.  Above HALF_MAX_M rows
# only where they compute at most HALF_WIDE_MAX_SHARE of the 128-row tiles' output elements (129-192 rows: three
# 64-row tile rows against two of 128): session 41 call 2, x the 128x64 tiles, 129 / 130 / 150 x 4096 x 4096 1.08 /
# 1.06 / 1.06, 160x4096x2048 1.03, 192x4096x1024 1.00; at 319x2048x2048 (80 of them against 96, 0.83 of the
# elements) 0.98, at 256x4096x4096 and 1024^3 (as many elements; call 1) 0.97 / 1.00.
WS_HALF_WIDE_CONFIG: tuple = (64, 128, 64, 8, 8, 0)
HALF_WIDE_MAX_SHARE = 0.75
# Ragged edges fitted inside A and B (matmul_ws_kernel's FIT_M / FIT_N, fit_modes): the last tile row moved up to
# end at row M (M >= 128); a single tile row of at least FIT_HALVES_MIN_PAST rows short of 128 (and M >= 64) as two
# 64-row halves, each moved up to end at M at most (two boxes a step); the last tile column moved left to end at
# column N (B by TMA).  Rows of a TMA box past M are zero-filled by the copy engine at more than a read's cost: the
# 128x64 tiles at 65 / 80 / 96 / 112 / 127 x 4096 x 4096 took 22.2 / 20.2 / 16.5 / 13.7 / 13.0 us, the same 64 tiles
# (H200, session 39 call 1, steady state), fitted as halves 13.8-14.1 (x unfitted: 1.60 / 1.46 / 1.19 / 0.99 / 0.93;
# the second box a step costs about 1 us there, hence FIT_HALVES_MIN_PAST; 100x1024x4096, 16 tiles, 0.93);
# 130x4096x4096 on 128x64 tiles fitted 1.60x the 128x128 tiles unfitted (x cuBLAS 0.50 -> 0.80), 130x4096x1024 1.39x.
# Level where one ragged tile row or column is among many (4000x5000x3000, 4000x4096x4096, 4096x4032x4096,
# 1000x3072x1000: 0.995-0.998, within the rounds' spread); halves there lose 2 %.  Outputs bitwise the unfitted ones.
FIT_EDGES = True
FIT_HALVES_MIN_PAST = 32
# K split into chunks, each its own work item (matmul_ws_kernel's SPLIT: fp32 partials through a workspace, summed by
# the warpgroup that completes a tile's rows until session 44, now by a second kernel: SPLIT_FUSED), where the tiles
# fill at most a quarter of the SMs: the largest power of two up to SPLIT_MAX whose items still fit one round, each
# chunk at least SPLIT_MIN_K_STEPS K steps (default_split).
# H200, session 39 call 3, steady state, x unsplit: 16-32 tiles 1.10-1.48 at 4 chunks of 16-32 K steps (65x1024x4096
# 1.18, 100x1024x4096 1.13, 96x2048x4096 1.10, 256x1024x8192 1.48 (x cuBLAS 0.64 -> 0.94), 512x512x8192 1.20; 2
# chunks there 1.06-1.27), 8 chunks of 8 K steps 0.93-0.98; at 64 tiles 2 chunks lost (0.88-0.96 at M 65-127 x 4096 x
# 4096 and 512x1024x4096, 0.63 at 200x2048x1024 with 8 K steps a chunk; ncu, call 5: split in 2 the 80-row kernel's
# warps wait longer for the same bytes, DRAM and L2 no busier).  Only the 128x64 tiles (SPLIT_BLOCK_N) are split by
# default: 128x128 tiles (EPI 1) in 2-4 chunks ran 0.19-0.76x the shipped route at 80-1024 rows, 128x256 tiles
# 0.03-0.45x (their build spills 1,186 bytes: the partials' sum beside a 128-register accumulator) (call 6).
SPLIT_MAX, SPLIT_MIN_K_STEPS, SPLIT_BLOCK_N = 4, 16, (64,)
# The split partials summed by the warpgroup that completes a tile's rows (True), or by a second kernel
# (``matmul_splitk.sum_partials``, as the decode-sized GEMMs' TMA kernel since session 43).  H200, session 44 call 4,
# steady state, the route with the second kernel x the fused sum wherever it splits: 65x1024x4096 1.36, 80x1024x8192
# 1.23, 100x1024x4096 1.31, 128x1024x8192 1.20, 256x512x4096 1.24, 256x1024x8192 1.05, 512x512x8192 1.04, 1024x64x4096
# 1.29, 512x64x8192 1.27 (x cuBLAS after 0.85-1.18); bitwise the same outputs, unsplit level (0.998-1.006).
SPLIT_FUSED = False
# Up to 8 chunks where they fill at most half the SMs (8 tiles), summed by the second kernel: session 44 call 6, x 4
# chunks: 512x64x8192 1.20, 256x128x16384 1.30; at 16 tiles (8 chunks: 128 of the 132 SMs) 0.94-1.03, not taken.
SPLIT_MAX_FEW = 8
SPLIT_STEP_K = 64  # default_split's K steps (HALF_SPLIT_MIN_K_STEPS, SPLIT_MIN_K_STEPS) are this wide at any BLOCK_K
_LOCKS: dict = {}  # per-tile arrival counters of split GEMMs, a buffer per (device, stream)
# consumer registers after setmaxnreg, launch-time maxnreg (12 warps share the 64K register file; the producer
# warpgroup keeps (168 * 384 - 208 * 256) / 128 = 88 per thread)
CONSUMER_REGS, MAXNREG = 208, 168
# what a ws config may hold (built and GPU-tested combinations: kernels/NOTES.md, sessions 8 and 38); more than 4
# stages only for 64-column tiles (WS_DEEP_BLOCK_N: 128x128 tiles build at 5-6 but were not faster, session 38)
WS_BLOCK_M, WS_BLOCK_N, WS_BLOCK_K, WS_STAGES, WS_EPI = (64, 128), (64, 128, 192, 256), (64,), (3, 4, 6, 8, 12), (0, 1)
WS_DEEP_BLOCK_N = (64,)
# K steps of 128 (32 KB stages) only for the 64x64 tiles (WS_WIDE_K_TILES), at WS_WIDE_K_STAGES stages (session 42)
WS_WIDE_K, WS_WIDE_K_TILES, WS_WIDE_K_STAGES = 128, ((64, 64),), (4, 5, 6)
# 64-row tiles (one consumer warpgroup) of 64 or 128 columns; more than 8 stages only for 64x64 tiles
WS_HALF_BLOCK_N = (64, 128)
# tile widths that are not a power of two (Gluon's shapes are): computed as BLOCK_N + BLOCK_N2 columns through two
# descriptors and buffers (``matmul_ws_kernel``'s BLOCK_N2), B by TMA, stored by TMA (EPI 0), unclustered
WS_SPLIT_BLOCK_N = {192: (128, 64)}
_broken: list[str] = []  # the default config's build error, once it failed to build here
_broken_cluster: list[str] = []  # the clustered build's error, once it failed (the PTX rewrite or the build)
_broken_light: list[str] = []  # a LIGHT_PTX build's error, once one failed (the plain builds take over)
# Tiles built without the consumer's warpgroup barriers before its slot releases (kernels/_ptx_barriers.py, session
# 31's rewrite for the attention kernels; matmul_ws_kernel's LIGHT_PTX), unclustered.  H200, session 41 call 10,
# steady state, x the plain build, 64x64 tiles: 104 / 127 x 4096 x 4096 1.013 / 1.025, 104x4096x1024 1.017,
# 512x1024x4096 1.030, 4096x128x4096 1.027, level at K = 8192 (1.005) and split in 4 (0.997); bitwise the same; call 11
# (as shipped, the route x LIGHT_TILES ()): 104x4096x4096 1.028, 512x1024x4096 1.007, 4096x128x4096 1.004.  Not
# taken: 64x128 (1.005), 128x64 (1.017 / 0.989), 128x256 (0.993; session 31: level), whose K steps are longer.
LIGHT_TILES = ((64, 64),)
LIGHT_ERROR: str | None = "the Gluon GEMM is not importable"
if matmul_ws_kernel is not None:
    try:  # CLUSTER=2 builds through the PTX rewrite, launched in clusters
        _ptx_cluster.clustered(matmul_ws_kernel, "CLUSTER", desc_param=B_DESC_PARAM)
    except Exception as exc:  # another Triton's JIT: the clustered route stays off
        _broken_cluster.append(f"{type(exc).__name__}: {exc}")
    LIGHT_ERROR = _ptx_barriers.light_error(matmul_ws_kernel, "LIGHT_PTX")


def check_ws_config(config: tuple) -> tuple:
    """``config`` as (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, EPI), or ValueError naming what it may hold."""
    allowed = (f"(BLOCK_M in {WS_BLOCK_M}, BLOCK_N in {WS_BLOCK_N}, BLOCK_K in {WS_BLOCK_K}, GROUP_M >= 1, "
               f"STAGES in {WS_STAGES}, more than 4 only with BLOCK_N in {WS_DEEP_BLOCK_N} or BLOCK_M 64, more than "
               f"8 only with 64x64 tiles, BLOCK_M 64 only with BLOCK_N in {WS_HALF_BLOCK_N}, EPI in {WS_EPI}, "
               f"EPI 0 with BLOCK_N in {tuple(WS_SPLIT_BLOCK_N)}; or BLOCK_K {WS_WIDE_K} with 64x64 tiles and STAGES "
               f"in {WS_WIDE_K_STAGES})")
    if not isinstance(config, tuple) or len(config) != 6 or not all(isinstance(v, int) for v in config):
        raise ValueError(f"ws must be a tuple of 6 ints {allowed}, got {config!r}")
    bm, bn, bk, group, stages, epi = config
    if bk == WS_WIDE_K and (bm, bn) in WS_WIDE_K_TILES:  # the deep K steps: their own stage counts
        ring_ok = stages in WS_WIDE_K_STAGES
    else:
        ring_ok = (bk in WS_BLOCK_K and stages in WS_STAGES and (stages <= 4 or bn in WS_DEEP_BLOCK_N or bm == 64)
                   and (stages <= 8 or (bm, bn) == (64, 64)))
    if bm not in WS_BLOCK_M or bn not in WS_BLOCK_N or group < 1 or not ring_ok \
            or (bm == 64 and bn not in WS_HALF_BLOCK_N) or epi not in WS_EPI or (bn in WS_SPLIT_BLOCK_N and epi):
        raise ValueError(f"ws config {config} is not one the Gluon GEMM builds: {allowed}")
    return config


def default_config(m: int, n: int, sms: int, b_tma: bool = True) -> tuple:
    """Of WS_CONFIG, WS_MID_CONFIG, WS_NARROW_CONFIG and WS_SLIM_CONFIG the one whose tiles' fill of the ``sms`` SMs'
    rounds, times the share of their columns inside N (a ragged tile column counts whole), times their rate against
    the wide tiles' (1, ``MID_EFFICIENCY``, ``NARROW_EFFICIENCY``, ``SLIM_EFFICIENCY``), is highest; the wider on a
    tie.  WS_MID_CONFIG only with ``b_tma`` (B read by TMA).  Ahead of them, with ``b_tma``: WS_HALF_CONFIG wherever
    its tiles fit one round, else WS_HALF_WIDE_CONFIG where its tiles fit one round and either M is at most
    ``HALF_MAX_M`` or they compute at most ``HALF_WIDE_MAX_SHARE`` of the output elements the 128-row tiles picked
    do (a last tile row mostly past M: 130 rows as 3 x 64 rather than 2 x 128)."""
    if b_tma and _tiles(m, n, WS_HALF_CONFIG) <= sms:
        return WS_HALF_CONFIG

    def score(config: tuple, rate: float) -> float:
        cols = cdiv(n, config[1])
        tiles = cdiv(m, config[0]) * cols
        return tiles / (cdiv(tiles, sms) * sms) * n / (cols * config[1]) * rate

    rated = [(WS_CONFIG, 1.0)] + ([(WS_MID_CONFIG, MID_EFFICIENCY)] if b_tma else [])
    rated += [(WS_NARROW_CONFIG, NARROW_EFFICIENCY), (WS_SLIM_CONFIG, SLIM_EFFICIENCY)]
    best = max(rated, key=lambda cr: score(*cr))[0]  # max keeps the first of equals
    wide = WS_HALF_WIDE_CONFIG
    if b_tma and _tiles(m, n, wide) <= sms and (
            m <= HALF_MAX_M or _elements(m, n, wide) <= HALF_WIDE_MAX_SHARE * _elements(m, n, best)):
        return wide
    return best


def _tiles(m: int, n: int, config: tuple) -> int:
    """How many of ``config``'s tiles cover an (m, n) output."""
    return cdiv(m, config[0]) * cdiv(n, config[1])


def _elements(m: int, n: int, config: tuple) -> int:
    """How many output elements ``config``'s tiles compute for an (m, n) output (a tile past an edge counts whole)."""
    return _tiles(m, n, config) * config[0] * config[1]


def fit_modes(m: int, n: int, block_m: int, block_n: int, b_tma: bool) -> tuple[int, bool]:
    """(FIT_M, FIT_N) of matmul_ws_kernel for an (m, n) output on block_m x block_n tiles (``FIT_EDGES``)."""
    if not FIT_EDGES:
        return 0, False
    halves = block_m == 128 and block_m // 2 <= m <= block_m - FIT_HALVES_MIN_PAST  # two consumers' 64-row halves
    fit_m = 0 if m % block_m == 0 else 1 if m >= block_m else 2 if halves else 0
    return fit_m, bool(b_tma and n % block_n and n >= block_n)


def default_split(m: int, n: int, k: int, config: tuple, sms: int) -> int:
    """How many chunks of K ``config``'s tiles take for an (m, n, k) product (1: unsplit): the largest power of two
    up to ``SPLIT_MAX`` whose chunks (of at least ``SPLIT_MIN_K_STEPS`` K steps) still fit one round of the ``sms``
    SMs; only tiles of ``SPLIT_BLOCK_N`` columns, of 128 rows where they fill at most a quarter of the SMs, of 64 rows
    where K has at least ``HALF_SPLIT_MIN_K_STEPS`` steps (the first where they fill at most ``HALF_SPLIT_LOW_FILL``
    of the SMs, the second above).  K steps counted ``SPLIT_STEP_K`` wide whatever the tiles' BLOCK_K.  Up to
    ``SPLIT_MAX_FEW`` chunks where that many still fill at most half the SMs."""
    tiles = _tiles(m, n, config)
    k_steps = cdiv(k, SPLIT_STEP_K)
    half_min_k_steps = HALF_SPLIT_MIN_K_STEPS[0 if tiles <= HALF_SPLIT_LOW_FILL * sms else 1]
    if config[1] not in SPLIT_BLOCK_N or (k_steps < half_min_k_steps if config[0] == 64 else 4 * tiles > sms):
        return 1
    most = SPLIT_MAX_FEW if SPLIT_MAX_FEW * tiles <= sms // 2 else SPLIT_MAX
    return pow2_split(tiles, k_steps, sms, most, SPLIT_MIN_K_STEPS)


def runnable(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """A, C row-major with 16-byte aligned pitches and bases; B row-major with 8-element aligned rows, base and
    N (its 16-byte cp.async copies); fp16/bf16 on an sm_90 GPU; the kernel importable and not broken."""
    return (a.dtype in (torch.float16, torch.bfloat16) and gluon_runnable(a.device, matmul_ws_kernel, _broken)
            and tma_aligned(a, b, c) and b.shape[1] % 8 == 0)


def _desc(t: torch.Tensor, box: list[int]):
    """A TMA descriptor over the row-major matrix ``t`` (its row pitch as it is) with ``box``-shaped copies."""
    layout = gl.NVMMASharedLayout.get_default_for(box, gl.bfloat16 if t.dtype == torch.bfloat16 else gl.float16)
    return TensorDescriptor(t, list(t.shape), [t.stride(0), 1], box, layout)


def matmul_ws(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: tuple | None = None,
              b_tma: bool | None = None, cluster: bool = False, split: int | None = None,
              fused: bool | None = None) -> bool:
    """``c = a @ b`` through the Gluon kernel (``config`` None: :func:`default_config`'s); False (nothing written)
    when it cannot be built here.  ``b_tma``: B through TMA too (default: only when its row pitch is a multiple of
    128 bytes; always for tiles of WS_SPLIT_BLOCK_N's widths).  ``cluster``: in clusters of two CTAs, B by TMA
    multicast (WS_CONFIG's tiles; False, nothing written, once that build failed).  ``split``: K in that many chunks
    (default: :func:`default_split`'s; clusters unsplit), fp32 partials summed in chunk order, by the tile's last
    warpgroup or (``fused`` False; default ``SPLIT_FUSED``) by a second kernel."""
    m, k = a.shape
    n = b.shape[1]
    sms = sm_count(a.device, 1)
    if split is not None and (split < 1 or (split > 1 and cluster)):
        raise ValueError(f"split must be at least 1, and 1 with clusters, got {split}")
    if cluster and (_broken_cluster or config is not None):
        return False
    if config is not None:
        config = check_ws_config(config)
    if b_tma is None or cluster:
        b_tma = cluster or (b.stride(0) * b.element_size()) % 128 == 0
    bm, bn, bk, group, stages, epi = config or (WS_CONFIG if cluster else default_config(m, n, sms, b_tma))
    bn1, bn2 = WS_SPLIT_BLOCK_N.get(bn, (bn, 0))  # the kernel's BLOCK_N and BLOCK_N2
    b_tma = b_tma or bn2 > 0
    fit_m, fit_n = fit_modes(m, n, bm, bn, b_tma)
    k_steps = cdiv(k, bk)
    if split is None:
        split = 1 if cluster else default_split(m, n, k, (bm, bn, bk), sms)
    elif split > 1 and bn2:
        raise ValueError(f"split must be 1 with {bm}x{bn} tiles, got {split}")
    kt_per = cdiv(k_steps, split)
    split = cdiv(k_steps, kt_per)  # no chunk empty
    fused = (SPLIT_FUSED if fused is None else fused) or split == 1
    if split > 1:  # fp32 partials, plain stores (EPI 1)
        work = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
        locks = arrival_counters(_LOCKS, a.device, 2 * _tiles(m, n, (bm, bn))) if fused else c
        epi = 1
    else:
        work = locks = c
    rows = consumer_rows(bm)
    light = (not cluster and (bm, bn) in LIGHT_TILES and not _broken_light
             and _ptx_barriers.buildable(LIGHT_ERROR))
    a_desc = _desc(a, [bm // 2 if fit_m == 2 else bm, bk])  # FIT_M 2: two half boxes a step
    b_desc = _desc(b, [bk, bn1 // 2] if cluster else [bk, bn1])  # with clusters each CTA copies half of B's tile
    c_desc = _desc(c, [rows, bn1])
    b2_desc, c2_desc = (_desc(b, [bk, bn2]), _desc(c, [rows, bn2])) if bn2 else (b_desc, c_desc)
    if cluster:  # one program a CTA, the grid counts clusters of two (pairs of tile rows in a tile column)
        grid = (min(cdiv(cdiv(m, bm), 2) * cdiv(n, bn), max(1, sms // 2)),)
    else:
        grid = (min(_tiles(m, n, (bm, bn)) * split, sms),)
    try:
        matmul_ws_kernel[grid](a_desc, b_desc, c_desc, b, c, m, n, k, n // 8, b.stride(0) // 8, c.stride(0),
                               b2_desc, c2_desc, work, locks, kt_per, BLOCK_N=bn1, GROUP_M=group, STAGES=stages,
                               B_TMA=bool(b_tma), EPI=epi, CONSUMER_REGS=CONSUMER_REGS, CLUSTER=2 if cluster else 1,
                               CLUSTER_PTX=_ptx_cluster.VERSION if cluster else 0, BLOCK_N2=bn2, FIT_M=fit_m,
                               FIT_N=fit_n, SPLIT=split, LIGHT_PTX=_ptx_barriers.VERSION if light else 0,
                               FUSED=fused, num_warps=4, maxnreg=MAXNREG)
    except GLUON_BUILD_ERRORS as exc:  # compile, ptxas or resource errors (the PTX rewrite's): not a launch failure
        if light:  # the plain build from now on, said once (a CUDA error re-raised)
            gluon_build_failed(exc, _broken_light, "Gluon GEMM without its warpgroup barriers", "its plain build")
            return matmul_ws(a, b, c, config, b_tma, cluster, split, fused)
        if cluster:  # the unclustered routes take over, said once
            gluon_build_failed(exc, _broken_cluster, "Gluon GEMM in clusters of two CTAs", "the repack route")
        elif config is None:  # the default config: the Triton kernels take every GEMM from now on, said once
            gluon_build_failed(exc, _broken, "warp-specialised Gluon GEMM", "the Triton kernels")
        elif "CUDA error" in str(exc):
            raise
        return False
    if not fused:
        _sk.sum_partials(work, c)
    return True


def status(cluster: bool = False) -> str:
    """The kernel's availability (``cluster``: of its clustered build) for reports."""
    return gluon_status(matmul_ws_kernel, IMPORT_ERROR, _broken + (_broken_cluster if cluster else []), True, "")
