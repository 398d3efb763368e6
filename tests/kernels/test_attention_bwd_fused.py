"""The fused FlashAttention backward (``impl="fused"``, kernels/_attn_bwd_fused.py) against the fp64 (CPU) /
fp32 (GPU) reference.

CPU: small odd shapes through the Triton interpreter (pointer loads and pointer atomics).  GPU (``-m gpu``):
real shapes, every load/accumulation path (pointer atomics, TMA loads, TMA reduce-adds).  Gradient buffers
are poisoned with NaN before every launch, so an unwritten element fails the check.
"""

from __future__ import annotations

import pytest
import torch

from kernels import attention_bwd_fused
from kernels.attention import attention_backward, attention_forward
from kernels.reference import attention_fp32, rel_err
from tests.kernels.test_attention import BWD_TOL, _nan, _rand, _shape


def check_fused(b, hq, hk, lq, lk, d, causal, layout, dtype, device, gen, *, config=None, use_tma=None,
                ref_dtype=torch.float64) -> None:
    q = _rand(_shape(b, hq, lq, d, layout), dtype, device, gen)
    k = _rand(_shape(b, hk, lk, d, layout), dtype, device, gen)
    v = _rand(_shape(b, hk, lk, d, layout), dtype, device, gen)
    do = _rand(q.shape, dtype, device, gen)
    out, lse = attention_forward(q, k, v, causal, None, layout, impl="triton")  # independent of the Gluon forward
    qr, kr, vr = (t.detach().to(ref_dtype).requires_grad_() for t in (q, k, v))
    ref, _ = attention_fp32(qr, kr, vr, causal, None, layout, dtype=ref_dtype)
    ref.backward(do.to(ref_dtype))
    grads = [_nan(t.shape, dtype, device) for t in (q, k, v)]
    attention_backward(do, q, k, v, out, lse, causal, None, layout, dq=grads[0], dk=grads[1], dv=grads[2],
                       impl="fused", configs=(config, None), use_tma=use_tma)
    tag = f"seed={gen.initial_seed()} {layout} {dtype} causal={causal} q={tuple(q.shape)} k={tuple(k.shape)} {config}"
    for name, g, r in zip(("dq", "dk", "dv"), grads, (qr.grad, kr.grad, vr.grad), strict=True):
        assert torch.isfinite(g).all(), f"{name} unwritten or non-finite: {tag}"
        e = rel_err(g, r)
        assert e < BWD_TOL[dtype], f"{name} rel err {e:.2e}: {tag}"


CPU_CASES = [
    # b, hq, hk, lq, lk, d, causal, layout, dtype
    (1, 2, 2, 37, 37, 64, False, "bhld", torch.float16),
    (2, 2, 2, 50, 50, 64, True, "bhld", torch.bfloat16),
    (1, 4, 2, 37, 53, 64, True, "blhd", torch.float16),  # GQA, Lk > Lq: bottom-right diagonal
    (1, 2, 1, 61, 29, 64, True, "blhd", torch.bfloat16),  # Lq > Lk: first rows see no key
    (1, 3, 1, 17, 40, 128, False, "bhld", torch.float16),  # group of 3
    (1, 2, 1, 33, 21, 80, True, "bhld", torch.float16),  # padded head dim, GQA
    (1, 2, 2, 1, 45, 64, True, "blhd", torch.bfloat16),  # a single query row
    (1, 1, 1, 45, 3, 64, False, "bhld", torch.float16),  # three keys (one key: dq is exactly 0)
]


@pytest.mark.parametrize(("b", "hq", "hk", "lq", "lk", "d", "causal", "layout", "dtype"), CPU_CASES)
def test_fused_backward_matches_reference(b, hq, hk, lq, lk, d, causal, layout, dtype, device, gen):
    check_fused(b, hq, hk, lq, lk, d, causal, layout, dtype, device, gen)


def test_fused_backward_unstaggered(device, gen, monkeypatch):
    """The plain q-block order (STAGGER off) gives the same gradients."""
    monkeypatch.setattr(attention_bwd_fused.fused_backward, "__kwdefaults__",
                        {**attention_bwd_fused.fused_backward.__kwdefaults__, "stagger": False})
    check_fused(1, 2, 1, 70, 70, 64, False, "bhld", torch.float16, device, gen)


def test_impl_is_checked(device, gen):
    q = _rand((1, 1, 8, 64), torch.float16, device, gen)
    lse = torch.zeros((1, 1, 8), dtype=torch.float32, device=device)
    with pytest.raises(ValueError, match="impl"):
        attention_backward(q, q, q, q, q, lse, impl="cudnn")


# --- GPU: real shapes, each load / accumulation path --------------------------------------------------------
GPU_CASES = [
    (2, 8, 8, 1024, 1024, 128, False, "bhld", torch.bfloat16),
    (2, 8, 8, 1024, 1024, 128, True, "bhld", torch.bfloat16),
    (2, 8, 2, 777, 1029, 128, True, "blhd", torch.float16),  # GQA 4, odd lengths, Lk > Lq
    (1, 4, 4, 1031, 515, 64, True, "bhld", torch.bfloat16),  # Lq > Lk
    (1, 8, 4, 600, 600, 64, False, "blhd", torch.float16),
    (1, 4, 1, 513, 513, 80, True, "bhld", torch.bfloat16),  # padded head dim
]
GPU_CONFIGS = [None, (64, 128, 8, 2, False, False), (64, 128, 8, 3, False, True), (64, 128, 8, 2, True, True),
               (64, 64, 4, 3, False, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("config", GPU_CONFIGS)
@pytest.mark.parametrize(("b", "hq", "hk", "lq", "lk", "d", "causal", "layout", "dtype"), GPU_CASES)
def test_fused_backward_gpu(b, hq, hk, lq, lk, d, causal, layout, dtype, config, gen):
    check_fused(b, hq, hk, lq, lk, d, causal, layout, dtype, "cuda", gen, config=config, ref_dtype=torch.float32)
