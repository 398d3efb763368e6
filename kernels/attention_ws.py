"""Host side of the warp-specialised Gluon forward (``kernels/_attn_fwd_ws.py``), Hopper only.

:func:`kernels.attention.attention_forward` routes here when :func:`eligible` says the kernel can run
(sm_90, fp16/bf16, head dim <= 128, TMA-compatible strides, a Triton whose Gluon API it compiles with),
:func:`preferred` says it is the faster kernel for these shapes and ``ENABLED`` is on; everything else
keeps the Triton kernel.  :func:`kernels.attention.attention_forward_fp8` routes here when
:func:`eligible_fp8` says the fp8 variant can run (e4m3 inputs, V stored position-contiguous, head dim
64..128).  If Triton cannot build the Gluon kernel on this machine, the first call says so
once (``RuntimeWarning``) and the Triton kernel is used from then on.
"""

from __future__ import annotations

import functools

import torch

from kernels import _ptx_barriers
from kernels._checks import (
    GLUON_BUILD_ERRORS,
    AttnDims,
    arrival_counters,
    cdiv,
    dim_position_view,
    gluon_build_failed,
    gluon_runnable,
    gluon_status,
    layout_strides,
    padded_dim,
    sm_count,
    tma_ok,
)

try:  # Gluon ships with Triton >= 3.5; its Hopper API is what the kernel is written against (3.6)
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from kernels._attn_fwd_ws import attn_fwd_ws
except Exception as exc:  # an older or newer Triton without the same Gluon API
    attn_fwd_ws = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None

# why the LIGHT_PTX builds are off (this Triton's compile step is not the known one), or None
LIGHT_ERROR = _ptx_barriers.light_error(attn_fwd_ws, "LIGHT_PTX") if attn_fwd_ws is not None else None

ENABLED = True
# fp8: read K with its keys permuted in shared memory where its strides allow (_permuted_k_descriptor), so P
# reaches the P·V wgmma without an exchange between threads (kernels/NOTES.md, session 8)
PERMUTE_K = True
ROWSUM_CODES = 2  # the kernel's ROWSUM_MMA for fp8 P's e4m3 codes without exponentials (_attn_fwd_ws.ROWSUM_CODES)
ROWS = 64  # query rows per consumer warpgroup (the kernel's _attn_fwd_ws.ROWS)
MAX_HEAD_DIM = 128
# (BLOCK_D, causal) -> (BLOCK_N, STAGES, consumer warpgroups, persistent, ping-pong): K and V tiles of BLOCK_N
# keys, STAGES of each in shared memory, each consumer owning 64 query rows (three consumers up to BLOCK_D 64);
# persistent: one program per SM looping over the work items, else one program per item (causal items are pairs
# of row blocks of equal total work); ping-pong: the consumers take turns to issue their wgmma groups
# (kernels/NOTES.md, sessions 6 and 7, H100).  Padded head dim 64 without a mask: three consumers taking turns, 2
# stages, from SHORT_QUERY_MAX_LEN queries (session 13, calls 9-10, H100, bf16 at head dim 64: +1.6 / +4.0 / +5.7 /
# +5.1 % at L2048 / 4096 / 8192 / 16384 against two consumers, 0.98-1.02x cuDNN; call 12, H200: +1.2 / +3.6 % at
# L4096 / 16384; with a causal mask three consumers lost 15 %, until session 26's grid tails: LONG_CAUSAL_CONFIGS;
# head dims 33-63 were not timed, only GPU-tested).
Config = tuple[int, int, int, bool, bool]
CONFIGS: dict[tuple[int, bool], Config] = {
    (128, False): (128, 2, 2, True, False), (128, True): (128, 2, 2, False, False),
    (64, False): (128, 2, 3, True, True), (64, True): (128, 3, 2, False, False),
    (32, False): (128, 3, 2, True, False), (32, True): (128, 3, 2, False, False),
    (16, False): (128, 3, 2, True, False), (16, True): (128, 3, 2, False, False),
}
# fp8 (e4m3) inputs, V position-contiguous: (BLOCK_D, causal) -> the same tuple.  d128 without a mask takes
# ping-pong turns (session 10, call 9, H100: L4096 0.643 against 0.675 ms, L16384 2.572 against 2.636; with a
# causal mask the turns lost, 0.366 against 0.362 and 1.377 against 1.348).  Head dim 64 without a mask: three
# consumers with turns as for 16-bit inputs (session 13, call 10: +8.6 / +10.3 / +10.7 % at L2048 / 4096 / 16384;
# with a causal mask -6 to -10 %, call 9).
FP8_CONFIGS: dict[tuple[int, bool], Config] = {
    (128, False): (128, 3, 2, True, True), (128, True): (128, 2, 2, False, False),
    (64, False): (128, 2, 3, True, True), (64, True): (128, 3, 2, False, False),
}
# Where three consumers do not pay: (BLOCK_D, causal, fp8) -> a two-consumer config, taken below SHORT_QUERY_MAX_LEN
# queries and for fp8 whose K cannot be read permuted (default_config).  Head dim 64 without a mask: three consumers
# (192-row blocks, more rows idle in the last one) measured at 1024 queries -4 % in fp8 (H100, session 13, call 10;
# +8.6 / +10.3 / +10.7 % at L2048 / 4096 / 16384) and -6 % in bf16 on an H200 (call 12; H100 +0.6 %).
TWO_CONSUMER_CONFIGS: dict[tuple[int, bool, bool], Config] = {
    (64, False, False): (128, 3, 2, True, False), (64, False, True): (128, 3, 2, True, False)}
