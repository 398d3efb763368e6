"""Nsight Systems: the selected benchmarks under ``nsys profile``, read back from its SQLite export.

Command: ``nsys profile --trace=cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none``
over the pytest child, then ``nsys export --type=sqlite``; ``DIR/perfci.nsys-rep`` and
``DIR/perfci.sqlite`` are kept. The process is traced whole, not with ``--capture-range=nvtx``:
``--nvtx-capture`` takes one exact ``range@domain`` (no pattern), a selection has many benchmarks,
and a capture that stops at the range's end loses the kernels still running after it.

Reader (:func:`read_nsys_sqlite`, also ``perfci profile --nsys --from FILE.sqlite``) works from the
export alone. Schema followed: the "SQLite Schema Reference" of the Nsight Systems User Guide
(2024.x-2025.x exports; unchanged for these columns since the 2021.5 exporter reference):
``StringIds(id, value)``; ``NVTX_EVENTS(start, end, eventType, text, textId -> StringIds,
domainId, globalTid)`` with eventType 59 NvtxPushPopRange, 60 NvtxStartEndRange, 75
NvtxDomainCreate (``text`` = the domain's name, ``domainId`` its id; taken by name from
``ENUM_NSYS_EVENT_TYPE`` when the export has it); ``CUPTI_ACTIVITY_KIND_KERNEL(start, end,
correlationId, demangledName/shortName -> StringIds, graphNodeId, globalPid)``;
``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``..._DRIVER`` when present) ``(start, end, nameId,
correlationId, globalTid)``; ``CUPTI_ACTIVITY_KIND_MEMCPY/MEMSET(start, end, bytes, copyKind,
correlationId, globalPid)``. Tables are created lazily: a missing activity table means none.

Assignment: a kernel (memcpy, memset) belongs to the range of the CUDA API call that launched it,
joined by (process, correlationId): the innermost benchmark range (:func:`perfci.nsight.
is_benchmark_range`) open on the call's thread (``globalTid``) when the call started. Never by
time overlap: kernels often run after their range closed, and a graph launch is one call for many
kernels. ``overhead_ms`` = range time - kernel time (host and launch time not hidden by the GPU;
negative when the GPU ran past the range's end).
"""

from __future__ import annotations

import sqlite3
import subprocess
from bisect import insort
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfci.categories import classify_kernel, display_kernel_name
from perfci.errors import BadInputError, InfrastructureError
from perfci.kernelrows import KernelRow
from perfci.nsight import (
    SCHEMA_VERSION,
    is_benchmark_range,
    pytest_child,
    require_tool,
    run_tool,
    tool_failed,
)
from perfci.profilers import ProfileRun
from perfci.record import write_atomic

SUMMARY_NAME = "nsys_summary.json"
EVENT_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
REQUIRED_TABLES = ("StringIds", "NVTX_EVENTS")
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP"}
_PID_SHIFT, _PID_MASK = 24, 0xFFFFFF  # serialized GlobalId: pid in bits 24..47


@dataclass(frozen=True)
class KernelStat:
    name: str  # display name (perfci.categories.display_kernel_name)
    category: str
    kind: str
    count: int
    time_ms: float


