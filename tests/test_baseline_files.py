"""Result and baseline files: bad input gives one-line errors; writes are atomic."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from perfci.baseline import available, baseline_path, load_baseline, load_for_gpu, make_baseline
from perfci.errors import BadInputError, UsageError
from perfci.record import SCHEMA_VERSION, load_results, to_document, write_atomic, write_results

GPU = "NVIDIA_H100_80GB_HBM3"


def result_doc(gpu: str = GPU, medians=(1.0, 2.0), noisy: bool = False) -> dict:
    benches = []
    for i, med in enumerate(medians):
        benches.append({
            "name": f"test_{i}", "fullname": f"tests/perf/test_x.py::test_{i}",
            "stats": {"median": med / 1e3, "data": [med / 1e3] * 5},
            "extra_info": {"perfci": {"median_ms": med, "gated_samples_ms": [med] * 30, "timer": "graph",
                                      "normalization": "sm_clock", "noisy": noisy,
                                      "noise_reasons": ["throttled: hw_slowdown"] if noisy else [],
                                      "threshold": 0.03}},
        })
    return {"machine_info": {"perfci": {"slug": gpu, "name": gpu.replace("_", " "), "driver": "580"}},
            "benchmarks": benches}


def write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


@pytest.mark.parametrize("content, message", [
    ("", "is empty"),
    ('{"benchmarks": [', "not valid JSON"),
    ("[1, 2]", "JSON list"),
    ('{"machine_info": {}}', "no 'benchmarks' list"),
    ('{"benchmarks": [{"name": "x"}]}', "not a benchmark entry"),
    ('{"benchmarks": [{"fullname": "x", "extra_info": {"perfci": {"median_ms": "fast"}}}]}', "malformed"),
    ('{"perfci": {"schema_version": 99}, "benchmarks": []}', "schema_version 99"),
])
def test_bad_result_files_give_one_line_errors(tmp_path, content, message):
    path = write(tmp_path / "r.json", content)
    with pytest.raises(BadInputError, match=message) as info:
        load_results(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        load_results(tmp_path / "nope.json")
    with pytest.raises(BadInputError, match="is a directory"):
        load_results(tmp_path)


def test_baseline_round_trip_and_foreign_gpu_refused(tmp_path):
    run = load_results(write(tmp_path / "run.json", result_doc()))
    target = baseline_path(tmp_path / "baselines", GPU)
    write_results(make_baseline([run], gpu=GPU), target)
    base = load_for_gpu(tmp_path / "baselines", GPU)
    assert base is not None and base.header["schema_version"] == SCHEMA_VERSION
    assert base.benchmarks["tests/perf/test_x.py::test_1"].median_ms == 2.0
    assert available(tmp_path / "baselines") == [GPU]
    assert load_for_gpu(tmp_path / "baselines", "NVIDIA_H200") is None
    with pytest.raises(BadInputError, match="refusing to compare across GPU models") as info:
        load_baseline(target, gpu="NVIDIA_H200")
    assert GPU in str(info.value)  # the available baselines are listed


def test_baseline_keeps_per_run_medians_and_refuses_noisy_runs(tmp_path):
    runs = [load_results(write(tmp_path / f"r{i}.json", result_doc(medians=(1.0 + i / 100, 2.0)))) for i in range(3)]
    doc = to_document(make_baseline(runs, gpu=GPU))
    info = doc["benchmarks"][0]["extra_info"]["perfci"]
    assert info["run_medians_ms"] == [1.0, 1.01, 1.02]
    assert "data" not in doc["benchmarks"][0]["stats"]
    noisy = load_results(write(tmp_path / "n.json", result_doc(noisy=True)))
    with pytest.raises(UsageError, match="NOISY"):
        make_baseline([noisy], gpu=GPU)
    assert make_baseline([noisy], gpu=GPU, force=True).header["forced"] is True
    other = load_results(write(tmp_path / "o.json", result_doc(gpu="NVIDIA_H200")))
    with pytest.raises(BadInputError, match="not NVIDIA_H100"):
        make_baseline([other], gpu=GPU)


def test_interrupted_write_leaves_the_previous_file(tmp_path):
    target = tmp_path / "b" / "0001_baseline.json"
    write_atomic(target, {"v": 1})

    with pytest.raises(TypeError):  # not JSON-serialisable: fails before anything is replaced
        write_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in target.parent.iterdir()] == ["0001_baseline.json"]  # no temp file left


def _writer(path: str, value: int) -> None:
    for _ in range(30):
        write_atomic(Path(path), {"writer": value, "payload": [value] * 20000})


def test_concurrent_writers_never_tear_the_file(tmp_path):
    target = tmp_path / "0001_baseline.json"
    procs = [multiprocessing.Process(target=_writer, args=(str(target), v)) for v in (1, 2)]
    for p in procs:
        p.start()
    seen = 0
    while any(p.is_alive() for p in procs):
        if target.exists():
            doc = json.loads(target.read_text())  # must always parse whole
            assert set(doc["payload"]) == {doc["writer"]}
            seen += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    final = json.loads(target.read_text())
    assert final["writer"] in (1, 2) and len(final["payload"]) == 20000
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
