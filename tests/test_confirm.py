"""perfci run's confirmation of a SLOWER: pooling two fresh runs (perfci.confirm), the pooled verdict,
and the plugin's two passes in real pytest sessions (pytester) on this machine's CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfci.compare import Sample, Verdict, compare_samples
from perfci.confirm import merge, pooled, pooled_run_medians, to_confirm, with_notes
from perfci.gate import judge_files
from perfci.record import parse_results
from tests.test_plugin import FAST, MUL_TEST


def samples(level_ms: float, seed: int, n: int = 400) -> list[float]:
    """One process's device times: tight lognormal jitter around ``level_ms``."""
    rng = np.random.default_rng(seed)
    return [float(v) for v in level_ms * np.exp(rng.normal(0.0, 0.002, n))]


def result_doc(levels: dict[str, float], seed: int, *, run_medians: dict[str, list[float]] | None = None,
               pooled_with: str | None = None) -> dict:
    """A result file as the plugin writes it (device timer), one benchmark per entry of ``levels``."""
    benches = []
    for i, (name, level) in enumerate(sorted(levels.items())):
        data = samples(level, seed * 100 + i)
        info = {"median_ms": float(np.median(data)), "compared_samples_ms": data, "timer": "graph",
                "normalization": "none", "noisy": False, "noise_reasons": []}
        if run_medians and name in run_medians:
            info["run_medians_ms"] = run_medians[name]
            info["pooled_with"] = pooled_with
        benches.append({"fullname": name, "stats": {"median": info["median_ms"] / 1e3},
                        "extra_info": {"perfci": info}})
    return {"machine_info": {"perfci": {"slug": "gpu-x", "name": "GPU X"}}, "benchmarks": benches}


def result(doc: dict, name: str = "run.json"):
    return parse_results(doc, Path(name))


BASE = {"t::steady": 1.0, "t::slowed": 1.0, "t::blip": 2.0}


def test_pooling_keeps_the_second_runs_samples_and_both_run_medians():
    first = result(result_doc({"t::a": 1.03}, seed=1)).benchmarks["t::a"]
    second = result(result_doc({"t::a": 1.0}, seed=2)).benchmarks["t::a"]
    both = pooled(first, second)
    assert both.compared_samples_ms == second.compared_samples_ms
    assert both.run_medians_ms == pooled_run_medians(first, second)
    assert both.run_medians_ms[0] == pytest.approx(first.compared_median_ms)
    assert both.run_medians_ms[1] == pytest.approx(second.compared_median_ms, rel=1e-6)
    # a result that was pooled already contributes its run medians, not its own median again
    again = pooled(both, first)
    assert again.run_medians_ms[:2] == both.run_medians_ms and len(again.run_medians_ms) == 3


def five_run_base() -> dict:
    """A baseline of five runs that agreed within 0.4 %."""
    return result_doc(BASE, seed=1, run_medians={name: [level * f for f in (1.0, 1.002, 0.998, 1.004, 0.999)]
                                                 for name, level in BASE.items()})


def test_a_slowdown_both_runs_show_is_confirmed_and_a_one_process_blip_is_not():
    base = result(five_run_base(), "base.json")
    # the first process lands +2.5 % off on t::blip (as single H100 processes did), t::slowed is 5 % slower
    first = result(result_doc({"t::steady": 1.0, "t::slowed": 1.05, "t::blip": 2.05}, seed=2), "first.json")
    verdict = judge_files(first, base)
    assert set(to_confirm(verdict)) == {"t::slowed", "t::blip"}
    # the second process: the slowdown is still there, the blip is gone
    second_levels = {"t::slowed": 1.05, "t::blip": 2.0}
    second_raw = result_doc(second_levels, seed=3)
    for entry in second_raw["benchmarks"]:
        name = entry["fullname"]
        entry["extra_info"]["perfci"]["run_medians_ms"] = list(pooled_run_medians(
            first.benchmarks[name], result(result_doc({name: second_levels[name]}, seed=3)).benchmarks[name]))
        entry["extra_info"]["perfci"]["pooled_with"] = "first.json"
    second = result(second_raw, "confirm.json")
    merged, not_re_measured = merge(first, second, to_confirm(verdict))
    assert not_re_measured == ()
    assert merged.benchmarks["t::steady"] == first.benchmarks["t::steady"]  # untouched
    assert len(merged.benchmarks["t::slowed"].run_medians_ms) == 2
    assert merged.document["perfci_confirmation"]["re_measured"] == ["t::blip", "t::slowed"]
    final = with_notes(judge_files(merged, base), to_confirm(verdict), verdict, not_re_measured)
    by_name = {o.name: o for o in final.outcomes}
    assert by_name["t::slowed"].timing_failed
    assert "confirmed by a second fresh process" in by_name["t::slowed"].evidence()
    assert not by_name["t::blip"].failed
    assert by_name["t::blip"].comparison.verdict is Verdict.SAME
    assert "not confirmed" in by_name["t::blip"].notes[0] and "read +2.4" in by_name["t::blip"].notes[0]
    assert by_name["t::steady"].notes == ()
    assert [o.name for o in final.regressions] == ["t::slowed"]