SHORT_QUERY_MAX_LEN = 2048  # measured at 1024 (two consumers faster or equal) and 2048 (three faster)
# 16-bit causal attention over fewer than SHORT_CAUSAL_MAX_LEN keys: BLOCK_D -> config.  64-key tiles lose less of
# the diagonal blocks' work and keep more items in flight (H100, session 8: d128 L512 0.130 / 0.129 ms against
# 0.136 / 0.139 with 128-key tiles, calls 1-2; 6 % slower at L4096, so long sequences keep CONFIGS), and a
# persistent grid gains 3-5 % over one program per item there (call 7: 0.1217 against 0.1280 ms at 3 stages,
# 0.1213 / 0.1274 at 4, 0.1244 / 0.1282 at 2).  Padded head dim 64 takes the same config (session 23: d64 causal
# B32 L512 / B16 L1024 on H100 GPU-fda9aff3 0.0873 / 0.1255 ms against the Triton kernel's 0.0893 / 0.1307, on
# GPU-83418717 0.0854 / 0.1251 against 0.0894 / 0.1337, on an H200 0.0858 / 0.1253 against 0.0889 / 0.1322 (CONFIGS'
# there 0.113-0.116 / 0.143-0.144); at L2048 CONFIGS' stays faster (H100: 0.206 against 0.224 ms); padded head
# dims <= 32 keep the Triton kernel (d32 L512 0.059 against 0.073).  Head dims 33-63 (padded) were not timed.
SHORT_CAUSAL_CONFIGS: dict[int, Config] = {128: (64, 3, 2, True, False), 64: (64, 3, 2, True, False)}
SHORT_CAUSAL_MAX_LEN = 2048  # d128 measured at 512 (64-key tiles faster) and 4096 (slower); d64 at 512-2048
# 16-bit causal attention from LONG_CAUSAL_MIN_LEN queries: BLOCK_D -> config.  Padded head dim 64 on three consumers
# with ping-pong turns (and so ROWSUM_MMA), 192-row blocks ending in LPT's single row blocks (kernels/NOTES.md session
# 26, H100 GPU-b093ffc6: L16384 1.183 against 1.289 ms on CONFIGS' two consumers, 1.077x cuDNN; at L4096 6 % slower:
# 4096 = 21 * 192 + 64 rows, so two of the last row block's consumers compute rows past the end, 6 % of the work;
# since session 27 the row blocks start before row 0 (first_row) and L4096 is level with two consumers).
# Head dims 33-63 (padded to 64) take it too, not timed.
LONG_CAUSAL_CONFIGS: dict[int, Config] = {64: (128, 2, 3, False, True)}
LONG_CAUSAL_MIN_LEN = 8192
# Up to ONE_LOOP_MAX_KEYS keys, 16-bit inputs on SHORT_CAUSAL_CONFIGS' config run every key tile through one loop of
# the masked softmax (the kernel's ONE_LOOP: a third fewer instructions; the instruction cache stalled the two-loop
# build 0.92 of its 7.01 cycles an issued instruction at d64 L512, kernels/NOTES.md session 24).  H100 GPU-d45bb197
# (session 25, call 2), against two loops with the same row-bound mask: d64 L512 +3.8 %, L768 -5.0 %, L1024 -8.9 %;
# d128 L512 +5.3 %, L768 +0.3 %, L1024 -2.1 %.
ONE_LOOP_MAX_KEYS = 512
# A causal grid of one program an item ends in single row blocks, heaviest first (lpt_heads): about this many an SM.
# Causal pairs weigh the same, so the last wave of them leaves SMs idle (the suite's shapes: 1024 pairs, 7.76 waves on
# 132 SMs; 33 heads, 16 whole waves, ran 1.3 % (d64) and 4.3 % (d128) more TFLOPS on one H100, kernels/NOTES.md
# session 26).
LPT_SINGLES_PER_SM = 2
LPT_FP8 = True  # fp8 causal d128 L4096 / L16384 +1.2 / +2.5 % (call 6; with 512-1024 single row blocks -5-6 %, call 1)
# Where lpt_heads gives a tail (causal, one program an item, more than a wave of pairs) on two consumers, the grid is
# persistent and its programs take the items, pairs then single row blocks, from a grid-wide ticket (the kernel's
# DYNAMIC): a list schedule without a program's start and end an item.  H200 GPU-4c8c5557 (kernels/NOTES.md session
# 27, call 5, 5 rounds) against one program an item: d64 causal L2048 +4.8 % (0.905 -> 0.949x cuDNN), L4096 +1.8 %,
# d128 L4096 +1.6 %, L16384 +0.7 %, fp8 d128 L4096 +2.2 %, L16384 -0.2 %; more single row blocks did not pay (4 an
# SM +1.3-1.4 %, 8 level, 16 -11 %: calls 1 and 4).  The shipped tree on GPU-1b94c10f (call 6): +4.4 / +1.5 / +2.2
# / +0.4 / +3.4 / -0.1 %, outputs bitwise.  Not taken (call 7): the persistent short causal configs (2-3 % slower at
# L512-1024: a ticket's round trip a short item), three consumers (level).  Not timed on an H100.
DYNAMIC_GRID = True
_TICKETS: dict[tuple[torch.device, int], torch.Tensor] = {}  # DYNAMIC's ticket, a buffer per (device, stream)
FP8_MIN_HEAD_DIM = 64  # fp8 wgmma reads 32-byte K steps; smaller head dims keep the Triton kernel
# consumers -> (registers per consumer thread after setmaxnreg, launch-time maxnreg): 4 + 4 * consumers warps
# share the 64K register file; the loader warpgroup keeps 24 per thread.
REGISTERS = {2: (240, 168), 3: (160, 128)}
_broken: list[str] = []  # the compile error, once the kernel failed to build here


