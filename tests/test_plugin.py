"""End-to-end: real pytest sessions (pytester) running real perf tests on this machine's CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FAST = ["--perfci-max-time=0.05", "--perfci-min-time=0.01", "-p", "no:cacheprovider"]


MUL_TEST = """
import torch

def test_mul(perf):
    x = torch.randn(256)
    perf(torch.mul, x, x)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*FAST, *args)


def results(path: Path) -> dict:
    return json.loads(path.read_text())


def test_perf_fixture_feeds_pytest_benchmark_and_records_perfci_data(pytester):
    pytester.makepyfile(test_ops="""
        import torch

        def test_add(perf):
            x = torch.randn(1000)
            perf.flops = 10**9
            perf.bytes = 3 * x.nbytes
            out = perf(torch.add, x, x)
            assert torch.equal(out, x + x)
    """)
    res = run(pytester, "--benchmark-json=out.json")
    res.assert_outcomes(passed=1)
    assert "perfci" in res.stdout.str() and "CPU mode" in res.stdout.str()
    bench = results(pytester.path / "out.json")["benchmarks"][0]
    info = bench["extra_info"]["perfci"]
    assert info["timer"] == "wall" and info["normalization"] == "none"
    assert bench["stats"]["rounds"] == info["n_samples"] > 0
    # pytest-benchmark's statistics are computed on exactly the samples perfci measured
    assert bench["stats"]["median"] * 1e3 == pytest.approx(info["median_ms"], rel=1e-3)
    assert bench["extra_info"]["gbps"] > 0 and bench["extra_info"]["tflops"] > 0
    assert "host wall clock" in bench["extra_info"]["timer"]
    assert results(pytester.path / "out.json")["machine_info"]["perfci"]["slug"].startswith("cpu-")


def test_each_benchmark_records_its_whole_tests_seconds_for_shard_balancing(pytester):
    """A benchmark whose fixture takes 0.4 s (a model load, a compile) records it in ``test_wall_s`` beside its far
    shorter measuring; a test without ``perf`` is not in the file."""
    pytester.makepyfile(test_ops="""
        import time

        import pytest
        import torch

        @pytest.fixture
        def loaded():
            time.sleep(0.4)
            return torch.randn(256)

        def test_loaded(perf, loaded):
            perf(torch.mul, loaded, loaded)

        def test_plain():
            time.sleep(0.1)
    """)
    run(pytester, "--benchmark-json=out.json").assert_outcomes(passed=2)
    (bench,) = results(pytester.path / "out.json")["benchmarks"]
    info = bench["extra_info"]["perfci"]
    assert info["test_wall_s"] >= 0.4 > info["warmup_s"] + info["sampling_s"]


def test_autosave_storage_is_pytest_benchmarks_own_and_compare_reads_it(pytester):
    pytester.makepyfile(test_ops=MUL_TEST)
    run(pytester, "--benchmark-autosave").assert_outcomes(passed=1)
    dirs = [p.name for p in (pytester.path / ".benchmarks").iterdir()]
    from pytest_benchmark.utils import get_machine_id

    assert dirs == [get_machine_id()]  # the folder pytest-benchmark alone would use
    res = run(pytester, "--benchmark-compare")
    res.assert_outcomes(passed=1)
    out = res.stdout.str() + res.stderr.str()
    assert "Comparing against benchmarks from" in out
    assert "(--benchmark-compare)" in out and "UNCOMPARED" not in out  # perfci judged against it
    assert "machine_info is different" not in out  # perfci's block is checked by perfci, at the first perf call


def test_compare_with_another_gpus_run_is_refused(pytester):
    pytester.makepyfile(test_ops=MUL_TEST)
    run(pytester, "--benchmark-autosave").assert_outcomes(passed=1)
    (saved,) = (pytester.path / ".benchmarks").glob("*/0001_*.json")
    doc = results(saved)
    doc["machine_info"]["perfci"]["slug"] = "Another_GPU_Model"
    saved.write_text(json.dumps(doc))
    res = run(pytester, "--benchmark-compare")  # the newest saved run, found by pytest-benchmark
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    out = res.stdout.str() + res.stderr.str()
    assert "refusing to compare across GPU models" in out and str(saved) in out


def test_function_that_raises_errors_with_the_original_exception_and_saves_nothing(pytester):
    pytester.makepyfile(test_ops="""
        import torch
        def boom(x):
            raise ZeroDivisionError("kernel exploded")
        def test_boom(perf):
            perf(boom, torch.ones(3))
        def test_fine(perf):
            perf(torch.neg, torch.ones(3))
    """)
    res = run(pytester, "--benchmark-json=out.json")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*ZeroDivisionError: kernel exploded*"])
    names = [b["name"] for b in results(pytester.path / "out.json")["benchmarks"]]
    assert names == ["test_fine"]


