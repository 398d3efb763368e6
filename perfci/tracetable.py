"""The flat trace table and the stateless analysers that run over it (HTA style).

:func:`build_table` turns torch.profiler's kineto events into :class:`Row` s once; CPU rows are
nested per thread by time and device rows hang under the runtime call that launched them. The
analysers (:func:`op_hits`, :func:`kernel_hits`, :func:`sync_hits`, :func:`sdpa_backend`,
:func:`find_culprit`, :func:`peak_cpu_memory`) are plain functions of the table, driven by the rule
tables in :mod:`perfci.categories`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from perfci import categories as cat
from perfci.culprits import CALL_MARK, PY_EVENT_RE, SITE_PREFIX, Culprit, culprit_from_py_event, parse_site


@dataclass(frozen=True)
class Row:
    """One profiler event, flattened. ``kind``: op, runtime, device, annotation, python, memory."""

    kind: str
    name: str
    thread: int
    start_ns: int
    end_ns: int
    corr_id: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    nbytes: int
    on_cuda: bool
    stack: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    rows: tuple[Row, ...]
    parent: tuple[int, ...]  # enclosing CPU row on the same thread; for device rows, their launch call
    children: tuple[tuple[int, ...], ...]
    in_call: tuple[bool, ...]  # inside one of the profiled calls (device rows: launched inside one)
    windows: tuple[tuple[int, int], ...]  # (start_ns, end_ns) of each profiled call
    calls: int

    def ancestors(self, idx: int):
        idx = self.parent[idx]
        while idx >= 0:
            yield idx
            idx = self.parent[idx]

    def subtree(self, idx: int):
        todo = [idx]
        while todo:
            i = todo.pop()
            yield i
            todo.extend(self.children[i])


def _row_kind(evt: Any, name: str, on_cuda: bool, annotations: frozenset[str]) -> str:
    if name == "[memory]":
        return "memory"
    is_user = getattr(evt, "is_user_annotation", None)
    if name in annotations or name.startswith(SITE_PREFIX) or (is_user is not None and is_user()):
        return "annotation"
    if on_cuda:
        return "device"
    is_py = getattr(evt, "is_python_function", None)
    if (is_py is not None and is_py()) or name.startswith("<built-in") or PY_EVENT_RE.match(name):
        return "python"
    return "runtime" if cat.RUNTIME_NAME.match(name) else "op"


def _shape(shape: object) -> tuple[int, ...]:
    if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
        return tuple(shape)
    return ()


def _to_row(evt: Any, annotations: frozenset[str]) -> Row | None:
    try:
        name = evt.name()
    except UnicodeDecodeError:
        # seen under load: a Python-tracer event (no correlation, no shapes) whose name is garbage
        return None
    if name == "Activity Buffer Request":
        return None
    on_cuda = "CUDA" in str(evt.device_type())
    try:
        shapes = tuple(_shape(s) for s in evt.shapes())
        dtypes = tuple(str(d) for d in evt.dtypes())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        shapes, dtypes = (), ()
    try:
        stack = tuple(evt.stack())
    except (AttributeError, RuntimeError, ValueError):
        stack = ()
    start = int(evt.start_ns())
    return Row(_row_kind(evt, name, on_cuda, annotations), name, int(evt.start_thread_id()), start,
               max(start, int(evt.end_ns())), int(evt.correlation_id()), shapes, dtypes,
               int(evt.nbytes()) if name == "[memory]" else 0, on_cuda, stack)


def build_table(events: list[Any], *, calls: int, annotations: frozenset[str]) -> Table:
    """Flatten kineto events into rows; nest CPU rows per thread by time; link device rows to launches."""
    rows = [row for row in (_to_row(evt, annotations) for evt in events) if row is not None]
    parent = [-1] * len(rows)
    nested = sorted((i for i, r in enumerate(rows) if not r.on_cuda and r.kind != "memory"),
                    key=lambda i: (rows[i].thread, rows[i].start_ns, -rows[i].end_ns, i))
    open_rows: list[int] = []
    for i in nested:
        row = rows[i]
        while open_rows and (rows[open_rows[-1]].thread != row.thread or rows[open_rows[-1]].end_ns < row.end_ns):
            open_rows.pop()
        parent[i] = open_rows[-1] if open_rows else -1
        open_rows.append(i)
    launch_of = {r.corr_id: i for i, r in enumerate(rows) if r.kind == "runtime" and r.corr_id > 0}
    for i, row in enumerate(rows):
        if row.kind == "device":
            parent[i] = launch_of.get(row.corr_id, -1)
    children: list[list[int]] = [[] for _ in rows]
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    marks = [i for i, r in enumerate(rows) if r.kind == "annotation" and r.name == CALL_MARK and not r.on_cuda]
    in_call = [False] * len(rows)
    for mark in marks:
        todo = list(children[mark])
        while todo:
            i = todo.pop()
            in_call[i] = True
            todo.extend(children[i])
    windows = tuple(sorted((rows[m].start_ns, rows[m].end_ns) for m in marks))
    for i, row in enumerate(rows):
        if row.kind == "memory":
            in_call[i] = any(lo <= row.start_ns <= hi for lo, hi in windows)
    return Table(tuple(rows), tuple(parent), tuple(tuple(c) for c in children), tuple(in_call), windows, calls)


# --- analysers (stateless functions over the table) -------------------------------------------


@dataclass(frozen=True)
class _Hit:
    name: str
    category: str
    kind: str
    time_us: float
    nbytes: int
    culprit: Culprit | None


def find_culprit(table: Table, idx: int) -> Culprit | None:
    """Site marker above the row, else the profiler's Python stack (function start line), else None."""
    chain = list(table.ancestors(idx))
    for i in chain:
        found = parse_site(table.rows[i].name) if table.rows[i].kind == "annotation" else None
        if found is not None:
            return found
    for i in [idx, *chain]:
        for entry in table.rows[i].stack:
            found = culprit_from_py_event(entry)
            if found is not None:
                return found
    for i in chain:
        if table.rows[i].kind == "python":
            found = culprit_from_py_event(table.rows[i].name)
            if found is not None:
                return found
    return None


