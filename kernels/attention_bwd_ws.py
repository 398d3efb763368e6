"""Host side of the warp-specialised Gluon attention backward (``kernels/_attn_bwd_ws.py``), Hopper only.

:func:`kernels.attention.attention_backward` routes here with ``impl="gluon"``, or with ``impl="auto"`` where
:func:`preferred` says the kernel measured faster, when :func:`eligible` says it can run (sm_90, fp16/bf16, head
dim 64 or 128, TMA-compatible strides, a positive softmax scale, a Triton whose Gluon API builds it).  Three
launches: the delta pre-pass (which also zeroes the fp32 dQ scratch; with ``PREP_HEAD_DIMS`` for the first
:func:`prep_ahead` kv heads only, the kernel doing the rest), the Gluon kernel (dK, dV, and dQ added into the scratch
with TMA reduce-adds) and the dQ post-pass (scale and cast), the pre- and post-pass shared with the fused Triton
backward.  **dq is not bitwise deterministic** (the order of the adds varies); dk and dv are.  If
Triton cannot build the kernel here, the first call says so once (``RuntimeWarning``) and the caller falls back.

Status (session 9): built offline for sm_90 against Triton 3.6.0 (``kernels/compile_check_bwd_ws.py``: no spills
at d64; at d128 16 B (full) / 48 B (causal) of spill stores, all outside the loops, per the SASS; no ptxas-injected
wgmma wait); on H100s (``kernels/device_s9.sh`` calls 1-4) every kernels GPU test passed (281) and, graph-timed
against SDPA cuDNN in one call (call 4), d128 L4096 ran 0.96 / 0.99x cuDNN full / causal, d64 0.98 / 1.00x, d128
L8192 0.96 / 0.97x (the 2-kernel scheme: 0.75-0.91x); calls 8-9 timed shorter and ragged lengths, so ``PREFERRED``
lists head dims 64 and 128, both masks, each from the length where it measured faster, and ``attention.BWD_IMPL``
routes "auto" here.
"""

from __future__ import annotations

import math

import torch

from kernels import _ptx_barriers
from kernels._attn_bwd_fused import _bwd_pre_fused, _dq_post
from kernels._checks import (
    GLUON_BUILD_ERRORS,
    LOG2E,
    AttnDims,
    cdiv,
    gluon_build_failed,
    gluon_runnable,
    gluon_status,
    layout_strides,
    padded_dim,
    sm_count,
    tma_ok,
)
from kernels.attention_ws import descriptor, smem_layout

try:  # the kernel is written against Triton 3.6's Gluon Hopper API
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from kernels._attn_bwd_ws import attn_bwd_ws, dq_box
except Exception as exc:  # an older or newer Triton without the same Gluon API
    attn_bwd_ws = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None

# why the LIGHT_PTX builds are off (this Triton's compile step is not the known one), or None
LIGHT_ERROR = _ptx_barriers.light_error(attn_bwd_ws, "LIGHT_PTX") if attn_bwd_ws is not None else None