# Two Q buffers a consumer (the kernel's Q_BUFS: the loader loads the next row block's Q, then its first K/V tiles,
# while the consumers finish the current one; 32 KB more shared memory, 229,736 of the 232,448 bytes) for 16-bit
# inputs at padded head dim 128 without a mask on CONFIGS' config, from TWO_Q_BUFFERS_MIN_KEYS keys (kernels/NOTES.md,
# session 22).  Against one buffer, H100 GPU-c70307dd (call 5): d128 L4096 +1.2 %, L16384 +0.9 %, L512 -0.6 %; causal
# -2.1 %, L512 causal -3.2 %, d64 -2.8 %, fp8 -2.2 / -3.2 % (full / causal).  H100 GPU-7568208d (call 6, this rule):
# L1024 / 2048 / 4096 / 8192 / 16384 +0.5 / +0.6 / +0.3 / +1.7 / +0.7 %, d80 L4096 +0.5 %, L512 -0.9 %.  With
# ROWSUM_MMA's tile of ones the kernel would not fit.
TWO_Q_BUFFERS: tuple[tuple[int, bool], ...] = ((128, False),)
TWO_Q_BUFFERS_MIN_KEYS = 1024


# 16-bit inputs at padded head dim 128 on 128-key tiles (CONFIGS' two-consumer configs without turns, from
# LIGHT_MIN_LEN queries): the kernel built through kernels/_ptx_barriers.py, its consumers without the warpgroup
# barrier Triton puts before each slot release and mbarrier wait (kernels/NOTES.md session 31; H200s, graph-timed
# against the same kernel with them, outputs bitwise the same).  The shipped rule on GPU-ac985037 (call 3): d128
# L1024 / 2048 / 4096 / 8192 +3.4 / +1.5 / +3.8 / +3.9 %, causal L2048 / 4096 / 16384 +1.1 / +2.3 / +2.2 %, d80
# +4.0 %, fp16 +1.6 %, d96 causal +1.3 %; GPU-e9f4a7f8 / GPU-a0324a89 (calls 1-2): d128 L4096 +2.7 / +3.7 %, causal
# +1.6 / +1.7 %, L16384 +4.3 %.  Not taken: L512 without a mask -1.5 %, d64 (two consumers, or three with turns)
# -3 to -4 %, fp8 level (-1.2 to +0.6 %).
LIGHT_BARRIERS = True
LIGHT_MIN_LEN = 1024  # measured at 512 (-1.5 %) and 1024 (+3.4 %)


