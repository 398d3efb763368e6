"""The plugin end to end on a real GPU (pytester sessions; skipped cleanly without one)."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FAST = ["--perfci-max-time=0.3", "--perfci-min-time=0.1", "-p", "no:cacheprovider"]


def test_cuda_out_of_memory_fails_that_test_with_the_shapes_and_the_memory_state(pytester):
    pytester.makepyfile(test_oom="""
        import torch

        def grow(x):
            return torch.empty(1 << 50, dtype=torch.uint8, device=x.device)  # 1 PiB

        def test_oom(perf):
            perf(grow, torch.ones(64, 32, device="cuda", dtype=torch.float16))

        def test_fine(perf):
            x = torch.ones(4096, device="cuda")
            perf(torch.add, x, x)
    """)
    res = pytester.runpytest_subprocess(*FAST)
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "CUDA out of memory with inputs [(64, 32) float16]" in out
    assert "free" in out and "use smaller shapes" in out
    assert "Traceback" not in out.split("short test summary")[0].split("test_oom")[-1]


def test_gpu_run_records_device_time_clock_and_nvtx(pytester):
    pytester.makepyfile(test_mm="""
        import torch

        def test_mm(perf):
            a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
            perf.flops = 2 * 1024**3
            perf(torch.matmul, a, a)
    """)
    res = pytester.runpytest_subprocess(*FAST, "--benchmark-json=out.json")
    res.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "out.json").read_text())
    info = doc["benchmarks"][0]["extra_info"]["perfci"]
    assert info["timer"] == "graph" and info["fallback_reason"] is None
    assert "clock probe" in info["clock_source"]
    assert info["median_sm_clock_mhz"] and 100 < info["median_sm_clock_mhz"] < 5000
    assert info["profile"]["status"] == "ok" and info["profile"]["launches_per_call"] >= 1
    assert doc["machine_info"]["perfci"]["gpu_available"] is True
    assert doc["benchmarks"][0]["extra_info"]["tflops"] > 1
