"""Read result files: pytest-benchmark JSON with perfci's ``extra_info``, and perfci baselines.

A baseline is a result file with a ``perfci`` header (schema version, GPU, how it was made), so one
reader serves both. Every problem with a file is a one-line ``BadInputError`` naming the file and
what to do; nothing here writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfci import stats
from perfci.errors import BadInputError

SCHEMA_VERSION = 1
# top-level keys the plugin adds to a result file: what the run set out to run (see ResultFile.intended)
SCOPE_KEY, DESELECTED_KEY = "perfci_scope", "perfci_deselected"


@dataclass(frozen=True)
class BenchResult:
    name: str
    median_ms: float
    gated_samples_ms: tuple[float, ...]
    timer: str
    normalization: str
    noisy: bool
    noise_reasons: tuple[str, ...]
    threshold: float | None
    profile: dict[str, Any] | None
    run_medians_ms: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    # the declared structural rules the benchmark ran with (``perf.forbid``, ``perf.expect``, known_bad)
    forbid: tuple[str, ...] = ()
    expect: dict[str, Any] = field(default_factory=dict, compare=False)
    known_bad: tuple[str, ...] = ()

    @property
    def device_time(self) -> bool:
        return is_device_timer(self.timer)

    @property
    def gated_median_ms(self) -> float:
        """Median of the samples comparisons use (at the reference clock when normalised)."""
        return stats.median(self.gated_samples_ms) if self.gated_samples_ms else self.median_ms


@dataclass(frozen=True)
class ResultFile:
    path: Path
    gpu: str | None
    fingerprint: dict[str, Any]
    benchmarks: dict[str, BenchResult]
    header: dict[str, Any]
    raw: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)
    deselected: frozenset[str] = frozenset()  # tests the run deselected on purpose (-k, -m)
    scope: tuple[str, ...] | None = None  # node-id prefixes of the paths the run was given (None: all)

    def intended(self, name: str) -> bool:
        """Whether this run set out to run benchmark ``name`` (in its paths and not deselected)."""
        if name in self.deselected:
            return False
        return self.scope is None or any(
            not prefix or name == prefix or name.startswith((f"{prefix}/", f"{prefix}::", f"{prefix}["))
            for prefix in self.scope)

    @classmethod
    def empty(cls, path: Path, gpu: str) -> ResultFile:
        """A baseline with no benchmarks: every benchmark compared with it is NEW."""
        return cls(path=path, gpu=gpu, fingerprint={}, benchmarks={}, header={"schema_version": SCHEMA_VERSION})


def is_device_timer(timer: str) -> bool:
    """Every timer but the host wall clock measures device time."""
    return timer != "wall"


def read_json(path: Path, what: str = "result file") -> dict[str, Any]:
    if not path.exists():
        raise BadInputError(f"{what} {path} does not exist", hint="check the path")
    if path.is_dir():
        raise BadInputError(f"{what} {path} is a directory", hint="name a .json file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BadInputError(f"{what} {path} is not UTF-8 text", hint="it must be JSON") from None
    if not text.strip():
        raise BadInputError(f"{what} {path} is empty", hint="re-create it (perfci run / baseline update)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{what} {path} is not valid JSON (line {exc.lineno}: {exc.msg}); truncated?",
                            hint="restore it from git or re-create it") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{what} {path} holds a JSON {type(data).__name__}, not an object")
    return data


def load_results(path: Path, what: str = "result file") -> ResultFile:
    return parse_results(read_json(path, what), path, what)


def parse_results(data: dict[str, Any], path: Path, what: str = "result file") -> ResultFile:
    """A result file's parsed document (``path`` names it in messages); see :func:`load_results`."""
    header = data.get("perfci", {})
    if not isinstance(header, dict):
        raise BadInputError(f"{what} {path}: 'perfci' header is not an object")
    version = header.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise BadInputError(f"{what} {path} has schema_version {version!r}; "
                            f"this perfci reads {SCHEMA_VERSION}", hint="re-create it with this perfci version")
    benches = data.get("benchmarks")
    if not isinstance(benches, list):
        raise BadInputError(f"{what} {path} has no 'benchmarks' list: not a pytest-benchmark/perfci file",
                            hint="pass a file written by --benchmark-json, perfci run or perfci baseline")
    machine = data.get("machine_info", {}) if isinstance(data.get("machine_info"), dict) else {}
    fingerprint = machine.get("perfci", {}) if isinstance(machine.get("perfci"), dict) else {}
    parsed: dict[str, BenchResult] = {}
    for index, bench in enumerate(benches):
        result = _parse_bench(bench, path, index, what)
        parsed[result.name] = result
    gpu = header.get("gpu") or fingerprint.get("slug")
    deselected, scope = data.get(DESELECTED_KEY), data.get(SCOPE_KEY)
    return ResultFile(path=path, gpu=gpu, fingerprint=fingerprint, benchmarks=parsed, header=header, raw=data,
                      deselected=frozenset(str(n) for n in deselected) if isinstance(deselected, list) else frozenset(),
                      scope=tuple(str(p) for p in scope) if isinstance(scope, list) else None)


