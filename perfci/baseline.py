"""Baseline stage: per-GPU baseline files under ``baselines/<gpu-slug>/``.

A baseline is a pytest-benchmark-compatible JSON file (``0001_baseline.json``, so
``pytest --benchmark-storage=baselines --benchmark-compare=<gpu-slug>/0001`` reads it too) with a
``perfci`` header: schema version, GPU slug, fingerprint, how it was made. Writes are atomic (temp
file in the same directory, fsync, rename): an interrupted update leaves the previous file whole,
and of two concurrent writers one wins whole.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from perfci.errors import BadInputError, InfrastructureError, UsageError
from perfci.fingerprint import require_same_gpu
from perfci.record import SCHEMA_VERSION, ResultFile, cards_in, load_results

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
    if "schema_version" not in result.header:
        raise BadInputError(f"baseline {path} has no perfci header (schema_version)",
                            hint="write baselines with `perfci baseline update`")
    require_same_gpu(result.gpu, gpu, first_what=f"baseline {path}", second_what="this machine",
                     hint=describe_available(Path(path).parent.parent))
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


def make_baseline(runs: list[ResultFile], *, gpu: str, force: bool = False, path: Path | None = None) -> ResultFile:
    """A baseline from one or more result files of the same GPU (write it with ``record.write_results``).

    The first run's samples are kept; with several runs, each benchmark also stores the per-run
    medians (``run_medians_ms``), which the comparison uses as the between-run noise floor and whose
    mean is the baseline's level. A run with NOISY device times is refused unless ``force``.
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

    def kept(name: str) -> tuple[float, ...]:
        medians = tuple(round(r.benchmarks[name].compared_median_ms, 7) for r in runs if name in r.benchmarks)
        return medians if len(medians) > 1 else ()

    def cards_of(name: str) -> tuple[str, ...]:
        """The cards behind this entry's run medians (kept per entry: a partial update merges entries of
        other cards into the file, and the file's card list then says nothing about one entry): each run's
        record's own (a merged shard's card), else the run's card."""
        return tuple(dict.fromkeys(c for r in runs if name in r.benchmarks for c in r.cards_of(name)))

    records = [replace(rec, run_medians_ms=kept(rec.name) or rec.run_medians_ms, pooled_with=None,
                       first_pass_median_ms=None, cards=cards_of(rec.name),
                       entry={**rec.entry, "stats": {k: v for k, v in (rec.entry.get("stats") or {}).items()
                                                     if k != "data"}})
               for rec in first.benchmarks.values()]
    header = {"schema_version": SCHEMA_VERSION, "gpu": gpu,
              "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "runs": len(runs),
              "sources": [str(r.path) for r in runs], "forced": bool(force)}
    # every card the runs came from (the entries' own lists decide the comparison: perfci.gate.Drift)
    cards = cards_in(records)
    fingerprint = {**first.fingerprint, "cards": cards} if cards else dict(first.fingerprint)
    # a baseline stands for every benchmark it holds: no scope, nothing deselected
    return first.with_benchmarks(records, path=Path(path or first.path), header=header, scope=None,
                                 deselected=frozenset(), fingerprint=fingerprint, errors={})


@dataclass(frozen=True)
class MergeReport:
    added: tuple[str, ...]
    replaced: tuple[str, ...]
    kept: tuple[str, ...]
    dropped: tuple[str, ...]  # in the runs' scope, not measured: removed from the suite

    def describe(self) -> str:
        parts = [f"{len(self.added)} added", f"{len(self.replaced)} replaced", f"{len(self.kept)} kept"]
        if self.dropped:
            parts.append(f"{len(self.dropped)} dropped (selected but no longer measured: "
                         f"{', '.join(self.dropped[:3])}{', ...' if len(self.dropped) > 3 else ''})")
        return ", ".join(parts)


def merge_baseline(existing: ResultFile, fresh: ResultFile, run: ResultFile) -> tuple[ResultFile, MergeReport]:
    """``existing`` with the entries ``fresh`` measured replaced or added; entries the run did not set
    out to measure (``run``'s paths, -k/-m) are kept with their run medians; entries it set out to
    measure and did not (removed tests) are dropped."""
    measured = set(fresh.benchmarks)
    kept = [r for n, r in existing.benchmarks.items() if n not in measured and not run.intended(n)]
    dropped = tuple(sorted(n for n in existing.benchmarks if n not in measured and run.intended(n)))
    report = MergeReport(added=tuple(sorted(measured - set(existing.benchmarks))),
                         replaced=tuple(sorted(measured & set(existing.benchmarks))),
                         kept=tuple(sorted(r.name for r in kept)), dropped=dropped)
    header = {**fresh.header, "merged_into": str(existing.path), "kept_from": existing.header.get("written")}
    fingerprint = dict(fresh.fingerprint)
    cards = list(dict.fromkeys([*(existing.fingerprint.get("cards") or []), *(fresh.fingerprint.get("cards") or [])]))
    if kept and cards:
        fingerprint["cards"] = cards
    return fresh.with_benchmarks([*kept, *fresh.benchmarks.values()], header=header, fingerprint=fingerprint), report


LOCK_WAIT_S = 600.0


@contextmanager
def locked(directory: Path, *, wait_s: float = LOCK_WAIT_S, log: Callable[..., None] = print) -> Iterator[None]:
    """One baseline update per GPU directory at a time: a second one waits (up to ``wait_s``), then refuses."""
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".update.lock"
    with open(path, "a+", encoding="utf-8") as fh:
        deadline, told = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InfrastructureError(f"another baseline update holds {path} (waited {wait_s:.0f} s)",
                                              hint="let it finish (the lock goes with its process)") from None
                if not told:
                    log(f"perfci: another baseline update holds {path}; waiting for it", flush=True)
                    told = True
                time.sleep(0.5)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
