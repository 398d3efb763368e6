"""The perfci command line: exit codes, one-line errors, and the run -> baseline -> compare cycle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfci.cli import main
from perfci.fingerprint import detect
from perfci.record import SCHEMA_VERSION

SUITE = '''
import torch

def test_neg(perf):
    x = torch.randn(2000)
    perf(torch.neg, x)

def test_copy_then_add(perf):
    x = torch.randn(64, 64)
    perf(lambda: x.t().contiguous() + 1)
'''
FAST = ["--perfci-max-time=0.05", "--perfci-min-time=0.01"]


def perfci(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfci", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["profile", "--help"], ["baseline", "--help"],
                                  ["baseline", "update", "--help"], ["compare", "--help"], ["report", "--help"],
                                  ["env", "--help"]])
def test_every_verb_has_help(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: perfci" in out and "exit codes" in out


@pytest.mark.parametrize("argv, message", [
    (["frobnicate"], "invalid choice"),
    (["compare", "a.json"], "the following arguments are required"),
    (["env", "--colour"], "unrecognized arguments: --colour"),
    (["baseline"], "needs an action"),
    (["baseline", "update", "--runs", "0"], "--runs must be at least 1"),
])
def test_usage_errors_exit_2_with_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_compare_bad_files_exit_2(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"benchmarks": []}))
    bad = tmp_path / "bad.json"
    bad.write_text('{"benchmarks": [')
    assert main(["compare", str(good), str(bad)]) == 2
    assert "bad.json is not valid JSON" in capsys.readouterr().err
    assert main(["compare", str(good), str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_env_json_names_the_baseline_key(capsys):
    assert main(["env", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline_key"] == detect().slug
    assert data["baseline_file"].endswith(f"{detect().slug}/0001_baseline.json")


def test_profile_nsys_without_nsys_is_exit_3(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["profile", "--nsys"]) == 3
    assert "nsys is not on PATH" in capsys.readouterr().err


def test_run_baseline_compare_cycle(tmp_path):
    suite = tmp_path / "tests" / "perf"
    suite.mkdir(parents=True)
    (suite / "test_suite.py").write_text(SUITE)
    # no baseline yet: every benchmark NEW, exit 0
    first = perfci("run", *FAST, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "every benchmark is NEW" in first.stdout and "CPU mode" in first.stdout
    assert (tmp_path / "reports/latest/report.html").exists()
    verdict = json.loads((tmp_path / "reports/latest/verdict.json").read_text())
    assert {b["verdict"] for b in verdict["benchmarks"]} == {"NEW"}
    # write the baseline from a fresh run, then show and list it
    upd = perfci("baseline", "update", "--", *FAST, cwd=tmp_path)
    assert upd.returncode == 0, upd.stdout + upd.stderr
    target = tmp_path / "baselines" / detect().slug / "0001_baseline.json"
    doc = json.loads(target.read_text())
    assert doc["perfci"]["schema_version"] == SCHEMA_VERSION and doc["perfci"]["gpu"] == detect().slug
    assert perfci("baseline", "list", cwd=tmp_path).stdout.startswith(detect().slug)
    assert "test_neg" in perfci("baseline", "show", cwd=tmp_path).stdout
    # a second run compares (CPU timings are reported, not gated) -> exit 0
    second = perfci("run", *FAST, cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    results = sorted((tmp_path / ".perfci/results").glob("*_run.json"))
    assert len(results) == 2
    cmp_ = perfci("compare", str(results[0]), str(results[1]), cwd=tmp_path)
    assert cmp_.returncode == 0 and "test_neg" in cmp_.stdout
    rep = perfci("report", *map(str, results), "-o", "rep", cwd=tmp_path)
    assert rep.returncode == 0 and (tmp_path / "rep/summary.md").exists()


def test_run_refuses_a_broken_baseline_before_running(tmp_path):
    (tmp_path / "tests" / "perf").mkdir(parents=True)
    target = tmp_path / "baselines" / detect().slug / "0001_baseline.json"
    target.parent.mkdir(parents=True)
    target.write_text('{"perfci": {"schema_version": 1}, "benchmarks": [')
    res = perfci("run", cwd=tmp_path)
    assert res.returncode == 2
    assert "not valid JSON" in res.stderr and "Traceback" not in res.stderr
    assert target.read_text().endswith("[")  # untouched


def test_run_without_a_suite_is_a_usage_error(tmp_path):
    res = perfci("run", cwd=tmp_path)
    assert res.returncode == 2 and "tests/perf" in res.stderr


def test_profile_torch_prints_a_kernel_table_with_the_culprit_line(tmp_path):
    suite = tmp_path / "tests" / "perf"
    suite.mkdir(parents=True)
    (suite / "test_suite.py").write_text(SUITE)
    line = next(i for i, text in enumerate(SUITE.splitlines(), 1) if "contiguous" in text)
    res = perfci("profile", "--torch", "-k", "copy_then_add", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "== tests/perf/test_suite.py::test_copy_then_add" in res.stdout
    assert "copy/transpose" in res.stdout and f"test_suite.py:{line}" in res.stdout
    assert list((tmp_path / "reports/profile/traces").glob("*.json"))


def test_baseline_update_from_gpu_results_writes_that_gpus_baseline_on_any_machine(tmp_path):
    """Result files measured on an H100 (a GPU runner: this session's shard check) make or merge into
    the H100's baseline on this CPU machine; result files of two GPU models are refused, naming both."""
    import gzip

    from perfci.record import load_results

    measurements = Path(__file__).resolve().parent.parent / "docs" / "measurements"
    runs = []
    for name in ("shard_h100_whole_run.json.gz", "shard_h100_merged.json.gz"):
        target = tmp_path / name.removesuffix(".gz")
        target.write_bytes(gzip.decompress((measurements / name).read_bytes()))
        runs.append(str(target))
    root = tmp_path / "baselines"
    done = perfci("baseline", "update", "--from", *runs, "--baselines", str(root), "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    written = root / "NVIDIA_H100_80GB_HBM3" / "0001_baseline.json"
    base = load_results(written)
    assert base.gpu == "NVIDIA_H100_80GB_HBM3" and len(base.benchmarks) == 23
    assert all(len(b.run_medians_ms) == 2 for b in base.benchmarks.values())
    assert not (root / "cpu-x86_64").exists()
    other = Path(__file__).resolve().parent.parent / "baselines" / "NVIDIA_H200" / "0001_baseline.json"
    mixed = perfci("baseline", "update", "--from", runs[0], str(other), "--baselines", str(root), cwd=tmp_path)
    assert mixed.returncode == 2
    assert "NVIDIA_H100_80GB_HBM3" in mixed.stderr and "NVIDIA_H200" in mixed.stderr
