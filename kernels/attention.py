"""FlashAttention forward and backward in Triton (host side; kernels in ``_attn_fwd`` / ``_attn_bwd``).

fp16/bf16 forward and backward, fp8 (e4m3, per-tensor scales) forward; every head dim from 16 to 256
in multiples of 8 (non-powers of two run padded to the next power of two inside the kernel: masked
or zero-filled loads of the last dim, nothing copied); causal (diagonal aligned bottom-right when q
and kv lengths differ) and non-causal, arbitrary lengths, grouped-query heads (Hq a multiple of
Hkv), and the layouts "bhld" (B, H, L, D) and "blhd" (B, L, H, D), read through strides, never copied.

Two load paths share one kernel body: on Hopper (compute capability >= 9) with 16-byte aligned
strides, tiles come through device-side tensor descriptors (TMA, out-of-range rows and columns
zero-filled); elsewhere, and under the CPU interpreter, through masked pointer loads.  Rows that
see no key (causal with Lq > Lk) give a zero output and ``lse = +inf`` (the FlashAttention convention).
"""

from __future__ import annotations

import torch

from kernels import attention_bwd_fused, attention_bwd_ws, attention_ws
from kernels._attn_bwd import _attn_bwd_dkdv, _attn_bwd_dq, _bwd_preprocess
from kernels._attn_fwd import _attn_fwd
from kernels._checks import (
    LOG2E,
    AttnDims,
    autotuned_by_head_dim,
    cdiv,
    check_attention,
    check_buffer,
    dim_position_view,
    interpreting,
    launch,
    layout_strides,
    length_bucket,
    padded_dim,
    softmax_scale,
    tma_ok,
)

HEAD_DIMS: tuple[int, ...] = tuple(range(16, 257, 8))
FP8_DTYPES: tuple[torch.dtype, ...] = (torch.float8_e4m3fn,)
# the lse error attention_forward_fp8's fast_exp is held to (its tests, kernels.tune_ws check --fp8): its row sums are
# of P's approximate codes (-4.2 / +10.8 %, 4.0 % high on average, taken out), measured within 4.2e-2 on causal rows
# of a few keys and 2.2e-3 at 16384 keys (H200, kernels/NOTES.md session 33)
FP8_FAST_EXP_LSE_TOL = 8e-2
FP8_LSE_TOL = 1e-2  # with exponentials (fast_exp=False): P rounded to e4m3 for its product only


def fp8_lse_tolerance(fast_exp: bool) -> float:
    """The bound on attention_forward_fp8's lse error against the fp32 reference (its tests, tune_ws check --fp8)."""
    return FP8_FAST_EXP_LSE_TOL if fast_exp else FP8_LSE_TOL


