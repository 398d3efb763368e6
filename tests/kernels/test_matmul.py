"""Persistent Triton GEMM against float64 (CPU) / float32 (GPU) torch.matmul."""

from __future__ import annotations

import pytest
import torch

from kernels.matmul import matmul
from kernels.reference import rel_err

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def check_matmul(m, n, k, dtype, device, gen, b_colmajor=False, ref_dtype=torch.float64, **kw):
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=dtype)
    if b_colmajor:
        b = torch.randn(n, k, generator=gen).to(device=device, dtype=dtype).t()
    else:
        b = torch.randn(k, n, generator=gen).to(device=device, dtype=dtype)
    c = torch.full((m, n), float("nan"), dtype=dtype, device=device)
    matmul(a, b, out=c, **kw)
    ref = a.to(ref_dtype) @ b.to(ref_dtype)
    tag = f"seed={gen.initial_seed()} {m}x{n}x{k} {dtype} colmajor={b_colmajor} {kw}"
    assert torch.isfinite(c).all(), f"unwritten output: {tag}"
    err = rel_err(c, ref)
    assert err < TOL[dtype], f"rel err {err:.2e}: {tag}"


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "colmajor"),
    [
        (37, 45, 29, torch.float16, False),
        (64, 33, 70, torch.bfloat16, True),
        (1, 100, 17, torch.bfloat16, False),
        (96, 64, 48, torch.float16, True),
    ],
)
def test_matmul_matches_reference(m, n, k, dtype, colmajor, device, gen):
    check_matmul(m, n, k, dtype, device, gen, colmajor)


@pytest.mark.parametrize("colmajor", [False, True])
def test_matmul_tensor_descriptor_path(colmajor, device, gen):
    check_matmul(72, 40, 56, torch.bfloat16, device, gen, colmajor, use_tma=True)


@pytest.mark.parametrize(("m", "split"), [(1, 3), (5, None), (33, 2)])
def test_matmul_split_k(m, split, device, gen):
    """Decode-sized M through the split-K kernels (ragged K chunks, M below one tile)."""
    check_matmul(m, 40, 70, torch.bfloat16, device, gen, split_k=split or 4)


@pytest.mark.parametrize(("m", "n", "k", "split"), [(1, 40, 70, 3), (33, 70, 300, 4), (64, 100, 129, 2)])
def test_matmul_split_k_fused(m, n, k, split, device, gen):
    """Split-K with the reduction in the last program of each tile (arrival counters reset for the next
    call: run twice)."""
    from kernels.matmul_splitk import _LOCKS

    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, device, gen, split_k=split, splitk_fused=True)
    assert all(int(t.sum()) == 0 for t in _LOCKS.values())


@pytest.mark.parametrize("how", ["ptr", "repack", "tma"])
@pytest.mark.parametrize("flatten", [False, True])
def test_matmul_misaligned_b_pitch(how, flatten, device, gen):
    """B's row pitch (104 bf16 = 208 bytes) not a multiple of 128 bytes: B through pointer loads, repacked, or
    through its descriptor anyway."""
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, use_tma=True, misaligned_b=how,
                 config=(32, 32, 16, 2, 4, 1, 0, flatten))


def test_matmul_non_persistent_grid(device, gen):
    check_matmul(70, 90, 33, torch.float16, device, gen, persistent=False)


def test_matmul_empty(device):
    a = torch.randn(0, 8, dtype=torch.float16, device=device)
    b = torch.randn(8, 5, dtype=torch.float16, device=device)
    assert matmul(a, b).shape == (0, 5)
    a2 = torch.randn(3, 0, dtype=torch.float16, device=device)
    b2 = torch.randn(0, 4, dtype=torch.float16, device=device)
    assert torch.equal(matmul(a2, b2), torch.zeros(3, 4, dtype=torch.float16, device=device))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "colmajor"),
    [
        (4096, 4096, 4096, torch.bfloat16, False),
        (4096, 4096, 4096, torch.float16, True),
        (3000, 5000, 1000, torch.bfloat16, False),
        (1001, 777, 1003, torch.float16, False),  # unaligned strides: pointer path
        (1, 4096, 4096, torch.bfloat16, False),  # decode-sized: split-K
        (16, 14336, 4096, torch.bfloat16, False),
        (64, 1000, 3000, torch.float16, True),
    ],
)
def test_matmul_gpu(m, n, k, dtype, colmajor, gen):
    check_matmul(m, n, k, dtype, "cuda", gen, colmajor, ref_dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("config", [(128, 256, 64, 8, 8, 3, 0, False), (128, 256, 64, 8, 8, 4, 1, True),
                                    (128, 256, 64, 8, 8, 4, 2, False)])
def test_matmul_gpu_epilogues(config, gen):
    check_matmul(3000, 5000, 1000, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, config=config)


@pytest.mark.parametrize("epi", [0, 1, 2])
def test_matmul_epilogues(epi, device, gen):
    """Tensor-descriptor path with each epilogue: whole-tile, two half-tile, and plain stores."""
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, use_tma=True, config=(32, 32, 16, 2, 4, 1, epi, True))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "split"), [(64, 4096, 4096, 4), (1, 4096, 4096, 4), (16, 14336, 4096, None),
                                                     (37, 1000, 3000, 3), (64, 4096, 4096, 2)])
@pytest.mark.parametrize("fused", [True, False])
def test_matmul_gpu_split_k(m, n, k, split, fused, gen):
    """Split-K on the GPU, separate reduce kernel or fused (last-arriving program); three calls in a row."""
    for _ in range(3):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, split_k=split or 4,
                     splitk_fused=fused)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(4000, 5000, 3000), (3000, 5000, 1000), (1000, 4104, 777), (64, 5000, 3000)])
@pytest.mark.parametrize("how", ["ptr", "repack", "tma"])
def test_matmul_gpu_misaligned_b(m, n, k, how, gen):
    """Row-major B with a row pitch that is not a multiple of 128 bytes, each way of reading it (autotuned)."""
    check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, misaligned_b=how)
