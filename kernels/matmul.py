"""Persistent, autotuned Triton GEMM: ``C = A @ B`` for fp16/bf16, any M, N, K.

One program per SM loops over output tiles (grouped ordering, so neighbouring programs share A
row-panels and B column-panels in L2).  On Hopper with 16-byte aligned strides the tiles arrive
through tensor descriptors (TMA; out-of-range elements zero-filled, stores clipped); otherwise through
masked pointer loads (also the CPU-interpreter path).  B may be row-major (K, N) or column-major
(a transposed (N, K) tensor); both are read in place.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import _matmul_gluon as _mg
from kernels import matmul_rows as _rows
from kernels import matmul_splitk as _sk
from kernels._checks import cdiv, check_device, check_dtype, interpreting, mma, set_triton_allocator, sm_count, tma_ok
from kernels.matmul_splitk import SPLITK_MAX_M, matmul_splitk, matmul_splitk_tma, tma_splitk_ok


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * num_pid_n
    first_m = (tile_id // per_group) * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % per_group) % group_m
    pid_n = (tile_id % per_group) // group_m
    return pid_m, pid_n


@triton.jit
def _matmul_kernel(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   USE_TMA: tl.constexpr, B_COLMAJOR: tl.constexpr, DOT_F32: tl.constexpr,
                   FLATTEN: tl.constexpr = False, EPI: tl.constexpr = 0, B_PTR: tl.constexpr = False, SBK8=1, NB8=1):
    # EPI (TMA path): 0 = one tensor-descriptor store of the tile, 1 = two half-tile stores (half the
    # shared-memory staging, room for a deeper pipeline), 2 = plain masked stores from registers.
    # B_PTR (TMA path, row-major B): B through 16-byte cp.async pointer loads instead of a descriptor, for B
    # row pitches that are not 128-byte aligned (every descriptor box row then straddles two L2 lines);
    # SBK8 = B's row stride / 8 and NB8 = N / 8 tell the compiler that rows and the column mask are 8-aligned.
    start = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(A, [M, K], [sam, 1], [BLOCK_M, BLOCK_K])
        if B_PTR:
            pass
        elif B_COLMAJOR:
            b_desc = tl.make_tensor_descriptor(B, [N, K], [sbn, 1], [BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(B, [K, N], [sbk, 1], [BLOCK_K, BLOCK_N])
        if EPI == 0:
            c_desc = tl.make_tensor_descriptor(C, [M, N], [scm, 1], [BLOCK_M, BLOCK_N])
        elif EPI == 1:
            c_desc = tl.make_tensor_descriptor(C, [M, N], [scm, 1], [BLOCK_M, BLOCK_N // 2])
    offs_bk = tl.arange(0, BLOCK_K)
    for tile_id in tl.range(start, num_tiles, num_progs, flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for kt in range(k_tiles):
            off_k = kt * BLOCK_K
            if USE_TMA:
                a = a_desc.load([off_m, off_k])
                if B_PTR:
                    offs_k = off_k + offs_bk
                    b = tl.load(B + offs_k[:, None].to(tl.int64) * (SBK8 * 8) + offs_n[None, :],
                                mask=(offs_k[:, None] < K) & (offs_n[None, :] < NB8 * 8), other=0.0)
                elif B_COLMAJOR:
                    b = b_desc.load([off_n, off_k]).T
                else:
                    b = b_desc.load([off_k, off_n])
            else:
                offs_k = off_k + offs_bk
                a = tl.load(A + offs_m[:, None].to(tl.int64) * sam + offs_k[None, :] * sak,
                            mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
                b = tl.load(B + offs_k[:, None].to(tl.int64) * sbk + offs_n[None, :] * sbn,
                            mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc = mma(a, b, acc, DOT_F32)
        c = acc.to(C.dtype.element_ty)
        if USE_TMA and EPI == 0:
            c_desc.store([off_m, off_n], c)
        elif USE_TMA and EPI == 1:
            c0, c1 = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([off_m, off_n], c0)
            c_desc.store([off_m, off_n + BLOCK_N // 2], c1)
        else:
            tl.store(C + offs_m[:, None].to(tl.int64) * scm + offs_n[None, :] * scn, c,
                     mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, EPI, FLATTEN): Hopper-tuned, kernels/NOTES.md.
CONFIGS: list[tuple] = [
    (128, 256, 64, 8, 8, 3, 0, False),
    (128, 256, 64, 8, 8, 3, 0, True),
    (128, 256, 64, 4, 8, 3, 0, True),
    (128, 256, 64, 8, 8, 4, 1, True),
    (128, 256, 64, 16, 8, 3, 0, True),
]
# Decode-sized GEMMs (M <= SMALL_M: memory-bound on reading B): short, wide-K tiles, deep pipelines.
SMALL_M = 64
SMALL_M_CONFIGS: list[tuple] = [
    (64, 128, 64, 1, 4, 6, 2, False),
    (64, 32, 128, 1, 4, 6, 2, False),
    (64, 32, 256, 1, 4, 4, 2, False),
    (64, 128, 128, 1, 4, 4, 2, False),
]
# B through pointer loads (B_PTR): the persistent loop must not be flattened, or the B loads are not pipelined.
BPTR_CONFIGS: list[tuple] = [
    (128, 256, 64, 8, 8, 3, 0, False),
    (128, 256, 64, 4, 8, 3, 0, False),
    (256, 128, 64, 8, 8, 3, 0, False),
]
INTERPRET_CONFIG: tuple = (32, 32, 16, 2, 4, 1)


def _to_config(c: tuple) -> triton.Config:
    kw = {"BLOCK_M": c[0], "BLOCK_N": c[1], "BLOCK_K": c[2], "GROUP_M": c[3]}
    if len(c) > 6:
        kw.update(EPI=c[6], FLATTEN=bool(c[7]))
    return triton.Config(kw, num_warps=c[4], num_stages=c[5])


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Candidates for this M: the decode-sized list when M <= SMALL_M, else the large-tile list."""
    small = named_args["M"] <= SMALL_M
    want = {_key(c) for c in (SMALL_M_CONFIGS if small else BPTR_CONFIGS if kwargs.get("B_PTR") else CONFIGS)}
    kept = [c for c in configs if _key(c) in want]
    return kept or configs[:1]