def test_usage_errors_name_the_test(pytester):
    pytester.makepyfile(test_ops="""
        import pytest, torch

        def test_not_callable(perf):
            perf(torch.ones(3))

        @pytest.mark.perf(treshold="3%")
        def test_bad_key(perf):
            perf(torch.neg, torch.ones(3))

        @pytest.mark.perf(threshold="three")
        def test_bad_value(perf):
            perf(torch.neg, torch.ones(3))

        def test_bad_forbid(perf):
            perf.forbid("copies")
            perf(torch.neg, torch.ones(3))
    """)
    res = run(pytester)
    res.assert_outcomes(failed=2, errors=2)
    out = res.stdout.str()
    assert "test_not_callable: perf(fn, *args) needs a callable first, got Tensor" in out
    assert "test_bad_key: unknown @pytest.mark.perf option(s) treshold" in out
    assert "test_bad_value: bad @pytest.mark.perf option: threshold 'three' is not a number" in out
    assert "test_bad_forbid" in out and "copies" in out
    assert "Traceback" not in out


def test_marker_options_are_recorded(pytester):
    pytester.makepyfile(test_ops="""
        import pytest, torch
        @pytest.mark.perf(threshold="2.5%", max_time=0.05, torch_profile=False)
        def test_neg(perf):
            perf(torch.neg, torch.ones(3))
    """)
    run(pytester, "--benchmark-json=out.json").assert_outcomes(passed=1)
    info = results(pytester.path / "out.json")["benchmarks"][0]["extra_info"]["perfci"]
    assert info["threshold"] == 0.025
    assert "profile" not in info


def test_odd_test_names_give_safe_trace_file_names(pytester):
    pytester.makepyfile(test_ops="""
        import pytest, torch
        @pytest.mark.parametrize("case", ["a/b", "with space", "ünï"])
        def test_odd(perf, case):
            perf(torch.neg, torch.ones(3))
    """)
    run(pytester, "--perfci-trace-dir=traces", "--benchmark-autosave").assert_outcomes(passed=3)
    names = sorted(p.name for p in (pytester.path / "traces").iterdir())
    assert len(names) == 3
    for name in names:
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name), name


def test_benchmark_disable_runs_the_function_once(pytester):
    pytester.makepyfile(test_ops="""
        calls = []
        def f():
            calls.append(1)
            return 7
        def test_once(perf):
            assert perf(f) == 7
            assert len(calls) == 1
    """)
    run(pytester, "--benchmark-disable").assert_outcomes(passed=1)


def test_github_step_summary_is_written(pytester, monkeypatch, tmp_path):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_ops="""
        import torch
        def test_neg(perf):
            perf(torch.neg, torch.ones(3))
    """)
    run(pytester).assert_outcomes(passed=1)
    text = summary.read_text()
    assert "| `test_ops.py::test_neg` |" in text and "CPU mode" in text


def test_structural_regression_fails_only_the_offending_test_with_its_line(pytester, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    from perfci.baseline import baseline_path, make_baseline
    from perfci.fingerprint import detect
    from perfci.record import load_results, write_results

    clean = """
        import torch
        X = torch.randn(64, 64)

        def work(x):
            return x.neg()

        def test_changed(perf):
            perf(work, X)

        def test_untouched(perf):
            perf(torch.abs, X)
    """
    pytester.makepyfile(test_ops=clean)
    run(pytester, "--benchmark-json=base.json").assert_outcomes(passed=2)
    slug = detect().slug
    write_results(make_baseline([load_results(pytester.path / "base.json")], gpu=slug,
                                path=baseline_path(pytester.path / "bl", slug)))

    pytester.makepyfile(test_ops=clean.replace("return x.neg()", "return x.t().contiguous().neg()"))
    line = next(i for i, text in enumerate((pytester.path / "test_ops.py").read_text().splitlines(), 1)
                if "contiguous" in text)
    res = run(pytester, "--perfci-baselines=bl")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "test_ops.py::test_changed regressed" in out
    assert f"test_ops.py:{line}" in out  # the culprit line, in the failure and in the summary
    assert "FAIL STRUCTURE" in out
    res.stdout.fnmatch_lines(["*FAILED test_ops.py::test_changed*"])
    # on GitHub Actions: an annotation at the culprit line
    assert f"::error file=test_ops.py,line={line},title=perfci new:" in out


def test_known_bad_variant_passes_when_flagged_and_fails_when_not(pytester):
    pytester.makepyfile(test_ops="""
        import pytest, torch
        X = torch.randn(32, 32)

        @pytest.mark.perf(known_bad=["copy"])
        def test_flagged(perf):
            perf(lambda: X.t().contiguous())

        @pytest.mark.perf(known_bad=["copy"])
        def test_not_flagged(perf):
            perf(lambda: X.neg())
    """)
    res = run(pytester)
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "declared known-bad for 'copy' but perfci did not flag it" in out
    res.stdout.fnmatch_lines(["*FAILED test_ops.py::test_not_flagged*"])
