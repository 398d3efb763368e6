"""The measured-benchmark record and the result file: the only reader and writer of both formats.

A result file is pytest-benchmark's JSON (``--benchmark-json``) with perfci's record of each
benchmark in ``extra_info["perfci"]``; a baseline is a result file with a ``perfci`` header (schema
version, GPU, how it was made), so one reader serves both. Nothing else in perfci reads or writes a
key of either: the plugin builds :class:`BenchmarkRecord` objects from the stage outputs and judges
them, files parse into the same type, and :func:`to_document` / :func:`write_atomic` write them.

Schema 2 renamed the compared samples (``gated_samples_ms`` -> ``compared_samples_ms``); schema-1
files (baselines written before) still load. Every problem with a file is a one-line
``BadInputError`` naming the file and what to do.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfci import stats
from perfci.errors import BadInputError, InfrastructureError
from perfci.fingerprint import require_same_gpu
from perfci.trace import KernelProfile

if TYPE_CHECKING:
    from perfci.measurement import Measurement
    from perfci.settings import PerfSettings

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
_RENAMED = {"gated_samples_ms": "compared_samples_ms", "gated_median_ms": "compared_median_ms"}  # schema 1 -> 2
# top-level keys of a result file besides pytest-benchmark's own
HEADER_KEY, SCOPE_KEY, DESELECTED_KEY, CONFIRMATION_KEY = "perfci", "perfci_scope", "perfci_deselected", \
    "perfci_confirmation"
ERRORS_KEY = "perfci_errors"  # {node id: one-line error} of perf benchmarks that raised (no timing entry)
# a record's whole test in its pass (setup + call + teardown: imports, compiles and model loads with the measuring), in
# seconds: what a shard of the suite costs (perfci.shard.cost_s); kept in ``details``
TEST_WALL_KEY = "test_wall_s"
# the keys of a record that BenchmarkRecord models; every other key of the record is kept in ``details``
_MODELLED = ("schema_version", "timer", "device_time", "median_ms", "compared_samples_ms", "compared_median_ms",
             "normalization", "noise_reasons", "noisy", "threshold", "forbid", "expect", "known_bad", "flops",
             "bytes", "profile", "run_medians_ms", "pooled_with", "first_pass_median_ms", "cards")


@dataclass(frozen=True)
class BenchmarkRecord:
    """One measured benchmark: timing summary, compared samples, settings, kernel profile."""

    name: str  # pytest-benchmark's fullname (the test's node id)
    timer: str  # the timer's registry name (perfci.timing.TIMERS)
    device_time: bool  # the timer measures device time (host wall-clock times are never gated)
    median_ms: float  # median of the raw samples
    compared_samples_ms: tuple[float, ...]  # what comparisons use (at the reference SM clock when normalised)
    normalization: str = "none"
    noise_reasons: tuple[str, ...] = ()
    threshold: float | None = None
    forbid: tuple[str, ...] = ()
    expect: tuple[tuple[str, Any], ...] = ()
    known_bad: tuple[str, ...] = ()
    flops: float | None = None
    bytes_moved: int | None = None
    profile: KernelProfile | None = None
    run_medians_ms: tuple[float, ...] = ()  # per-run medians: several fresh-process runs (baseline, pooled run)
    pooled_with: str | None = None  # the first-pass result file this run was pooled with (perfci.confirm)
    first_pass_median_ms: float | None = None
    # the cards (GPU UUIDs) it was measured on: a baseline entry's run medians (from one card they carry no
    # card-to-card offset), a merged shard run's benchmark (its shard's card); () where not recorded (a plain
    # run: the file's card; entries written before perfci recorded them per entry)
    cards: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict, compare=False)  # clocks, stop reason, ...
    entry: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # pytest-benchmark's

    @property
    def noisy(self) -> bool:
        return bool(self.noise_reasons)

    @property
    def compared_median_ms(self) -> float:
        return stats.median(self.compared_samples_ms) if self.compared_samples_ms else self.median_ms

    @property
    def expect_map(self) -> dict[str, Any]:
        return dict(self.expect)


@dataclass(frozen=True)
class ResultFile:
    """A run's (or a baseline's) benchmarks, the fingerprint it recorded and what it set out to run."""

    path: Path
    gpu: str | None
    fingerprint: Mapping[str, Any]
    benchmarks: Mapping[str, BenchmarkRecord]
    header: Mapping[str, Any] = field(default_factory=dict)
    deselected: frozenset[str] = frozenset()  # tests the run deselected on purpose (-k, -m)
    scope: tuple[str, ...] | None = None  # node-id prefixes of the paths the run was given (None: all)
    errors: Mapping[str, str] = field(default_factory=dict)  # benchmarks that raised: node id -> one line
    document: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # other top-level keys

    def intended(self, name: str) -> bool:
        """Whether this run set out to run benchmark ``name`` (in its paths and not deselected)."""
        return in_scope(name, self.scope, self.deselected)

    def cards_of(self, name: str) -> tuple[str, ...]:
        """The cards benchmark ``name`` was measured on: its record's own (a baseline entry, a merged shard run's
        benchmark), else this file's card; () where neither is recorded."""
        card = self.fingerprint.get("card")
        return self.benchmarks[name].cards or ((str(card),) if card else ())

    @classmethod
    def empty(cls, path: Path, gpu: str | None) -> ResultFile:
        """No benchmarks: every benchmark compared with it is NEW."""
        return cls(path=Path(path), gpu=gpu, fingerprint={}, benchmarks={}, header={"schema_version": SCHEMA_VERSION})

    def with_benchmarks(self, records: Iterable[BenchmarkRecord], **changes: Any) -> ResultFile:
        return replace(self, benchmarks={r.name: r for r in records}, **changes)


