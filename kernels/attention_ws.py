"""Host side of the warp-specialised Gluon forward (``kernels/_attn_fwd_ws.py``), Hopper only.

:func:`kernels.attention.attention_forward` routes here when :func:`eligible` says the kernel can run
(sm_90, fp16/bf16, head dim <= 128, TMA-compatible strides, a Triton whose Gluon API it compiles with),
:func:`preferred` says it is the faster kernel for these shapes and ``ENABLED`` is on; everything else
keeps the Triton kernel.  If Triton cannot build the Gluon kernel on this machine, the first call says so
once (``RuntimeWarning``) and the Triton kernel is used from then on.
"""

from __future__ import annotations

import warnings

import torch
import triton

from kernels._checks import AttnDims, interpreting, layout_strides, padded_dim, set_triton_allocator, tma_ok

try:  # Gluon ships with Triton >= 3.5; its Hopper API is what the kernel is written against (3.6)
    from kernels._attn_fwd_ws import attn_fwd_ws
except Exception as exc:  # an older or newer Triton without the same Gluon API
    attn_fwd_ws = None
    IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    IMPORT_ERROR = None

ENABLED = True
ROWS_PER_PROGRAM = 128  # two consumer warpgroups of 64 query rows
MAX_HEAD_DIM = 128
# BLOCK_D -> (BLOCK_N, STAGES): K and V tiles of BLOCK_N keys, STAGES of each in shared memory.
CONFIGS: dict[int, tuple[int, int]] = {16: (128, 3), 32: (128, 3), 64: (128, 3), 128: (128, 2)}
CONSUMER_REGS = 240  # per consumer thread (setmaxnreg); the loader warpgroup keeps the rest (24)
MAXNREG = 168  # launch-time registers per thread: 12 warps x 168 = the 64K register file
_broken: list[str] = []  # the compile error, once the kernel failed to build here


# Where "auto" prefers the Gluon kernel (H100, kernels/NOTES.md session 6): padded head dims 72..128 at
# lengths >= PREFER_MIN_LEN.  Below that, and at head dims <= 64, the Triton kernel measured faster.
PREFER_BLOCK_D = (128,)
PREFER_MIN_LEN = 1024


def eligible(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, head_dim: int) -> bool:
    """True when the Gluon forward can run these tensors on this GPU."""
    if not ENABLED or attn_fwd_ws is None or _broken or interpreting() or q.device.type != "cuda":
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or out.dtype != q.dtype or head_dim > MAX_HEAD_DIM:
        return False
    return torch.cuda.get_device_capability(q.device) == (9, 0) and tma_ok(q, k, v, out)


def preferred(dims: AttnDims) -> bool:
    """True where "auto" should take the Gluon kernel (given :func:`eligible`): where it measured faster."""
    return padded_dim(dims.head_dim) in PREFER_BLOCK_D and max(dims.len_q, dims.len_k) >= PREFER_MIN_LEN


def forward(q, k, v, out, lse, dims: AttnDims, layout: str, causal: bool, qk_scale: float,
            config: tuple[int, int] | None = None) -> bool:
    """Launch the Gluon forward; False (nothing written) when the kernel cannot be built here."""
    block_d = padded_dim(dims.head_dim)
    block_n, stages = config or CONFIGS[block_d]
    grid = (triton.cdiv(dims.len_q, ROWS_PER_PROGRAM), dims.batch * dims.heads_q)
    set_triton_allocator()  # device-side tensor descriptors
    try:
        attn_fwd_ws[grid](q, k, v, out, lse, *layout_strides(q, layout)[:3], *layout_strides(k, layout)[:3],
                          *layout_strides(v, layout)[:3], *layout_strides(out, layout)[:3],
                          dims.heads_q, dims.group, dims.len_q, dims.len_k, qk_scale,
                          HEAD_DIM=dims.head_dim, BLOCK_D=block_d, BLOCK_N=block_n, STAGES=stages,
                          CAUSAL=bool(causal), CONSUMER_REGS=CONSUMER_REGS, num_warps=4, maxnreg=MAXNREG)
    except (triton.CompilationError, RuntimeError) as exc:  # compile or PTX errors: not a launch failure
        if "CUDA error" in str(exc):
            raise
        _broken.append(f"{type(exc).__name__}: {str(exc)[:300]}")
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