def _key(c) -> tuple:
    if isinstance(c, tuple):
        c = _to_config(c)
    return (tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages)


def _all_configs() -> list[triton.Config]:
    return [_to_config(c) for c in dict.fromkeys([*CONFIGS, *SMALL_M_CONFIGS, *BPTR_CONFIGS])]


_matmul_tuned = triton.autotune(_all_configs(), key=["M", "N", "K", "USE_TMA", "B_COLMAJOR", "B_PTR"],
                                prune_configs_by={"early_config_prune": _prune}, cache_results=True)(_matmul_kernel)


def set_configs(configs: list[tuple], small_m: list[tuple] | None = None) -> None:
    """Replace the autotuner's candidates (8-tuples as in CONFIGS; ``small_m`` for M <= SMALL_M); used by
    kernels/tune.py."""
    CONFIGS[:] = list(configs)
    if small_m is not None:
        SMALL_M_CONFIGS[:] = list(small_m)
    _matmul_tuned.configs = _all_configs()
    _matmul_tuned.cache.clear()


def _tma_ok(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """Tensor descriptors for A, C and B (read column-major as its transpose when stride(0) == 1)."""
    return tma_ok(a, b if b.stride(1) == 1 else b.t(), c)


# Row-major B whose row pitch is not a multiple of 128 bytes (H100, 4000x5000x3000: the same GEMM on a
# 5120-column pitch ran 642-655 vs 469 TFLOPS; padding C's pitch changed nothing): "tma" (descriptor anyway),
# "ptr" (cp.async pointer loads for B, B_PTR: slower, 407-431), "repack" (copy B to a 128-byte pitch first:
# 538 with torch's strided copy; kernels/NOTES.md 2026-11-24 session 5) or "overlap" (repack in two column
# parts, the second part's copy on a side stream beside the first part's GEMM; session 6: slower, 219.1 vs
# 213.2 us at 4000x5000x3000, so opt-in only), or through the warp-specialised Gluon kernel (kernels/_matmul_ws.py):
# "ws" (B through cp.async copies, no repack: session 8, 418 TFLOPS, L2-bound), "ws-tma" (B through TMA anyway)
# or "ws-repack" (repack, then the Gluon kernel), or "ws-mc" (no repack: the Gluon kernel in clusters of two CTAs,
# each B tile read once by TMA for both; as the default where the Gluon kernel is taken, ``gluon_default`` or
# gluon=True, else "ws-repack"; asked for, wherever it runs); the Gluon ones fall back to "ws-repack" / "repack".
# Session 8 call 2 finals (H100, 4000x5000x3000, graph-timed): ws-repack 208.3 us, repack 218.3, ws-tma 251.3
# (cuBLAS 187.1).  Session 30 (H200s, NOTES.md): ws-mc 199.4 / 201.9 us, ws-repack 207.5 / 210.3, ws-tma 236.8 /
# 232.7 (cuBLAS 193.6 / 195.8).
MISALIGNED_B = "ws-mc"
MISALIGNED_HOWS = ("tma", "ptr", "repack", "overlap", "ws", "ws-tma", "ws-repack", "ws-mc")
# Large GEMMs through the Gluon kernel (row-major B, fp16/bf16, sm_90): session 8 call 2 finals (H100, graph-timed),
# Gluon vs Triton: 4096^3 193.9 vs 202.5 us, 8192^3 1560 vs 1604, 4096x14336x4096 710.0 vs 725.0
GLUON_GEMM = True
GLUON_MIN_TILES = 132  # at least one wave of its 128x256 tiles
# Row-major B aligned for TMA: the Gluon kernel also below a wave of 128x256 tiles, from GLUON_MIN_M rows and
# GLUON_MIN_N columns (``_matmul_gluon.default_config`` picks its tiles; session 37 calls 10 and 13 found the Triton
# kernel that took them slower at every such shape timed, M 128-2048, N 1024-14336).  H200, steady state, this rule x
# the routes before it: 1024^3 1.91, 1536^3 1.16, 1024x2048x2048 1.74, 2048^3 1.09, 1024x1024x4096 1.99 (call 11,
# with M and N from 1024); M 128 / 256 / 512 / 768 at N = K = 4096 1.96 / 1.97 / 1.63 / 1.07, 512x1024x4096 1.99,
# 256x14336x4096 1.04 (call 13, the kernel's tiles as default_config picks them).  x cuBLAS still 0.45-0.97 there,
# until session 38's 128x64 tiles (``_matmul_gluon.WS_SLIM_CONFIG``) for those whose 128x128 tiles leave SMs idle
# and 128x192 ones (``WS_MID_CONFIG``) where those fill the rounds better.
# Session 38 call 4 found the Triton kernel 2-3x slower than the Gluon kernel's tiles at M 65-127 too (80 / 96 / 112 /
# 127 x 4096 x 4096: 43 us against 13-20, 0.22-0.35x cuBLAS; 96x14336x4096 1.26x), so from SMALL_M + 1 rows; since
# session 40 on 64x64 tiles there (``WS_HALF_CONFIG``) wherever those fit one round (since session 41 at any M).
GLUON_MIN_M = SMALL_M + 1
# N from 128 (session 38 call 9: the Triton kernel 1.065-3.57x slower than the Gluon kernel's tiles as
# ``default_config`` picks them; x cuBLAS before -> after: 4096x512x4096 0.66 -> 0.99, 2048x512x2048 0.34 -> 0.77,
# 8192x256x4096 0.68 -> 0.92, 4096x768x4096 0.79 -> 0.99, 1024x512x1024 0.29 -> 0.77, 16384x128x4096 0.63 -> 0.96,
# 512x512x8192 0.16 -> 0.56, 4096x896x4096 0.92 -> 0.98).  Since session 42 from 64 (B's 128-byte rows: one 64x64
# tile column): H200, session 42 call 3, steady state, the Gluon kernel's tiles x the Triton kernel that took them
# (x cuBLAS after): 4096x64x4096 4.1 (1.04), 8192x64x4096 2.4 (1.02), 16384x64x4096 1.8 (0.98), 1024x64x4096 5.3
# (0.84), 2048x64x2048 4.0 (0.91), 8192x64x1024 3.1 (1.06), 512x64x8192 8.1 (0.71); call 4 as routed, x session
# 41's route: 4096x64x4096 4.51 (x cuBLAS 0.24 -> 1.10), 2048x64x2048 3.95 (0.23 -> 0.90).
GLUON_MIN_N = 64


def gluon_default(m: int, n: int, aligned: bool = False) -> bool:
    """The Gluon kernel by default: GLUON_GEMM and at least GLUON_MIN_TILES 128x256 output tiles, or with ``aligned``
    (row-major B whose pitch TMA reads) at least GLUON_MIN_M rows and GLUON_MIN_N columns."""
    if not GLUON_GEMM or m <= SMALL_M:
        return False
    return (cdiv(m, 128) * cdiv(n, 256) >= GLUON_MIN_TILES
            or (aligned and m >= GLUON_MIN_M and n >= GLUON_MIN_N))


def _b_pitch_misaligned(b: torch.Tensor) -> bool:
    return b.stride(1) == 1 and (b.stride(0) * b.element_size()) % 128 != 0 and b.shape[1] % 8 == 0


@triton.jit
def _repack_kernel(S, D, R, C8, SS8, SD8, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, EVICT: tl.constexpr = 0):
    # rows of S (stride SS8 * 8) into D (stride SD8 * 8); C8 * 8 columns; the factors of 8 let the compiler
    # use 16-byte accesses.  EVICT 1: source loads evict-first and destination stores evict-last (keep the
    # copy, which the GEMM reads next, in L2 rather than the source)
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C8 * 8)
    rows = offs_r[:, None].to(tl.int64)
    if EVICT == 1:
        tile = tl.load(S + rows * (SS8 * 8) + offs_c[None, :], mask=mask, eviction_policy="evict_first")
        tl.store(D + rows * (SD8 * 8) + offs_c[None, :], tile, mask=mask, eviction_policy="evict_last")
    else:
        tile = tl.load(S + rows * (SS8 * 8) + offs_c[None, :], mask=mask)
        tl.store(D + rows * (SD8 * 8) + offs_c[None, :], tile, mask=mask)