def require_one_gpu(results: Iterable[ResultFile], hint: str) -> ResultFile | None:
    """The first of ``results`` that records a GPU model, after checking that every other one that
    records a model records the same (``fingerprint.require_same_gpu``); None when none records one."""
    with_gpu = [r for r in results if r.gpu]
    for other in with_gpu[1:]:
        require_same_gpu(with_gpu[0].gpu, other.gpu, first_what=str(with_gpu[0].path), second_what=str(other.path),
                         hint=hint)
    return with_gpu[0] if with_gpu else None


def record_from_measurement(name: str, measurement: Measurement, settings: PerfSettings, *,
                            profile: KernelProfile | None, flops: float | None, bytes_moved: int | None,
                            details: Mapping[str, Any] = ()) -> BenchmarkRecord:
    """The record of a benchmark measured in this process, built from the stage outputs.

    The compared samples are thinned to what a result file keeps (``measurement.thin``), so the
    record judged here is the record a later reader of the file judges.
    """
    from perfci.measurement import thin
    from perfci.timing import is_device_timer

    return BenchmarkRecord(
        name=name, timer=measurement.timer, device_time=is_device_timer(measurement.timer),
        median_ms=measurement.median_ms,
        compared_samples_ms=tuple(_round(v) for v in thin(measurement.compared_samples_ms)),
        normalization=measurement.normalization, noise_reasons=measurement.noise_reasons,
        threshold=settings.threshold, forbid=settings.forbid, expect=settings.expect, known_bad=settings.known_bad,
        flops=flops or None, bytes_moved=bytes_moved or None, profile=profile,
        details={**measurement.details(), **dict(details)})


def in_scope(name: str, scope: tuple[str, ...] | None, deselected: frozenset[str] | set[str]) -> bool:
    """Whether a run with these node-id prefixes (None: everything) and deselections meant to run ``name``."""
    if name in deselected:
        return False
    return scope is None or any(
        not prefix or name == prefix or name.startswith((f"{prefix}/", f"{prefix}::", f"{prefix}["))
        for prefix in scope)


# --- reading ------------------------------------------------------------------------------------


def read_json(path: Path, what: str = "result file") -> dict[str, Any]:
    path = Path(path)
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
    return parse_results(read_json(path, what), Path(path), what)


def parse_results(data: Mapping[str, Any], path: Path, what: str = "result file") -> ResultFile:
    """A result file's parsed document (``path`` names it in messages); see :func:`load_results`."""
    header = data.get(HEADER_KEY, {})
    if not isinstance(header, dict):
        raise BadInputError(f"{what} {path}: 'perfci' header is not an object")
    version = header.get("schema_version", SCHEMA_VERSION)
    if version not in READABLE_SCHEMAS:
        raise BadInputError(f"{what} {path} has schema_version {version!r}; this perfci reads "
                            f"{', '.join(map(str, READABLE_SCHEMAS))}", hint="re-create it with this perfci version")
    benches = data.get("benchmarks")
    if not isinstance(benches, list):
        raise BadInputError(f"{what} {path} has no 'benchmarks' list: not a pytest-benchmark/perfci file",
                            hint="pass a file written by --benchmark-json, perfci run or perfci baseline")
    machine = data.get("machine_info") if isinstance(data.get("machine_info"), dict) else {}
    fingerprint = machine.get("perfci") if isinstance(machine.get("perfci"), dict) else {}
    records = [record_from_entry(bench, f"{what} {path}, benchmark #{i + 1}") for i, bench in enumerate(benches)]
    deselected, scope, errors = data.get(DESELECTED_KEY), data.get(SCOPE_KEY), data.get(ERRORS_KEY)
    rest = {k: v for k, v in data.items()
            if k not in ("benchmarks", HEADER_KEY, SCOPE_KEY, DESELECTED_KEY, ERRORS_KEY)}
    return ResultFile(path=Path(path), gpu=header.get("gpu") or fingerprint.get("slug"), fingerprint=fingerprint,
                      benchmarks={r.name: r for r in records}, header=header,
                      deselected=frozenset(str(n) for n in deselected) if isinstance(deselected, list) else frozenset(),
                      scope=tuple(str(p) for p in scope) if isinstance(scope, list) else None,
                      errors=_errors(errors),
                      document=rest)


