"""Decode (q_len = 1) benchmarks: split-KV Triton kernel beside SDPA backends.  GPU only.

Bytes: the K and V caches read once (plus q and the output), the floor for this memory-bound op.
"""

from __future__ import annotations

import pytest
import torch

from kernels.decode import decode_attention
from kernels.reference import sdpa

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _randn(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Random CUDA tensor from a private generator (the default one may be tied to a captured graph)."""
    g = torch.Generator(device="cuda")
    g.seed()
    return torch.randn(shape, device="cuda", dtype=dtype, generator=g)

CASES = [  # B, Hq, Hkv, kv length, D, dtype
    (8, 16, 16, 2048, 64, torch.float16),
    (8, 16, 16, 8192, 128, torch.float16),
    (2, 32, 8, 32768, 128, torch.bfloat16),
    (1, 8, 8, 131072, 128, torch.float16),
]


@pytest.mark.parametrize("impl", ("ours", "sdpa-flash", "sdpa-efficient"))
@pytest.mark.parametrize("case", CASES, ids=[f"b{c[0]}-hq{c[1]}-hkv{c[2]}-kv{c[3]}-d{c[4]}" for c in CASES])
def test_decode(perf, impl, case):
    b, hq, hk, seq, d, dtype = case
    q = _randn(b, hq, 1, d, dtype=dtype)
    k = _randn(b, hk, seq, d, dtype=dtype)
    v = _randn(b, hk, seq, d, dtype=dtype)
    perf.flops = 4.0 * b * hq * seq * d
    perf.bytes = (k.numel() + v.numel() + 2 * q.numel()) * q.element_size()
    if impl == "ours":
        fn, args = decode_attention, (q, k, v)
    else:
        fn, args = sdpa, (q, k, v, False, impl.removeprefix("sdpa-"))
    try:
        fn(*args)
    except RuntimeError as exc:
        pytest.skip(f"not runnable here: {str(exc).splitlines()[0][:120]}")
    perf(fn, *args)
