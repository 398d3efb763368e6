"""Baseline stage: per-GPU baseline files under ``baselines/<gpu-slug>/``.

A baseline is a pytest-benchmark-compatible JSON file (``0001_baseline.json``, so
``pytest --benchmark-storage=baselines --benchmark-compare=<gpu-slug>/0001`` reads it too) with a
``perfci`` header: schema version, GPU slug, fingerprint, how it was made. Writes are atomic (temp
file in the same directory, fsync, rename): an interrupted update leaves the previous file whole,
and of two concurrent writers one wins whole.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from perfci.errors import BadInputError, UsageError
from perfci.results import DESELECTED_KEY, SCHEMA_VERSION, SCOPE_KEY, ResultFile, load_results

BASELINE_FILE = "0001_baseline.json"
# fresh-process runs `perfci baseline update` makes on a GPU by default: one-run baselines caught a
# planted 3 % slowdown in 88-94 % of trials on an H100, five-run baselines in 98-100 % (README)
GPU_BASELINE_RUNS = 5


def baseline_path(root: Path, gpu: str) -> Path:
    return Path(root) / gpu / BASELINE_FILE


def available(root: Path) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{BASELINE_FILE}"))


def describe_available(root: Path) -> str:
    gpus = available(root)
    return f"available in {root}: {', '.join(gpus)}" if gpus else f"{root} holds no baselines yet"


def load_baseline(path: Path, *, gpu: str | None = None) -> ResultFile:
    """Load and validate one baseline file; with ``gpu``, refuse a baseline of another GPU model."""
    result = load_results(Path(path), what="baseline")
    header = result.header
    if "schema_version" not in header:
        raise BadInputError(f"baseline {path} has no perfci header (schema_version)",
                            hint="write baselines with `perfci baseline update`")
    if gpu is not None and result.gpu != gpu:
        root = Path(path).parent.parent
        raise BadInputError(f"baseline {path} was measured on {result.gpu}, this machine is {gpu}: refusing "
                            f"to compare across GPU models", hint=describe_available(root))
    return result


def load_for_gpu(root: Path, gpu: str) -> ResultFile | None:
    """This GPU's baseline under ``root``, or None when it has none yet."""
    path = baseline_path(root, gpu)
    if not path.exists():
        return None
    return load_baseline(path, gpu=gpu)


def load_or_empty(root: Path, gpu: str) -> tuple[ResultFile, str]:
    """This GPU's baseline and a line saying which; with none, an empty one (every benchmark NEW)."""
    base = load_for_gpu(root, gpu)
    if base is None:
        note = f"no baseline for {gpu} in {root} ({describe_available(Path(root))}): every benchmark is NEW"
        return ResultFile.empty(Path(root) / gpu, gpu), note
    return base, f"compared with {base.path}"


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=False, ensure_ascii=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_baseline(runs: list[ResultFile], *, gpu: str, force: bool = False) -> dict[str, Any]:
    """Build a baseline document from one or more result files of the same GPU.

    The first run's samples are kept; with several runs, each benchmark also stores the per-run
    medians (``run_medians_ms``), which the comparison uses as the between-run noise floor.
    A run marked NOISY is refused unless ``force``.
    """
    if not runs:
        raise UsageError("no result files to make a baseline from")
    for run in runs:
        if run.gpu != gpu:
            raise BadInputError(f"result file {run.path} was measured on {run.gpu}, not {gpu}",
                                hint="baselines are written for the GPU of this machine only")
        # host wall-clock timings (CPU mode) are never gated, so their noise does not matter here
        noisy = [b.name for b in run.benchmarks.values() if b.noisy and b.device_time]
        if noisy and not force:
            raise UsageError(f"{run.path}: {len(noisy)} benchmark(s) were NOISY (e.g. {noisy[0]}): "
                             "not writing a baseline from them",
                             hint="re-run on a quiet GPU, or pass --force to accept them")
    first = runs[0]
    doc = json.loads(json.dumps(first.raw))
    for key in (DESELECTED_KEY, SCOPE_KEY):  # a baseline stands for every benchmark it holds
        doc.pop(key, None)
    for bench in doc["benchmarks"]:
        info = bench.setdefault("extra_info", {}).setdefault("perfci", {})
        # per-run medians of the compared samples: the between-run noise floor of this benchmark
        medians = [round(r.benchmarks[bench["fullname"]].gated_median_ms, 7) for r in runs
                   if bench["fullname"] in r.benchmarks]
        if len(medians) > 1:
            info["run_medians_ms"] = medians
        bench.get("stats", {}).pop("data", None)
    doc["perfci"] = {
        "schema_version": SCHEMA_VERSION,
        "gpu": gpu,
        "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": len(runs),
        "sources": [str(r.path) for r in runs],
        "forced": bool(force),
    }
    return doc