def record_from_entry(bench: Any, where: str = "result file") -> BenchmarkRecord:
    """The record of one pytest-benchmark entry (with or without perfci's ``extra_info``)."""
    if not isinstance(bench, dict) or "fullname" not in bench:
        raise BadInputError(f"{where}: not a benchmark entry (no 'fullname')")
    name = str(bench["fullname"])
    extra = bench.get("extra_info") if isinstance(bench.get("extra_info"), dict) else {}
    info = extra.get("perfci") if isinstance(extra.get("perfci"), dict) else None
    entry = {k: v for k, v in bench.items() if k != "extra_info"}
    entry["extra_info"] = {k: v for k, v in extra.items() if k != "perfci"}
    try:
        if info is None:  # a plain pytest-benchmark entry: seconds, samples only with --benchmark-save-data
            pb = bench.get("stats") if isinstance(bench.get("stats"), dict) else {}
            return BenchmarkRecord(name=name, timer="wall", device_time=False, median_ms=float(pb["median"]) * 1e3,
                                   compared_samples_ms=tuple(float(v) * 1e3 for v in pb.get("data", ())), entry=entry)
        return _from_info(name, {_RENAMED.get(k, k): v for k, v in info.items()}, entry)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadInputError(f"{where} ({name}): malformed timing data ({exc})", hint="re-create the file") from None
    except BadInputError as exc:
        raise BadInputError(f"{where} ({name}): {exc.message}", hint=exc.hint) from None


def _from_info(name: str, info: Mapping[str, Any], entry: dict[str, Any]) -> BenchmarkRecord:
    from perfci.timing import is_device_timer

    def opt_float(key: str) -> float | None:
        return None if info.get(key) is None else float(info[key])

    timer = str(info.get("timer", "graph"))
    profile = info.get("profile")
    expect = info.get("expect") or {}
    return BenchmarkRecord(
        name=name, timer=timer, device_time=bool(info.get("device_time", is_device_timer(timer))),
        median_ms=float(info["median_ms"]),
        compared_samples_ms=tuple(float(v) for v in info.get("compared_samples_ms", ())),
        normalization=str(info.get("normalization", "none")),
        noise_reasons=tuple(str(r) for r in info.get("noise_reasons", ())),
        threshold=opt_float("threshold"),
        forbid=tuple(str(n) for n in info.get("forbid") or ()),
        expect=tuple(dict(expect).items()),
        known_bad=tuple(str(n) for n in info.get("known_bad") or ()),
        flops=opt_float("flops"), bytes_moved=None if info.get("bytes") is None else int(info["bytes"]),
        profile=KernelProfile.from_dict(profile) if isinstance(profile, dict) else None,
        run_medians_ms=tuple(float(v) for v in info.get("run_medians_ms", ())),
        pooled_with=None if info.get("pooled_with") is None else str(info["pooled_with"]),
        first_pass_median_ms=opt_float("first_pass_median_ms"),
        cards=tuple(str(c) for c in info.get("cards") or ()),
        details={k: v for k, v in info.items() if k not in _MODELLED}, entry=entry)


