"""perfci through plain pytest: --benchmark-compare is a perfci gate, paths and names cannot silently miss,
broken benchmarks are ERROR, CPU mode skips GPU-only options, and every output shows one set of counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfci.baseline import baseline_path, make_baseline
from perfci.fingerprint import Fingerprint, detect
from perfci.gate import error_outcome, run_verdict
from perfci.names import NameMatcher, prefix_between
from perfci.record import ERRORS_KEY, load_results, write_results
from perfci.report import display_names, headline, markdown_summary, terminal_table, write_report

# on a GPU these tiny benchmarks' device times are gated: a wide threshold keeps the tests about structure
FAST = ["--perfci-max-time=0.05", "--perfci-min-time=0.01", "--perfci-threshold=90%", "-p", "no:cacheprovider"]

CLEAN = """
import torch
X = torch.randn(64, 64)

def work(x):
    return x.neg()

def test_changed(perf):
    perf(work, X)

def test_untouched(perf):
    perf(torch.abs, X)
"""
COPIED = CLEAN.replace("return x.neg()", "return x.t().contiguous().neg()")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*FAST, *args)


def write_baseline(json_path: Path, root: Path) -> Path:
    slug = detect().slug
    return write_results(make_baseline([load_results(json_path)], gpu=slug, path=baseline_path(root, slug), force=True))


def test_benchmark_compare_is_perfcis_gate_and_compare_fail_keeps_its_meaning(pytester):
    pytester.makepyfile(test_ops=CLEAN)
    run(pytester, "--benchmark-autosave").assert_outcomes(passed=2)
    pytester.makepyfile(test_ops=COPIED)
    res = run(pytester, "--benchmark-compare")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "test_ops.py::test_changed regressed" in out and "new:transpose" in out
    assert "FAIL STRUCTURE" in out and "(--benchmark-compare)" in out
    assert out.count("perfci: REGRESSION") == 1  # one headline

    res = run(pytester, "--benchmark-compare", "--benchmark-compare-fail=min:0.0000001")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    out = res.stdout.str() + res.stderr.str()
    assert "Traceback" not in out and "perfci: REGRESSION" in out
    assert "--benchmark-compare-fail: Performance has regressed" in out
    res.stdout.fnmatch_lines(["*FAILED test_ops.py::test_changed*"])


@pytest.mark.skipif(detect().gpu_available, reason="on a GPU a host-time file against device times is the gate's call")
def test_a_compared_file_without_perfci_data_is_judged_on_timing_only_said_once(pytester):
    pytester.makepyfile(test_ops=CLEAN)
    run(pytester, "--benchmark-json=run.json", "--benchmark-save-data").assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "run.json").read_text())
    doc["machine_info"].pop("perfci")
    for bench in doc["benchmarks"]:
        bench["extra_info"] = {}
    (pytester.path / "plain.json").write_text(json.dumps(doc))
    res = run(pytester, f"--benchmark-compare={pytester.path / 'plain.json'}")
    res.assert_outcomes(passed=2)
    out = res.stdout.str()
    assert out.count("holds no perfci data") == 1 and "judged on timing only" in out


def test_baselines_outside_the_project_in_the_space_form_still_match(pytester):
    """``--perfci-baselines ../bl`` moves pytest's rootdir up (it is taken for a test path): names still match."""
    proj = pytester.mkdir("userproj")
    (proj / "test_ops.py").write_text(CLEAN)
    pytester.chdir()
    import os

    os.chdir(proj)
    run(pytester, "--benchmark-json=base.json").assert_outcomes(passed=2)
    write_baseline(proj / "base.json", pytester.path / "bl")
    (proj / "test_ops.py").write_text(COPIED)
    res = run(pytester, "--perfci-baselines", "../bl")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    assert "rootdir: " + str(pytester.path) in out  # pytest's rootdir did move
    assert "NEW" not in out and "MISSING" not in out and "new:transpose" in out

    res = run(pytester, "--perfci-baselines=nowhere")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "does not exist" in res.stderr.str() and str(proj / "nowhere") in res.stderr.str()


def test_baselines_resolve_against_the_project_root_not_the_cwd(pytester):
    pytester.makeini("[pytest]\n")
    sub = pytester.mkdir("benchmarks")
    (sub / "test_ops.py").write_text(CLEAN)
    run(pytester, "--benchmark-json=base.json").assert_outcomes(passed=2)
    write_baseline(pytester.path / "base.json", pytester.path / "bl")
    pytester.makeini("[pytest]\n")
    import os

    os.chdir(sub)
    res = run(pytester, "--perfci-baselines=bl", ".")
    res.assert_outcomes(passed=2)
    assert "compared with " + str(pytester.path / "bl") in res.stdout.str()


def test_nothing_matching_a_baseline_is_loud_and_require_baseline_fails(pytester):
    pytester.makepyfile(test_ops=CLEAN)
    run(pytester, "--benchmark-json=base.json").assert_outcomes(passed=2)
    write_baseline(pytester.path / "base.json", pytester.path / "bl")
    pytester.makepyfile(test_renamed=CLEAN)
    (pytester.path / "test_ops.py").unlink()
    res = run(pytester, "--perfci-baselines=bl")
    res.assert_outcomes(passed=2)
    assert "WARNING: none of the 2 benchmark(s) of this run is in the baseline" in res.stdout.str()
    res = run(pytester, "--perfci-baselines=bl", "--perfci-require-baseline")
    res.assert_outcomes(failed=2)
    assert "--perfci-require-baseline" in res.stdout.str()