def light_barriers(dims: AttnDims, causal: bool, fp8: bool, config: Config) -> bool:
    """Whether the kernel runs without the consumers' warpgroup barriers before mbarrier operations (``LIGHT_PTX``)."""
    return (LIGHT_BARRIERS and not fp8 and padded_dim(dims.head_dim) == 128 and config[0] == 128 and config[2] == 2
            and not config[4] and dims.len_q >= LIGHT_MIN_LEN and _ptx_barriers.buildable(LIGHT_ERROR))


def q_buffers(block_d: int, causal: bool, fp8: bool, len_k: int, config: Config, rowsum: bool) -> int:
    """Q buffers a consumer for this launch: 2 for 16-bit inputs where ``TWO_Q_BUFFERS`` lists (BLOCK_D, causal),
    from ``TWO_Q_BUFFERS_MIN_KEYS`` keys, on ``CONFIGS``' config for it (the one measured), without ROWSUM_MMA;
    else 1."""
    two = ((block_d, causal) in TWO_Q_BUFFERS and not fp8 and not rowsum and len_k >= TWO_Q_BUFFERS_MIN_KEYS
           and config == CONFIGS[(block_d, causal)])
    return 2 if two else 1


def rowsum_mma(fp8: bool, consumers: int, codes: bool = False) -> int:
    """The kernel's ``ROWSUM_MMA``: ``ROWSUM_CODES`` where ``codes`` (fp8 P's e4m3 codes without exponentials,
    :func:`forward`'s ``fast_exp`` where K is read permuted), else whether the kernel takes the softmax's row sums
    from the tensor cores (P times a tile of ones beside the P·V product, instead of 62 FADDs a thread and step):
    for 16-bit inputs on three consumers (the
    default configs give three to head dim 64 without a mask, and with a causal mask from ``LONG_CAUSAL_MIN_LEN``
    queries, where they spill 576 B against 64 B without a mask, offline build, and measured faster than the FADDs:
    session 26, call 2, 1.09 against 1.06x the two-consumer config at L16384).  H100, kernels/NOTES.md
    session 16 (call 3), against the FADDs: bf16 d64 without a mask +8.0 %; with two consumers bf16 lost (d128
    -2.4 / -4.2 % full / causal, d64 causal -4.8 %, L512 -1.2 %).  Never for fp8: its P is rounded to e4m3 for the
    product (3 mantissa bits, values below 2^-9 flushed), and the lse of those sums missed the fp32 reference's by
    more than 1e-2 (call 4), although fp8 ran 3-6 % faster.  Nor for an fp8 caller that takes no lse (session 21,
    call 4): the fp8 wgmma accumulates with less than fp32 precision, so a row sum carried across every key tile loses
    its late terms as it grows; the output, normalised by it, missed the fp64 reference by 6.2e-2 at 4096 keys and
    3.2e-1 at 16384 (the FADD sums: 2.6e-2 / 2.7e-2).  Nor summed one key tile at a time into a zeroed accumulator
    and added in fp32 (session 22, call 1): the output then matched the FADDs' (2.6e-2), 0-2.4 % faster at d128
    (5 % at d64), but the lse stayed 0.7-1.8e-2 off the fp64 reference (the FADDs': 1e-4 to 6e-4).  (fp8's codes
    take them so, a tile at a time: there the exponentials they save pay, session 33.)"""
    if fp8 and codes:
        return ROWSUM_CODES
    return not fp8 and consumers >= 3


