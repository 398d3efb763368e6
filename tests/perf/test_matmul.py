"""GEMM benchmarks: persistent Triton GEMM beside cuBLAS (torch.matmul), bf16.  GPU only."""

from __future__ import annotations

import pytest
import torch

from kernels.matmul import matmul

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _randn(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Random CUDA tensor from a private generator (the default one may be tied to a captured graph)."""
    g = torch.Generator(device="cuda")
    g.seed()
    return torch.randn(shape, device="cuda", dtype=dtype, generator=g)

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 5000, 3000), (4096, 14336, 4096),
          (1, 4096, 4096), (16, 14336, 4096)]  # the last two: decode-sized (memory-bound on B)


@pytest.mark.parametrize("impl", ("ours", "cublas"))
@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_matmul(perf, impl, m, n, k):
    a = _randn(m, k)
    b = _randn(k, n)
    perf.flops = 2.0 * m * n * k
    perf.bytes = (m * k + k * n + m * n) * a.element_size()
    perf(matmul if impl == "ours" else torch.matmul, a, b)