ENABLED = True
ROWS = 64  # query rows per step, and keys per consumer warpgroup (the kernel's ROWS)
BLOCK_N = 2 * ROWS  # keys per program: two consumer warpgroups
HEAD_DIMS = (64, 128)
# head dim -> STAGES (Q/dO ring depth); shared memory: d128 2 stages 197 KB, d64 2 stages 131 KB
CONFIGS: dict[int, int] = {128: 2, 64: 2}
# registers per consumer thread after setmaxnreg, launch-time maxnreg (the loader warpgroup keeps 24)
REGISTERS = (240, 168)
# Where "auto" takes this kernel (given eligible()): (head dim, causal) -> the shortest query and key length at which
# it measured faster than the 2-kernel Triton scheme on H100s, or level there and faster on an H200 (kernels/NOTES.md,
# session 9, calls 4, 8 and 9; B*L = 16k tokens, H=16): d128 from 512 keys without a mask (0.609 against 0.687 ms),
# also with one since session 24 (H100s level at L512: 0.505 / 0.502 in session 9, 0.501 / 0.500 in session 23; an
# H200 1.10x at L512, 1.14x at L768 with B 16, session 24 call 7); d64 from 2048 (L1024 lost: 0.555 / 0.391 against
# 0.547 / 0.373).  No GQA was timed (grouped problems keep the 2-kernel scheme).  Ragged lengths (4000, 4100)
# measured like the multiples of 128.
PREFERRED: dict[tuple[int, bool], int] = {(128, False): 512, (128, True): 512, (64, False): 2048, (64, True): 2048}
# Causal: the last kv heads' programs, about this many waves of them (one program per SM), are started heaviest key
# block first across those heads instead of head by head (the kernel's ``n_tail``); 0 keeps head order throughout.
# Session 11, call 1 (H100, kernels/NOTES.md): 1-3 waves 3-5 % faster than head order at the suite's causal shapes
# (d128 L4096 1.533-1.543 against 1.580 ms, d64 0.950-0.955 against 0.996, d128 L8192 2.78-2.82 against 2.85);
# 5 waves lost at d128 L4096 (1.627), every head (2.413 ms): the programs running together then add into the dQ
# scratch rows of too many heads for L2.  Without a mask every program has the same work: head order throughout.
CAUSAL_TAIL_WAVES = 2.0
# dK += dS^T Q with dS^T from registers (as dV's P^T) rather than from its shared-memory tile (which dQ still reads):
# the product then reads only Q from shared memory, whose bandwidth a step's ten wgmma groups share (session 20)
DS_REGISTERS = True
# Head dims whose consumers hold their keys of K and V in registers for the whole program (the A operands of S^T and
# dP^T every step, else read from shared memory by each product): 64 (no spill); at 128 they spill (660 B).  Only
# with DS_REGISTERS: without it Triton 3.6's ptxas packs P^T over K's registers inside the loop and dk / dv come out
# wrong (session 20; ``kernels/compile_check_bwd_ws.py`` checks the SASS for it)
KV_REGISTERS_HEAD_DIMS = (64,)
# Head dims whose dQ part is staged as 128-byte rows of 32 columns, a row's parts side by side (dq_descriptor): a
# half-warp's four rows of a 64-bit store then land on distinct banks under the 128-byte swizzle, where as [64, 64]
# (the parts stored apart) rows r and r ^ 1 share them (session 35, call 7: 33.6M excess wavefronts at d128).  H200,
# session 36, calls 4-5: d64 +1.9-5.8 % (L2048-16384, full and causal), d128 -1.2 to +0.3 % (not taken there).
DQ_ROWS_HEAD_DIMS = (64,)
# Head dims whose consumers each compute half of dQ's columns over all the block's keys every row block (the kernel's
# DQ_SPLIT); elsewhere one consumer computes all of them, the consumers taking turns by row block.  At d128 the turns
# (8 m64n128 products a step instead of 16 m64n64, dS^T read once) ran 10-12 % slower at L1024-16384, full and causal
# (H200, kernels/NOTES.md session 37, call 4): the step's work no longer equal between the consumers.
DQ_SPLIT_HEAD_DIMS = (128,)
# Head dims whose pre-pass work (delta = rowsum(o dO), the dQ scratch zeroed: ~0.1 ms at d128 L4096, at the copy
# rate) the kernel does itself for all but the first kv heads: each program's loader warpgroup, a chunk of rows after
# each Q/dO issue once its ring is full, prepares its key block's share of the kv head ``prep_ahead`` heads after its
# own, while the compute leaves DRAM idle, and counts it done (release); a program waits in its prologue for its own
# head's count (acquire).  Programs take their index from a ticket in start order, so every program waited on has
# started and waits only on earlier ones: no deadlock whatever order the hardware starts them in.  Session 21 (H100
# GPU-382dd5d8, call 7, against the pre-pass for every head): d128 L4096 +1.2 % (causal +2.7 %), d64 L4096 +2.0 %
# (causal +0.7 %), L8192 -0.7 % (d128) / level (d64); call 6's first form (the wait in the consumers, the work at once
# when the ring was full) lost 2.4 % at d128 and gained 2.8 % at d64.
# With few key blocks a head many heads run in the first wave: the pre-pass prepares at least those (prep_ahead),
# else they would wait for the loaders of the first ones, which spread their chunks over most of their programs
# (session 22, H100 GPU-451ea00b, call 1: ahead 4 at d128 L1024 ran 2.6x slower).  With that rule (call 2,
# GPU-6542254e, against the pre-pass for every head): without a mask d128 L1024 +4.2 %, L2048 +1.4 %, d64 L1024
# +1.1 %; "auto" from PREP_MIN_LEN queries on GPU-c722a5b3 (call 3): d128 L1024 +3.8 %, L2048 +1.8 %, d64 L1024
# +1.7 %, L2048 +1.4 % (call 4, the same card: +4.0 / -0.2 / +1.5 %).  With a causal mask d128 L1024 -2.4 %, so only
# from PREP_MIN_LEN_CAUSAL (session 21: L4096 +2.7 %; session 22 call 1: L8192 level).
PREP_HEAD_DIMS: tuple[int, ...] = (64, 128)
PREP_MIN_LEN = 1024
PREP_MIN_LEN_CAUSAL = 4096
PREP_AHEAD = 4  # kv heads the pre-pass still prepares, at least
# (head dim, causal) where the kernel is built through kernels/_ptx_barriers.py (``LIGHT_PTX``), from LIGHT_MIN_LEN
# queries: its consumers without the warpgroup barrier Triton puts before each of their two slot releases a step (the
# Q / dO ring's, dS^T's buffer), as the forward at head dim 128 (kernels/NOTES.md, sessions 31-32; H200s, graph-timed
# against the same kernel with them; dk, dv bitwise the same).  Head dim 64 without a mask, L4096: +1.9 % (session 31
# call 2, GPU-a0324a89), +2.0 % (call 6, GPU-0ba338cd), +2.1 % (session 32 call 4, GPU-fb6f9293); this rule (session
# 32 call 5, GPU-b1d00f5e): L1024 / 2048 / 4096 / 8192 / 16384 +0.3 / +1.7 / +2.5 / +2.5 / +3.0 %, fp16 +1.8 %, GQA 4
# +1.9 % (0.988 -> 1.012x cuDNN at L4096, 0.994 -> 1.019x at L8192).  Not taken: d64 causal -0.8 % (twice), d128
# -1.6 to -2.3 % (causal level).
LIGHT_BARRIERS: tuple[tuple[int, bool], ...] = ((64, False),)
LIGHT_MIN_LEN = 2048  # measured at 1024 (+0.3 %) and 2048 (+1.7 %)
_PRE_BM = 64
_broken: list[str] = []  # the build error, once the kernel failed to build here