# Where "auto" prefers the Gluon kernel (given eligible()), from the H100 measurements (kernels/NOTES.md
# sessions 6, 7 and 23): every padded head dim it runs, except causal at padded head dims <= 32 below
# PREFER_CAUSAL_SMALL_D_MIN_LEN keys, where the Triton kernel is faster (session 23: d32 L512 0.059 against 0.073 ms on
# the 64-key config).  Padded head dim 64 took that exception too (session 7, call 2: d64 L512 0.089 against 0.113 ms on
# CONFIGS' 128-key tiles; L4096 0.394 against 0.350, Gluon ahead) until session 23 timed it on SHORT_CAUSAL_CONFIGS'
# 64-key tiles (faster than Triton at d64; head dims 33-63, padded to 64, were not timed).
PREFER_BLOCK_D = (16, 32, 64, 128)
PREFER_CAUSAL_MIN_BLOCK_D = 64
PREFER_CAUSAL_SMALL_D_MIN_LEN = 2048  # d64 measured at 512 / 4096 (session 7), d64 / d32 at 512-2048 (session 23)


def _runnable_on(device: torch.device) -> bool:
    """The kernel is enabled, built with this Triton, and ``device`` is an sm_90 GPU (not the interpreter)."""
    return gluon_runnable(device, attn_fwd_ws, _broken, ENABLED)


def eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, head_dim: int) -> bool:
    """True when the Gluon forward can run these tensors on this GPU."""
    if q.dtype not in (torch.float16, torch.bfloat16) or out.dtype != q.dtype or head_dim > MAX_HEAD_DIM:
        return False
    return _runnable_on(q.device) and tma_ok(q, k, v, out)


def eligible_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, head_dim: int,
                 layout: str) -> bool:
    """True when the Gluon forward can run these fp8 tensors: e4m3 q/k/v with v stored position-contiguous
    (its length stride 1, the K-major layout fp8 wgmma needs), a bf16/fp16/fp32 output, head dim 64..128."""
    if any(t.dtype != torch.float8_e4m3fn for t in (q, k, v)) or not FP8_MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        return False
    if out.dtype not in (torch.bfloat16, torch.float16, torch.float32) or layout_strides(v, layout)[2] != 1:
        return False
    return _runnable_on(q.device) and tma_ok(q, k, out, dim_position_view(v, layout))


# Where "auto" prefers the Gluon fp8 kernel (given eligible_fp8()), from the H100 measurements (kernels/NOTES.md
# session 8, call 2): head dim 128, both masks (P packed next to the P·V product, K read permuted: L4096
# 0.672 / 0.365 ms full / causal against the Triton fp8 kernel's 0.776 / 0.446; L512 0.105 / 0.111 against
# 0.156 / 0.122).  Head dim 64 since P is carried packed (session 13, call 5): without a mask at every length
# (L512 0.078 against 0.089 ms, L2048 0.259 / 0.286, L4096 0.506 / 0.517 in call 4), causal from 2048 keys (L2048
# 0.173 / 0.178, L4096 0.290 / 0.317; L512 0.093 / 0.071 and L1024 0.119 / 0.106 stay with Triton), the causal
# threshold being the 16-bit rule's (PREFER_CAUSAL_SMALL_D_MIN_LEN; fp8 measured at 1024 and 2048 keys).  Padded
# head dim 64 includes 33-63, which eligible_fp8 refuses below 64.
PREFER_FP8_BLOCK_D = (64, 128)
PREFER_FP8_CAUSAL_MIN_BLOCK_D = 128


def _measured_faster(dims: AttnDims, causal: bool, block_ds: tuple[int, ...], causal_min_block_d: int) -> bool:
    """The routing rule both dtypes share: a padded head dim in ``block_ds``, and with a causal mask below
    ``causal_min_block_d`` only from ``PREFER_CAUSAL_SMALL_D_MIN_LEN`` keys."""
    block_d = padded_dim(dims.head_dim)
    return block_d in block_ds and (not causal or block_d >= causal_min_block_d
                                    or dims.len_k >= PREFER_CAUSAL_SMALL_D_MIN_LEN)


def preferred_fp8(dims: AttnDims, causal: bool) -> bool:
    """True where fp8 "auto" should take the Gluon kernel (given :func:`eligible_fp8`): where it measured faster."""
    return _measured_faster(dims, causal, PREFER_FP8_BLOCK_D, PREFER_FP8_CAUSAL_MIN_BLOCK_D)


