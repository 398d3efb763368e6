"""A gate you can trust on any runner (issue 11): same-card A/B, card identity, broken benchmarks,
complete files only, checked output locations, partial baseline updates that merge, one update at a time."""

from __future__ import annotations

import json
import math
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from perfci.ab import paired_verdict
from perfci.baseline import locked, make_baseline, merge_baseline
from perfci.compare import Sample, compare_samples
from perfci.errors import InfrastructureError
from perfci.gate import BenchmarkOutcome, environment_drift, judge_files, run_verdict
from perfci.record import ResultFile, load_results, parse_results, write_results
from perfci.verdicts import Verdict
from tests.test_cli import FAST, SUITE, perfci
from tests.test_confirm import result_doc


def _records(levels: list[float], seed: int) -> list:
    """One record per run of one benchmark, at the given levels."""
    return [parse_results(result_doc({"t::a": level}, seed=seed + i), Path(f"r{i}.json")).benchmarks["t::a"]
            for i, level in enumerate(levels)]


def test_paired_verdict_resolves_a_consistent_change_and_stays_noisy_on_disagreeing_pairs():
    ref = _records([1.0, 1.0, 1.0], seed=1)
    slower = paired_verdict("t::a", ref, _records([1.05, 1.05, 1.05], seed=10))
    assert slower.comparison.verdict is Verdict.SLOWER and slower.pairs == 3
    assert slower.comparison.ratio == pytest.approx(1.05, rel=0.01)
    assert "3 interleaved pair(s)" in slower.evidence()
    same = paired_verdict("t::a", ref, _records([1.001, 0.999, 1.0], seed=20))
    assert same.comparison.verdict is Verdict.SAME
    wild = paired_verdict("t::a", ref[:2], _records([1.10, 0.93], seed=30))
    assert wild.comparison.verdict is Verdict.NOISY  # two pairs that disagree cannot resolve 3 %


def test_a_card_change_is_drift_with_the_models_cross_card_term_unless_the_baseline_had_several_cards():
    base = {"slug": "NVIDIA_H100_80GB_HBM3", "card": "GPU-aaa", "driver": "580"}
    same = environment_drift(base, {**base})
    assert same.cross_card_sigma(None) == 0.0 and not same.lines
    other = environment_drift(base, {**base, "card": "GPU-bbb"})
    assert other.cross_card_sigma(None) == pytest.approx(math.log1p(0.0428) / 1.96)
    assert any("another card" in line for line in other.lines)
    old = environment_drift({k: v for k, v in base.items() if k != "card"}, {**base, "card": "GPU-bbb"})
    assert old.cross_card_sigma(None) > 0 and any("not recorded" in line for line in old.lines)
    several = environment_drift({**base, "cards": ["GPU-aaa", "GPU-ccc"]}, {**base, "card": "GPU-bbb"})
    assert several.cross_card_sigma(None) == 0.0  # its run medians carry the card offsets
    # a merged file's card list is every update's: it says nothing about one entry, so the term applies
    merged = environment_drift({**base, "cards": ["GPU-aaa", "GPU-ccc"]}, {**base, "card": "GPU-bbb"}, merged=True)
    assert merged.cross_card_sigma(None) > 0 and any("other cards" in line for line in merged.lines)
    # a run merged from two cards (perfci run --gpus) names both where neither measured the baseline
    pair = environment_drift(base, {**base, "card": "GPU-bbb", "cards": ["GPU-bbb", "GPU-ddd"]})
    assert any("-> GPU-bbb, GPU-ddd" in line for line in pair.lines)
    half = environment_drift(base, {**base, "card": "GPU-aaa", "cards": ["GPU-aaa", "GPU-ddd"]})
    assert any("GPU-aaa -> GPU-ddd" in line for line in half.lines)


def _clocked(level: float, seed: int, *, clock_mhz: float | None) -> object:
    """A record of one benchmark whose times sit at ``level`` ms as measured; with ``clock_mhz`` it ran there and
    is compared at 1980 MHz (normalization 'sm_clock': compared = measured x clock / 1980)."""
    doc = result_doc({"t::a": level}, seed=seed)
    info = doc["benchmarks"][0]["extra_info"]["perfci"]
    if clock_mhz is not None:
        info["compared_samples_ms"] = [v * clock_mhz / 1980 for v in info["compared_samples_ms"]]
        info["compared_median_ms"], info["normalization"] = info["median_ms"] * clock_mhz / 1980, "sm_clock"
    return parse_results(doc, Path(f"c{seed}.json")).benchmarks["t::a"]