def _innermost_op(table: Table, idx: int) -> int:
    return next((i for i in table.ancestors(idx) if table.rows[i].kind == "op"), -1)


def _copy_top(table: Table, idx: int) -> int:
    """The top-most op of the copy chain that ``idx`` belongs to."""
    top = idx
    for i in table.ancestors(idx):
        if table.rows[i].kind != "op" or cat.op_role(table.rows[i].name) != "copy":
            break
        top = i
    return top


def _copy_ops(table: Table, top: int) -> list[Row]:
    return [table.rows[i] for i in table.subtree(top) if table.rows[i].name == "aten::copy_"]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _copy_bytes(row: Row) -> int:
    if not row.shapes or not row.dtypes:
        return 0
    return _numel(row.shapes[0]) * cat.dtype_size(row.dtypes[0])


def _copy_kind(table: Table, top: int, copies: list[Row]) -> str:
    for row in copies:
        if len(row.dtypes) >= 2 and cat.dtype_size(row.dtypes[0]) and row.dtypes[0] != row.dtypes[1]:
            return "cast"
    above = _innermost_op(table, top)
    layout = table.rows[top].name == "aten::contiguous" or (
        above >= 0 and cat.op_role(table.rows[above].name) == "composite")
    return "transpose" if layout else "copy"


def _dtype_kind(row: Row) -> str:
    return next((cat.dtype_label(d) for d in row.dtypes if cat.dtype_size(d)), "")


def _absorbed(table: Table, idx: int) -> bool:
    """An op inside another work/copy op is that op's implementation (composites are transparent)."""
    return any(table.rows[i].kind == "op" and cat.op_role(table.rows[i].name) in ("work", "copy", "sync")
               for i in table.ancestors(idx))


def op_hits(table: Table) -> list[_Hit]:
    """Op level (no CUDA): the top-most work op of each chain is one "launch"."""
    hits = []
    for i, row in enumerate(table.rows):
        if row.kind != "op" or not table.in_call[i] or row.name.startswith("profiler::"):
            continue
        role = cat.op_role(row.name)
        if role in ("view", "sync", "composite") or _absorbed(table, i):
            continue  # composites are transparent: the ops they dispatch to are the records
        time_us = (row.end_ns - row.start_ns) / 1e3
        if role == "copy":
            copies = _copy_ops(table, i)
            if not copies or not copies[0].shapes or copies[0].shapes[0] == ():
                continue  # no data moved, or a 0-dim scalar wrapped for an op
            hits.append(_Hit(row.name, "copy", _copy_kind(table, i, copies), time_us, _copy_bytes(copies[0]),
                             find_culprit(table, i)))
            continue
        category, kind = cat.op_category(row.name)
        if category == "gemm":
            kind = _dtype_kind(row)
        hits.append(_Hit(cat.stable_op_name(row.name), category, kind, time_us, 0, find_culprit(table, i)))
    return hits