# (BLOCK_R, BLOCK_C, num_warps, EVICT) of the repack copy.  H100, 4000x5000x3000 (NOTES.md session 6): 22.3 us
# alone (2690 GB/s); EVICT 1 copies in 19.4 us but the GEMM after it is no faster (finals 215.8 vs 215.3 us)
REPACK_CONFIG: tuple = (32, 256, 4, 0)


def _repack_into(b: torch.Tensor, view: torch.Tensor, config: tuple | None) -> None:
    rows, cols = b.shape
    br, bc, warps, evict = config or REPACK_CONFIG
    _repack_kernel[(cdiv(rows, br), cdiv(cols, bc))](b, view, rows, cols // 8, b.stride(0) // 8,
                                                     view.stride(0) // 8, BLOCK_R=br, BLOCK_C=bc,
                                                     EVICT=evict, num_warps=warps)


def _pitched_empty(b: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor of ``b``'s shape whose row pitch is a multiple of 128 bytes (a view of the first
    columns of a wider buffer)."""
    per = 128 // b.element_size()
    rows, cols = b.shape
    return torch.empty((rows, cdiv(cols, per) * per), dtype=b.dtype, device=b.device)[:, :cols]


def repack_rows(b: torch.Tensor, config: tuple | None = None) -> torch.Tensor:
    """``b`` copied into a buffer whose row pitch is a multiple of 128 bytes (a view of its first columns);
    ``b`` row-major with 8-element aligned rows and a multiple of 8 columns (``_b_pitch_misaligned``).
    ``config`` overrides REPACK_CONFIG."""
    view = _pitched_empty(b)
    _repack_into(b, view, config)
    return view


def use_splitk(m: int, n: int, k: int, sms: int) -> bool:
    """Split K when M <= 16 and 64-column output tiles would leave SMs idle (H100: 1x4096x4096 8.9 us split
    vs 21.8 us unsplit; at 16x14336x4096 and 64x4096x4096 splitting lost: 46.6 vs 42.9 us, 15.1 vs 11.6 us).
    ``matmul`` splits only where the TMA route cannot run (``tma_ok``: A, B or the output not row-major with 16-byte
    aligned pitches, a GPU before sm_90, the CPU interpreter): where it can, M <= matmul_splitk.SWAP_MAX_M always
    takes ``default_tma_route`` (session 15)."""
    return m <= SPLITK_MAX_M and cdiv(n, 64) < sms and k >= 1024


def default_tma_route(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, sms: int) -> tuple | None:
    """The TMA kernel's config ``matmul`` takes for ``c = a @ b`` when no tuning knob is given, or None (split-K
    where ``use_splitk`` holds, else the other kernels): with row-major, TMA-aligned tensors, M <= SMALL_M through
    ``matmul_splitk.default_tma_config`` (always a config for M <= matmul_splitk.SWAP_MAX_M), larger M through
    ``matmul_rows.rows_split_config`` where B's pitch is a multiple of 128 bytes (the Gluon kernel's route else)."""
    m, k = a.shape
    n = b.shape[1]
    if not tma_ok(a, b, c):  # row-major B (unit last strides): tma_splitk_ok holds too
        return None
    if m > SMALL_M:
        return None if _b_pitch_misaligned(b) else _rows.rows_split_config(m, n, k, sms)
    return _sk.default_tma_config(m, n, k, sms)


def num_sms(device: torch.device) -> int:
    return sm_count(device, cpu_default=4)  # 4 on CPU keeps the persistent loop exercised in the interpreter


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    config: tuple | None = None,
    use_tma: bool | None = None,
    persistent: bool = True,
    split_k: int | None = None,
    splitk_fused: bool | None = None,
    misaligned_b: str | None = None,
    repack: tuple | None = None,
    splitk_tma: tuple | None = None,
    ws: tuple | None = None,
    gluon: bool | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``a @ b`` for 2-D fp16/bf16 tensors (M, K) x (K, N) -> (M, N), fp32 accumulation.

    ``config`` (a CONFIGS tuple; 6 entries = EPI 0, no flattening), ``use_tma`` and ``persistent`` are
    tuning knobs (``kernels/tune.py``); the defaults autotune on GPU.  Decode-sized products
    (``use_splitk``: M <= SPLITK_MAX_M with too few output tiles to fill the GPU) go through the split-K
    kernels (``kernels/matmul_splitk.py``) where the TMA kernel cannot run (below); ``split_k``
    forces a split count there (0: never split);
    ``splitk_fused`` forces the reduction into the last-arriving program (True) or a second kernel (False);
    ``misaligned_b`` overrides MISALIGNED_B, ``repack`` REPACK_CONFIG.  ``splitk_tma`` (a
    ``matmul_splitk.SPLITK_TMA_CONFIG`` tuple) runs the tensor-descriptor split-K kernel, its K-split partials summed
    by a second kernel (``matmul_splitk.TMA_SPLIT_FUSED``); by default it is used for M <= SMALL_M where
    ``default_tma_config`` picks a config (M <= SWAP_MAX_M: its tiles computed transposed, always, ahead of split-K;
    larger M: one of its WIDE_TMA_CONFIGS where their tiles fill the GPU, else SPLITK_TMA_CONFIG's tiles or 64-column
    ones with K split (``narrow_split_config``), else the tiles that fill at least half their waves rather than the
    persistent kernel), and above SMALL_M rows 64-row tiles with K split in 4-16 chunks where
    ``matmul_rows.rows_split_config`` picks them (row-major B of a 128-byte pitch).  ``ws`` (a
    ``_matmul_gluon.WS_CONFIG`` tuple) runs the warp-specialised Gluon kernel (``misaligned_b="ws"`` picks it
    with its default config for a misaligned B); ValueError where it cannot run.  ``gluon``: True / False takes
    / avoids that kernel (default config) wherever it can run; None (default): ``gluon_default`` decides, for
    row-major B with no Triton tuning knob given, and for a misaligned B when ``misaligned_b`` is "ws-mc" (then in
    clusters, B not repacked) or "ws-repack".
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor, got {getattr(t, 'shape', type(t).__name__)}")
    check_dtype(a, b)
    check_device(a, b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions must match: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if misaligned_b is not None and misaligned_b not in MISALIGNED_HOWS:
        raise ValueError(f"misaligned_b must be one of {MISALIGNED_HOWS}, got {misaligned_b!r}")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device) if out is None else out
    if tuple(c.shape) != (m, n) or c.dtype != a.dtype or c.device != a.device:
        raise ValueError(f"out must be ({m}, {n}) {a.dtype} on {a.device}, got {tuple(c.shape)} {c.dtype}")
    if c.numel() == 0:
        return c
    if k == 0:
        return c.zero_()
    sms = num_sms(a.device)
    no_knob = (splitk_tma is None and split_k is None and config is None and use_tma is None and persistent
               and splitk_fused is None and misaligned_b is None and repack is None and ws is None and not gluon)
    cfg = default_tma_route(a, b, c, sms) if no_knob else None
    if cfg is not None:
        return matmul_splitk_tma(a, b, c, cfg)
    if split_k or (split_k is None and config is None and splitk_tma is None and use_splitk(m, n, k, sms)):
        return matmul_splitk(a, b, c, sms, split=split_k, fused=splitk_fused)
    if splitk_tma is not None:
        if not tma_splitk_ok(a, b, c):
            raise ValueError("splitk_tma needs row-major a, b, out with 16-byte aligned pitches")
        return matmul_splitk_tma(a, b, c, splitk_tma)
    if ws is not None:
        _mg.check_ws_config(ws)
        if not (_mg.runnable(a, b, c) and _mg.matmul_ws(a, b, c, ws)):
            raise ValueError(f"the Gluon GEMM cannot run these tensors here ({_mg.status()})")
        return c
    tma = _tma_ok(a, b, c) if use_tma is None else use_tma
    colmajor = bool(b.stride(0) == 1 and b.stride(1) != 1) if tma else False
    b_ptr = False
    # the Gluon kernel where not asked otherwise (no Triton tuning knob given)
    auto = config is None and use_tma is None and persistent
    misaligned = tma and not colmajor and _b_pitch_misaligned(b)
    want_gluon = gluon if gluon is not None else auto and gluon_default(m, n, aligned=not misaligned)
    if misaligned:
        # decode-sized M reads B once (memory-bound): a repack would double its traffic
        how = misaligned_b or (MISALIGNED_B if m > SMALL_M else "tma")
        if how == "ws-mc":  # by default where the Gluon kernel is taken; asked for, wherever it runs (as "ws")
            if (want_gluon or misaligned_b == "ws-mc") and _mg.runnable(a, b, c) \
                    and _mg.matmul_ws(a, b, c, cluster=True):
                return c
            how = "ws-repack"
        if how in ("ws", "ws-tma"):
            if _mg.runnable(a, b, c) and _mg.matmul_ws(a, b, c, b_tma=how == "ws-tma"):
                return c
            how = "ws-repack"
        if how == "overlap":
            n1 = _overlap_split(m, n, sms, config)
            if n1:
                return _matmul_overlap(a, b, c, n1, repack, config, persistent, sms)
            how = "repack"
        if how in ("repack", "ws-repack"):
            b = repack_rows(b, repack)
        if how != "ws-repack":
            want_gluon = bool(gluon)  # the other misaligned-B paths are Triton's unless Gluon is asked for
        b_ptr = how == "ptr"
    if want_gluon and tma and not colmajor and not b_ptr and _mg.runnable(a, b, c) and _mg.matmul_ws(a, b, c):
        return c
    _launch(a, b, c, tma, colmajor, b_ptr, config, persistent, sms)
    return c


def _launch(a, b, c, tma: bool, colmajor: bool, b_ptr: bool, config: tuple | None, persistent: bool,
            sms: int) -> None:
    """One launch of the persistent kernel (autotuned unless ``config``)."""
    m, k = a.shape
    n = b.shape[1]
    if tma:
        set_triton_allocator()
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    consts = {"USE_TMA": tma, "B_COLMAJOR": colmajor, "DOT_F32": interpreting(), "B_PTR": b_ptr}
    if b_ptr:
        consts.update(SBK8=b.stride(0) // 8, NB8=n // 8)

    def grid_for(bm: int, bn: int) -> int:
        tiles = cdiv(m, bm) * cdiv(n, bn)
        return min(sms, tiles) if persistent else tiles

    if config is None and interpreting():
        config = INTERPRET_CONFIG
    if config is None:
        def grid(meta: dict) -> tuple[int]:
            return (grid_for(meta["BLOCK_M"], meta["BLOCK_N"]),)

        _matmul_tuned[grid](*args, **consts)
    else:
        cfg = _to_config(config)
        progs = grid_for(config[0], config[1])
        _matmul_kernel[(progs,)](*args, **cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **consts)


def _overlap_split(m: int, n: int, sms: int, config: tuple | None) -> int:
    """Columns of the first part of an overlapped repack GEMM (``_matmul_overlap``): the fewest whole BLOCK_N
    tiles, at least half, for which the two parts together take no more rounds of tiles over the SMs than the
    whole GEMM; 0 when no split keeps that."""
    bm, bn = (config or (INTERPRET_CONFIG if interpreting() else CONFIGS[0]))[:2]
    mt, nt = cdiv(m, bm), cdiv(n, bn)
    whole = cdiv(mt * nt, sms)
    for j in range((nt + 1) // 2, nt):
        if cdiv(mt * j, sms) + cdiv(mt * (nt - j), sms) <= whole:
            return j * bn
    return 0


_SIDE: dict[torch.device, torch.cuda.Stream] = {}


def _matmul_overlap(a, b, c, n1: int, repack: tuple | None, config: tuple | None, persistent: bool, sms: int):
    """Misaligned B, repacked in two column parts: the copy of the second part runs on a side stream while the
    GEMM of the first part runs (compute-bound; the copy is memory-bound), then the second part's GEMM."""
    bw = _pitched_empty(b)
    _repack_into(b[:, :n1], bw[:, :n1], repack)
    side = None  # interpreter (CPU): no side stream, the same kernels in order
    if b.device.type == "cuda":
        cur = torch.cuda.current_stream(b.device)
        side = _SIDE.get(b.device)
        if side is None:
            side = _SIDE[b.device] = torch.cuda.Stream(b.device)
        side.wait_stream(cur)  # first part copied (and the inputs ready)
    _launch(a, bw[:, :n1], c[:, :n1], True, False, False, config, persistent, sms)
    with torch.cuda.stream(side):  # a no-op context for None
        _repack_into(b[:, n1:], bw[:, n1:], repack)
    if side is not None:
        cur.wait_stream(side)
    _launch(a, bw[:, n1:], c[:, n1:], True, False, False, config, persistent, sms)
    return c


__all__ = ["CONFIGS", "SMALL_M", "SMALL_M_CONFIGS", "matmul", "set_configs"]