def light_barriers(dims: AttnDims, causal: bool) -> bool:
    """Whether the kernel runs without the consumers' warpgroup barriers before their slot releases (``LIGHT_PTX``):
    at ``LIGHT_BARRIERS``' (head dim, causal) from ``LIGHT_MIN_LEN`` queries, where the build can be made."""
    return ((dims.head_dim, bool(causal)) in LIGHT_BARRIERS and dims.len_q >= LIGHT_MIN_LEN
            and _ptx_barriers.buildable(LIGHT_ERROR))


def runnable_on(device: torch.device) -> bool:
    """The kernel is enabled, imported with this Triton, has not failed to build, and ``device`` is an sm_90 GPU
    (not the interpreter)."""
    return gluon_runnable(device, attn_bwd_ws, _broken, ENABLED)


def eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, dk: torch.Tensor,
             dv: torch.Tensor, head_dim: int, scale: float) -> bool:
    """True when the Gluon backward can run these tensors (``do`` already in q's dtype) on this GPU: dk and dv
    are written through pointers and need a unit stride in their last dim."""
    if q.dtype not in (torch.float16, torch.bfloat16) or head_dim not in HEAD_DIMS or not scale > 0:
        return False
    if dk.stride(-1) != 1 or dv.stride(-1) != 1:
        return False
    return runnable_on(q.device) and tma_ok(q, k, v, do)


def preferred(dims: AttnDims, causal: bool) -> bool:
    """True where "auto" should take the Gluon backward (given :func:`eligible`): where it measured faster (or level
    on H100s and faster on an H200: ``PREFERRED``)."""
    min_len = PREFERRED.get((dims.head_dim, bool(causal)))
    return min_len is not None and dims.group == 1 and min(dims.len_q, dims.len_k) >= min_len