def kernel_hits(table: Table) -> list[_Hit]:
    """Kernel level: every device activity launched inside a profiled call."""
    hits = []
    for i, row in enumerate(table.rows):
        if row.kind != "device" or not table.in_call[i] or cat.DEVICE_MARKER.match(row.name):
            continue
        category, kind = cat.classify_kernel(row.name)
        launch = table.parent[i]
        op = _innermost_op(table, launch) if launch >= 0 else -1
        op_row = table.rows[op] if op >= 0 else None
        nbytes = 0
        if op_row is not None and cat.op_role(op_row.name) == "copy" and category in (
                "copy", "elementwise", "other", "memcpy"):
            top = _copy_top(table, op)
            copies = _copy_ops(table, top)
            nbytes = _copy_bytes(copies[0]) if copies else 0
            if category != "memcpy":
                category, kind = "copy", _copy_kind(table, top, copies)
        elif category == "memcpy" and op_row is not None:
            nbytes = cat.dtype_size(op_row.dtypes[0]) if op_row.name == cat.SCALAR_SYNC and op_row.dtypes else 0
        elif category == "copy":
            kind = "cat" if "Cat" in row.name else "copy"
        elif category == "gemm":
            kind = _dtype_kind(op_row) if op_row is not None and op_row.dtypes else ""
            kind = kind or ("fp32" if re.search(r"f32f32|sgemm", row.name) else "")
        elif category == "other" and op_row is None and launch >= 0 and cat.DRIVER_LAUNCH.match(
                table.rows[launch].name):
            category = "triton"
        elif category == "other" and op_row is not None:
            category, kind = cat.op_category(op_row.name)
        hits.append(_Hit(cat.display_kernel_name(row.name), category, kind, (row.end_ns - row.start_ns) / 1e3, nbytes,
                         find_culprit(table, launch) if launch >= 0 else None))
    return hits


def sync_hits(table: Table, level: str) -> list[tuple[str, Culprit | None]]:
    """Host syncs. Kernel level: blocking runtime calls, one per enclosing sync/copy op. Op level: sync ops."""
    found: dict[int, str] = {}
    if level == "kernel":
        for i, row in enumerate(table.rows):
            if row.kind != "runtime" or not table.in_call[i] or row.name not in cat.SYNC_RUNTIME:
                continue
            anchor, kind = i, cat.SYNC_RUNTIME[row.name]
            for j in table.ancestors(i):
                name = table.rows[j].name
                if table.rows[j].kind == "op" and name in cat.SYNC_OPS:
                    anchor, kind = j, cat.SYNC_OPS[name]
                elif table.rows[j].kind == "op" and cat.op_role(name) == "copy":
                    anchor, kind = j, _memcpy_sync_kind(table, j)
            found.setdefault(anchor, kind)
    else:
        for i, row in enumerate(table.rows):
            if (row.kind == "op" and table.in_call[i] and row.name in cat.SYNC_OPS
                    and not any(table.rows[j].name in cat.SYNC_OPS for j in table.ancestors(i))):
                found[i] = cat.SYNC_OPS[row.name]
    return [(kind, find_culprit(table, i)) for i, kind in sorted(found.items())]


def _memcpy_sync_kind(table: Table, op: int) -> str:
    kinds = {cat.classify_kernel(table.rows[i].name)[1] for i in table.subtree(op) if table.rows[i].kind == "device"}
    return next((f"{k}_copy" for k in ("d2h", "h2d", "d2d") if k in kinds), "copy")


def sdpa_backend(table: Table, hits: list[_Hit]) -> tuple[str | None, Culprit | None]:
    """The SDPA backend(s) used ("+"-joined when mixed) and the user line of the first SDPA call."""
    sdpa_rows = [i for i, r in enumerate(table.rows)
                 if r.kind == "op" and table.in_call[i] and (r.name in cat.SDPA_OPS or r.name == cat.SDPA_ENTRY)]
    backends = {cat.SDPA_OPS[table.rows[i].name] for i in sdpa_rows if table.rows[i].name in cat.SDPA_OPS}
    backends |= {h.kind for h in hits if h.category == "attention" and h.kind in cat.SDPA_BACKENDS}
    if len(backends) > 1:
        backends.discard("unknown")
    if not backends and sdpa_rows:
        backends = {"unknown"}
    if not backends:
        return None, None
    culprit = find_culprit(table, sdpa_rows[0]) if sdpa_rows else next(
        (h.culprit for h in hits if h.category == "attention"), None)
    return "+".join(sorted(backends)), culprit


def peak_cpu_memory(table: Table) -> int:
    """Largest running total of CPU allocations inside one profiled call (bytes above the inputs)."""
    peak = 0
    for lo, hi in table.windows:
        total = 0
        for row in sorted((r for r in table.rows if r.kind == "memory" and not r.on_cuda
                           and lo <= r.start_ns <= hi), key=lambda r: r.start_ns):
            total += row.nbytes
            peak = max(peak, total)
    return peak