def preferred(dims: AttnDims, causal: bool) -> bool:
    """True where "auto" should take the Gluon kernel (given :func:`eligible`): where it measured faster."""
    return _measured_faster(dims, causal, PREFER_BLOCK_D, PREFER_CAUSAL_MIN_BLOCK_D)


@functools.cache
def smem_layout(box: tuple[int, ...], dtype: torch.dtype):
    """The shared layout of a [1, 1, rows, cols] box for a 2-D ``box``, else of ``box`` itself."""
    gl_type = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32,
               torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for([1, 1, *box] if len(box) == 2 else list(box), gl_type)


def descriptor(t: torch.Tensor, layout: str, batch: int, heads: int, length: int, head_dim: int, rows: int,
               transposed: bool = False):
    """Rank-4 (batch, head, position, dim) tensor descriptor over ``t`` (either layout, read in place) with
    [1, 1, rows, BLOCK_D] boxes: positions >= length and dims >= head_dim read as zero, stores clipped.
    ``transposed``: (batch, head, dim, position) with [1, 1, BLOCK_D, rows] boxes, for a position-contiguous
    ``t``."""
    block_d = padded_dim(head_dim)
    sb, sh, sl, sd = layout_strides(t, layout)
    if transposed:
        return TensorDescriptor(t, [batch, heads, head_dim, length], [sb, sh, sd, 1], [1, 1, block_d, rows],
                                smem_layout((block_d, rows), t.dtype))
    return TensorDescriptor(t, [batch, heads, length, head_dim], [sb, sh, sl, 1], [1, 1, rows, block_d],
                            smem_layout((rows, block_d), t.dtype))


def k_permutable(k: torch.Tensor, layout: str, dims: AttnDims) -> bool:
    """Whether k's strides allow :func:`_permuted_k_descriptor`'s view (batch·heads at a stride of len_k rows,
    len_k a multiple of 16)."""
    sb, sh, sl, _ = layout_strides(k, layout)
    return not (dims.len_k % 16 or (dims.heads_kv > 1 and sh != dims.len_k * sl)
                or (dims.batch > 1 and sb != dims.heads_kv * dims.len_k * sl))