@dataclass(frozen=True)
class RangeStats:
    """One benchmark range (all its instances) and the device work its API calls launched."""

    name: str
    domain: str  # "perfci", "(default)" for the default domain, ...
    instances: int
    range_time_ms: float  # union of its instances per thread, summed over threads
    kernel_count: int
    kernel_time_ms: float
    late_kernel_count: int  # kernels still running after their range instance closed
    graph_kernel_count: int  # kernels launched as CUDA graph nodes
    memcpy_count: int
    memcpy_bytes: int
    memcpy_time_ms: float
    memset_count: int
    memset_bytes: int
    memset_time_ms: float
    kernels: tuple[KernelStat, ...]  # by total time, largest first
    copies: tuple[KernelStat, ...] = ()  # memcpy by direction and memset, as device activities

    @property
    def overhead_ms(self) -> float:
        return self.range_time_ms - self.kernel_time_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "domain": self.domain, "instances": self.instances, "range_time_ms": self.range_time_ms,
            "kernel_count": self.kernel_count, "kernel_time_ms": self.kernel_time_ms,
            "overhead_ms": self.overhead_ms, "late_kernel_count": self.late_kernel_count,
            "graph_kernel_count": self.graph_kernel_count,
            "memcpy_count": self.memcpy_count, "memcpy_bytes": self.memcpy_bytes,
            "memcpy_time_ms": self.memcpy_time_ms, "memset_count": self.memset_count,
            "memset_bytes": self.memset_bytes, "memset_time_ms": self.memset_time_ms,
            "kernels": [{"name": k.name, "category": k.category, "kind": k.kind, "count": k.count,
                         "time_ms": k.time_ms} for k in self.kernels],
        }


@dataclass(frozen=True)
class NsysCapture:
    """What :func:`read_nsys_sqlite` found: per benchmark range, and the kernels of no range."""

    source: Path
    ranges: dict[str, RangeStats]
    unassigned_kernel_count: int = 0  # kernels launched outside every benchmark range
    unassigned_kernel_time_ms: float = 0.0
    other_ranges: tuple[str, ...] = field(default=(), compare=False)  # some non-benchmark range texts

    def rows(self) -> list[KernelRow]:
        out = []
        for rng in self.ranges.values():
            total_ms = rng.kernel_time_ms or 1.0
            out += [KernelRow(rng.name, k.name, k.category, k.kind, k.count, k.time_ms,
                              metrics={"share_pct": 100.0 * k.time_ms / total_ms}) for k in rng.kernels]
            out += [KernelRow(rng.name, c.name, c.category, c.kind, c.count, c.time_ms) for c in rng.copies]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "tool": "nsys", "source": str(self.source),
                "ranges": {name: rng.to_json() for name, rng in self.ranges.items()},
                "unassigned": {"kernel_count": self.unassigned_kernel_count,
                               "kernel_time_ms": self.unassigned_kernel_time_ms}}


@dataclass
class _Acc:
    """Running totals of one range name while reading (ns, counts)."""

    domains: set[str] = field(default_factory=set)
    instances: int = 0
    kernels: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)  # -> [count, ns]
    copies: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    kernel_count: int = 0
    kernel_ns: int = 0
    late: int = 0
    graph: int = 0
    memcpy: list[int] = field(default_factory=lambda: [0, 0, 0])  # count, bytes, ns
    memset: list[int] = field(default_factory=lambda: [0, 0, 0])


@dataclass(frozen=True)
class _Range:
    name: str
    domain: str
    tid: int
    start_ns: int
    end_ns: int


def _pid(global_id: int) -> int:
    return (int(global_id) >> _PID_SHIFT) & _PID_MASK


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _event_types(db: sqlite3.Connection, tables: set[str]) -> dict[str, int]:
    types = dict(EVENT_TYPES)
    if "ENUM_NSYS_EVENT_TYPE" in tables:
        for ident, name in db.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            if name in types:
                types[name] = int(ident)
    return types


def _read_ranges(db: sqlite3.Connection, strings: dict[int, str], tables: set[str]) -> tuple[list[_Range], list[str]]:
    types = _event_types(db, tables)
    cols = _columns(db, "NVTX_EVENTS")
    domain_col = "domainId" if "domainId" in cols else "0"
    text_id = "textId" if "textId" in cols else "NULL"
    domains = {0: "(default)"}
    for dom, text, tid in db.execute(f"SELECT {domain_col}, text, {text_id} FROM NVTX_EVENTS WHERE eventType = ?",
                                     (types["NvtxDomainCreate"],)):
        domains[int(dom or 0)] = text if text is not None else strings.get(tid, "?")
    ranges, others = [], set()
    query = (f"SELECT start, end, text, {text_id}, {domain_col}, globalTid FROM NVTX_EVENTS "
             "WHERE eventType IN (?, ?) AND end IS NOT NULL")
    for start, end, text, tid, dom, gtid in db.execute(query, (types["NvtxPushPopRange"], types["NvtxStartEndRange"])):
        name = text if text is not None else strings.get(tid, "")
        if is_benchmark_range(name):
            domain = domains.get(int(dom or 0), f"domain {dom}")
            ranges.append(_Range(name, domain, int(gtid or 0), int(start), int(end)))
        elif len(others) < 5:
            others.add(name)
    return ranges, sorted(others)


