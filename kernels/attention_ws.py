"""Host side of the warp-specialised Gluon forward (``kernels/_attn_fwd_ws.py``), Hopper only.

:func:`kernels.attention.attention_forward` routes here when :func:`eligible` says the kernel can run
(sm_90, fp16/bf16, head dim <= 128, TMA-compatible strides, a Triton whose Gluon API it compiles with),
:func:`preferred` says it is the faster kernel for these shapes and ``ENABLED`` is on; everything else
keeps the Triton kernel.  If Triton cannot build the Gluon kernel on this machine, the first call says so
once (``RuntimeWarning``) and the Triton kernel is used from then on.
"""

from __future__ import annotations

import functools
import warnings

import torch
import triton

from kernels._checks import AttnDims, interpreting, layout_strides, padded_dim, sm_count, tma_ok

try:  # Gluon ships with Triton >= 3.5; its Hopper API is what the kernel is written against (3.6)
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from kernels._attn_fwd_ws import attn_fwd_ws
except Exception as exc:  # an older or newer Triton without the same Gluon API
    attn_fwd_ws = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None

ENABLED = True
ROWS = 64  # query rows per consumer warpgroup (the kernel's _attn_fwd_ws.ROWS)
MAX_HEAD_DIM = 128
# (BLOCK_D, causal) -> (BLOCK_N, STAGES, consumer warpgroups, persistent): K and V tiles of BLOCK_N keys,
# STAGES of each in shared memory, each consumer owning 64 query rows (three consumers, selectable up to
# BLOCK_D 64, measured no faster than two).  Persistent (one program per SM looping over the work tiles)
# measured faster without a causal mask; with one, the tiles' work differs and one program per tile
# balances better (H100, kernels/NOTES.md session 6).
CONFIGS: dict[tuple[int, bool], tuple[int, int, int, bool]] = {
    (128, False): (128, 2, 2, True), (128, True): (128, 2, 2, False),
    (64, False): (128, 3, 2, True), (64, True): (128, 3, 2, False),
    (32, False): (128, 3, 2, True), (32, True): (128, 3, 2, False),
    (16, False): (128, 3, 2, True), (16, True): (128, 3, 2, False),
}
# consumers -> (registers per consumer thread after setmaxnreg, launch-time maxnreg): 4 + 4 * consumers warps
# share the 64K register file; the loader warpgroup keeps 24 per thread.
REGISTERS = {2: (240, 168), 3: (160, 128)}
_broken: list[str] = []  # the compile error, once the kernel failed to build here


# Where "auto" prefers the Gluon kernel (given eligible()), from the H100 measurements (kernels/NOTES.md
# session 6): every padded head dim it runs, except causal at head dims <= 64, where the Triton kernel was
# as fast at L4096 and faster at L512.
PREFER_BLOCK_D = (16, 32, 64, 128)
PREFER_CAUSAL_MIN_BLOCK_D = 128


def eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, head_dim: int) -> bool:
    """True when the Gluon forward can run these tensors on this GPU."""
    if not ENABLED or attn_fwd_ws is None or _broken or interpreting() or q.device.type != "cuda":
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or out.dtype != q.dtype or head_dim > MAX_HEAD_DIM:
        return False
    return torch.cuda.get_device_capability(q.device) == (9, 0) and tma_ok(q, k, v, out)


def preferred(dims: AttnDims, causal: bool) -> bool:
    """True where "auto" should take the Gluon kernel (given :func:`eligible`): where it measured faster."""
    block_d = padded_dim(dims.head_dim)
    return block_d in PREFER_BLOCK_D and (not causal or block_d >= PREFER_CAUSAL_MIN_BLOCK_D)


@functools.cache
def _smem_layout(rows: int, block_d: int, dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for([1, 1, rows, block_d],
                                                gl.bfloat16 if dtype == torch.bfloat16 else gl.float16)


def _descriptor(t: torch.Tensor, layout: str, batch: int, heads: int, length: int, head_dim: int, rows: int):
    """Rank-4 (batch, head, position, dim) tensor descriptor over ``t`` (either layout, read in place) with
    [1, 1, rows, BLOCK_D] boxes: positions >= length and dims >= head_dim read as zero, stores clipped."""
    block_d = padded_dim(head_dim)
    sb, sh, sl, _ = layout_strides(t, layout)
    return TensorDescriptor(t, [batch, heads, length, head_dim], [sb, sh, sl, 1], [1, 1, rows, block_d],
                            _smem_layout(rows, block_d, t.dtype))


def forward(q, k, v, out, lse, dims: AttnDims, layout: str, causal: bool, qk_scale: float,
            config: tuple[int, int, int, bool] | None = None) -> bool:
    """Launch the Gluon forward; False (nothing written) when the kernel cannot be built here.

    ``config`` = (BLOCK_N, STAGES, consumers, persistent) overrides ``CONFIGS``."""
    block_n, stages, consumers, persistent = config or CONFIGS[(padded_dim(dims.head_dim), bool(causal))]
    regs, maxnreg = REGISTERS[consumers]
    b, d = dims.batch, dims.head_dim
    descs = (_descriptor(q, layout, b, dims.heads_q, dims.len_q, d, ROWS),
             _descriptor(k, layout, b, dims.heads_kv, dims.len_k, d, block_n),
             _descriptor(v, layout, b, dims.heads_kv, dims.len_k, d, block_n),
             _descriptor(out, layout, b, dims.heads_q, dims.len_q, d, ROWS))
    n_work = triton.cdiv(dims.len_q, ROWS * consumers) * b * dims.heads_q
    grid = (min(n_work, sm_count(q.device, 1)) if persistent else n_work,)
    try:
        attn_fwd_ws[grid](*descs, lse, dims.heads_q, dims.group, dims.len_q, dims.len_k, n_work, qk_scale,
                          BLOCK_N=block_n, STAGES=stages, NC=consumers, CAUSAL=bool(causal), CONSUMER_REGS=regs,
                          num_warps=4, maxnreg=maxnreg)
    except (triton.CompilationError, RuntimeError) as exc:  # compile or PTX errors: not a launch failure
        if "CUDA error" in str(exc):
            raise
        lines = [line for line in str(exc).splitlines() if line.strip()]
        _broken.append(f"{type(exc).__name__}: {lines[-1][:300] if lines else ''}")
        warnings.warn(f"the warp-specialised Gluon attention forward does not build with Triton "
                      f"{triton.__version__} here ({_broken[0]}); using the Triton kernel", RuntimeWarning,
                      stacklevel=3)
        return False
    return True


def status() -> str:
    """One line for reports: whether the Gluon forward is available and why not."""
    if attn_fwd_ws is None:
        return f"unavailable ({IMPORT_ERROR})"
    if _broken:
        return f"disabled after a build failure ({_broken[0]})"
    return "enabled" if ENABLED else "disabled (attention_ws.ENABLED = False)"