# --- configurations -------------------------------------------------------------------------------
# Hopper-tuned per head dim (kernels/tune.py sweeps, kernels/NOTES.md); the autotuner picks one per
# (length bucket, TMA eligibility, head dim, causal).  USE_TMA entries are skipped when tensor descriptors
# can't be used, so every list keeps pointer-load entries too.  (BLOCK_M, BLOCK_N, warps, stages, USE_TMA)
FWD_CONFIGS: dict[int, list[tuple]] = {
    64: [(128, 128, 4, 3, True), (128, 64, 4, 3, True), (128, 64, 4, 3, False), (128, 128, 4, 3, False)],
    80: [(128, 128, 8, 3, False), (128, 128, 8, 3, True), (128, 64, 8, 3, False)],
    96: [(128, 128, 8, 3, False), (128, 128, 8, 3, True), (128, 64, 8, 3, False)],
    128: [(128, 128, 8, 3, False), (128, 64, 8, 3, False), (128, 128, 8, 3, True)],
    256: [(64, 64, 4, 2, True), (64, 64, 4, 2, False), (128, 64, 8, 2, False)],
}
DKDV_CONFIGS: dict[int, list[tuple]] = {
    64: [(64, 64, 4, 3, True), (64, 64, 4, 3, False), (64, 128, 8, 3, False)],
    96: [(64, 128, 8, 3, False), (64, 128, 8, 3, True), (64, 128, 8, 2, True)],
    128: [(64, 128, 8, 2, True), (64, 128, 8, 3, True), (64, 128, 8, 2, False)],
    256: [(32, 64, 4, 2, False), (64, 64, 8, 2, False)],
}
DQ_CONFIGS: dict[int, list[tuple]] = {
    64: [(128, 64, 8, 3, False), (64, 64, 4, 3, False), (128, 64, 8, 3, True)],
    128: [(128, 64, 8, 3, True), (128, 64, 8, 3, False), (128, 128, 8, 2, True)],
    256: [(64, 32, 4, 2, False), (64, 64, 8, 2, False)],
}
# backward used by impl="auto": "triton" (2 kernels, deterministic), "fused" (kernels/attention_bwd_fused.py) or
# "gluon-where-faster" (the warp-specialised Gluon backward, kernels/attention_bwd_ws.py, where it is eligible and
# attention_bwd_ws.preferred() says it measured faster; the 2-kernel scheme elsewhere)
# (H100, session 8: the Gluon backward at 0.91-1.00x cuDNN against 0.78-0.90x for the 2-kernel scheme)
BWD_IMPL: str = "gluon-where-faster"
# fp8 forward (e4m3 q/k/v; tiles are half the bytes, so deeper pipelines / wider KV tiles fit).
FP8_FWD_CONFIGS: dict[int, list[tuple]] = {
    64: [(128, 128, 4, 3, True), (128, 128, 8, 3, True), (128, 64, 4, 3, False)],
    128: [(128, 128, 8, 3, False), (128, 128, 8, 4, False), (128, 256, 8, 2, True), (128, 256, 8, 2, False)],
    256: [(128, 64, 8, 2, True), (64, 64, 4, 2, False), (128, 64, 8, 2, False)],
}
_TABLES = {"fwd": FWD_CONFIGS, "dkdv": DKDV_CONFIGS, "dq": DQ_CONFIGS, "fp8": FP8_FWD_CONFIGS}

_KEYS = ["TUNE_KEY", "TMA_OK", "HEAD_DIM", "CAUSAL"]


_attn_fwd_tuned = autotuned_by_head_dim(_attn_fwd, FWD_CONFIGS, _KEYS)
_attn_fwd_fp8_tuned = autotuned_by_head_dim(_attn_fwd, FP8_FWD_CONFIGS, [*_KEYS, "V_T"])
_attn_bwd_dkdv_tuned = autotuned_by_head_dim(_attn_bwd_dkdv, DKDV_CONFIGS, _KEYS)
_attn_bwd_dq_tuned = autotuned_by_head_dim(_attn_bwd_dq, DQ_CONFIGS, _KEYS)
_TUNERS = (_attn_fwd_tuned, _attn_fwd_fp8_tuned, _attn_bwd_dkdv_tuned, _attn_bwd_dq_tuned)


def set_configs(kind: str, head_dim: int, configs: list[tuple]) -> None:
    """Replace the autotuner's candidates for ("fwd" | "dkdv" | "dq" | "fp8", head_dim); used by kernels/tune.py."""
    _TABLES[kind][head_dim] = list(configs)
    for tuner in _TUNERS:
        tuner.cache.clear()


def attention_path(*tensors: torch.Tensor) -> str:
    """``"hopper"`` when the Hopper configs may use tensor descriptors (TMA) for these tensors (the
    autotuner then chooses between TMA and cp.async pointer loads per shape), else ``"pointer"``."""
    return "hopper" if tma_ok(*tensors) else "pointer"


def _check_impl(impl: str, impls: tuple[str, ...], triton_options: bool) -> None:
    """``impl`` is one of ``impls``, and "gluon" comes without the options that pick a Triton configuration (they
    used to be dropped in silence, or to run the Triton kernel instead)."""
    if impl not in impls:
        raise ValueError(f"impl must be one of {', '.join(map(repr, impls))}, got {impl!r}")
    if impl == "gluon" and triton_options:
        raise ValueError("impl='gluon' takes no config/configs or use_tma: they pick a Triton kernel's configuration "
                         "(leave them out, or use impl='triton')")


