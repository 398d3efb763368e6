"""Single-query (decode) attention over a long KV cache, split-KV, in Triton (and, on Hopper for one program a
head without GQA at head dim 64, the Gluon TMA kernel of ``kernels/decode_tma.py``).

Decode is memory-bound: each step reads the whole K and V cache once.  One program handles one
(batch, kv head, KV chunk) and all the query heads that share that kv head (GQA), so the cache is
read exactly once; the number of chunks is chosen so that there are several programs per SM.
A second small kernel merges the per-chunk partial outputs with their log-sum-exps (with one chunk per
head the output is written directly instead).

Layouts: q is (B, Hq, 1, D) for "bhld" or (B, 1, Hq, D) for "blhd"; the caches are (B, Hkv, L, D)
or (B, L, Hkv, D).  Everything is read through strides.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels import decode_tma
from kernels._checks import (
    LOG2E,
    arrival_counters,
    cdiv,
    check_attention,
    empty_like_layout,
    interpreting,
    layout_strides,
    mma,
    next_pow2,
    padded_dim,
    set_triton_allocator,
    sm_count,
    softmax_scale,
    tma_ok,
)

HEAD_DIMS: tuple[int, ...] = tuple(range(16, 257, 8))  # non-powers of two run padded (masked loads)
NUM_SMS_DEFAULT = 132


@triton.jit
def _decode_split(Q, K, V, PO, PL, sqb, sqh, sqd, skb, skh, skl, skd, svb, svh, svl, svd, sob, soh, sod,
                  HKV, GROUP, LK, CHUNK, NSPLIT, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr,
                  DOT_F32: tl.constexpr, DIRECT: tl.constexpr = False, USE_TMA: tl.constexpr = False,
                  Out=None, LOCKS=None, FUSED: tl.constexpr = False):
    # DIRECT (one chunk per head): PO is the output itself (strides sob/soh/sod); no partials, no combine.
    # USE_TMA: K/V tiles through per-(batch, kv head) tensor descriptors of shape (LK, HEAD_DIM) (zero-filled
    # beyond LK rows and HEAD_DIM columns) instead of masked pointer loads.
    # FUSED (several chunks): the last program of a (batch, kv head) to finish (arrival counter in LOCKS) merges
    # the chunks' partials into Out and resets the counter; no combine kernel.
    split = tl.program_id(0)
    bhk = tl.program_id(1)
    b = (bhk // HKV).to(tl.int64)
    hk = (bhk % HKV).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    g_ok = offs_g < GROUP
    heads = hk * GROUP + offs_g
    q = tl.load(Q + b * sqb + heads[:, None] * sqh + offs_d[None, :] * sqd, mask=g_ok[:, None] & d_ok[None, :],
                other=0.0)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, LK)
    if USE_TMA:
        k_desc = tl.make_tensor_descriptor(k_base, [LK, HEAD_DIM], [skl, 1], [BLOCK_N, BLOCK_D])
        v_desc = tl.make_tensor_descriptor(v_base, [LK, HEAD_DIM], [svl, 1], [BLOCK_N, BLOCK_D])
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_ok = offs_n < hi
        if HEAD_DIM == BLOCK_D:  # noqa: SIM108 (constexpr branch: no column mask at power-of-two dims)
            kv_ok = n_ok[:, None]
        else:
            kv_ok = n_ok[:, None] & d_ok[None, :]
        if USE_TMA:
            k = k_desc.load([start, 0])
            v = v_desc.load([start, 0])
        else:
            k = tl.load(k_base + offs_n[:, None] * skl + offs_d[None, :] * skd, mask=kv_ok, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * svl + offs_d[None, :] * svd, mask=kv_ok, other=0.0)
        s = mma(q, tl.trans(k), None, DOT_F32)
        s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], DOT_F32)
        m_i = m_new
    # every chunk holds >= 1 key, so l_i > 0 for the real heads
    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    if DIRECT:
        tl.store(PO + b * sob + heads[:, None] * soh + offs_d[None, :] * sod,
                 (acc / l_safe[:, None]).to(PO.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])
    else:
        bh = b * (HKV * GROUP) + heads
        tl.store(PO + (bh[:, None] * NSPLIT + split) * BLOCK_D + offs_d[None, :], acc / l_safe[:, None],
                 mask=g_ok[:, None])
        tl.store(PL + bh * NSPLIT + split, m_i + tl.math.log2(l_safe), mask=g_ok)
        if FUSED:
            tl.debug_barrier()  # every thread's partials stored before the release below
            arrived = tl.atomic_add(LOCKS + bhk, 1, sem="acq_rel", scope="gpu")
            if arrived == NSPLIT - 1:
                m_c = tl.full([BLOCK_G], float("-inf"), tl.float32)
                for t in range(NSPLIT):
                    m_c = tl.maximum(m_c, tl.load(PL + bh * NSPLIT + t, mask=g_ok, other=0.0, cache_modifier=".cg"))
                w_sum = tl.zeros([BLOCK_G], tl.float32)
                out = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
                for t in range(NSPLIT):
                    w = tl.math.exp2(tl.load(PL + bh * NSPLIT + t, mask=g_ok, other=0.0, cache_modifier=".cg") - m_c)
                    po = tl.load(PO + (bh[:, None] * NSPLIT + t) * BLOCK_D + offs_d[None, :], mask=g_ok[:, None],
                                 other=0.0, cache_modifier=".cg")
                    out += po * w[:, None]
                    w_sum += w
                tl.store(Out + b * sob + heads[:, None] * soh + offs_d[None, :] * sod,
                         (out / w_sum[:, None]).to(Out.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])
                tl.atomic_xchg(LOCKS + bhk, 0, sem="relaxed", scope="gpu")


@triton.jit
def _decode_combine(PO, PL, Out, sob, soh, sod, HQ, NSPLIT,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < NSPLIT
    lse = tl.load(PL + bh * NSPLIT + offs_s, mask=s_ok, other=float("-inf"))
    w = tl.math.exp2(lse - tl.max(lse, 0))
    w = w / tl.sum(w, 0)
    po = tl.load(PO + (bh * NSPLIT + offs_s[:, None]) * BLOCK_D + offs_d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(po * w[:, None], 0)
    b = bh // HQ
    h = bh % HQ
    tl.store(Out + b * sob + h * soh + offs_d * sod, out.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)


@triton.jit
def _read_floor(K, V, S, ROWS, PER, BLOCK_N: tl.constexpr, D: tl.constexpr):
    # Diagnostic: program p reads rows [p * PER, (p + 1) * PER) of the (ROWS, D) K and V caches (contiguous) in
    # BLOCK_N-row tiles, as the decode kernel's loads do, and only sums them: the floor of this access pattern.
    p = tl.program_id(0)
    offs_d = tl.arange(0, D)
    acc = tl.zeros([D], tl.float32)
    lo = p * PER
    hi = tl.minimum(lo + PER, ROWS)
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        ok = offs_n[:, None] < hi
        rows = offs_n[:, None].to(tl.int64) * D + offs_d[None, :]
        k = tl.load(K + rows, mask=ok, other=0.0)
        v = tl.load(V + rows, mask=ok, other=0.0)
        acc += tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
    tl.store(S + p * D + offs_d, acc)


def read_floor(k_cache: torch.Tensor, v_cache: torch.Tensor, programs: int, block_n: int = 128,
               num_warps: int = 4, num_stages: int = 3, tma: bool = False) -> torch.Tensor | None:
    """Diagnostic (kernels/tune.py): read contiguous K and V caches once with ``programs`` programs, each a
    contiguous run of rows, summing them; times the bytes decode must read without its arithmetic.  ``tma``:
    through the Gluon kernel's TMA ring instead (``num_stages`` (K, V) tile pairs in flight, nothing summed,
    returns None; sm_90 only)."""
    if tma:
        decode_tma.read_floor(k_cache, v_cache, programs, block_n, num_stages)
        return None
    d = k_cache.shape[-1]
    rows = k_cache.numel() // d
    per = cdiv(cdiv(rows, programs), block_n) * block_n
    grid = cdiv(rows, per)
    out = torch.empty((grid, d), dtype=torch.float32, device=k_cache.device)
    extra = {} if interpreting() else {"num_warps": num_warps, "num_stages": num_stages}
    _read_floor[(grid,)](k_cache, v_cache, out, rows, per, BLOCK_N=block_n, D=d, **extra)
    return out


USE_TMA = False  # default for K/V loads (kernels/NOTES.md, 2026-11-24 session 5: slower on an H100)
FUSED_COMBINE = False  # merge the chunks in the last-arriving program instead of a combine kernel
# per-(batch, kv head) arrival counters, a buffer per (device, stream)
_LOCKS: dict[tuple[torch.device, int], torch.Tensor] = {}


def choose_splits(batch: int, heads_kv: int, len_k: int, block_n: int, num_sms: int, waves: float = 2.0) -> int:
    """KV chunks per (batch, kv head).  When there are about as many (batch, kv head) pairs as SMs, one
    chunk each (the output is written directly, no combine kernel: +3-13 % on an H100 at 8x16 heads);
    otherwise about ``waves`` programs per SM, each chunk >= 2 tiles."""
    if batch * heads_kv >= 0.9 * num_sms:
        return 1
    tiles = cdiv(len_k, block_n)
    want = max(1, math.ceil(waves * num_sms / max(batch * heads_kv, 1)))
    return max(1, min(want, tiles // 2 if tiles >= 2 else 1))


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    sm_scale: float | None = None,
    layout: str = "bhld",
    *,
    num_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    use_tma: bool | None = None,
    fused_combine: bool | None = None,
    out: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention of one query position against a KV cache of any length.

    q: (B, Hq, 1, D) ("bhld") or (B, 1, Hq, D) ("blhd"); caches: (B, Hkv, L, D) or (B, L, Hkv, D),
    Hq a multiple of Hkv.  Returns q's shape (into ``out`` if given).  ``num_splits`` and the tile
    sizes override the heuristic; ``use_tma`` forces tensor-descriptor loads on or off (default: USE_TMA
    where the caches allow it); ``fused_combine`` merges the chunks in the last program of each head
    (default FUSED_COMBINE) instead of a second kernel.  Those options pick a Triton configuration.
    ``impl``: "auto" runs the Gluon TMA kernel (``kernels/decode_tma.py``) where it can run and measured faster
    (Hopper, no GQA, head dim 64, at least 0.9 (batch, head) pairs a SM, each head's rows together: bhld-like),
    the Triton kernel elsewhere; "triton" / "gluon" force one
    (ValueError where "gluon" cannot run these inputs, or with a Triton option).
    """
    dims = check_attention(q, k_cache, v_cache, layout, HEAD_DIMS)
    if dims.len_q != 1:
        raise ValueError(f"decode needs a query length of 1, got {dims.len_q}")
    if impl not in ("auto", "triton", "gluon"):
        raise ValueError(f"impl must be one of 'auto', 'triton', 'gluon', got {impl!r}")
    triton_options = any(o is not None for o in (num_splits, block_n, num_warps, num_stages, use_tma, fused_combine))
    if impl == "gluon" and triton_options:
        raise ValueError("impl='gluon' takes no num_splits, block_n, num_warps, num_stages, use_tma or "
                         "fused_combine: they pick a Triton configuration (leave them out, or use impl='triton')")
    scale = softmax_scale(dims.head_dim, sm_scale)
    if out is None:
        out = empty_like_layout(dims.batch, dims.heads_q, 1, dims.head_dim, layout, q)
    if tuple(out.shape) != tuple(q.shape) or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must match q: {tuple(q.shape)} {q.dtype}, got {tuple(out.shape)} {out.dtype}")
    if out.numel() == 0:
        return out
    if dims.len_k == 0:  # empty cache: nothing to attend to, zero output, no launch
        return out.zero_()
    if impl != "triton" and not triton_options:
        wants = impl == "gluon" or decode_tma.preferred(
            dims.group, dims.head_dim, dims.batch * dims.heads_kv, sm_count(q.device, cpu_default=NUM_SMS_DEFAULT),
            decode_tma.head_major(k_cache, layout) and decode_tma.head_major(v_cache, layout))
        kv_views = decode_tma.eligible(q, k_cache, v_cache, out, layout, dims.group, dims.head_dim) if wants else None
        if impl == "gluon" and kv_views is None:
            raise ValueError(f"the Gluon decode kernel cannot run these inputs ({decode_tma.status()}; it needs an "
                             f"sm_90 GPU, fp16/bf16, no GQA, head dim in {decode_tma.HEAD_DIMS} and caches whose "
                             "head dim is contiguous, 16-byte aligned)")
        if kv_views is not None:
            if decode_tma.decode(q, k_cache, v_cache, out, layout, kv_views, dims.batch, dims.heads_q, dims.len_k,
                                 scale * LOG2E):
                return out
            if impl == "gluon":
                raise RuntimeError(f"the Gluon decode kernel did not build: {decode_tma.status()}")
    interp = interpreting()
    # 128-row tiles (more bytes in flight per program: +10 % at 32/8 GQA heads on an H100, +10 % with one chunk
    # per head at 8x16 heads, kv 2048, d64; equal elsewhere)
    bn = block_n or (16 if interp else (32 if dims.head_dim > 128 else 128))
    nsplit = num_splits or choose_splits(dims.batch, dims.heads_kv, dims.len_k, bn,
                                              sm_count(q.device, cpu_default=NUM_SMS_DEFAULT))
    chunk = cdiv(cdiv(dims.len_k, nsplit), bn) * bn
    nsplit = cdiv(dims.len_k, chunk)  # every chunk non-empty
    bh = dims.batch * dims.heads_q
    block_d = padded_dim(dims.head_dim)
    direct = nsplit == 1
    part_o = out if direct else torch.empty((bh, nsplit, block_d), dtype=torch.float32, device=q.device)
    part_l = out if direct else torch.empty((bh, nsplit), dtype=torch.float32, device=q.device)
    so = layout_strides(out, layout)
    sq = layout_strides(q, layout)
    sk = layout_strides(k_cache, layout)
    sv = layout_strides(v_cache, layout)
    block_g = max(16, next_pow2(dims.group))
    extra = {} if interp else {"num_warps": num_warps or 4, "num_stages": num_stages or 3}
    fused = {}
    if not direct and (FUSED_COMBINE if fused_combine is None else fused_combine):
        fused = {"Out": out, "LOCKS": arrival_counters(_LOCKS, q.device, dims.batch * dims.heads_kv), "FUSED": True}
    tma = (USE_TMA and tma_ok(k_cache, v_cache)) if use_tma is None else use_tma  # per-head descriptors
    if tma:
        set_triton_allocator()
    _decode_split[(nsplit, dims.batch * dims.heads_kv)](
        q, k_cache, v_cache, part_o, part_l, sq[0], sq[1], sq[3], *sk, *sv, so[0], so[1], so[3],
        dims.heads_kv, dims.group, dims.len_k, chunk, nsplit, scale * LOG2E,
        HEAD_DIM=dims.head_dim, BLOCK_D=block_d, BLOCK_N=bn, BLOCK_G=block_g, DOT_F32=interp, DIRECT=direct,
        USE_TMA=tma, **fused, **extra)
    if direct or fused:
        return out
    _decode_combine[(bh,)](part_o, part_l, out, so[0], so[1], so[3], dims.heads_q, nsplit,
                           HEAD_DIM=dims.head_dim, BLOCK_D=block_d, BLOCK_S=max(2, next_pow2(nsplit)))
    return out


__all__ = ["HEAD_DIMS", "choose_splits", "decode_attention", "read_floor"]