def test_a_benchmark_the_second_pass_did_not_measure_keeps_its_first_pass_verdict():
    base = result(five_run_base(), "base.json")
    first = result(result_doc({"t::steady": 1.0, "t::slowed": 1.05, "t::blip": 2.0}, seed=2), "first.json")
    verdict = judge_files(first, base)
    empty = result({"benchmarks": []}, "confirm.json")
    merged, not_re_measured = merge(first, empty, to_confirm(verdict))
    assert not_re_measured == ("t::slowed",)
    final = with_notes(judge_files(merged, base), to_confirm(verdict), verdict, not_re_measured)
    assert [o.name for o in final.regressions] == ["t::slowed"]
    assert "did not re-measure it" in final.regressions[0].evidence()


def test_two_runs_against_a_one_run_baseline_use_the_default_floor_unless_they_disagree():
    base = Sample(tuple(samples(1.0, 1)))
    agree = Sample(tuple(samples(1.04, 2)), run_medians_ms=(1.04, 1.04))
    c = compare_samples("k", base, agree)
    assert c.verdict is Verdict.SLOWER and "whichever is larger" in c.reasons[0]
    # one run far off: the two runs' own spread widens the interval past a decision
    disagree = Sample(tuple(samples(1.04, 2)), run_medians_ms=(1.25, 1.04))
    assert compare_samples("k", base, disagree).verdict is Verdict.NOISY
    # two runs 1 % apart: the 80 % upper bound of one degree of freedom (4x) would call this NOISY
    close = Sample(tuple(samples(1.035, 2)), run_medians_ms=(1.04, 1.03))
    assert compare_samples("k", base, close).verdict is Verdict.SLOWER


MUL_TESTS = MUL_TEST + """
def test_add(perf):
    x = torch.randn(256)
    perf(torch.add, x, x)
"""


def test_confirmation_pass_runs_only_the_selected_benchmarks_and_records_both_runs(pytester):
    pytester.makepyfile(test_ops=MUL_TESTS)
    pytester.runpytest_subprocess(*FAST, "--perfci-provisional", "--benchmark-json=first.json").assert_outcomes(
        passed=2)
    first = json.loads((pytester.path / "first.json").read_text())
    res = pytester.runpytest_subprocess(*FAST, "--perfci-pool-with=first.json",
                                        "--perfci-select=test_ops.py::test_mul", "--benchmark-json=second.json")
    res.assert_outcomes(passed=1, deselected=1)
    second = json.loads((pytester.path / "second.json").read_text())
    assert [b["fullname"] for b in second["benchmarks"]] == ["test_ops.py::test_mul"]
    info = second["benchmarks"][0]["extra_info"]["perfci"]
    first_info = next(b for b in first["benchmarks"] if b["fullname"] == "test_ops.py::test_mul")["extra_info"]
    first_median = float(np.median(first_info["perfci"]["compared_samples_ms"]))
    assert info["pooled_with"] == "first.json"
    assert info["run_medians_ms"][0] == pytest.approx(first_median)
    # run medians are stored to 0.1 ns (round(ms, 7)): about 6e-6 relative at a 1.6 µs median
    assert info["run_medians_ms"][1] == pytest.approx(float(np.median(info["compared_samples_ms"])), rel=1e-6,
                                                      abs=1.5e-7)