def _prepare_out(dims: AttnDims, q: torch.Tensor, out_dtype: torch.dtype, out, lse):
    lse_shape = (dims.batch, dims.heads_q, dims.len_q)
    if out is None:
        out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    check_buffer("out", out, tuple(q.shape), out_dtype, q.device)
    if lse is None:
        lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    check_buffer("lse", lse, lse_shape, torch.float32, q.device, contiguous=True)
    return out, lse


def _launch_fwd(tuned, q, k, v, out, lse, dims: AttnDims, layout: str, causal: bool, qk_scale: float,
                v_scale: float, eligible: bool, use_tma, config, v_t: bool = False) -> None:
    tma_ok_arg = int(eligible if use_tma is None else use_tma)
    args = (q, k, v, out, lse, *layout_strides(q, layout), *layout_strides(k, layout), *layout_strides(v, layout),
            *layout_strides(out, layout), dims.heads_q, dims.group, dims.len_q, dims.len_k, qk_scale, v_scale,
            length_bucket(max(dims.len_q, dims.len_k)), tma_ok_arg)
    consts = {"HEAD_DIM": dims.head_dim, "BLOCK_D": padded_dim(dims.head_dim), "CAUSAL": bool(causal),
              "DOT_F32": interpreting(), "V_T": v_t}
    grid = lambda bm, bn: (cdiv(dims.len_q, bm), dims.batch * dims.heads_q)
    launch(tuned, _attn_fwd, grid, args, consts, config, bool(tma_ok_arg))


def attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
    *,
    config: tuple[int, int, int, int] | None = None,
    use_tma: bool | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward pass without autograd; returns ``(out, lse)``, lse float32 of shape (B, Hq, Lq), natural log.

    ``out``/``lse`` may be given preallocated (any strides for ``out``; ``lse`` contiguous).
    ``impl``: "auto" runs the warp-specialised Gluon kernel (``kernels/attention_ws.py``) where it can run
    (Hopper, fp16/bf16, head dim <= 128, TMA-compatible strides) and measured faster, the Triton kernel elsewhere;
    "triton" / "gluon" force one (ValueError when "gluon" cannot run these inputs).
    ``config`` = (BLOCK_M, BLOCK_N, num_warps, num_stages) picks a Triton config and bypasses the autotuner
    ("auto" then runs the Triton kernel; with "gluon" it is a ValueError); ``use_tma`` forces its load path (with
    ``config``) or restricts the autotuner to pointer loads (False), likewise.
    """
    dims = check_attention(q, k, v, layout, HEAD_DIMS)
    triton_options = config is not None or use_tma is not None
    _check_impl(impl, ("auto", "triton", "gluon"), triton_options)
    scale = softmax_scale(dims.head_dim, sm_scale)
    out, lse = _prepare_out(dims, q, q.dtype, out, lse)
    # the eligibility checks (strides, device) only where the Gluon kernel is wanted: not on the Triton path
    wants_gluon = impl == "gluon" or (impl == "auto" and not triton_options and attention_ws.preferred(dims, causal))
    # the Gluon kernel scales a row's maximum of the raw scores and masks before scaling: a positive scale only
    gluon_ok = wants_gluon and scale > 0 and attention_ws.eligible(q, k, v, out, dims.head_dim)
    if impl == "gluon" and not gluon_ok:
        raise ValueError(f"the Gluon forward cannot run these inputs ({attention_ws.status()}; it needs an sm_90 "
                         f"GPU, fp16/bf16, head dim <= {attention_ws.MAX_HEAD_DIM}, 16-byte aligned strides and a "
                         f"positive sm_scale)")
    if out.numel() == 0:
        return out, lse
    if dims.len_k == 0:  # nothing to attend to: zero output, lse = +inf; no launch
        out.zero_()
        lse.fill_(float("inf"))
        return out, lse
    if gluon_ok:
        if attention_ws.forward(q, k, v, out, lse, dims, layout, causal, scale * LOG2E):
            return out, lse
        if impl == "gluon":
            raise RuntimeError(f"the Gluon forward did not build: {attention_ws.status()}")
    _launch_fwd(_attn_fwd_tuned, q, k, v, out, lse, dims, layout, causal, scale * LOG2E, 1.0,
                attention_path(q, k, v, out) == "hopper", use_tma, config)
    return out, lse


def quantize_fp8(t: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, float]:
    """Per-tensor e4m3 quantisation: ``(t8, scale)`` with ``t ≈ t8.float() * scale`` (amax maps to 448)."""
    amax = t.detach().abs().amax().float().clamp_min(1e-12).item()
    scale = amax / torch.finfo(dtype).max
    return (t.float() / scale).to(dtype), scale


def attention_forward_fp8(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_scale: float = 1.0,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    config: tuple[int, int, int, int] | None = None,
    use_tma: bool | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    impl: str = "auto",
    fast_exp: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 (e4m3) forward: attention of ``q*q_scale``, ``k*k_scale``, ``v*v_scale`` (per-tensor descales,
    e.g. from :func:`quantize_fp8`); returns ``(out, lse)`` with ``out`` in ``out_dtype`` (bf16, fp16 or fp32).

    ``fast_exp`` (the Gluon kernel, where it reads K permuted: heads of K following one another): P's e4m3 codes
    are computed from the scores without exponentials (two FMAs, the first saturating, and byte permutes a score;
    the code's mantissa bits taken as linear in the exponent's fraction: each P within -4.2 / +10.8 % of its value,
    against +-6.25 % rounded exactly) and its row sums by the tensor cores from those codes: 8-15 % faster on an
    H200 (1.54-1.59x our bf16 forward at head dim 128 and 4096-16384 keys), the output's error against the fp64
    reference of the dequantised inputs about 1.2-1.5x the exact path's (3.2e-2 against 2.6e-2 at 4096 keys), the
    lse within about 4e-2 on rows of a few keys and 2e-3 at 16384 (kernels/NOTES.md, sessions 33-34).
    ``fast_exp=False``: exact exponentials and fp32 row sums (lse within 1e-3).

    p is rounded to e4m3 for the p·v product.  v may be stored position-contiguous (its length stride
    1, e.g. ``vt.transpose(-1, -2)`` of a (B, H, D, L) tensor in "bhld"): the fp8 MMA then reads it
    K-major straight from memory, which is the fast layout on Hopper.
    ``impl``: "auto" runs the warp-specialised Gluon kernel where it can run (Hopper, v position-contiguous,
    head dim 64..128, TMA-compatible strides) and measured faster (``attention_ws.preferred_fp8``), the Triton
    kernel elsewhere; "triton" / "gluon" force one.  ``config`` / ``use_tma`` pick the Triton kernel's
    configuration, as in :func:`attention_forward` (a ValueError with "gluon").
    """
    dims = check_attention(q, k, v, layout, HEAD_DIMS, dtypes=FP8_DTYPES)
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
    triton_options = config is not None or use_tma is not None
    _check_impl(impl, ("auto", "triton", "gluon"), triton_options)
    scale = softmax_scale(dims.head_dim, sm_scale)
    out, lse = _prepare_out(dims, q, out_dtype, out, lse)
    qk_scale = scale * LOG2E * float(q_scale) * float(k_scale)
    wants_gluon = impl == "gluon" or (impl == "auto" and not triton_options
                                      and attention_ws.preferred_fp8(dims, causal))
    gluon_ok = wants_gluon and qk_scale > 0 and attention_ws.eligible_fp8(q, k, v, out, dims.head_dim, layout)
    if impl == "gluon" and not gluon_ok:
        raise ValueError(f"the Gluon fp8 forward cannot run these inputs ({attention_ws.status()}; it needs an "
                         f"sm_90 GPU, v stored position-contiguous, head dim {attention_ws.FP8_MIN_HEAD_DIM}.."
                         f"{attention_ws.MAX_HEAD_DIM}, 16-byte aligned strides and a positive softmax scale)")
    if out.numel() == 0:
        return out, lse
    if dims.len_k == 0:
        out.zero_()
        lse.fill_(float("inf"))
        return out, lse
    if gluon_ok:
        if attention_ws.forward(q, k, v, out, lse, dims, layout, causal, qk_scale, o_scale=float(v_scale),
                                fast_exp=fast_exp):
            return out, lse
        if impl == "gluon":
            raise RuntimeError(f"the Gluon forward did not build: {attention_ws.status()}")
    v_t = layout_strides(v, layout)[2] == 1 and dims.len_k > 1
    eligible = tma_ok(q, k, out) and tma_ok(dim_position_view(v, layout) if v_t else v)
    _launch_fwd(_attn_fwd_fp8_tuned, q, k, v, out, lse, dims, layout, causal, qk_scale, float(v_scale), eligible,
                use_tma, config, v_t)
    return out, lse


