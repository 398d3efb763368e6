"""Bad inputs raise ValueError naming the constraint, before any launch."""

from __future__ import annotations

import pytest
import torch

from kernels.attention import attention_backward, attention_forward, flash_attention
from kernels.decode import decode_attention
from kernels.matmul import matmul


def _t(*shape, dtype=torch.float16, device="cpu"):
    return torch.randn(*shape).to(device=device, dtype=dtype)


@pytest.mark.parametrize(
    ("q", "k", "v", "kwargs", "match"),
    [
        (_t(1, 2, 8, 64, dtype=torch.float32), None, None, {}, "dtype must be one of"),
        (_t(1, 2, 8, 44), None, None, {}, "head dim must be one of"),
        (_t(1, 3, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 8, 64), {}, "multiple of key/value heads"),
        (_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 9, 64), {}, "k and v must have the same shape"),
        (_t(2, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 8, 64), {}, "same batch size"),
        (_t(1, 2, 8, 64), _t(1, 2, 8, 128), _t(1, 2, 8, 128), {}, "same head dim"),
        (_t(2, 8, 64), None, None, {}, "must be 4-D"),
        (_t(1, 2, 8, 64), None, None, {"layout": "lbhd"}, "layout must be one of"),
        (_t(1, 2, 8, 64), _t(1, 2, 8, 64, dtype=torch.bfloat16), None, {}, "share one dtype"),
    ],
)
def test_attention_rejects(q, k, v, kwargs, match, device):
    q = q.to(device)
    k = q if k is None else k.to(device)
    v = k if v is None else v.to(device)
    with pytest.raises(ValueError, match=match):
        flash_attention(q, k, v, **kwargs)
    with pytest.raises(ValueError, match=match):
        attention_forward(q, k, v, **kwargs)


def test_attention_rejects_device():
    q = torch.empty(1, 2, 8, 64, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="CUDA tensors"):
        flash_attention(q, q, q)
    cpu = torch.empty(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="one device"):
        flash_attention(cpu, q, q)


def test_backward_rejects_mismatched_grad(device):
    q = _t(1, 2, 8, 64, device=device)
    out, lse = attention_forward(q, q, q)
    with pytest.raises(ValueError, match="grad_out must have q's shape"):
        attention_backward(_t(1, 2, 7, 64, device=device), q, q, q, out, lse)
    with pytest.raises(ValueError, match="lse must be"):
        attention_backward(out, q, q, q, out, lse[:, :1])


@pytest.mark.parametrize("sm_scale", [-0.125, float("nan"), float("inf")])
def test_attention_rejects_negative_or_non_finite_scale(sm_scale, device):
    """Every kernel scales a row's maximum of the raw scores, the maximum of the scaled ones only for a scale >= 0."""
    q = _t(1, 2, 8, 64, device=device)
    out, lse = attention_forward(q, q, q)
    for call in (lambda: flash_attention(q, q, q, sm_scale=sm_scale),
                 lambda: attention_forward(q, q, q, sm_scale=sm_scale),
                 lambda: attention_backward(out, q, q, q, out, lse, sm_scale=sm_scale),
                 lambda: decode_attention(q[:, :, :1], q, q, sm_scale=sm_scale)):
        with pytest.raises(ValueError, match="sm_scale must be a finite number >= 0"):
            call()


def test_decode_rejects(device):
    q = _t(1, 4, 1, 64, device=device)
    k = _t(1, 3, 16, 64, device=device)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        decode_attention(q, k, k)
    with pytest.raises(ValueError, match="dtype must be one of"):
        decode_attention(q.float(), k.float(), k.float())
    with pytest.raises(ValueError, match="head dim must be one of"):
        decode_attention(_t(1, 4, 1, 36, device=device), _t(1, 4, 16, 36, device=device),
                         _t(1, 4, 16, 36, device=device))


def test_matmul_rejects(device):
    a = _t(8, 16, device=device)
    with pytest.raises(ValueError, match="inner dimensions must match"):
        matmul(a, _t(8, 4, device=device))
    with pytest.raises(ValueError, match="2-D"):
        matmul(_t(2, 8, 16, device=device), _t(16, 4, device=device))
    with pytest.raises(ValueError, match="dtype must be one of"):
        matmul(a.double(), _t(16, 4, device=device).double())
    with pytest.raises(ValueError, match="device"):
        matmul(a.to("meta"), _t(16, 4).to("meta"))
