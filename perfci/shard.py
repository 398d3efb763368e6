"""Sharding: split the suite's benchmarks across runners (or GPUs) and merge the shards' results.

``perfci run --shard i/n`` collects the suite's node ids once (``pytest --collect-only``), splits them
with :func:`split` and measures shard i only (the others are deselected, so they are never MISSING).
The split is stable (a function of the ids and the baseline alone) and balanced by each benchmark's
test time recorded in the baseline (setup, call and teardown; else its warm-up plus sampling), one unit per
benchmark without one.
``perfci merge`` combines the shards' result files into one run for the gate and the report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from perfci.errors import BadInputError, InfrastructureError, UsageError
from perfci.record import TEST_WALL_KEY, ResultFile, cards_in, load_results, require_one_gpu
from perfci.runner import PYTEST_NO_TESTS, PYTEST_OK, pytest_command

_SHARD = re.compile(r"^(\d+)/(\d+)$")


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): shard 2 of 4, counted from 1."""
    match = _SHARD.match(text.strip())
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise UsageError(f"--shard {text!r} is not i/n with 1 <= i <= n", hint="e.g. --shard 1/2")
    return int(match.group(1)), int(match.group(2))


def cost_s(baseline: ResultFile | None, name: str) -> float:
    """Seconds benchmark ``name``'s test took in the baseline's run (``TEST_WALL_KEY``: setup, compiles and
    profiling with the measuring), else its measuring alone (warm-up + sampling; entries written before perfci
    recorded the test's), else 1.  On an H200 pair the measuring was a third of a shard's time, so two shards
    level in measuring took 121 and 208 s."""
    record = baseline.benchmarks.get(name) if baseline is not None else None
    if record is None:
        return 1.0
    wall = float(record.details.get(TEST_WALL_KEY) or 0.0)
    spent = wall or float(record.details.get("warmup_s") or 0.0) + float(record.details.get("sampling_s") or 0.0)
    return spent if spent > 0 else 1.0


def split(names: Sequence[str], shards: int, baseline: ResultFile | None = None) -> list[list[str]]:
    """Longest-first greedy assignment to the least loaded shard; ties broken by name: stable."""
    loads = [0.0] * shards
    out: list[list[str]] = [[] for _ in range(shards)]
    for name in sorted(set(names), key=lambda n: (-cost_s(baseline, n), n)):
        target = min(range(shards), key=lambda i: (loads[i], i))
        out[target].append(name)
        loads[target] += cost_s(baseline, name)
    return [sorted(s) for s in out]


