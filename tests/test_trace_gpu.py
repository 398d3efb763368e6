"""The profile stage at kernel level on a CUDA GPU (skipped cleanly without one).

The same seeded cases as ``test_trace.py``, in bf16 on the GPU: copies must show up as copy kernels
with bytes, syncs from the CUDA runtime, the SDPA backend from the kernels that ran.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perfci.rules import check_against_baseline, check_declared
from perfci.trace import Culprit, KernelProfile, profile_call

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

B, L, H, D = 4, 1024, 16, 64
DEV = "cuda"


def make_tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, L, H, D, device=DEV, dtype=torch.bfloat16) for _ in range(3))  # BLHD
    return {"q": q, "k": k, "v": v, "x": torch.randn(1 << 20, device=DEV),
            "a": torch.randn(1024, 1024, device=DEV, dtype=torch.bfloat16)}


@pytest.fixture(scope="module")
def t() -> dict[str, torch.Tensor]:
    return make_tensors()


def sdpa_transpose_copies(t):
    q, k, v = (t[n].transpose(1, 2).contiguous() for n in "qkv")  # 3 copy kernels
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_strided_views(t):
    q, k, v = (t[n].transpose(1, 2) for n in "qkv")
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_broadcast_kv(t):
    q, k, v = (t[n].transpose(1, 2) for n in "qkv")
    return F.scaled_dot_product_attention(q, k[:1], v[:1])  # K/V broadcast over the batch


def nan_check_sync(t):
    y = t["x"] * 2
    if bool(torch.isnan(y).any()):  # device->host sync
        raise AssertionError("nan")
    return y


def item_sync(t):
    return t["x"].sum().item()


def to_host(t):
    return t["x"].cpu()


def explicit_synchronize(t):
    y = t["x"] * 2
    torch.cuda.synchronize()
    return y


def nonzero_sync(t):
    return torch.nonzero(t["x"] > 0)


def upcast_matmul(t):
    return t["a"].float() @ t["a"].float()


def bf16_matmul(t):
    return t["a"] @ t["a"]


def unfused_chain(t):
    return ((t["x"] * 2 + 1).relu() * 3).sigmoid()


CASES = [sdpa_transpose_copies, sdpa_strided_views, sdpa_broadcast_kv, nan_check_sync, item_sync, to_host,
         explicit_synchronize, nonzero_sync, upcast_matmul, bf16_matmul, unfused_chain]


def line_of(fn, needle: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return next(start + i for i, text in enumerate(lines) if needle in text)


def assert_points_at(culprit: Culprit | None, fn, needle: str) -> None:
    assert culprit is not None
    assert Path(culprit.file).resolve() == Path(__file__).resolve()
    assert culprit.line == line_of(fn, needle)


@pytest.fixture(scope="module")
def p(t) -> dict[str, KernelProfile]:
    return {fn.__name__: profile_call(lambda fn=fn: fn(t), label=fn.__name__) for fn in CASES}


def test_gpu_profiles_are_kernel_level(p):
    for name, profile in p.items():
        assert profile.status == "ok", (name, profile.missing_reason)
        assert profile.level == "kernel", name
        assert profile.device.startswith("cuda")


def test_transpose_contiguous_is_three_copy_kernels_with_bytes(p, t):
    bad, clean = p["sdpa_transpose_copies"], p["sdpa_strided_views"]
    copies = bad.copies()
    assert sum(c.count_per_call for c in copies) == 3
    assert {c.category for c in copies} == {"copy"} and {c.kind for c in copies} == {"transpose"}
    assert all("copy" in c.name or "elementwise" in c.name for c in copies)
    assert bad.copy_bytes_per_call == 3 * t["q"].numel() * t["q"].element_size()
    for c in copies:
        assert_points_at(c.culprit, sdpa_transpose_copies, ".contiguous()")
    assert clean.copies() == () and clean.copy_bytes_per_call == 0
    assert bad.sdpa_backend == clean.sdpa_backend and bad.sdpa_backend in ("flash", "efficient", "cudnn")
    findings = [f for f in check_against_baseline(bad, clean) if f.failed]
    assert {"new:transpose", "more:launches"} <= {f.rule for f in findings}


def test_sdpa_backend_is_read_from_kernels(p):
    clean = p["sdpa_strided_views"]
    attention = [k for k in clean.kernels if k.category == "attention"]
    assert attention and {k.kind for k in attention} == {clean.sdpa_backend}
    assert_points_at(clean.sdpa_culprit, sdpa_strided_views, "scaled_dot_product_attention")
    assert p["sdpa_broadcast_kv"].sdpa_backend == "math"
    (changed,) = [f for f in check_against_baseline(p["sdpa_broadcast_kv"], clean)
                  if f.rule == "changed:sdpa_backend"]
    assert changed.failed


def test_syncs_from_the_cuda_runtime(p, t):
    for name, kind, fn, needle in [("nan_check_sync", "item", nan_check_sync, "if bool("),
                                   ("item_sync", "item", item_sync, ".item()"),
                                   ("to_host", "d2h_copy", to_host, ".cpu()"),
                                   ("nonzero_sync", "nonzero", nonzero_sync, "torch.nonzero"),
                                   ("explicit_synchronize", "device_synchronize", explicit_synchronize,
                                    "torch.cuda.synchronize()")]:
        (sync,) = p[name].syncs
        assert (sync.kind, sync.count_per_call) == (kind, 1), name
        assert_points_at(sync.culprit, fn, needle)
    (d2h,) = [k for k in p["to_host"].kernels if k.category == "memcpy"]
    assert d2h.kind == "d2h" and d2h.bytes_per_call == t["x"].numel() * 4
    assert p["unfused_chain"].syncs == () and p["sdpa_strided_views"].syncs == ()


def test_upcast_swaps_the_gemm_for_fp32(p, t):
    upcast, bf16 = p["upcast_matmul"], p["bf16_matmul"]
    casts = [c for c in upcast.copies() if c.kind == "cast"]
    assert sum(c.count_per_call for c in casts) == 2
    assert sum(c.bytes_per_call for c in casts) == 2 * t["a"].numel() * 4
    assert {k.kind for k in upcast.kernels if k.category == "gemm"} == {"fp32"}
    assert {k.kind for k in bf16.kernels if k.category == "gemm"} == {"bf16"}
    assert check_declared(upcast, ["fp32_gemm"], {})
    assert {"new:cast", "new:gemm_dtype"} <= {f.rule for f in check_against_baseline(upcast, bf16) if f.failed}


def test_unfused_chain_launches(p):
    chain = p["unfused_chain"]
    assert chain.launches_per_call == 5
    assert {k.category for k in chain.kernels} == {"elementwise"}


def test_peak_memory_measured_on_the_device(p, t):
    bad, clean = p["sdpa_transpose_copies"], p["sdpa_strided_views"]
    assert clean.peak_memory_bytes is not None and clean.peak_memory_bytes > 0
    assert bad.peak_memory_bytes >= clean.peak_memory_bytes


def test_structure_is_identical_over_five_runs(t):
    for fn in (sdpa_transpose_copies, nan_check_sync):
        runs = [profile_call(lambda fn=fn: fn(t)) for _ in range(5)]
        for run in runs[1:]:
            assert [f for f in check_against_baseline(run, runs[0]) if f.failed] == []
            assert [(k.name, k.category, k.kind, k.count_per_call, k.bytes_per_call) for k in run.kernels] == [
                (k.name, k.category, k.kind, k.count_per_call, k.bytes_per_call) for k in runs[0].kernels]