def test_a_change_only_one_clock_model_shows_is_noisy_not_slower():
    """The H200 baseline's cuDNN L512 d128 causal entry ran at 1634-1694 MHz and was compared at 1980 (112 us ->
    94.7); a fresh card at 1980 MHz measured 111 us, compared as measured: +17.7 % SLOWER, confirmed, on a clean
    build.  Both as measured it is level, so the gate cannot tell: NOISY.  A slowdown both readings show fails."""
    from perfci.gate import judge

    base = _clocked(0.112, 1, clock_mhz=1678)
    level = judge(_clocked(0.111, 2, clock_mhz=None), base, compared=True)
    assert level.comparison.verdict is Verdict.NOISY and not level.failed
    assert "SLOWER +16.9" in level.comparison.reasons[0] and "NOISY -0.9" in level.comparison.reasons[0]
    slower = judge(_clocked(0.140, 3, clock_mhz=None), base, compared=True)  # +25 % as measured, +48 % compared
    assert slower.comparison.verdict is Verdict.SLOWER and slower.failed
    same_model = judge(_clocked(0.135, 4, clock_mhz=1678), base, compared=True)  # one model on both sides
    assert same_model.comparison.verdict is Verdict.SLOWER


def _on_card(doc: dict, card: str) -> dict:
    doc["machine_info"]["perfci"].update(slug="NVIDIA_H100_80GB_HBM3", card=card)
    return doc


def _baseline_run(levels: dict[str, float], seed: int, card: str, tmp_path: Path, **scope) -> ResultFile:
    doc = _on_card(result_doc(levels, seed=seed), card)
    doc.update(scope)
    return parse_results(doc, tmp_path / f"run{seed}.json")


def test_each_baseline_entry_keeps_its_own_cards_through_a_merge_and_the_gate_goes_by_them(tmp_path):
    """Session 47's H200 gate run: a file merged from updates on many cards judged every entry as if its run
    medians carried card offsets, and a clean build failed on a new card (cuBLAS 1x4096x4096 +6.7 %)."""
    gpu = "NVIDIA_H100_80GB_HBM3"
    first = make_baseline([_baseline_run({"t::a": 1.0, "t::b": 1.0}, s, "GPU-aaa", tmp_path) for s in (1, 2)], gpu=gpu)
    assert first.benchmarks["t::a"].cards == ("GPU-aaa",)
    partial = [_baseline_run({"t::b": 1.0}, s, "GPU-ccc", tmp_path, perfci_deselected=["t::a"]) for s in (3, 4)]
    merged, _ = merge_baseline(first, make_baseline(partial, gpu=gpu), partial[0])
    path = write_results(merged, tmp_path / "base.json")
    base = load_results(path)
    assert base.fingerprint["cards"] == ["GPU-aaa", "GPU-ccc"] and base.header["kept_from"]
    assert base.benchmarks["t::a"].cards == ("GPU-aaa",) and base.benchmarks["t::b"].cards == ("GPU-ccc",)
    both = make_baseline([_baseline_run({"t::a": 1.0}, 5, "GPU-aaa", tmp_path),
                          _baseline_run({"t::a": 1.0}, 6, "GPU-ccc", tmp_path)], gpu=gpu)
    assert both.benchmarks["t::a"].cards == ("GPU-aaa", "GPU-ccc")

    def verdicts(card: str, baseline: ResultFile) -> dict:
        run = parse_results(_on_card(result_doc({"t::a": 1.035, "t::b": 1.035}, seed=9), card), tmp_path / "n.json")
        return {o.name: o for o in judge_files(run, baseline).outcomes}

    elsewhere = verdicts("GPU-bbb", base)  # +3.5 %: inside the H100's measured 4.28 % card offset
    for name in ("t::a", "t::b"):
        assert elsewhere[name].verdict is Verdict.SAME, elsewhere[name].evidence()
        assert "baseline from another card" in elsewhere[name].evidence()
    home = verdicts("GPU-aaa", base)  # t::a's run medians came from this card: no offset to allow for
    assert home["t::a"].verdict is Verdict.SLOWER and home["t::b"].verdict is Verdict.SAME
    assert verdicts("GPU-bbb", both)["t::a"].verdict is Verdict.SLOWER  # two cards' offsets are in its medians
    # entries written before perfci kept cards per entry, in a merged file: whose card is unknown
    old = load_results(path)
    old = old.with_benchmarks([replace(r, cards=()) for r in old.benchmarks.values()])
    assert verdicts("GPU-aaa", old)["t::a"].verdict is Verdict.SAME


