"""Split-KV decode attention against a float64 (CPU) / float32 (GPU) reference."""

from __future__ import annotations

import pytest
import torch

from kernels.decode import decode_attention
from kernels.reference import decode_fp32, rel_err

TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}


def _shape(b, h, seq, d, layout):
    return (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)


def _rand(shape, dtype, device, gen):
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def check_decode(b, hq, hk, seq, d, layout, dtype, device, gen, num_splits=None, cache_len=None,
                 ref_dtype=torch.float64, **kw):
    """``cache_len`` > seq: the caches are views of the first ``seq`` slots of a longer buffer."""
    cap = cache_len or seq
    q = _rand(_shape(b, hq, 1, d, layout), dtype, device, gen)
    kbuf = _rand(_shape(b, hk, cap, d, layout), dtype, device, gen)
    vbuf = _rand(_shape(b, hk, cap, d, layout), dtype, device, gen)
    dim = 2 if layout == "bhld" else 1
    k, v = kbuf.narrow(dim, 0, seq), vbuf.narrow(dim, 0, seq)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=device)
    decode_attention(q, k, v, layout=layout, num_splits=num_splits, out=out, **kw)
    ref = decode_fp32(q.to(ref_dtype), k.to(ref_dtype), v.to(ref_dtype), layout=layout)
    tag = f"seed={gen.initial_seed()} {layout} {dtype} q={tuple(q.shape)} k={tuple(k.shape)} splits={num_splits} {kw}"
    assert torch.isfinite(out).all(), f"unwritten output: {tag}"
    err = rel_err(out, ref)
    assert err < TOL[dtype], f"rel err {err:.2e}: {tag}"


@pytest.mark.parametrize(
    ("b", "hq", "hk", "seq", "d", "layout", "dtype", "splits", "cache_len"),
    [
        (2, 4, 4, 300, 64, "bhld", torch.float16, None, None),
        (1, 8, 2, 129, 128, "blhd", torch.bfloat16, 3, None),  # GQA, 3 chunks, ragged tail
        (1, 2, 1, 1, 64, "bhld", torch.float16, None, None),  # a single cached position
        (2, 4, 1, 77, 64, "bhld", torch.bfloat16, 5, 96),  # cache is a view of a longer buffer
        (1, 2, 2, 50, 256, "blhd", torch.float16, 2, 64),
        (2, 6, 2, 70, 80, "blhd", torch.bfloat16, 1, None),  # one chunk: output written directly, padded dim
        (1, 4, 4, 45, 24, "bhld", torch.float16, 2, None),
        (1, 3, 1, 33, 96, "bhld", torch.float16, None, None),
        (1, 2, 1, 40, 192, "blhd", torch.bfloat16, 1, 48),
    ],
)
def test_decode_matches_reference(b, hq, hk, seq, d, layout, dtype, splits, cache_len, device, gen):
    check_decode(b, hq, hk, seq, d, layout, dtype, device, gen, splits, cache_len)


@pytest.mark.parametrize(
    ("b", "hq", "hk", "seq", "d", "layout", "dtype", "splits", "cache_len"),
    [
        (1, 8, 2, 129, 128, "blhd", torch.bfloat16, 3, None),  # GQA, 3 chunks, ragged tail
        (2, 4, 1, 77, 64, "bhld", torch.bfloat16, 5, 96),  # view of a longer buffer: rows >= 77 zero-filled
        (2, 6, 2, 70, 80, "blhd", torch.bfloat16, 1, None),  # direct output, padded dim (zero-filled columns)
        (1, 2, 1, 40, 192, "blhd", torch.bfloat16, 1, 48),
    ],
)
def test_decode_tensor_descriptor_path(b, hq, hk, seq, d, layout, dtype, splits, cache_len, device, gen):
    """K/V through per-head tensor descriptors (``use_tma=True``)."""
    check_decode(b, hq, hk, seq, d, layout, dtype, device, gen, splits, cache_len, use_tma=True)


@pytest.mark.parametrize(
    ("b", "hq", "hk", "seq", "d", "layout", "dtype", "splits", "cache_len"),
    [
        (1, 8, 2, 129, 128, "blhd", torch.bfloat16, 3, None),
        (2, 4, 1, 77, 64, "bhld", torch.float16, 5, 96),
        (2, 6, 2, 70, 80, "blhd", torch.bfloat16, 2, None),
    ],
)
def test_decode_fused_combine(b, hq, hk, seq, d, layout, dtype, splits, cache_len, device, gen):
    """Chunks merged by the last-arriving program (counters reset for the next call: run twice)."""
    from kernels.decode import _LOCKS

    for _ in range(2):
        check_decode(b, hq, hk, seq, d, layout, dtype, device, gen, splits, cache_len, fused_combine=True)
    assert all(int(t.sum()) == 0 for t in _LOCKS.values())


def test_decode_rejects_long_query(device):
    q = torch.randn(1, 2, 2, 64, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="query length of 1"):
        decode_attention(q, q, q)


def test_decode_empty_cache(device):
    q = torch.randn(1, 2, 1, 64, dtype=torch.float16, device=device)
    k = torch.randn(1, 2, 0, 64, dtype=torch.float16, device=device)
    out = decode_attention(q, k, k)
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("b", "hq", "hk", "seq", "d", "layout", "dtype"),
    [
        (8, 16, 16, 2048, 64, "bhld", torch.float16),
        (4, 32, 8, 8192, 128, "bhld", torch.bfloat16),
        (2, 32, 8, 32771, 128, "blhd", torch.bfloat16),
        (1, 8, 8, 131072, 128, "bhld", torch.float16),
        (4, 32, 8, 4099, 80, "blhd", torch.bfloat16),
        (8, 16, 16, 2048, 96, "bhld", torch.float16),
    ],
)
def test_decode_gpu(b, hq, hk, seq, d, layout, dtype, gen):
    check_decode(b, hq, hk, seq, d, layout, dtype, "cuda", gen, ref_dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("b", "hq", "hk", "seq", "d", "layout", "dtype", "cache_len"),
    [
        (8, 16, 16, 2048, 64, "bhld", torch.float16, None),
        (2, 32, 8, 32771, 128, "blhd", torch.bfloat16, None),
        (4, 32, 8, 4099, 80, "blhd", torch.bfloat16, 4200),
        (1, 8, 8, 131072, 128, "bhld", torch.float16, None),
    ],
)
@pytest.mark.parametrize(("use_tma", "fused", "splits"), [(True, None, None), (False, None, None),
                                                       (False, True, 2), (False, True, None), (False, False, 3)])
def test_decode_gpu_loads(b, hq, hk, seq, d, layout, dtype, cache_len, use_tma, fused, splits, gen):
    """Both load paths (tensor descriptors, pointers) and both ways to merge chunks (fused in the last
    program, combine kernel) on the GPU, whatever the defaults; three calls in a row."""
    for _ in range(3):
        check_decode(b, hq, hk, seq, d, layout, dtype, "cuda", gen, splits, cache_len, ref_dtype=torch.float32,
                     use_tma=use_tma, fused_combine=fused)