def test_benchmarks_that_raise_are_errors_in_the_table_the_json_and_the_error_file(pytester):
    pytester.makepyfile(test_ops="""
        import pytest, torch

        @pytest.fixture
        def broken():
            raise RuntimeError("setup exploded")

        def boom(x):
            raise ZeroDivisionError("kernel exploded")

        def test_boom(perf):
            perf(boom, torch.ones(3))

        def test_setup(perf, broken):
            perf(torch.neg, torch.ones(3))

        def test_misused(perf):
            perf(torch.ones(3))

        def test_skipped(perf):
            pytest.skip("not here")

        def test_fine(perf):
            perf(torch.neg, torch.ones(3))
    """)
    res = run(pytester, "--benchmark-json=out.json", "--perfci-errors=errs.json")
    res.assert_outcomes(passed=1, failed=2, errors=1, skipped=1)
    errors = json.loads((pytester.path / "out.json").read_text())[ERRORS_KEY]
    assert errors == json.loads((pytester.path / "errs.json").read_text())[ERRORS_KEY]
    assert errors["test_ops.py::test_boom"] == "ZeroDivisionError: kernel exploded"
    assert errors["test_ops.py::test_setup"] == "RuntimeError: setup exploded"
    assert "needs a callable first" in errors["test_ops.py::test_misused"]
    assert "test_ops.py::test_skipped" not in errors
    out = res.stdout.str()
    assert "3 ERROR" in out and "nan" not in out


def test_error_file_is_written_when_nothing_was_measured(pytester):
    pytester.makepyfile(test_ops="""
        def test_boom(perf):
            perf(lambda: 1 / 0)
    """)
    res = run(pytester, "--perfci-errors=errs.json")
    res.assert_outcomes(failed=1)
    assert json.loads((pytester.path / "errs.json").read_text())[ERRORS_KEY] == {
        "test_ops.py::test_boom": "ZeroDivisionError: division by zero"}


@pytest.mark.skipif(detect().gpu_available, reason="CPU mode only")
def test_cpu_mode_skips_gpu_only_options_with_one_note_and_keeps_cpu_rules(pytester):
    pytester.makepyfile(test_ops="""
        import pytest, torch

        @pytest.mark.perf(timer="event", l2_flush=True)
        def test_event(perf):
            perf.expect(sdpa_backend="cudnn")
            perf(torch.neg, torch.ones(8))

        @pytest.mark.perf(timer="event")
        def test_event_too(perf):
            perf(torch.neg, torch.ones(8))

        def test_cpu_rule(perf):
            perf.expect(max_kernels=0)
            perf(torch.neg, torch.ones(8))
    """)
    res = run(pytester, "--benchmark-json=out.json")
    res.assert_outcomes(passed=2, failed=1)
    out = res.stdout.str()
    assert out.count("CPU mode: timer='event' skipped (needs a GPU) (2 benchmarks)") == 1
    assert out.count("CPU mode: l2_flush (cold L2) skipped") == 1
    assert out.count("expect sdpa_backend='cudnn'") == 1
    res.stdout.fnmatch_lines(["*FAILED test_ops.py::test_cpu_rule*"])
    assert "USDT" not in out + res.stderr.str()


# --- units: names, tables, one set of counts ------------------------------------------------------


def test_names_match_across_a_rootdir_change():
    assert prefix_between("userproj/b/test_x.py::t[1]", "b/test_x.py::t[1]") == ("userproj/", "")
    assert prefix_between("b/test_x.py::t[1]", "b/test_x.py::t[2]") is None
    matcher = NameMatcher(["b/test_x.py::t[1]", "b/test_x.py::t[2]", "b/test_y.py::u"])
    assert matcher.lookup("userproj/b/test_x.py::t[1]") == "b/test_x.py::t[1]"
    assert matcher.lookup("userproj/b/test_x.py::t[3]") is None
    assert matcher.to_new("b/test_y.py::u") == "userproj/b/test_y.py::u"
    assert NameMatcher(["a/test_x.py::t", "c/test_x.py::t"]).lookup("test_x.py::t") is None  # ambiguous


def test_long_parametrized_names_stay_distinct():
    long = "benchmarks/attention/test_flash_attention_forward.py::test_flash_attention_forward_with_causal_mask"
    names = [f"{long}[bf16-seq4096-heads32-causal]", f"{long}[bf16-seq4096-heads32-noncausal]"]
    shown, prefix = display_names(names)
    assert prefix == "benchmarks/attention/"
    assert len(set(shown.values())) == 2
    assert all(shown[n].endswith(n[n.index("["):]) for n in names)  # the full parameter id is kept


CPU = Fingerprint(False, "CPU x86_64", "cpu-x86_64")


def test_error_outcomes_render_without_nan_and_counts_agree_everywhere(tmp_path):
    verdict = run_verdict([error_outcome("t.py::test_a", "ValueError: bad\nmore")], missing=["t.py::test_gone"])
    table = terminal_table(verdict, CPU)
    md = markdown_summary(verdict, CPU)
    assert "nan" not in table and "nan" not in md
    line = headline(verdict, CPU)
    assert line.endswith("1 ERROR, 1 MISSING") and line in table and line in md
    paths = write_report([], verdict, tmp_path, "t", baseline=Path("bl/cpu/0001_baseline.json"))
    doc = json.loads((tmp_path / "verdict.json").read_text())
    assert doc["headline"].endswith("1 ERROR, 1 MISSING") and doc["counts"] == {"ERROR": 1, "MISSING": 1}
    assert doc["baseline"] == "bl/cpu/0001_baseline.json" and doc["timing_gated"] is False
    assert doc["written"] and "fingerprint" in doc
    assert doc["benchmarks"][0]["median_ms"] is None and len(paths) == 3
    assert math.isnan(verdict.outcomes[0].median_ms)
