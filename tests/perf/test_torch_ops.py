"""The first suite: plain torch ops that every GPU has (GEMM, SDPA, a copy, a tiny elementwise op).

Runs on the GPU at real shapes, or in CPU mode at small shapes (host wall-clock, labelled).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.perf.shapes import DEVICE, GPU, pick

DTYPE = torch.bfloat16 if GPU else torch.float32


def test_gemm(perf):
    n = pick(4096, 256)
    a = torch.randn(n, n, device=DEVICE, dtype=DTYPE)
    b = torch.randn(n, n, device=DEVICE, dtype=DTYPE)
    perf.flops = 2 * n**3
    perf.bytes = 3 * n * n * a.element_size()
    perf.forbid("copy", "sync")
    perf(torch.matmul, a, b)


def test_sdpa(perf):
    b, h, seq, d = pick((8, 16, 2048, 128), (2, 2, 128, 32))
    q, k, v = (torch.randn(b, h, seq, d, device=DEVICE, dtype=DTYPE) for _ in range(3))
    perf.flops = 4 * b * h * seq * seq * d
    perf.forbid("copy", "sync", "math_sdpa")
    perf(F.scaled_dot_product_attention, q, k, v)


def test_copy_256mb(perf):
    numel = pick(256 * 2**20 // 4, 2**20)
    src = torch.randn(numel, device=DEVICE)
    dst = torch.empty_like(src)
    perf.bytes = 2 * src.nbytes
    perf(dst.copy_, src)


def test_tiny_add(perf):
    x = torch.randn(4096, device=DEVICE)
    y = torch.randn(4096, device=DEVICE)
    perf.bytes = 3 * x.nbytes
    perf.forbid("sync")
    perf(torch.add, x, y)
