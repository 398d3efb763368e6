"""Split-K GEMM for decode-sized products (M <= 64): ``C = A @ B`` with B's K range cut into SPLIT chunks.

With M this small the work is reading B once (memory-bound), and an (M, N) grid alone has too few
programs to keep every SM's loads in flight (N = 4096 in 64-column tiles: 64 programs on 132 SMs).
Each program here reduces one K chunk of one (BLOCK_M, BLOCK_N) tile into an fp32 workspace
(SPLIT, M, N); the last program of each tile to finish sums the chunks and casts (FUSED_DEFAULT),
or else a second kernel does.  Pointer loads (the A tile is mostly rows beyond M: a tensor descriptor
would still stage the whole box in shared memory).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._checks import arrival_counters, interpreting, mma, next_pow2


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
def _splitk_reduce(W, C, M, N, SPLIT, scm, scn, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M * N
    acc = tl.zeros([BLOCK], tl.float32)
    for s in range(SPLIT):
        acc += tl.load(W + s * M * N + offs, mask=ok, other=0.0)
    m = offs // N
    n = offs % N
    tl.store(C + m.to(tl.int64) * scm + n * scn, acc.to(C.dtype.element_ty), mask=ok)


# (BLOCK_N, BLOCK_K, num_warps, num_stages); BLOCK_M = next power of two >= M (>= 16)
SPLITK_CONFIG: tuple[int, int, int, int] = (64, 128, 4, 4)
# reduce in the last-arriving program instead of a second kernel (H100: 1x4096x4096 8.62 vs 8.96 us with the
# same tiles, 16x14336x4096 44.4 vs 44.5 us; kernels/NOTES.md 2026-11-24 session 5)
FUSED_DEFAULT = True
_LOCKS: dict[torch.device, torch.Tensor] = {}  # per-tile arrival counters, one buffer per device


def choose_split(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, num_sms: int) -> int:
    """About two programs per SM, each chunk at least 4 K tiles (H100, 1x4096x4096: split 4 ran 8.9 us,
    split 8 12.1 us, split 16 13.8 us)."""
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
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
    k_per = triton.cdiv(triton.cdiv(k, split), bk) * bk
    split = triton.cdiv(k, k_per)  # every chunk non-empty
    work = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    extra = {} if interpreting() else {"num_warps": warps, "num_stages": stages}
    grid = (triton.cdiv(n, bn), triton.cdiv(m, bm), split)
    fused = FUSED_DEFAULT if fused is None else fused
    if fused and split > 1:
        locks = arrival_counters(_LOCKS, a.device, grid[0] * grid[1])
        _splitk_partial[grid](a, b, work, m, n, k, k_per, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                              BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, DOT_F32=interpreting(), C=c, LOCKS=locks,
                              SPLIT=split, scm=c.stride(0), scn=c.stride(1), FUSED=True, **extra)
        return c
    _splitk_partial[grid](
        a, b, work, m, n, k, k_per, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, DOT_F32=interpreting(), **extra)
    block = 1024
    _splitk_reduce[(triton.cdiv(m * n, block),)](work, c, m, n, split, c.stride(0), c.stride(1), BLOCK=block)
    return c


__all__ = ["SPLITK_CONFIG", "choose_split", "matmul_splitk"]