def test_errors_and_invalid_times_fail_the_run(tmp_path):
    doc = result_doc({"t::ok": 1.0, "t::nan": 1.0}, seed=3)
    nan_entry = next(b for b in doc["benchmarks"] if b["fullname"] == "t::nan")
    nan_entry["extra_info"]["perfci"]["compared_samples_ms"][5] = float("nan")
    doc["perfci_errors"] = {"t::crashed": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    base = parse_results(result_doc({"t::ok": 1.0, "t::nan": 1.0, "t::crashed": 1.0}, seed=4), tmp_path / "b.json")
    verdict = judge_files(parse_results(doc, tmp_path / "r.json"), base)
    by_name = {o.name: o for o in verdict.outcomes}
    assert by_name["t::crashed"].verdict is Verdict.ERROR and by_name["t::crashed"].failed
    assert "illegal memory access" in by_name["t::crashed"].evidence()
    assert by_name["t::nan"].verdict is Verdict.INVALID and by_name["t::nan"].failed
    assert by_name["t::ok"].verdict is Verdict.SAME
    assert verdict.missing == () and verdict.exit_code == 1  # a crashed benchmark is ERROR, not MISSING
    assert verdict.counts() == {"ERROR": 1, "INVALID": 1, "SAME": 1}
    # an invalid baseline entry is INVALID too
    bad_base = result_doc({"t::ok": 1.0}, seed=5)
    bad_base["benchmarks"][0]["extra_info"]["perfci"]["compared_samples_ms"][0] = -1.0
    again = judge_files(parse_results(result_doc({"t::ok": 1.0}, seed=6), tmp_path / "n.json"),
                        parse_results(bad_base, tmp_path / "bad.json"))
    assert again.outcomes[0].verdict is Verdict.INVALID and again.exit_code == 1


def test_shards_on_several_cards_keep_each_benchmarks_card_into_the_baseline_and_the_gate(tmp_path):
    """`perfci run --gpus` (or shards on several runners) then `perfci merge`: each benchmark keeps its shard's card,
    so a baseline made from the merged runs, and a merged run judged against it, compare each entry card to card."""
    from perfci.shard import merge_results

    def merged(levels: tuple[float, float], seed: int) -> ResultFile:
        shards = [_baseline_run({name: level}, seed + i, card, tmp_path)
                  for i, (name, level, card) in enumerate((("t::a", levels[0], "GPU-aaa"),
                                                           ("t::b", levels[1], "GPU-bbb")))]
        return merge_results(shards, tmp_path / f"merged{seed}.json")

    run = merged((1.0, 1.0), 1)
    assert run.benchmarks["t::a"].cards == ("GPU-aaa",) and run.benchmarks["t::b"].cards == ("GPU-bbb",)
    assert run.fingerprint["cards"] == ["GPU-aaa", "GPU-bbb"]
    base = load_results(write_results(make_baseline([run, merged((1.0, 1.0), 3)], gpu="NVIDIA_H100_80GB_HBM3"),
                                      tmp_path / "base.json"))
    assert base.benchmarks["t::a"].cards == ("GPU-aaa",) and base.benchmarks["t::b"].cards == ("GPU-bbb",)
    same_cards = {o.name: o for o in judge_files(merged((1.035, 1.035), 5), base).outcomes}
    assert same_cards["t::a"].verdict is Verdict.SLOWER and same_cards["t::b"].verdict is Verdict.SLOWER
    swapped = merge_results([_baseline_run({"t::a": 1.035}, 7, "GPU-bbb", tmp_path),
                             _baseline_run({"t::b": 1.035}, 8, "GPU-aaa", tmp_path)], tmp_path / "swapped.json")
    crossed = {o.name: o for o in judge_files(swapped, base).outcomes}
    assert all(o.verdict is Verdict.SAME and "another card" in o.evidence() for o in crossed.values())


def test_a_partial_baseline_update_merges_and_a_full_one_drops_removed_tests(tmp_path):
    full = parse_results(result_doc({"a::x": 1.0, "a::y": 2.0, "b::z": 3.0}, seed=1), tmp_path / "full.json")
    existing = make_baseline([full], gpu="gpu-x")
    partial_doc = result_doc({"a::x": 1.5}, seed=2)
    partial_doc["perfci_scope"], partial_doc["perfci_deselected"] = ["a"], ["a::y"]  # `-k x` over a/
    partial = parse_results(partial_doc, tmp_path / "part.json")
    merged, report = merge_baseline(existing, make_baseline([partial], gpu="gpu-x"), partial)
    assert report.replaced == ("a::x",) and set(report.kept) == {"a::y", "b::z"} and not report.dropped
    assert merged.benchmarks["a::x"].median_ms == pytest.approx(1.5, rel=0.01)
    assert merged.benchmarks["b::z"].median_ms == pytest.approx(3.0, rel=0.01)
    everything = parse_results(result_doc({"a::x": 1.0, "a::y": 2.0}, seed=3), tmp_path / "all.json")  # b::z removed
    _, report = merge_baseline(existing, make_baseline([everything], gpu="gpu-x"), everything)
    assert report.dropped == ("b::z",) and "1 dropped" in report.describe()


def test_one_baseline_update_at_a_time(tmp_path):
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with locked(tmp_path, log=lambda *a, **k: None):
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(5)
    said: list[str] = []
    with (pytest.raises(InfrastructureError, match="another baseline update holds"),
          locked(tmp_path, wait_s=0.3, log=lambda text, **k: said.append(text))):
        pass
    assert said and "waiting" in said[0]
    release.set()
    thread.join()
    with locked(tmp_path, wait_s=0.3):  # free again
        pass


def _project(tmp_path: Path, suite: str = SUITE) -> Path:
    (tmp_path / "tests" / "perf").mkdir(parents=True)
    (tmp_path / "tests" / "perf" / "test_suite.py").write_text(suite)
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    return tmp_path


def test_unwritable_output_is_exit_3_before_the_suite_runs(tmp_path):
    root = _project(tmp_path)
    (root / "blocker").write_text("a file, not a directory")
    res = perfci("run", "--results-dir", "blocker/results", *FAST, cwd=root)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "cannot write to blocker/results" in res.stderr and "Traceback" not in res.stderr
    assert "passed" not in res.stdout  # the suite never ran


def test_a_suite_that_only_crashes_fails_with_a_complete_result_and_a_report(tmp_path):
    root = _project(tmp_path, "def test_boom(perf):\n    raise RuntimeError('kernel exploded')\n")
    res = perfci("run", *FAST, cwd=root / "tests")  # from a subdirectory: defaults live under the project root
    assert res.returncode == 1, res.stdout + res.stderr
    runs = list((root / ".perfci" / "results").glob("*_run.json"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
    assert not list((root / ".perfci" / "results").glob("*.part"))
    verdict = json.loads((root / "reports" / "latest" / "verdict.json").read_text())
    assert verdict["exit_code"] == 1
    errors = {b["name"]: b for b in verdict["benchmarks"] if b["verdict"] == "ERROR"}
    assert set(errors) == {"tests/perf/test_suite.py::test_boom"}  # named through --perfci-errors
    assert "kernel exploded" in errors["tests/perf/test_suite.py::test_boom"]["error"]


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_ab_against_a_git_ref_flags_the_structural_change_and_reports_the_pairs(tmp_path):
    clean = SUITE.replace("perf(lambda: x.t().contiguous() + 1)", "perf(lambda: x + 1)")
    root = _project(tmp_path, clean)
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "clean")
    (root / "tests" / "perf" / "test_suite.py").write_text(SUITE)  # the working tree adds a transpose copy
    res = perfci("ab", "HEAD", "--max-pairs", "2", *FAST, cwd=root)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "same-card A/B, 2 interleaved pair(s)" in res.stdout
    assert "STRUCTURE" in res.stdout and "copy" in res.stdout
    # perfci run --against with no stored baseline: REF is the baseline, every benchmark A/B'd
    run = perfci("run", "--against", "HEAD", "--max-pairs", "2", *FAST, cwd=root)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "A/B on this card against HEAD" in run.stdout and "new:transpose" in run.stdout
    bad = perfci("run", "--against", "no-such-ref", *FAST, cwd=root)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    kept = load_results(next((root / ".perfci" / "results").glob("*_run.json")))
    assert isinstance(kept, ResultFile) and kept.benchmarks


def test_results_are_written_whole(tmp_path):
    result = ResultFile.empty(tmp_path / "r.json", "gpu-x").with_benchmarks((), errors={"t::a": "boom"})
    write_results(result)
    assert load_results(tmp_path / "r.json").errors == {"t::a": "boom"}


def test_split_is_stable_and_balanced_by_the_baselines_test_times(tmp_path):
    from perfci.shard import parse_shard, split

    names = [f"t::b{i}" for i in range(7)]
    doc = result_doc({n: 1.0 for n in names}, seed=1)
    for entry in doc["benchmarks"]:  # b0 took 6 s to measure, the rest 1 s
        entry["extra_info"]["perfci"]["sampling_s"] = 5.5 if entry["fullname"] == "t::b0" else 0.5
        entry["extra_info"]["perfci"]["warmup_s"] = 0.5
    base = parse_results(doc, tmp_path / "b.json")
    shards = split(list(reversed(names)), 2, base)
    assert shards == split(names, 2, base)  # order of collection does not matter
    assert shards[0] == ["t::b0"] and len(shards[1]) == 6  # 6 s against 6 x 1 s
    assert sorted(n for s in split(names, 3) for n in s) == sorted(names)
    # a test's whole seconds (its fixtures, compiles and profiling) where the baseline records them: b3 took 8 s
    for entry in doc["benchmarks"]:
        entry["extra_info"]["perfci"]["test_wall_s"] = 8.0 if entry["fullname"] == "t::b3" else 1.5
    walled = split(names, 2, parse_results(doc, tmp_path / "w.json"))
    assert walled[0] == ["t::b3"] and len(walled[1]) == 6  # 8 s against 6 x 1.5 s
    assert parse_shard("2/3") == (2, 3)
    with pytest.raises(Exception, match="i/n"):
        parse_shard("4/3")


def test_two_shards_merge_into_the_run_one_pass_gives(tmp_path):
    root = _project(tmp_path)
    outs = []
    for shard in ("1/2", "2/2", "3/3"):
        res = perfci("run", "--no-compare", "--shard", shard, "--results-dir", f"res{shard[0]}{shard[2]}", *FAST,
                     cwd=root)
        assert res.returncode == 0, res.stdout + res.stderr
        outs.append(next((root / f"res{shard[0]}{shard[2]}").glob("*_run.json")))
    one, two, empty = (load_results(p) for p in outs)
    assert len(one.benchmarks) == len(two.benchmarks) == 1 and not empty.benchmarks  # 3/3 of two: empty, valid
    merged = perfci("merge", str(outs[0]), str(outs[1]), str(outs[2]), "-o", "merged.json", cwd=root)
    assert merged.returncode == 0, merged.stderr
    run = load_results(root / "merged.json")
    assert set(run.benchmarks) == {"tests/perf/test_suite.py::test_neg", "tests/perf/test_suite.py::test_copy_then_add"}
    assert judge_files(run, run).missing == () and not run.deselected
    again = perfci("merge", str(outs[0]), str(outs[0]), "-o", "twice.json", cwd=root)
    assert again.returncode == 2 and "measured by two shards" in again.stderr
    foreign = json.loads(outs[1].read_text())
    foreign["machine_info"]["perfci"]["slug"] = "NVIDIA_H200"
    (root / "foreign.json").write_text(json.dumps(foreign))
    mixed = perfci("merge", str(outs[0]), "foreign.json", "-o", "mixed.json", cwd=root)
    assert mixed.returncode == 2 and "NVIDIA_H200" in mixed.stderr and "refusing" in mixed.stderr


@pytest.mark.parametrize("device_time", [True, False])
def test_fail_on_noisy_fails_a_noisy_device_time_benchmark_only(device_time):
    """``--fail-on-noisy`` turns a NOISY device-time verdict into exit 1 (one rule for `perfci run` on one GPU
    and with --gpus); host-timed NOISY benchmarks are never gated; without the flag NOISY passes."""
    few = Sample((1.0, 1.1, 0.9))  # too few samples to resolve anything: NOISY
    steady = Sample(tuple(1.0 + 0.001 * (i % 7) for i in range(100)))
    noisy = compare_samples("t::a", steady, few)
    assert noisy.verdict is Verdict.NOISY and not noisy.failed
    verdict = run_verdict([BenchmarkOutcome("t::a", 1.0, "graph" if device_time else "wall", device_time, noisy, ())])
    assert verdict.exit_code_for(False) == 0
    assert verdict.exit_code_for(True) == (1 if device_time else 0)


def test_gpus_runs_a_pinned_worker_per_device_and_merges_them(tmp_path):
    root = _project(tmp_path)
    res = perfci("run", "--gpus", "0,1", "--no-compare", *FAST, cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "GPU 0: shard 1/2" in res.stdout and "GPU 1: shard 2/2" in res.stdout
    merged = load_results(next((root / ".perfci" / "results").glob("*_merged-*.json")))
    assert len(merged.benchmarks) == 2 and not merged.errors
    assert (root / "reports" / "latest" / "verdict.json").exists()
    bad = perfci("run", "--gpus", "0,0", cwd=root)
    assert bad.returncode == 2 and "distinct device indices" in bad.stderr
    pairs = perfci("run", "--gpus", "0,1", "--max-pairs", "0", cwd=root)  # refused before any worker starts
    assert pairs.returncode == 2 and "--max-pairs" in pairs.stderr and "shard" not in pairs.stdout


def test_gpus_prints_each_workers_progress_and_its_end_as_it_comes(tmp_path, monkeypatch):
    """A --gpus run is minutes of silence otherwise (318 s on an H200 pair): every heartbeat, where each running
    worker stands (pytest's progress in its first or confirmation pass); each worker's end when it comes."""
    from perfci.shard import run_workers, worker_progress

    root = _project(tmp_path)
    monkeypatch.chdir(root)
    lines: list[str] = []
    results = run_workers(["0", "1"], ["--no-compare", *FAST], root / "res",
                          log=lambda text, **_: lines.append(text), heartbeat_s=0.2)
    assert len(results) == 2 and sum(len(r.benchmarks) for r in results) == 2
    assert sum("worker exit 0 after" in line for line in lines) == 2
    beats = [line for line in lines if "first pass" in line]
    assert beats and all(line.startswith(("perfci: GPU 0: ", "perfci: GPU 1: ")) for line in beats)
    assert worker_progress(root / "res" / "gpu0" / "worker.log") == "first pass 100 %"
    # a worker that writes no result this time fails the run, whatever an earlier run left in its folder
    with pytest.raises(InfrastructureError, match="the worker on GPU 0 wrote no result"):
        run_workers(["0"], ["--no-compare", "--no-such-option"], root / "res", log=lambda text, **_: None)
    assert worker_progress(root / "res" / "nowhere.log") == "starting"
    (root / "confirming.log").write_text("tests/a.py ..  [100%]\nperfci: 1 benchmark(s) read SLOWER or NOISY in this "
                                         "pass; re-measuring them in a fresh process\ncollected 2 items\n")
    assert worker_progress(root / "confirming.log") == "confirmation pass, collecting"


def test_report_exits_like_compare_and_replaces_a_stale_summary(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(result_doc({"t::a": 1.0, "t::b": 2.0}, seed=1)))
    slow = tmp_path / "history" / "new.json"
    slow.parent.mkdir()
    slow.write_text(json.dumps(result_doc({"t::a": 1.25, "t::b": 2.0}, seed=2)))
    (tmp_path / "history" / "older.json").write_text(json.dumps(result_doc({"t::a": 1.0, "t::b": 2.0}, seed=3)))
    res = perfci("report", str(base), str(slow), "--history", str(slow.parent), "-o", "out", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr  # a regression, as `perfci compare` says
    page = (tmp_path / "out" / "report.html").read_text()
    assert "t::a" in page and "SLOWER" in page
    assert json.loads((tmp_path / "out" / "verdict.json").read_text())["exit_code"] == 1
    again = perfci("report", str(slow), "-o", "out", cwd=tmp_path)  # one file: no verdict
    assert again.returncode == 0 and not (tmp_path / "out" / "summary.md").exists()
    assert not (tmp_path / "out" / "verdict.json").exists()