def collect(pytest_args: list[str]) -> list[str]:
    """The node ids the suite's pytest arguments select (a child ``pytest --collect-only -q``)."""
    command = pytest_command(pytest_args, extra=["--collect-only", "-q", "-p", "no:cacheprovider"])
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise InfrastructureError(f"could not start pytest: {exc}") from None
    if done.returncode not in (PYTEST_OK, PYTEST_NO_TESTS):
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise BadInputError(f"collecting the suite failed (pytest exit {done.returncode}): {' / '.join(tail)}")
    return [line.strip() for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def merge_results(results: Sequence[ResultFile], path: Path) -> ResultFile:
    """One run from shard results of one GPU model: benchmarks and errors joined (a benchmark measured by
    two shards is refused), scopes joined, deselected = what no shard measured or intended."""
    if not results:
        raise UsageError("perfci merge needs at least one result file")
    first = require_one_gpu(results, "merge the shards of one GPU model; each model is judged against its own "
                                     "baselines") or results[0]
    seen: dict[str, Path] = {}
    for result in results:
        for name in result.benchmarks:
            if name in seen:
                raise BadInputError(f"{name} was measured by two shards ({seen[name]} and {result.path})",
                                    hint="merge the shards of one run only")
            seen[name] = result.path
    measured = set(seen)
    scopes = [r.scope for r in results if r.benchmarks or r.scope]
    scope = None if any(s is None for s in scopes) else tuple(dict.fromkeys(p for s in scopes for p in s or ()))
    deselected = frozenset.intersection(*(frozenset(r.deselected) for r in results)) - measured
    errors = {k: v for r in results for k, v in r.errors.items()}
    shards = [str(r.path) for r in results]
    # each benchmark keeps the card its shard ran on (shards may run on several cards of the model): a baseline
    # made from the merged file, and the gate, go by it (perfci.gate.Drift)
    records = [replace(b, cards=r.cards_of(name)) for r in results for name, b in r.benchmarks.items()]
    cards = cards_in(records)
    fingerprint = {**first.fingerprint, "cards": cards} if len(cards) > 1 else dict(first.fingerprint)
    return first.with_benchmarks(records, path=Path(path), scope=scope, deselected=deselected, errors=errors,
                                 fingerprint=fingerprint, document={**first.document, "perfci_merged_from": shards})


def load_shards(paths: Sequence[Path]) -> list[ResultFile]:
    return [load_results(Path(p), "shard result file") for p in paths]


def parse_gpus(text: str) -> list[str]:
    """'all' -> every visible CUDA device index; '0,2' -> ['0', '2']."""
    if text.strip() == "all":
        try:
            import torch

            count = torch.cuda.device_count()
        except ImportError:
            count = 0
        if count == 0:
            raise UsageError("--gpus all: no CUDA GPU is visible",
                             hint="run without --gpus, or name devices: --gpus 0,1")
        return [str(i) for i in range(count)]
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if not devices or any(not d.isdigit() for d in devices) or len(set(devices)) != len(devices):
        raise UsageError(f"--gpus {text!r} is not 'all' or distinct device indices", hint="e.g. --gpus 0,1")
    return devices


HEARTBEAT_S = 60.0  # perfci run --gpus: how often the running workers' progress is printed
_PROGRESS = re.compile(r"\[\s*(\d+)%\]")  # pytest's progress column
_CONFIRMING = "re-measuring them in a fresh process"  # perfci run's line before its confirmation pass


def worker_progress(log_path: Path) -> str:
    """Where a worker stands, from its log: pytest's last progress figure, in the first or the confirmation pass."""
    try:
        with open(log_path, "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "starting"
    stage = "confirmation pass" if _CONFIRMING in text else "first pass"
    tail = text[text.rfind(_CONFIRMING):] if stage == "confirmation pass" else text
    figures = _PROGRESS.findall(tail)
    return f"{stage} {figures[-1]} %" if figures else f"{stage}, collecting"


def run_workers(devices: Sequence[str], cli_args: Sequence[str], results_dir: Path,
                log: Callable[..., None] = print, heartbeat_s: float = HEARTBEAT_S) -> list[ResultFile]:
    """One ``perfci run --shard i/n`` worker per device, pinned with CUDA_VISIBLE_DEVICES, in parallel;
    each confirms its own SLOWER/NOISY benchmarks on its own card. Each worker's end is printed as it comes,
    and every ``heartbeat_s`` where the others stand. Returns their final run results, in device order."""
    workers = []
    earlier: dict[str, set[Path]] = {}
    for i, device in enumerate(devices):
        where = Path(results_dir) / f"gpu{device}"
        where.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "perfci", "run", "--shard", f"{i + 1}/{len(devices)}",
                   "--results-dir", str(where), "--report-dir", str(where / "report"), *cli_args]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": device, "PYTHONUNBUFFERED": "1"}
        log_path = where / "worker.log"
        earlier[device] = set(where.glob("*_run.json"))  # an earlier run's results there are not this worker's
        log(f"perfci: GPU {device}: shard {i + 1}/{len(devices)} (log {log_path})", flush=True)
        with open(log_path, "w", encoding="utf-8") as fh:
            workers.append((device, where, subprocess.Popen(command, env=env, stdout=fh, stderr=subprocess.STDOUT)))
    start = time.monotonic()
    beat = start + heartbeat_s
    runs: dict[str, list[Path]] = {}  # each ended worker's result files from this run
    while len(runs) < len(workers):
        time.sleep(min(0.5, heartbeat_s))
        for device, where, proc in workers:
            if device not in runs and proc.poll() is not None:
                runs[device] = sorted(set(where.glob("*_run.json")) - earlier[device])
                log(f"perfci: GPU {device}: worker exit {proc.returncode} after {time.monotonic() - start:.0f} s, "
                    f"{runs[device][-1] if runs[device] else 'no result'}", flush=True)
        if len(runs) < len(workers) and time.monotonic() >= beat:
            beat += heartbeat_s
            for device, where, _ in workers:
                if device not in runs:
                    log(f"perfci: GPU {device}: {worker_progress(where / 'worker.log')} after "
                        f"{time.monotonic() - start:.0f} s", flush=True)
    results = []
    for device, where, proc in workers:
        if not runs[device]:
            raise InfrastructureError(f"the worker on GPU {device} wrote no result (exit {proc.returncode})",
                                      hint=f"see {where / 'worker.log'}")
        results.append(load_results(runs[device][-1], "worker result file"))
    return results
