"""Reference implementations the Triton kernels are checked and benchmarked against.

* :func:`sdpa` -- ``torch.nn.functional.scaled_dot_product_attention`` pinned to one backend
  ("flash", "efficient", "cudnn", "math") through ``torch.nn.attention.sdpa_kernel``.
* :func:`attention_fp32` -- explicit attention in float32 (or float64), with the same conventions as
  ``kernels.attention``: bottom-right causal diagonal, GQA, both layouts; returns ``(out, lse)``.
* :func:`matmul_ref` -- ``torch.matmul`` (cuBLAS on GPU).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

SDPA_BACKENDS: tuple[str, ...] = ("flash", "efficient", "cudnn", "math")


def _backend(name: str):
    from torch.nn.attention import SDPBackend

    table = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    if name not in table:
        raise ValueError(f"SDPA backend must be one of {SDPA_BACKENDS}, got {name!r}")
    return table[name]


def to_bhld(t: torch.Tensor, layout: str) -> torch.Tensor:
    """View of ``t`` in (B, H, L, D) order (no copy)."""
    if layout not in ("bhld", "blhd"):
        raise ValueError(f"layout must be 'bhld' or 'blhd', got {layout!r}")
    return t if layout == "bhld" else t.transpose(1, 2)


def sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    backend: str = "flash",
    sm_scale: float | None = None,
    layout: str = "bhld",
) -> torch.Tensor:
    """SDPA through exactly one backend (raises if that backend cannot run these inputs).

    SDPA's ``is_causal`` aligns the diagonal top-left; it equals ours (bottom-right) when Lq == Lk,
    which is what the benchmarks use.  GQA goes through ``enable_gqa``.
    """
    from torch.nn.attention import sdpa_kernel

    qb, kb, vb = (to_bhld(t, layout) for t in (q, k, v))
    gqa = qb.shape[1] != kb.shape[1]
    with sdpa_kernel([_backend(backend)]):
        out = F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, scale=sm_scale, enable_gqa=gqa)
    return out if layout == "bhld" else out.transpose(1, 2)


def causal_mask(len_q: int, len_k: int, device: torch.device | str) -> torch.Tensor:
    """Boolean (Lq, Lk) mask, True where query i may see key j: j <= i + (Lk - Lq) (bottom-right)."""
    i = torch.arange(len_q, device=device)[:, None]
    j = torch.arange(len_k, device=device)[None, :]
    return j <= i + (len_k - len_q)


def attention_fp32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    layout: str = "bhld",
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Materialised attention in ``dtype`` (float32 default); differentiable.

    Returns ``(out, lse)``: ``out`` in q's layout and ``dtype``, ``lse`` of shape (B, Hq, Lq).  Rows
    that see no key give zero output and ``lse = +inf`` (as the kernels do).
    """
    qb, kb, vb = (to_bhld(t, layout).to(dtype) for t in (q, k, v))
    hq, hk = qb.shape[1], kb.shape[1]
    if hq != hk:
        kb = kb.repeat_interleave(hq // hk, dim=1)
        vb = vb.repeat_interleave(hq // hk, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
    has_key = torch.full((s.shape[-2],), s.shape[-1] > 0, dtype=torch.bool, device=s.device)
    if causal:
        mask = causal_mask(s.shape[-2], s.shape[-1], s.device)
        has_key = mask.any(-1)
        s = s.masked_fill(~mask, float("-inf"))
    # rows with no visible key get finite dummy scores so gradients stay finite, then weight 0
    s = torch.where(has_key[:, None], s, torch.zeros_like(s))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]) * has_key[:, None].to(dtype)
    out = torch.matmul(p, vb)
    lse = torch.where(has_key, lse, torch.full_like(lse, float("inf")))
    return (out if layout == "bhld" else out.transpose(1, 2)), lse


def decode_fp32(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    sm_scale: float | None = None,
    layout: str = "bhld",
) -> torch.Tensor:
    """fp32 reference of single-query decode attention (q of length 1)."""
    return attention_fp32(q, k_cache, v_cache, False, sm_scale, layout)[0]


def matmul_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.matmul`` (cuBLAS on GPU)."""
    return torch.matmul(a, b)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere in ``out`` gives inf."""
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    if not torch.isfinite(o).all():
        return float("inf")
    den = torch.linalg.vector_norm(r).item()
    return torch.linalg.vector_norm(o - r).item() / max(den, 1e-30)
