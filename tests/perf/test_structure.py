"""Structural seeds: each known-bad variant must be flagged by perfci (the test passes when it is);
each clean variant must not be. Shapes from FlashAttention-vs-SDPA reports on a GPU; small on CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.perf.shapes import DEVICE, GPU, pick

HALF = torch.float16 if GPU else torch.float32
BLHD_SHAPES = pick([(16, 784, 16, 128), (1, 256, 12, 64)], [(2, 64, 2, 32), (1, 32, 3, 16)])


def _blhd(shape):
    b, seq, h, d = shape
    return [torch.randn(b, seq, h, d, device=DEVICE, dtype=HALF) for _ in range(3)]


def attention_blhd_copies(q, k, v):
    """The common wrapper: copy each input to (B, H, L, D), and the output back."""
    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).contiguous()


def attention_blhd_views(q, k, v):
    """The same through strided views: SDPA reads strides, nothing is copied."""
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


@pytest.mark.perf(known_bad=["copy"])
@pytest.mark.parametrize("shape", BLHD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_blhd_attention_with_copies_is_flagged(perf, shape):
    q, k, v = _blhd(shape)
    b, seq, h, d = shape
    perf.flops = 4 * b * h * seq * seq * d
    perf(attention_blhd_copies, q, k, v)


@pytest.mark.parametrize("shape", BLHD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_blhd_attention_with_views_is_clean(perf, shape):
    q, k, v = _blhd(shape)
    b, seq, h, d = shape
    perf.flops = 4 * b * h * seq * seq * d
    perf.forbid("copy", "sync", "math_sdpa")
    out = perf(attention_blhd_views, q, k, v)
    torch.testing.assert_close(out, attention_blhd_copies(q, k, v), atol=2e-3, rtol=2e-3)


def _cross_attention():
    b, h, kv, d = pick((8, 16, 2048, 64), (2, 4, 256, 32))
    q = torch.randn(b, h, 1, d, device=DEVICE, dtype=HALF)
    k, v = (torch.randn(b, h, kv, d, device=DEVICE, dtype=HALF) for _ in range(2))
    return q, k, v


def test_cross_attention_q1_kv2048(perf):
    q, k, v = _cross_attention()
    perf.bytes = k.nbytes + v.nbytes
    perf.forbid("copy", "sync", "math_sdpa")
    perf(F.scaled_dot_product_attention, q, k, v)


@pytest.mark.perf(known_bad=["math_sdpa"])
def test_cross_attention_on_a_transposed_kv_cache_falls_back_to_math(perf):
    """A KV cache kept as (B, H, D, L) and passed as a transposed view: the last dimension is
    strided, which flash, efficient and cuDNN all refuse, so SDPA runs the math path."""
    q, k, v = _cross_attention()
    k_cache, v_cache = k.transpose(-1, -2).contiguous(), v.transpose(-1, -2).contiguous()
    perf(F.scaled_dot_product_attention, q, k_cache.transpose(-1, -2), v_cache.transpose(-1, -2))


def _gemm_inputs():
    n = pick(4096, 128)
    dtype = torch.bfloat16 if GPU else torch.float32
    return torch.randn(n, n, device=DEVICE, dtype=dtype), torch.randn(n, n, device=DEVICE, dtype=dtype)


@pytest.mark.perf(known_bad=["cast"])
def test_upcast_before_gemm_is_flagged(perf):
    a, b = _gemm_inputs()
    a = a.to(torch.bfloat16)
    b = b.to(torch.bfloat16)
    perf(lambda: a.float() @ b.float())


def _nan_checked(x):
    if torch.isnan(x).any():  # a hidden device-to-host sync
        raise FloatingPointError("NaN")
    return x * 2


@pytest.mark.perf(known_bad=["sync"])
def test_hidden_item_sync_is_flagged(perf):
    x = torch.randn(pick(2**20, 2**12), device=DEVICE)
    perf(_nan_checked, x)


def _chain(x):
    return ((x * 2 + 1).relu() * 3 - 1).sigmoid()


@pytest.mark.perf(known_bad=["max_kernels"])
def test_unfused_elementwise_chain_is_flagged(perf):
    x = torch.randn(pick(2**22, 2**12), device=DEVICE)
    perf.bytes = 2 * x.nbytes
    perf.expect(max_kernels=1)
    perf(_chain, x)