def run_scope(args: list[str], invocation_dir: Path, rootdir: Path) -> list[str] | None:
    """Node-id prefixes (rootdir-relative) of the paths a pytest session was given; None when one of
    them lies outside the rootdir (then nothing can be said and every baseline benchmark is in scope)."""
    prefixes = []
    for arg in args:
        path, sep, rest = str(arg).partition("::")
        try:
            rel = (Path(invocation_dir) / path).resolve().relative_to(Path(rootdir).resolve()).as_posix()
        except ValueError:
            return None
        rel = "" if rel == "." else rel
        prefixes.append(f"{rel}::{rest}" if sep else rel)
    return prefixes


def bench_from_info(name: str, extra_info: dict[str, Any]) -> BenchResult:
    """The BenchResult for one benchmark of the running session (from the fixture's extra_info)."""
    return _parse_bench({"fullname": name, "extra_info": extra_info}, Path("<this run>"), 0, "run")


def _parse_bench(bench: Any, path: Path, index: int, what: str) -> BenchResult:
    where = f"{what} {path}, benchmark #{index + 1}"
    if not isinstance(bench, dict) or "fullname" not in bench:
        raise BadInputError(f"{where}: not a benchmark entry (no 'fullname')")
    name = str(bench["fullname"])
    extra = bench.get("extra_info") if isinstance(bench.get("extra_info"), dict) else {}
    info = extra.get("perfci") if isinstance(extra.get("perfci"), dict) else None
    stats = bench.get("stats") if isinstance(bench.get("stats"), dict) else {}
    try:
        if info is not None:
            samples = tuple(float(v) for v in info.get("gated_samples_ms", ()))
            median_ms = float(info["median_ms"])
            timer = str(info.get("timer", "graph"))
            normalization = str(info.get("normalization", "none"))
            noisy = bool(info.get("noisy", False))
            reasons = tuple(str(r) for r in info.get("noise_reasons", ()))
            threshold = float(info["threshold"]) if info.get("threshold") is not None else None
            profile = info.get("profile") if isinstance(info.get("profile"), dict) else None
            run_medians = tuple(float(v) for v in info.get("run_medians_ms", ()))
            forbid = tuple(info.get("forbid") or ())
            expect = dict(info.get("expect") or {})
            known_bad = tuple(info.get("known_bad") or ())
        else:  # a plain pytest-benchmark entry: seconds, samples only with --benchmark-save-data
            samples = tuple(float(v) * 1e3 for v in stats.get("data", ()))
            median_ms = float(stats["median"]) * 1e3
            timer, normalization, noisy, reasons = "wall", "none", False, ()
            threshold, profile, run_medians = None, None, ()
            forbid, expect, known_bad = (), {}, ()
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"{where} ({name}): malformed timing data ({exc})",
                            hint="re-create the file") from None
    return BenchResult(name=name, median_ms=median_ms, gated_samples_ms=samples, timer=timer,
                       normalization=normalization, noisy=noisy, noise_reasons=reasons, threshold=threshold,
                       profile=profile, run_medians_ms=run_medians, extra=extra, forbid=forbid, expect=expect,
                       known_bad=known_bad)
