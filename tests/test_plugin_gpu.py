"""The plugin end to end on a real GPU (pytester sessions; skipped cleanly without one)."""

from __future__ import annotations

import json
import re

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


PLANTED_SUITE = """
import os
from pathlib import Path

import torch

FLAG = Path(__file__).parent / "slow_once.flag"


def test_spin(perf):
    cycles = int(os.environ.get("PLANT_CYCLES", "200000"))
    if FLAG.exists():  # a one-process slowdown: this process is slow, the next one is not
        FLAG.unlink()
        cycles = 250000
    # one kernel spinning a number of SM cycles: more work, same kernels, same memory (no structural change)
    perf(torch.cuda._sleep, cycles)


def test_steady(perf):
    x = torch.randn(1 << 22, device="cuda")
    perf(torch.add, x, x)
"""


def test_perfci_run_fails_a_slowdown_only_when_a_second_fresh_process_confirms_it(tmp_path):
    import os

    from tests.test_cli import perfci as run_perfci

    suite = tmp_path / "tests" / "perf"
    suite.mkdir(parents=True)
    (suite / "test_planted.py").write_text(PLANTED_SUITE)

    def perfci(*args: str, cycles: int = 200000):
        return run_perfci(*args, cwd=tmp_path, env={**os.environ, "PLANT_CYCLES": str(cycles)})

    timing = ["--perfci-max-time=1.5", "--perfci-min-time=0.5", "-p", "no:cacheprovider"]
    update = perfci("baseline", "update", "--runs", "2", "--force", "--", *timing)  # any NOISY: still a base
    assert update.returncode == 0, update.stdout + update.stderr
    # a real slowdown (+25 % work): SLOWER in the first pass, re-measured, confirmed, exit 1
    slow = perfci("run", *timing, cycles=250000)
    out = slow.stdout
    assert slow.returncode == 1, out + slow.stderr
    # test_spin is re-measured; test_steady too when it read NOISY (e.g. another process held the GPU)
    assert re.search(r"[12] benchmark\(s\) read SLOWER or NOISY in this pass; re-measuring", out), out
    assert "  tests/perf/test_planted.py::test_spin\n" in out, out
    assert "confirmed by a second fresh process" in out and "test_spin regressed" in out, out
    results = tmp_path / ".perfci" / "results"
    stems = {p.name.split("_", 1)[1] for p in results.iterdir()}
    assert {"first.json", "confirm.json", "run.json"} <= stems
    run_doc = json.loads(next(results.glob("*_run.json")).read_text())
    entries = {b["fullname"].split("::")[-1]: b["extra_info"]["perfci"] for b in run_doc["benchmarks"]}
    assert len(entries["test_spin"]["run_medians_ms"]) == 2 and entries["test_spin"]["pooled_with"]
    steady_again = "  tests/perf/test_planted.py::test_steady\n" in out  # it read NOISY in the first pass
    assert ("pooled_with" in entries["test_steady"]) is steady_again
    confirm_doc = json.loads(next(results.glob("*_confirm.json")).read_text())
    assert [b["fullname"].split("::")[-1] for b in confirm_doc["benchmarks"]] == ["test_spin"] + (
        ["test_steady"] if steady_again else [])
    # a slowdown of one process only: the first pass reads SLOWER, the second does not, exit 0
    (suite / "slow_once.flag").touch()
    blip = perfci("run", *timing)
    assert blip.returncode == 0, blip.stdout + blip.stderr
    assert "not confirmed by a second fresh process" in blip.stdout
    # the same blip without confirmation fails the test in its one pass
    (suite / "slow_once.flag").touch()
    single = perfci("run", "--no-confirm", *timing)
    assert single.returncode == 1 and "re-measuring" not in single.stdout
    assert "FAILED" in single.stdout and "test_spin" in single.stdout