def requirements() -> str:
    """What :func:`eligible` asks for, for error messages."""
    return (f"an sm_90 GPU, fp16/bf16, head dim in {HEAD_DIMS}, a positive sm_scale, 16-byte aligned strides, "
            f"dk/dv with a unit last stride; kernel: {status()}")


def backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
             lse: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, dims: AttnDims, layout: str,
             causal: bool, scale: float, *, stages: int | None = None, skip_dq: bool = False,
             tail_waves: float | None = None, ds_registers: bool | None = None,
             kv_registers: bool | None = None, prep: bool | None = None, light: bool | None = None) -> bool:
    """Write dq, dk, dv (checked, preallocated, non-empty problem, :func:`eligible` inputs) through the Gluon
    kernel; False (nothing written) when the kernel cannot be built here.  ``stages`` overrides ``CONFIGS``,
    ``tail_waves`` ``CAUSAL_TAIL_WAVES`` (for a causal mask only), ``ds_registers`` ``DS_REGISTERS``,
    ``kv_registers`` ``KV_REGISTERS_HEAD_DIMS``, ``prep`` :func:`prepares_in_kernel` (o and dO need a unit last
    stride for it), ``light`` :func:`light_barriers` (True builds with the barriers all the same where
    ``LIGHT_ERROR`` is set or under Triton's asynchronous compile mode); ``skip_dq`` (a timing diagnostic: dq comes
    out zero) leaves out the dQ product and its reduce-adds."""
    d = dims.head_dim
    b, hq, hk = dims.batch, dims.heads_q, dims.heads_kv
    ds_rs = DS_REGISTERS if ds_registers is None else bool(ds_registers)
    kv_rs = (ds_rs and d in KV_REGISTERS_HEAD_DIMS) if kv_registers is None else bool(kv_registers)
    if kv_rs and not ds_rs:
        raise ValueError("kv_registers needs ds_registers: without it ptxas (Triton 3.6) miscompiles the kernel")
    n_kb = cdiv(dims.len_k, BLOCK_N)
    sms = sm_count(q.device, 1)
    n_tail = tail_heads(n_kb, b * hk, sms, CAUSAL_TAIL_WAVES if tail_waves is None else tail_waves, causal)
    so, sdo = layout_strides(out, layout), layout_strides(do, layout)
    prep = (prepares_in_kernel(d, dims.len_q, causal) if prep is None else bool(prep)) and so[3] == 1 and sdo[3] == 1
    ahead = prep_ahead(b * hk, n_tail, n_kb, sms) if prep else b * hk
    # [0] the programs' start ticket, [1 + kv head] its preparation count (unused without prep)
    sync = torch.zeros(1 + b * hk, dtype=torch.int32, device=q.device) if prep else lse
    delta = torch.empty_like(lse)
    dq_acc = torch.empty((b * hq, dims.len_q, d), dtype=torch.float32, device=q.device)
    _bwd_pre_fused[(cdiv(dims.len_q, _PRE_BM), ahead * dims.group)](
        out, do, delta, dq_acc, *so, *sdo, hq, dims.len_q, HEAD_DIM=d, BLOCK_D=padded_dim(d), BLOCK_M=_PRE_BM)
    split = d in DQ_SPLIT_HEAD_DIMS
    descs = (descriptor(q, layout, b, hq, dims.len_q, d, ROWS), descriptor(k, layout, b, hk, dims.len_k, d, BLOCK_N),
             descriptor(v, layout, b, hk, dims.len_k, d, BLOCK_N), descriptor(do, layout, b, hq, dims.len_q, d, ROWS),
             dq_descriptor(dq_acc, split))
    sdk, sdv = layout_strides(dk, layout), layout_strides(dv, layout)
    regs, maxnreg = REGISTERS
    light = light_barriers(dims, causal) if light is None else bool(light) and _ptx_barriers.buildable(LIGHT_ERROR)
    try:
        attn_bwd_ws[(n_kb * b * hk,)](
            *descs, lse, delta, dk, dv, sdk[0], sdk[1], sdk[2], sdv[0], sdv[1], sdv[2], hq, hk, dims.group,
            dims.len_q, dims.len_k, n_kb, n_tail, scale * LOG2E, scale, out, do, dq_acc, sync, so[0], so[1], so[2],
            sdo[0], sdo[1], sdo[2], ahead, PREP=prep, HEAD_DIM=d,
            STAGES=stages or CONFIGS[d], CAUSAL=bool(causal), DQ_SPLIT=split, DQ_SKIP=bool(skip_dq),
            CONSUMER_REGS=regs, DS_RS=ds_rs, KV_RS=kv_rs, LIGHT_PTX=_ptx_barriers.VERSION if light else 0,
            num_warps=4, maxnreg=maxnreg)
    except GLUON_BUILD_ERRORS as exc:  # compile, ptxas or resource errors: not a launch failure
        gluon_build_failed(exc, _broken, "warp-specialised Gluon attention backward", "the Triton backward")
        return False
    _dq_post[(cdiv(dims.len_q, _PRE_BM), b * hq)](
        dq_acc, dq, *layout_strides(dq, layout), hq, dims.len_q, scale, HEAD_DIM=d, BLOCK_D=padded_dim(d),
        BLOCK_M=_PRE_BM)
    return True