def attention_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
    *,
    configs: tuple[tuple[int, int, int, int] | None, tuple[int, int, int, int] | None] = (None, None),
    use_tma: bool | None = None,
    dq: torch.Tensor | None = None,
    dk: torch.Tensor | None = None,
    dv: torch.Tensor | None = None,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of attention, from the forward's output and log-sum-exp.

    ``dq``/``dk``/``dv`` may be given preallocated.  ``impl``: "triton" is the deterministic 2-kernel scheme
    (a dK/dV kernel and a dQ kernel; ``configs`` = (dkdv config, dq config)); "fused" is one kernel computing
    S and dP once per tile pair and adding dQ into an fp32 scratch with atomics (``kernels/attention_bwd_fused.py``;
    dq is **not bitwise deterministic**; ``configs[0]`` is its config); "gluon" is the warp-specialised Gluon
    backward (``kernels/attention_bwd_ws.py``: Hopper, fp16/bf16, head dim 64 or 128; dq not bitwise deterministic;
    ValueError where it cannot run); "auto" is ``BWD_IMPL``.  ``configs`` and ``use_tma`` apply to the Triton
    schemes only ("auto" then keeps to them; with "gluon" they are a ValueError).
    """

    dims = check_attention(q, k, v, layout, HEAD_DIMS)
    triton_options = configs != (None, None) or use_tma is not None
    _check_impl(impl, ("auto", "triton", "fused", "gluon"), triton_options)
    for name, t in (("grad_out", do), ("out", out)):
        if tuple(t.shape) != tuple(q.shape) or t.device != q.device:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)} and device, got {tuple(t.shape)}")
    check_buffer("lse", lse, (dims.batch, dims.heads_q, dims.len_q), torch.float32, q.device, contiguous=True)
    if do.dtype != q.dtype:
        do = do.to(q.dtype)
    scale = softmax_scale(dims.head_dim, sm_scale)
    dq = torch.empty_like(q, memory_format=torch.contiguous_format) if dq is None else dq
    dk = torch.empty_like(k, memory_format=torch.contiguous_format) if dk is None else dk
    dv = torch.empty_like(v, memory_format=torch.contiguous_format) if dv is None else dv
    for name, t, ref in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        check_buffer(name, t, tuple(ref.shape), ref.dtype, ref.device)
    chosen = BWD_IMPL if impl == "auto" else impl
    if chosen == "gluon-where-faster":  # "auto" with BWD_IMPL naming the Gluon backward where it measured faster
        # (its dq is not bitwise deterministic: torch.use_deterministic_algorithms(True) keeps the 2-kernel scheme)
        chosen = "gluon" if (not triton_options and attention_bwd_ws.preferred(dims, causal)
                             and not torch.are_deterministic_algorithms_enabled()) else "triton"
    if chosen == "gluon" and not attention_bwd_ws.eligible(q, k, v, do, dk, dv, dims.head_dim, scale):
        if impl == "gluon":
            raise ValueError(f"impl='gluon': the Gluon backward cannot run these inputs (it needs "
                             f"{attention_bwd_ws.requirements()})")
        chosen = "triton"
    if dims.len_q == 0 or dims.len_k == 0 or dims.batch == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    if chosen == "gluon":
        if attention_bwd_ws.backward(do, q, k, v, out, lse, dq, dk, dv, dims, layout, causal, scale):
            return dq, dk, dv
        if impl == "gluon":
            raise RuntimeError(f"the Gluon backward did not build: {attention_bwd_ws.status()}")
        chosen = "triton"
    eligible = attention_path(q, k, v, do) == "hopper"
    if chosen == "fused":
        attention_bwd_fused.fused_backward(do, q, k, v, out, lse, dq, dk, dv, dims, layout, causal, scale, eligible,
                                           config=configs[0], use_tma=use_tma)
        return dq, dk, dv
    delta = torch.empty_like(lse)
    pre_bm = 64
    _bwd_preprocess[(cdiv(dims.len_q, pre_bm), dims.batch * dims.heads_q)](
        out, do, delta, *layout_strides(out, layout), *layout_strides(do, layout), dims.heads_q, dims.len_q,
        HEAD_DIM=dims.head_dim, BLOCK_D=padded_dim(dims.head_dim), BLOCK_M=pre_bm)
    tma_ok_arg = int(eligible if use_tma is None else use_tma)
    sq, sk, sv, sd, sdk, sdv = (layout_strides(t, layout) for t in (q, k, v, do, dk, dv))
    qk_scale = scale * LOG2E
    key = length_bucket(max(dims.len_q, dims.len_k))
    consts = {"HEAD_DIM": dims.head_dim, "BLOCK_D": padded_dim(dims.head_dim), "CAUSAL": bool(causal),
              "DOT_F32": interpreting()}
    launch(_attn_bwd_dkdv_tuned, _attn_bwd_dkdv,
            lambda bm, bn: (cdiv(dims.len_k, bn), dims.batch * dims.heads_kv),
            (q, k, v, do, lse, delta, dk, dv, *sq, *sk, *sv, *sd, *sdk, *sdv,
             dims.heads_q, dims.heads_kv, dims.group, dims.len_q, dims.len_k, qk_scale, scale, key, tma_ok_arg),
            consts, configs[0], bool(tma_ok_arg))
    launch(_attn_bwd_dq_tuned, _attn_bwd_dq,
            lambda bm, bn: (cdiv(dims.len_q, bm), dims.batch * dims.heads_q),
            (q, k, v, do, lse, delta, dq, *sq, *sk, *sv, *sd, *layout_strides(dq, layout),
             dims.heads_q, dims.group, dims.len_q, dims.len_k, qk_scale, scale, key, tma_ok_arg),
            consts, configs[1], bool(tma_ok_arg))
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """``torch.autograd.Function`` wrapping the Triton forward and backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, sm_scale: float | None, layout: str):  # type: ignore[override]
        out, lse = attention_forward(q, k, v, causal, sm_scale, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.sm_scale, ctx.layout = causal, sm_scale, layout
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(grad_out, q, k, v, out, lse, ctx.causal, ctx.sm_scale, ctx.layout)
        return dq, dk, dv, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
) -> torch.Tensor:
    """Attention ``softmax(q k^T * sm_scale) v`` with autograd support.

    q: (B, Hq, Lq, D) for layout "bhld" or (B, Lq, Hq, D) for "blhd"; k, v: same with Hkv heads
    and Lk positions, Hq a multiple of Hkv.  ``sm_scale`` defaults to 1/sqrt(D).  Returns a tensor
    of q's shape in the same layout.  Use :func:`attention_forward` to also get the log-sum-exp.
    """
    return FlashAttentionFunction.apply(q, k, v, causal, sm_scale, layout)  # attention_forward checks the inputs


__all__ = [
    "FP8_DTYPES",
    "FP8_FAST_EXP_LSE_TOL",
    "FP8_LSE_TOL",
    "HEAD_DIMS",
    "AttnDims",
    "FlashAttentionFunction",
    "attention_backward",
    "attention_forward",
    "attention_forward_fp8",
    "attention_path",
    "flash_attention",
    "fp8_lse_tolerance",
    "quantize_fp8",
    "set_configs",
]