def _read_calls(db: sqlite3.Connection, tables: set[str]) -> list[tuple[int, int, int]]:
    """(globalTid, start, correlationId) of every CUDA runtime and driver API call."""
    calls = []
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if table in tables:
            query = f"SELECT globalTid, start, correlationId FROM {table} WHERE correlationId IS NOT NULL"
            calls += [(int(t or 0), int(s), int(c)) for t, s, c in db.execute(query)]
    return calls


def _assign_calls(ranges: list[_Range], calls: list[tuple[int, int, int]]) -> dict[tuple[int, int], int]:
    """(pid, correlationId) -> index in ``ranges`` of the innermost benchmark range open on the
    call's thread when it started (start inclusive, end exclusive): a sweep per thread."""
    events: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # tid -> (time, order, payload)
    for i, r in enumerate(ranges):
        events[r.tid] += [(r.start_ns, 1, i), (r.end_ns, 0, i)]
    for j, (tid, start, _) in enumerate(calls):
        if tid in events:
            events[tid].append((start, 2, j))
    owner: dict[tuple[int, int], int] = {}
    for tid, items in events.items():
        items.sort()
        open_ranges: list[tuple[int, int]] = []  # (start, index), innermost last
        for _, order, payload in items:
            if order == 1:
                insort(open_ranges, (ranges[payload].start_ns, payload))
            elif order == 0:
                open_ranges.remove((ranges[payload].start_ns, payload))
            elif open_ranges:
                _, _, corr = calls[payload]
                owner[(_pid(tid), corr)] = open_ranges[-1][1]
    return owner


def _union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            total += (cur_end - cur_start) if cur_end is not None else 0
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + ((cur_end - cur_start) if cur_end is not None else 0)


def _activities(db: sqlite3.Connection, table: str, strings: dict[int, str]) -> Iterable[tuple]:
    """(pid, correlationId, start, end, label, graph_node, bytes) of one activity table."""
    cols = _columns(db, table)
    pid = "globalPid" if "globalPid" in cols else "0"
    graph = "graphNodeId" if "graphNodeId" in cols else "NULL"
    if table.endswith("KERNEL"):
        name = "demangledName" if "demangledName" in cols else "shortName"
        for p, c, s, e, n, g in db.execute(f"SELECT {pid}, correlationId, start, end, {name}, {graph} FROM {table}"):
            yield _pid(p or 0), int(c), int(s), int(e), strings.get(n, str(n)), g, 0
    else:
        memcpy = table.endswith("MEMCPY")
        kind = "copyKind" if memcpy and "copyKind" in cols else "NULL"
        for p, c, s, e, b, k, g in db.execute(f"SELECT {pid}, correlationId, start, end, bytes, {kind}, {graph} "
                                              f"FROM {table}"):
            label = f"Memcpy {COPY_KINDS.get(int(k or 0), '')}".rstrip() if memcpy else "Memset"
            yield _pid(p or 0), int(c), int(s), int(e), label, g, int(b or 0)