def dq_descriptor(dq_acc: torch.Tensor, split: bool) -> TensorDescriptor:
    """The fp32 dQ scratch (B*Hq, Lq, D) for the kernel's reduce-adds, in boxes of a consumer's dQ part (D / 2
    columns with ``split``, else D): ``_attn_bwd_ws.dq_box``, at ``DQ_ROWS_HEAD_DIMS`` the scratch viewed as
    (B*Hq, Lq, D / 32, 32), the part staged as 128-byte rows of 32 columns, a row's parts side by side."""
    bhq, len_q, d = dq_acc.shape
    box = dq_box(d // 2 if split else d, d in DQ_ROWS_HEAD_DIMS)
    if len(box) == 4:
        return TensorDescriptor(dq_acc, [bhq, len_q, d // 32, 32], [len_q * d, d, 32, 1], list(box),
                                smem_layout(box, torch.float32))
    return TensorDescriptor(dq_acc, [bhq, len_q, d], [len_q * d, d, 1], list(box), smem_layout(box, torch.float32))


def prepares_in_kernel(head_dim: int, len_q: int, causal: bool) -> bool:
    """Whether :func:`backward` has the kernel do the pre-pass's work past the first heads by default: at
    ``PREP_HEAD_DIMS`` from ``PREP_MIN_LEN`` queries, ``PREP_MIN_LEN_CAUSAL`` with a causal mask (where it was timed
    faster)."""
    return head_dim in PREP_HEAD_DIMS and len_q >= (PREP_MIN_LEN_CAUSAL if causal else PREP_MIN_LEN)


def prep_ahead(n_heads: int, n_tail: int, n_kb: int, sms: int) -> int:
    """How many kv heads the pre-pass prepares (and how far ahead each program prepares one, the kernel's ``ahead``):
    ``PREP_AHEAD``, at least the ``n_tail`` heads started in key block order (their programs come after every other
    head's, so each is prepared by programs that start before any of its own), at least the heads whose ``n_kb``
    programs a head wholly fill the first wave of ``sms`` programs (a head prepared by programs of the same wave waits
    for most of their run: forced at L1024, ahead 4 where 16 heads fill the wave made the d128 backward 2.6x slower,
    kernels/NOTES.md session 22; rounded down, as measured: the programs of a head that only partly fits the wave, 4
    of 132 at 8, 16 or 32 key blocks, may still wait), at most every head."""
    return min(max(PREP_AHEAD, n_tail, sms // max(n_kb, 1)), n_heads)


def tail_heads(n_kb: int, n_heads: int, sms: int, waves: float, causal: bool) -> int:
    """How many of the last kv heads' programs the kernel starts in key block order (its ``n_tail``): enough for
    ``waves`` waves of ``sms`` programs, under a causal mask only (0 otherwise, or for ``waves`` <= 0)."""
    if not causal or waves <= 0:
        return 0
    return min(n_heads, math.ceil(waves * sms / n_kb))


def status() -> str:
    """One line for reports: whether the Gluon backward is available and why not."""
    return gluon_status(attn_bwd_ws, IMPORT_ERROR, _broken, ENABLED, "attention_bwd_ws.ENABLED")