def test_a_bad_first_pass_file_is_a_one_line_usage_error(pytester):
    pytester.makepyfile(test_ops=MUL_TESTS)
    (pytester.path / "first.json").write_text('{"benchmarks": [')
    res = pytester.runpytest_subprocess(*FAST, "--perfci-pool-with=first.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "first-pass result file first.json is not valid JSON" in res.stderr.str()


def test_the_merged_entry_keeps_the_first_passs_kernel_profile_and_structural_failures_are_not_re_measured():
    import torch

    from perfci.trace import profile_call

    base = result(five_run_base(), "base.json")
    first_doc = result_doc({"t::steady": 1.0, "t::slowed": 1.05, "t::blip": 2.0}, seed=2)
    x = torch.randn(64, 64)
    marker = profile_call(lambda: x.t().contiguous(), calls=2, label="first pass").to_dict()  # a real copy
    for entry in first_doc["benchmarks"]:
        entry["extra_info"]["perfci"]["profile"] = marker
        if entry["fullname"] == "t::blip":  # slower and a declared rule broken: fails on structure alone
            entry["extra_info"]["perfci"]["compared_samples_ms"] = samples(2.1, 7)
            entry["extra_info"]["perfci"]["forbid"] = ["copy"]
    first = result(first_doc, "first.json")
    verdict = judge_files(first, base)
    blip = next(o for o in verdict.outcomes if o.name == "t::blip")
    assert blip.timing_failed and blip.structure_failed
    assert to_confirm(verdict) == ("t::slowed",)
    second_doc = result_doc({"t::slowed": 1.05}, seed=3, run_medians={"t::slowed": [1.05, 1.05]},
                            pooled_with="first.json")
    merged, _ = merge(first, result(second_doc, "confirm.json"), ("t::slowed",))
    assert merged.benchmarks["t::slowed"].profile.to_dict() == marker
    second_samples = result(second_doc).benchmarks["t::slowed"].compared_samples_ms
    assert merged.benchmarks["t::slowed"].compared_samples_ms == second_samples


# --- perfci run's two passes, driven through the real CLI; only the pytest child is replaced, by one
# that writes the device-timer result files a GPU run would (on CPU, timings are never gated)


def _drive(tmp_path, monkeypatch, second: str, cli: tuple[str, ...] = ()):
    from perfci import pipeline
    from perfci.cli import main
    from perfci.errors import InfrastructureError
    from perfci.fingerprint import detect
    from perfci.runner import SuiteRun

    slug, machine = detect().slug, detect().machine_info()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step_summary.md"))
    base_doc = five_run_base()
    base_doc["machine_info"]["perfci"] = machine
    base_doc["perfci"] = {"schema_version": 1, "gpu": slug}
    target = tmp_path / "baselines" / slug / "0001_baseline.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(base_doc))
    calls = []
    first_doc = result_doc({"t::steady": 1.0, "t::slowed": 1.05, "t::blip": 2.0}, seed=2)
    first_doc["machine_info"]["perfci"] = machine

    def fake_run_suite(args, *, out, baselines, extra=None, cwd=None):
        calls.append([*args, *(extra or [])])
        out.parent.mkdir(parents=True, exist_ok=True)
        if "--perfci-provisional" in (extra or []):
            out.write_text(json.dumps(first_doc))
            return SuiteRun(out, 0)
        if second == "interrupted":
            raise InfrastructureError("interrupted")
        if second == "empty":  # pytest-benchmark creates the --benchmark-json file before anything runs
            out.write_text("")
            return SuiteRun(out, 5)
        first_median = next(b for b in first_doc["benchmarks"]
                            if b["fullname"] == "t::slowed")["extra_info"]["perfci"]["median_ms"]
        doc = result_doc({"t::slowed": 1.05}, seed=3, run_medians={"t::slowed": [first_median, 1.05]},
                         pooled_with="first.json")
        out.write_text(json.dumps(doc))
        return SuiteRun(out, 1)

    monkeypatch.setattr(pipeline, "run_suite", fake_run_suite)
    code = main(["run", "--report-dir", "rep", *cli])
    results = tmp_path / ".perfci" / "results"
    return code, calls, results, tmp_path


@pytest.mark.parametrize("second, exit_code, note", [
    ("pooled", 1, "confirmed by a second fresh process"),
    ("empty", 1, "did not re-measure it"),
    ("interrupted", 3, "did not re-measure it"),
])
def test_perfci_run_keeps_every_file_and_writes_the_report_once_whatever_the_second_pass_does(
        tmp_path, monkeypatch, capsys, second, exit_code, note):
    code, calls, results, root = _drive(tmp_path, monkeypatch, second)
    assert code == exit_code
    assert len(calls) == 2 and "--perfci-select=t::slowed" in calls[1]
    names = sorted(p.name.split("_", 1)[1] for p in results.iterdir())
    assert "first.json" in names and "run.json" in names
    run = json.loads(next(results.glob("*_run.json")).read_text())
    assert {b["fullname"] for b in run["benchmarks"]} == {"t::steady", "t::slowed", "t::blip"}
    assert (root / "rep" / "report.html").exists() and (root / "rep" / "verdict.json").exists()
    assert (root / "step_summary.md").read_text().count("## perfci") == 1
    out = capsys.readouterr()
    assert note in out.out
    assert "t::slowed regressed" in out.out


def test_a_shards_confirmation_pass_re_measures_what_it_flagged_not_the_whole_shard(tmp_path, monkeypatch):
    """`perfci run --shard` (each `--gpus` worker) selects its shard with --perfci-select; the confirmation pass
    re-measures the flagged benchmark only (on an H200 pair it had re-run all 50 of a shard: 188 s for 7)."""
    (tmp_path / "tests" / "perf").mkdir(parents=True)
    (tmp_path / "tests" / "perf" / "test_suite.py").write_text("def test_a(perf):\n    pass\n\n\n"
                                                             "def test_b(perf):\n    pass\n")
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    code, calls, _, _ = _drive(tmp_path, monkeypatch, "pooled", cli=("--shard", "1/1"))
    assert code == 1 and len(calls) == 2
    shard = {f"--perfci-select=tests/perf/test_suite.py::test_{x}" for x in "ab"}
    assert shard <= set(calls[0])  # the first pass measures the shard (collected by pytest for real)
    assert [a for a in calls[1] if a.startswith("--perfci-select")] == ["--perfci-select=t::slowed"]


def test_selecting_replaces_a_passs_selection_and_keeps_the_rest():
    from perfci.runner import selecting

    args = ["tests/perf", "--perfci-select=t::a", "-k", "gemm", "--perfci-select", "t::b", "-q"]
    assert selecting(args, ["t::b"]) == ["tests/perf", "-k", "gemm", "-q", "--perfci-select=t::b"]
    assert selecting(["-q"], []) == ["-q"]


def test_confirmation_args_drop_what_would_stop_or_deselect_the_second_pass():
    from perfci.runner import confirmation_args

    assert confirmation_args(["-x", "tests/perf", "--maxfail", "2", "-k", "gemm", "--lf", "--maxfail=1",
                              "--sw", "-q"]) == ["tests/perf", "-k", "gemm", "-q"]


def test_a_deselected_or_unnamed_benchmark_is_not_missing_but_a_removed_one_is(pytester):
    from perfci.record import load_results

    pytester.makepyfile(test_ops=MUL_TESTS, test_other=MUL_TESTS.replace("test_", "test_other_"))
    pytester.runpytest_subprocess(*FAST, "--benchmark-json=all.json").assert_outcomes(passed=4)
    pytester.runpytest_subprocess(*FAST, "test_ops.py", "-k", "mul", "--benchmark-json=some.json").assert_outcomes(
        passed=1, deselected=1)
    base, some = load_results(pytester.path / "all.json"), load_results(pytester.path / "some.json")
    assert some.deselected == {"test_ops.py::test_add"} and some.scope == ("test_ops.py",)
    assert judge_files(some, base).missing == ()  # test_add deselected, test_other.py not named
    pytester.makepyfile(test_ops=MUL_TESTS.split("def test_add")[0])  # test_add removed from the suite
    pytester.runpytest_subprocess(*FAST, "--benchmark-json=fewer.json").assert_outcomes(passed=3)
    assert judge_files(load_results(pytester.path / "fewer.json"), base).missing == ("test_ops.py::test_add",)


def test_run_scope_is_rootdir_relative_and_unknown_outside_it(tmp_path):
    from perfci.runner import run_scope

    root = tmp_path / "proj"
    (root / "tests" / "perf").mkdir(parents=True)
    assert run_scope([str(root)], root, root) == ("",)
    assert run_scope(["tests/perf", "tests/x.py::test_a[1]"], root, root) == ("tests/perf", "tests/x.py::test_a[1]")
    assert run_scope(["perf"], root / "tests", root) == ("tests/perf",)
    assert run_scope([str(tmp_path / "elsewhere")], root, root) is None