def _permuted_k_descriptor(k: torch.Tensor, layout: str, dims: AttnDims, rows: int):
    """The fp8 kernel's ``PERM_K`` descriptor, or None where k's strides do not allow it.

    k is read as one (batch · kv heads · keys, head dim) matrix, through a rank-5 view (key / 16, t1, q, t0,
    dim) of strides (16, 2, 4, 1) rows, so that each [rows / 16, 2, 4, 2, BLOCK_D] box lands in shared
    memory with the keys of every 16 in the order of the kernel's ``_perm_key``.  That needs the batch·heads
    to follow one another at a stride of len_k rows (a contiguous (B, H, L, D) k, or one head) and len_k a
    multiple of 16; the rows past a head's last key belong to the next head and are masked like the zero
    fill they replace."""
    if not k_permutable(k, layout, dims):
        return None
    sl = layout_strides(k, layout)[2]
    block_d = padded_dim(dims.head_dim)
    box = (rows // 16, 2, 4, 2, block_d)
    return TensorDescriptor(k, [dims.batch * dims.heads_kv * dims.len_k // 16, 2, 4, 2, dims.head_dim],
                            [16 * sl, 2 * sl, 4 * sl, sl, 1], list(box), smem_layout(box, k.dtype))


def default_config(dims: AttnDims, causal: bool, fp8: bool, permuted_k: bool = True) -> Config:
    """The configuration :func:`forward` runs without an explicit one: ``CONFIGS`` / ``FP8_CONFIGS`` by padded
    head dim and mask, for 16-bit causal attention over fewer than ``SHORT_CAUSAL_MAX_LEN`` keys the
    ``SHORT_CAUSAL_CONFIGS`` entry where there is one, from ``LONG_CAUSAL_MIN_LEN`` queries the
    ``LONG_CAUSAL_CONFIGS`` one, and the ``TWO_CONSUMER_CONFIGS`` one over fewer than
    ``SHORT_QUERY_MAX_LEN`` queries or for fp8 whose K cannot be read permuted (``permuted_k`` False: P is then
    exchanged between threads and carried in fp32, and three consumers spill 804 bytes, offline build)."""
    block_d = padded_dim(dims.head_dim)
    if not fp8 and causal and dims.len_k < SHORT_CAUSAL_MAX_LEN and block_d in SHORT_CAUSAL_CONFIGS:
        return SHORT_CAUSAL_CONFIGS[block_d]
    if not fp8 and causal and dims.len_q >= LONG_CAUSAL_MIN_LEN and block_d in LONG_CAUSAL_CONFIGS:
        return LONG_CAUSAL_CONFIGS[block_d]
    two_consumers = dims.len_q < SHORT_QUERY_MAX_LEN or (fp8 and not permuted_k)
    if two_consumers and (block_d, bool(causal), fp8) in TWO_CONSUMER_CONFIGS:
        return TWO_CONSUMER_CONFIGS[(block_d, bool(causal), fp8)]
    return (FP8_CONFIGS if fp8 else CONFIGS)[(block_d, bool(causal))]


def one_loop(dims: AttnDims, causal: bool, fp8: bool, config: Config) -> bool:
    """Whether the launch takes the kernel's ``ONE_LOOP`` (``ONE_LOOP_MAX_KEYS``)."""
    short = SHORT_CAUSAL_CONFIGS.get(padded_dim(dims.head_dim))
    return causal and not fp8 and dims.len_k <= ONE_LOOP_MAX_KEYS and short is not None and tuple(config) == short


def row_blocks(len_q: int, consumers: int) -> int:
    """Row blocks a batch·head: ``consumers`` * 64 queries each (the kernel's ``n_m``)."""
    return cdiv(len_q, ROWS * consumers)


def lpt_heads(dims: AttnDims, causal: bool, fp8: bool, config: Config, sms: int) -> int:
    """How many of the last batch·heads run their row blocks singly, heaviest first across them, at the end of a
    causal grid of one program an item (the kernel's ``LPT``): enough for about ``LPT_SINGLES_PER_SM`` row blocks an
    SM, so that the light ones fill the last wave; 0 (pairs only) for persistent configs, whose programs take items
    in a fixed order, without a mask (every item one row block), and where the pairs fit in one wave (no last wave
    to fill; measured only on grids of several waves).  fp8 too while ``LPT_FP8``."""
    if not causal or config[3] or (fp8 and not LPT_FP8):
        return 0
    n_m = row_blocks(dims.len_q, config[2])
    if cdiv(n_m, 2) * dims.batch * dims.heads_q <= sms:
        return 0
    return min(dims.batch * dims.heads_q, cdiv(LPT_SINGLES_PER_SM * sms, n_m))


def dynamic_grid(config: Config, lpt: int) -> bool:
    """Whether the launch takes its items from a grid-wide ticket (the kernel's ``DYNAMIC``; ``DYNAMIC_GRID``): where
    :func:`lpt_heads` gave the grid a tail (``lpt`` > 0), on two consumers."""
    return DYNAMIC_GRID and lpt > 0 and config[2] == 2


def first_row(dims: AttnDims, causal: bool, config: Config) -> int | None:
    """Where the causal row blocks start (the kernel's ``row0`` under ``SHIFT``), or None (row 0, no ``SHIFT``).

    With a causal mask the rows past the last query cost most in the last row block, which runs every key tile; so
    where a row block's rows are not a whole number of key tiles (three consumers: 192 rows on 128-key tiles) the
    blocks start up to a row block before row 0, in whole 64-row consumers, and the consumers with no row of their
    own sit in the first block, which runs one key tile (kernels/NOTES.md session 27, H200 GPU-986c3be3, d64 causal
    on three consumers against the same without it: L4096 +4.2 % (0.3580 against 0.3729 ms, level with two
    consumers), L8192 +1.1 %, L16384 +2.0 %; the shipped tree on GPU-f67b4cb8: +0.7 / +1.4 %).  Not on two
    consumers: 128-row blocks start on a key tile, and shifted by 64 rows each row block's diagonal spans two tiles
    through the masked softmax (d128 and d64 causal L4000 3-4 % slower)."""
    rows = ROWS * config[2]
    if not causal or rows % config[0] == 0:
        return None
    return -((row_blocks(dims.len_q, config[2]) * rows - dims.len_q) // ROWS * ROWS)


def work_items(dims: AttnDims, causal: bool, consumers: int, lpt: int = 0) -> tuple[int, int]:
    """The kernel's work items and how many of them are pairs: row blocks of NC * 64 queries per batch·head, paired
    (first with last, ...) when causal so that every item has the same number of key tiles, but for the last
    ``lpt`` batch·heads' row blocks (:func:`lpt_heads`), which are items of their own."""
    n_m = row_blocks(dims.len_q, consumers)
    if not causal:
        return n_m * dims.batch * dims.heads_q, 0
    pairs = cdiv(n_m, 2) * (dims.batch * dims.heads_q - lpt)
    return pairs + n_m * lpt, pairs


def forward(q, k, v, out, lse, dims: AttnDims, layout: str, causal: bool, qk_scale: float,
            config: Config | None = None, *, o_scale: float = 1.0, fast_exp: bool = False) -> bool:
    """Launch the Gluon forward; False (nothing written) when the kernel cannot be built here.

    fp8 inputs (given :func:`eligible_fp8`) read v position-contiguous and scale the output by ``o_scale``
    (v's descale), and K through the permuted rank-5 view (:func:`_permuted_k_descriptor`, ``PERMUTE_K``) where k
    allows it.  ``config`` = (BLOCK_N, STAGES, consumers, persistent, ping-pong) overrides :func:`default_config`
    (``CONFIGS`` / ``FP8_CONFIGS``, ``SHORT_CAUSAL_CONFIGS``, ``TWO_CONSUMER_CONFIGS``).  ``fast_exp`` (fp8 with K
    read permuted): P's e4m3 codes from the scores without exponentials and its row sums by wgmma
    (``ROWSUM_CODES``); elsewhere ignored."""
    fp8 = q.dtype == torch.float8_e4m3fn
    permuted = fp8 and PERMUTE_K and k_permutable(k, layout, dims)
    config = tuple(config or default_config(dims, causal, fp8, permuted))
    block_n, stages, consumers, persistent, pingpong = config
    regs, maxnreg = REGISTERS[consumers]
    b, d = dims.batch, dims.head_dim
    k_desc = _permuted_k_descriptor(k, layout, dims, block_n) if permuted else None
    descs = (descriptor(q, layout, b, dims.heads_q, dims.len_q, d, ROWS),
             k_desc or descriptor(k, layout, b, dims.heads_kv, dims.len_k, d, block_n),
             descriptor(v, layout, b, dims.heads_kv, dims.len_k, d, block_n, transposed=fp8),
             descriptor(out, layout, b, dims.heads_q, dims.len_q, d, ROWS))
    sms = sm_count(q.device, 1)
    lpt = lpt_heads(dims, causal, fp8, config, sms)
    n_items, n_pair_items = work_items(dims, causal, consumers, lpt)
    dynamic = dynamic_grid(config, lpt)
    grid = (min(n_items, sms) if persistent or dynamic else n_items,)
    ticket = arrival_counters(_TICKETS, q.device, 2) if dynamic else lse  # (not read without DYNAMIC)
    rowsum = rowsum_mma(fp8, consumers, codes=fast_exp and k_desc is not None)
    q_bufs = q_buffers(padded_dim(d), causal, fp8, dims.len_k, config, rowsum)
    row0 = first_row(dims, causal, config)
    light = light_barriers(dims, causal, fp8, config)
    try:
        attn_fwd_ws[grid](*descs, lse, dims.heads_q, dims.group, dims.len_q, dims.len_k, n_items, n_pair_items,
                          max(lpt, 1), qk_scale, float(o_scale), row0 or 0, ticket, BLOCK_N=block_n,
                          STAGES=stages, NC=consumers, CAUSAL=bool(causal), CONSUMER_REGS=regs, V_T=fp8,
                          PINGPONG=bool(pingpong), PERM_K=k_desc is not None, ROWSUM_MMA=rowsum, Q_BUFS=q_bufs,
                          ONE_LOOP=one_loop(dims, causal, fp8, config), LPT=lpt > 0, SHIFT=row0 is not None,
                          DYNAMIC=dynamic, LIGHT_PTX=_ptx_barriers.VERSION if light else 0, num_warps=4,
                          maxnreg=maxnreg)
    except GLUON_BUILD_ERRORS as exc:  # compile, ptxas or resource errors: not a launch failure
        gluon_build_failed(exc, _broken, "warp-specialised Gluon attention forward", "the Triton kernel")
        return False
    return True


def status() -> str:
    """One line for reports: whether the Gluon forward is available and why not."""
    return gluon_status(attn_fwd_ws, IMPORT_ERROR, _broken, ENABLED, "attention_ws.ENABLED")
