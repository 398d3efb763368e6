"""FlashAttention benchmarks: our kernels beside SDPA's flash, efficient and cuDNN backends.

"ours" is the default entry point (on Hopper the warp-specialised Gluon forward where it measured faster,
``kernels/attention_ws.py``), "ours-triton" the Triton forward kernel forced.

GPU only (skipped without CUDA).  FLOPs: 4*B*H*L^2*D forward (half of it causal), 2.5x that backward.
"""

from __future__ import annotations

import pytest
import torch

from kernels.attention import attention_backward, attention_forward, attention_forward_fp8, quantize_fp8
from kernels.reference import sdpa

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _randn(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Random CUDA tensor from a private generator (the default one may be tied to a captured graph)."""
    g = torch.Generator(device="cuda")
    g.seed()
    return torch.randn(shape, device="cuda", dtype=dtype, generator=g)

IMPLS = ("ours", "ours-triton", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
SHAPES = [(512, 128), (4096, 64), (4096, 128), (16384, 128)]  # (L, D); B*L = 16k tokens, 16 heads


def _inputs(seq: int, d: int, n: int = 3) -> list[torch.Tensor]:
    b = max(1, 16384 // seq)
    return [_randn(b, 16, seq, d) for _ in range(n)]


def _fwd_flops(q: torch.Tensor, causal: bool) -> float:
    b, h, seq, d = q.shape
    return 4.0 * b * h * seq * seq * d * (0.5 if causal else 1.0)


def _runnable(fn, *args) -> None:
    try:
        fn(*args)
    except RuntimeError as exc:  # an SDPA backend that cannot take these inputs on this GPU
        pytest.skip(f"not runnable here: {str(exc).splitlines()[0][:120]}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("seq", "d"), SHAPES, ids=[f"L{s}-d{d}" for s, d in SHAPES])
def test_flash_forward(perf, impl, causal, seq, d):
    q, k, v = _inputs(seq, d)
    perf.flops = _fwd_flops(q, causal)
    perf.bytes = 4 * q.numel() * q.element_size()
    if impl == "ours":
        fn, args = attention_forward, (q, k, v, causal)
    elif impl == "ours-triton":
        fn, args = _triton_forward, (q, k, v, causal)
    else:
        fn, args = sdpa, (q, k, v, causal, impl.removeprefix("sdpa-"))
    _runnable(fn, *args)
    perf(fn, *args)


def _triton_forward(q, k, v, causal):
    return attention_forward(q, k, v, causal, impl="triton")


def _sdpa_backward(out, inputs, do):
    return torch.autograd.grad(out, inputs, do, retain_graph=True)


@pytest.mark.parametrize("impl", ("ours", "sdpa-flash", "sdpa-cudnn"))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_backward(perf, impl, causal):
    _backward(perf, impl, causal, 128)


@pytest.mark.parametrize("impl", ("ours", "sdpa-flash", "sdpa-cudnn"))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_backward_d64(perf, impl, causal):
    """Head dim 64 (ours: the Gluon backward; without a mask built without its consumers' release barriers)."""
    _backward(perf, impl, causal, 64)


def _backward(perf, impl: str, causal: bool, d: int) -> None:
    """L4096, B4, H16: dq, dk, dv of our backward or of SDPA's autograd backward."""
    q, k, v, do = _inputs(4096, d, 4)
    perf.flops = 2.5 * _fwd_flops(q, causal)
    perf.bytes = 8 * q.numel() * q.element_size()
    if impl == "ours":
        out, lse = attention_forward(q, k, v, causal)
        perf(attention_backward, do, q, k, v, out, lse, causal)
        return
    qkv = tuple(t.requires_grad_() for t in (q, k, v))
    try:
        out = sdpa(*qkv, causal, impl.removeprefix("sdpa-"))
    except RuntimeError as exc:
        pytest.skip(f"not runnable here: {str(exc).splitlines()[0][:120]}")
    _runnable(_sdpa_backward, out, qkv, do)
    perf(_sdpa_backward, out, qkv, do)


@pytest.mark.parametrize("impl", ("ours", "sdpa-flash", "sdpa-cudnn"))
def test_flash_forward_d80(perf, impl):
    """A head dim that is not a power of two (ours runs it padded to 128 inside the kernel)."""
    q, k, v = _inputs(4096, 80)
    perf.flops = _fwd_flops(q, False)
    perf.bytes = 4 * q.numel() * q.element_size()
    if impl == "ours":
        fn, args = attention_forward, (q, k, v)
    else:
        fn, args = sdpa, (q, k, v, False, impl.removeprefix("sdpa-"))
    _runnable(fn, *args)
    perf(fn, *args)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_forward_fp8(perf, causal):
    """fp8 e4m3 forward (per-tensor scales, bf16 output, v stored position-contiguous); compare with
    test_flash_forward[L4096-d128-*] for bf16."""
    q, k, v = _inputs(4096, 128)
    (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
    v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
    perf.flops = _fwd_flops(q, causal)
    perf.bytes = 3 * q.numel() + 2 * q.numel()
    perf(attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal)