def read_nsys_sqlite(path: Path | str) -> NsysCapture:
    """Per benchmark range: kernels, copies and time, from an ``nsys export --type sqlite`` file.

    Raises BadInputError (exit 2) when the file is missing, not SQLite, or not an Nsight Systems
    export with NVTX."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"{path}: no such file", hint="give the .sqlite made by `nsys export --type sqlite`")
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return _read(db, path)
    except sqlite3.DatabaseError as exc:
        raise BadInputError(f"{path}: not a readable Nsight Systems SQLite export ({exc})",
                            hint="export the report with `nsys export --type sqlite FILE.nsys-rep`") from None


def _read(db: sqlite3.Connection, path: Path) -> NsysCapture:
    tables = _tables(db)
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing:
        raise BadInputError(f"{path}: no {' or '.join(missing)} table: not an Nsight Systems export with NVTX",
                            hint="profile with `nsys profile --trace=cuda,nvtx` and export with --type sqlite")
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    ranges, others = _read_ranges(db, strings, tables)
    owner = _assign_calls(ranges, _read_calls(db, tables))
    by_corr = {corr: index for (_, corr), index in owner.items()}
    acc: dict[str, _Acc] = defaultdict(_Acc)
    for r in ranges:
        acc[r.name].domains.add(r.domain)
        acc[r.name].instances += 1
    unassigned = [0, 0]
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table not in tables:
            continue
        for pid, corr, start, end, label, graph_node, n_bytes in _activities(db, table, strings):
            index = owner.get((pid, corr)) if pid else by_corr.get(corr)  # no globalPid: correlationId alone
            if index is None:
                if table.endswith("KERNEL"):
                    unassigned[0] += 1
                    unassigned[1] += end - start
                continue
            rng, a = ranges[index], acc[ranges[index].name]
            if table.endswith("KERNEL"):
                a.kernel_count += 1
                a.kernel_ns += end - start
                a.late += int(end > rng.end_ns)
                a.graph += int(bool(graph_node))
                category, kind = classify_kernel(label)
                slot = a.kernels.setdefault((display_kernel_name(label), category, kind), [0, 0])
            else:
                totals = a.memcpy if table.endswith("MEMCPY") else a.memset
                totals[0] += 1
                totals[1] += n_bytes
                totals[2] += end - start
                slot = a.copies.setdefault((label, *classify_kernel(label)), [0, 0])
            slot[0] += 1
            slot[1] += end - start
    by_name: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for r in ranges:
        by_name[r.name].append((r.tid, r.start_ns, r.end_ns))
    stats = {name: _stats(name, acc[name], by_name[name]) for name in sorted(acc)}
    return NsysCapture(path, stats, unassigned[0], unassigned[1] / 1e6, tuple(others))


def _stats(name: str, a: _Acc, instances: list[tuple[int, int, int]]) -> RangeStats:
    per_thread: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for tid, start, end in instances:
        per_thread[tid].append((start, end))
    range_ns = sum(_union_ns(v) for v in per_thread.values())

    def stat_list(items: dict[tuple[str, str, str], list[int]]) -> tuple[KernelStat, ...]:
        ordered = sorted(items.items(), key=lambda kv: (-kv[1][1], kv[0][0]))
        return tuple(KernelStat(n, c, k, count, ns / 1e6) for (n, c, k), (count, ns) in ordered)

    return RangeStats(name, ", ".join(sorted(a.domains)), a.instances, range_ns / 1e6, a.kernel_count,
                      a.kernel_ns / 1e6, a.late, a.graph, a.memcpy[0], a.memcpy[1], a.memcpy[2] / 1e6,
                      a.memset[0], a.memset[1], a.memset[2] / 1e6, stat_list(a.kernels), stat_list(a.copies))


def profile_command(nsys: str, stem: Path, child: Sequence[str]) -> list[str]:
    return [nsys, "profile", "--trace=cuda,nvtx", "--cuda-graph-trace=node", "--sample=none", "--cpuctxsw=none",
            "--force-overwrite=true", f"--output={stem}", *child]


def export_sqlite(nsys: str, report: Path) -> Path:
    target = report.with_suffix(".sqlite")
    cmd = [nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={target}", str(report)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise InfrastructureError(f"could not start {nsys}: {exc}") from None
    if done.returncode != 0 or not target.is_file():
        raise tool_failed(f"nsys export --type sqlite failed for {report}", done, hint=f"the report {report} is kept")
    return target


def selected_node_ids(pytest_args: Sequence[str], limit: int = 5) -> list[str]:
    """The node ids pytest selects for ``pytest_args`` (for error messages)."""
    cmd = [*pytest_child(pytest_args), "--collect-only"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in done.stdout.splitlines() if "::" in ln and not ln.startswith(" ")][:limit]


class NsysProfiler:
    name = "nsys"
    help = "Nsight Systems: kernels, copies and launch overhead per benchmark range (keeps .nsys-rep, .sqlite)"

    def run(self, pytest_args: list[str], out_dir: Path, options: Mapping[str, str] | None = None) -> ProfileRun:
        exe = require_tool("nsys")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / "perfci"
        for stale in (stem.with_suffix(".nsys-rep"), stem.with_suffix(".qdstrm")):
            stale.unlink(missing_ok=True)
        child_exit = run_tool(profile_command(exe, stem, pytest_child(pytest_args)))
        report = stem.with_suffix(".nsys-rep")
        if not report.is_file():
            streams = sorted(out_dir.glob("*.qdstrm"))
            if streams:
                raise InfrastructureError(
                    f"nsys wrote only {streams[0]} (kept): this nsys has no QdstrmImporter, so it cannot turn the "
                    "capture into a .nsys-rep report",
                    hint="install a complete Nsight Systems, or import the .qdstrm where one is installed "
                         "(QdstrmImporter -i FILE.qdstrm; nsys export --type sqlite FILE.nsys-rep) and run "
                         "`perfci profile --nsys --from FILE.sqlite`")
            raise InfrastructureError(f"nsys wrote no report {report} (exit {child_exit})",
                                      hint="see nsys's messages above")
        capture = read_nsys_sqlite(export_sqlite(exe, report))
        if not capture.ranges:
            expected = selected_node_ids(pytest_args)
            seen = f"; ranges seen: {', '.join(capture.other_ranges)}" if capture.other_ranges else ""
            raise InfrastructureError(
                f"no perfci benchmark range in the nsys capture (pytest exit {child_exit}); expected NVTX ranges "
                f"named {', '.join(expected) or 'after the selected tests'} in domain 'perfci'{seen}",
                hint="check that the tests call perf(...) and that -k selects them; the report is kept")
        return self._finish(capture, out_dir, (report, capture.source), child_exit)

    def read(self, path: Path, out_dir: Path | None = None) -> ProfileRun:
        """``perfci profile --nsys --from FILE.sqlite [-o DIR]``: an export made elsewhere."""
        capture = read_nsys_sqlite(path)
        if not capture.ranges:
            raise BadInputError(f"{path}: no perfci benchmark range (NVTX range named after a pytest node id)",
                                hint="profile the benchmarks with `perfci profile --nsys` or nsys --trace=cuda,nvtx")
        return self._finish(capture, Path(out_dir) if out_dir is not None else Path(path).parent, (), 0)

    def _finish(self, capture: NsysCapture, out_dir: Path, kept: tuple[Path, ...], child_exit: int) -> ProfileRun:
        summary = out_dir / SUMMARY_NAME
        write_atomic(summary, capture.to_json())
        notes = tuple(f"{r.name}: range {r.range_time_ms:.3f} ms, kernels {r.kernel_time_ms:.3f} ms, overhead "
                      f"{r.overhead_ms:.3f} ms; {r.memcpy_count} memcpy ({r.memcpy_bytes} B), {r.memset_count} memset"
                      for r in capture.ranges.values())
        return ProfileRun(tuple(capture.rows()), (*kept, summary), summary, child_exit, ("share_pct",), notes, "nsys")