# --- writing ------------------------------------------------------------------------------------


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def record_to_info(record: BenchmarkRecord) -> dict[str, Any]:
    """The record's JSON form: what goes into ``extra_info["perfci"]``."""
    info: dict[str, Any] = {**record.details, "schema_version": SCHEMA_VERSION, "timer": record.timer,
                            "device_time": record.device_time, "median_ms": _round(record.median_ms),
                            "compared_median_ms": _round(record.compared_median_ms),
                            "compared_samples_ms": [_round(v) for v in record.compared_samples_ms],
                            "normalization": record.normalization, "noisy": record.noisy,
                            "noise_reasons": list(record.noise_reasons), "threshold": record.threshold,
                            "forbid": list(record.forbid), "expect": dict(record.expect)}
    optional = {"known_bad": list(record.known_bad), "flops": record.flops, "bytes": record.bytes_moved,
                "profile": record.profile.to_dict() if record.profile is not None else None,
                "run_medians_ms": list(record.run_medians_ms), "pooled_with": record.pooled_with,
                "first_pass_median_ms": record.first_pass_median_ms, "cards": list(record.cards)}
    info.update({k: v for k, v in optional.items() if v not in (None, [])})
    return info


def display_extra(record: BenchmarkRecord, timer_label: str) -> dict[str, Any]:
    """The extra_info keys pytest-benchmark shows beside perfci's record (its own tables and JSON)."""
    from perfci.units import gbps, tflops

    extra: dict[str, Any] = {"device_time_ms": _round(record.median_ms), "timer": timer_label}
    if record.flops:
        extra["tflops"] = round(tflops(record.flops, record.median_ms), 3)
    if record.bytes_moved:
        extra["gbps"] = round(gbps(record.bytes_moved, record.median_ms), 2)
    return extra


def to_entry(record: BenchmarkRecord) -> dict[str, Any]:
    """The pytest-benchmark entry of ``record`` (its stats and other extra_info kept)."""
    entry = dict(record.entry) or {"fullname": record.name, "name": record.name.split("::")[-1]}
    entry["extra_info"] = {**dict(entry.get("extra_info") or {}), "perfci": record_to_info(record)}
    return entry


def to_document(result: ResultFile) -> dict[str, Any]:
    """The JSON document of ``result`` (what :func:`load_results` reads back as the same records)."""
    doc: dict[str, Any] = dict(result.document)
    if result.fingerprint:
        doc["machine_info"] = {**dict(doc.get("machine_info") or {}), "perfci": dict(result.fingerprint)}
    doc["benchmarks"] = [to_entry(r) for r in result.benchmarks.values()]
    if result.header:
        doc[HEADER_KEY] = {**result.header, "schema_version": SCHEMA_VERSION}
    if result.scope is not None:
        doc[SCOPE_KEY] = list(result.scope)
    if result.deselected:
        doc[DESELECTED_KEY] = sorted(result.deselected)
    if result.errors:
        doc[ERRORS_KEY] = dict(result.errors)
    return doc


def cards_in(records: Iterable[BenchmarkRecord]) -> list[str]:
    """Every card the records name, in order of first mention: a baseline's or a merged run's file card list."""
    return list(dict.fromkeys(c for record in records for c in record.cards))


def stamp_test_wall_s(output_json: Mapping[str, Any], seconds: Mapping[str, float]) -> None:
    """Each perfci entry of pytest-benchmark's ``output_json`` (its ``benchmarks``) with its test's wall seconds
    (``TEST_WALL_KEY``), where ``seconds`` (node id -> setup + call + teardown) has them."""
    for bench in output_json.get("benchmarks") or ():
        extra = bench.get("extra_info") if isinstance(bench, dict) else None
        info = extra.get("perfci") if isinstance(extra, dict) else None
        spent = seconds.get(str(bench.get("fullname"))) if isinstance(info, dict) else None
        if spent is not None:
            info[TEST_WALL_KEY] = round(float(spent), 3)


def write_errors(path: Path, errors: Mapping[str, str]) -> None:
    """The benchmarks of a session that raised (``--perfci-errors``): written when no result file is."""
    write_atomic(path, {ERRORS_KEY: dict(errors)})


def load_errors(path: Path) -> dict[str, str]:
    """What :func:`write_errors` wrote; {} when the file is absent."""
    if not Path(path).exists():
        return {}
    return _errors(read_json(Path(path), "error list").get(ERRORS_KEY))


def _errors(value: Any) -> dict[str, str]:
    """A document's ``perfci_errors`` ({node id: one line}); {} when absent or not an object."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def write_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn or empty one."""
    path = Path(path)
    text = json.dumps(data, indent=1, sort_keys=False, ensure_ascii=True) + "\n"  # fails before any file is touched
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InfrastructureError(f"cannot write {path}: {exc.strerror or exc}",
                                  hint="choose a writable output location") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(result: ResultFile, path: Path | None = None) -> Path:
    target = Path(path or result.path)
    write_atomic(target, to_document(result))
    return target
