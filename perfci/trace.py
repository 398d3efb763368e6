"""The profile stage: run a callable under torch.profiler and describe its structure.

``profile_call`` runs the callable ``calls`` times under ``torch.profiler``, flattens the trace
into a table of small rows once, and runs stateless analysers over it (categories, syncs, SDPA
backend, culprits). Structure, not time, is what the rules compare: counts are per call and are
exact integers when the code is deterministic.

Culprits: the profiler's own stack only knows the line where a Python function *starts*, so while
profiling a ``TorchFunctionMode`` wraps every torch call made from user code in a zero-cost
``perfci.site <file>:<line> (<function>) || <library frames>`` range. Kernels and ops inside such a
range are blamed on that line (the test's, or the code under test's) and carry the library frames
below it (``Culprit.stack``: e.g. the line of transformers' ``modeling_llama.py`` that made the
copy); otherwise the profiler's Python stack (function start line) is the fallback.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfci import categories as cat
from perfci.culprits import CALL_MARK, Culprit, site_marker
from perfci.errors import BadInputError, UsageError
from perfci.kernelrows import KernelRow, format_rows
from perfci.tracetable import (
    Table,
    build_table,
    kernel_hits,
    op_hits,
    peak_cpu_memory,
    sdpa_backend,
    sync_hits,
)
from perfci.units import format_bytes

__all__ = [
    "Culprit",
    "KernelProfile",
    "KernelRecord",
    "SyncRecord",
    "format_profile_table",
    "profile_call",
    "profile_rows",
]

SCHEMA = 1

# --- public records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelRecord:
    name: str
    category: str
    count_per_call: float
    time_us_per_call: float
    bytes_per_call: int
    culprit: Culprit | None
    kind: str = ""

    @property
    def is_copy(self) -> bool:
        return self.category in ("copy", "memcpy")


@dataclass(frozen=True)
class SyncRecord:
    kind: str
    count_per_call: float
    culprit: Culprit | None


@dataclass(frozen=True)
class KernelProfile:
    status: str  # "ok" | "missing"
    missing_reason: str | None
    level: str  # "kernel" (CUDA kernels seen) | "op" (aten ops) | "none" (missing)
    calls_profiled: int
    kernels: tuple[KernelRecord, ...]
    syncs: tuple[SyncRecord, ...]
    sdpa_backend: str | None  # "flash" | "efficient" | "cudnn" | "math" | "unknown", "+"-joined if mixed
    launches_per_call: float
    peak_memory_bytes: int | None
    copy_bytes_per_call: int
    device: str = ""
    notes: tuple[str, ...] = ()
    sdpa_culprit: Culprit | None = None  # the user line of the (first) SDPA call

    @classmethod
    def missing(cls, reason: str) -> KernelProfile:
        return cls("missing", reason, "none", 0, (), (), None, 0.0, None, 0)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def copies(self) -> tuple[KernelRecord, ...]:
        """The copy, cast, transpose and memcpy records."""
        return tuple(k for k in self.kernels if k.is_copy)

    def categories(self) -> frozenset[str]:
        return frozenset(k.category for k in self.kernels)

    def syncs_per_call(self) -> float:
        return sum(s.count_per_call for s in self.syncs)

    def to_dict(self) -> dict[str, Any]:
        """Compact, JSON-able form (it goes into pytest-benchmark's ``extra_info``)."""
        return {
            "schema": SCHEMA,
            "status": self.status,
            "missing_reason": self.missing_reason,
            "level": self.level,
            "calls": self.calls_profiled,
            "sdpa_backend": self.sdpa_backend,
            "sdpa_at": _culprit_text(self.sdpa_culprit),
            **_stack_of(self.sdpa_culprit, "sdpa_via"),
            "launches_per_call": self.launches_per_call,
            "peak_memory_bytes": self.peak_memory_bytes,
            "copy_bytes_per_call": self.copy_bytes_per_call,
            "device": self.device,
            "notes": list(self.notes),
            "kernels": [
                {"name": k.name, "cat": k.category, "kind": k.kind, "n": k.count_per_call,
                 "us": k.time_us_per_call, "bytes": k.bytes_per_call, "at": _culprit_text(k.culprit),
                 **_stack_of(k.culprit)}
                for k in self.kernels
            ],
            "syncs": [{"kind": s.kind, "n": s.count_per_call, "at": _culprit_text(s.culprit), **_stack_of(s.culprit)}
                      for s in self.syncs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelProfile:
        """Inverse of :meth:`to_dict`; unknown keys are ignored, malformed input is a BadInputError."""
        if not isinstance(data, Mapping):
            raise BadInputError(f"a stored profile must be a mapping, got {type(data).__name__}")
        if data.get("schema") != SCHEMA:
            raise BadInputError(f"stored profile has schema {data.get('schema')!r}, expected {SCHEMA}",
                                hint="re-record the baseline with this perfci version")
        try:
            status = str(data["status"])
            if status not in ("ok", "missing"):
                raise ValueError(f"status {status!r}")
            kernels = tuple(
                KernelRecord(str(k["name"]), str(k["cat"]), float(k["n"]), float(k["us"]), int(k["bytes"]),
                             _culprit_from(k.get("at"), k.get("via")), str(k.get("kind", "")))
                for k in data.get("kernels", ())
            )
            syncs = tuple(SyncRecord(str(s["kind"]), float(s["n"]), _culprit_from(s.get("at"), s.get("via")))
                          for s in data.get("syncs", ()))
            peak = data.get("peak_memory_bytes")
            backend = data.get("sdpa_backend")
            reason = data.get("missing_reason")
            return cls(
                status=status,
                missing_reason=None if reason is None else str(reason),
                level=str(data["level"]),
                calls_profiled=int(data["calls"]),
                kernels=kernels,
                syncs=syncs,
                sdpa_backend=None if backend is None else str(backend),
                launches_per_call=float(data["launches_per_call"]),
                peak_memory_bytes=None if peak is None else int(peak),
                copy_bytes_per_call=int(data["copy_bytes_per_call"]),
                device=str(data.get("device", "")),
                notes=tuple(str(n) for n in data.get("notes", ())),
                sdpa_culprit=_culprit_from(data.get("sdpa_at"), data.get("sdpa_via")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadInputError(f"malformed stored profile: {type(exc).__name__}: {exc}") from None


def _culprit_text(culprit: Culprit | None) -> str | None:
    return None if culprit is None else str(culprit)


def _stack_of(culprit: Culprit | None, key: str = "via") -> dict[str, list[str]]:
    """The library frames below a culprit, innermost first, under ``key`` (absent when there are none:
    profiles stored before they were recorded load unchanged)."""
    return {key: [str(f) for f in culprit.stack]} if culprit is not None and culprit.stack else {}


def _culprit_from(text: object, via: object = None) -> Culprit | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise BadInputError(f"culprit must be a string, got {type(text).__name__}")
    if via is not None and not (isinstance(via, list) and all(isinstance(f, str) for f in via)):
        raise BadInputError(f"a culprit's 'via' must be a list of 'file:line (function)' strings, got {via!r}")
    return Culprit.parse(text, tuple(via or ()))


# --- profiling --------------------------------------------------------------------------------


_SITE_MODE: list[Any] = []


def _site_marker() -> Any:
    try:
        from torch._C._profiler import _RecordFunctionFast
    except ImportError:  # pragma: no cover - older torch
        from torch.profiler import record_function as _RecordFunctionFast
    return _RecordFunctionFast


def _site_mode() -> Any:
    """A TorchFunctionMode marking every torch call from user code with its file:line.

    One instance per process: torch.compile guards on the mode's type, so a fresh class per call
    would recompile compiled callables on every profile.
    """
    if _SITE_MODE:
        return _SITE_MODE[0]
    import torch
    from torch.overrides import TorchFunctionMode

    marker = _site_marker()
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    class _SiteMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") == "__get__" or is_compiling():
                return func(*args, **kwargs)
            site = site_marker(sys._getframe(1))
            if site is None:
                return func(*args, **kwargs)
            with marker(site):
                return func(*args, **kwargs)

    _SITE_MODE.append(_SiteMode())
    return _SITE_MODE[0]


@contextlib.contextmanager
def _sites(torch: Any):
    """Site markers for torch calls, plus ``torch.cuda.synchronize`` (not a torch function)."""
    original = torch.cuda.synchronize
    marker = _site_marker()

    def synchronize(device: Any = None) -> None:
        site = site_marker(sys._getframe(1))
        if site is None:
            return original(device)
        with marker(site):
            return original(device)

    torch.cuda.synchronize = synchronize
    try:
        with _site_mode():
            yield
    finally:
        torch.cuda.synchronize = original


def _per_call(value: float, calls: int) -> float:
    return round(value / calls, 3)


def summarise(table: Table, *, peak_memory_bytes: int | None, device: str) -> KernelProfile:
    """Run the analysers over the table and aggregate per (name, category, kind, culprit).

    ``peak_memory_bytes``: the device's peak above the inputs (kernel level); op level uses the
    profiler's CPU memory events instead.
    """
    level = "kernel" if any(r.kind == "device" and table.in_call[i] for i, r in enumerate(table.rows)) else "op"
    hits = kernel_hits(table) if level == "kernel" else op_hits(table)
    calls = table.calls
    groups: dict[tuple[str, str, str, Culprit | None], list[Any]] = {}
    for hit in hits:
        groups.setdefault((hit.name, hit.category, hit.kind, hit.culprit), []).append(hit)
    kernels = tuple(
        KernelRecord(name, category, _per_call(len(group), calls),
                     round(sum(h.time_us for h in group) / calls, 1),
                     round(sum(h.nbytes for h in group) / calls), culprit, kind)
        for (name, category, kind, culprit), group in sorted(groups.items(), key=lambda kv: _sort_key(kv[0]))
    )
    sync_counts = Counter(sync_hits(table, level))
    syncs = tuple(SyncRecord(kind, _per_call(n, calls), culprit)
                  for (kind, culprit), n in sorted(sync_counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))))
    backend, backend_culprit = sdpa_backend(table, hits)
    notes = []
    if any(r.name == cat.CPU_FLASH and table.in_call[i] for i, r in enumerate(table.rows)):
        notes.append("sdpa 'flash' is the CPU kernel aten::_scaled_dot_product_flash_attention_for_cpu")
    if level == "op":
        notes.append("no CUDA kernels: records are top-level aten ops, syncs are the ops that sync on a GPU")
    return KernelProfile(
        status="ok",
        missing_reason=None,
        level=level,
        calls_profiled=calls,
        kernels=kernels,
        syncs=syncs,
        sdpa_backend=backend,
        launches_per_call=_per_call(len(hits), calls),
        peak_memory_bytes=peak_memory_bytes if level == "kernel" and peak_memory_bytes is not None
        else peak_cpu_memory(table),
        copy_bytes_per_call=sum(k.bytes_per_call for k in kernels if k.is_copy),
        device=device,
        notes=tuple(notes),
        sdpa_culprit=backend_culprit,
    )


def _sort_key(key: tuple[str, str, str, Culprit | None]) -> tuple[str, str, str, str]:
    name, category, kind, culprit = key
    return category, kind, name, str(culprit)


def _profiler_busy(torch: Any) -> bool:
    enabled = getattr(torch.autograd, "_profiler_enabled", None) or getattr(
        torch._C._autograd, "_profiler_enabled", None)
    try:
        return bool(enabled()) if enabled is not None else False
    except RuntimeError:
        return False


def profile_call(
    fn: Callable[[], object], *, calls: int = 3, label: str = "", trace_path: Path | None = None
) -> KernelProfile:
    """Profile ``fn`` (warm-up once untraced, then ``calls`` times traced); never raises for profiler trouble.

    Returns ``KernelProfile.missing(reason)`` when torch.profiler cannot be used or fails, and an
    empty ``ok`` profile when ``fn`` launches nothing. ``trace_path``: where to write the Chrome/
    Perfetto trace (parent folders are created).
    """
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise UsageError(f"profile_call needs calls >= 1, got {calls!r}")
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function
    except Exception as exc:  # ImportError, or a broken install
        return KernelProfile.missing(f"torch.profiler is not available: {type(exc).__name__}: {exc}")
    if _profiler_busy(torch):
        return KernelProfile.missing("another torch.profiler session is already running in this process")
    use_cuda = torch.cuda.is_available()
    device = f"cuda:{torch.cuda.get_device_name()}" if use_cuda else "cpu"
    try:
        with _sites(torch):  # warm-up: compiles, autotunes, allocates caches; not traced
            fn()
        if use_cuda:
            torch.cuda.synchronize()
    except Exception as exc:
        return KernelProfile.missing(f"the profiled function raised during warm-up: {type(exc).__name__}: {exc}")
    before = 0
    if use_cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else [])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=activities, record_shapes=True, with_stack=True, profile_memory=True) as prof:
                with record_function(label) if label else contextlib.nullcontext():
                    for _ in range(calls):
                        with record_function(CALL_MARK), _sites(torch):
                            fn()
                if use_cuda:
                    torch.cuda.synchronize()
        events = prof.profiler.kineto_results.events()
    except Exception as exc:
        return KernelProfile.missing(f"torch.profiler failed: {type(exc).__name__}: {exc}")
    peak = max(0, torch.cuda.max_memory_allocated() - before) if use_cuda else None
    notes: tuple[str, ...] = ()
    if trace_path is not None:
        try:
            trace_path = Path(trace_path)
            trace_path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(trace_path))
        except (OSError, RuntimeError) as exc:
            notes = (f"could not write the trace to {trace_path}: {exc}",)
    try:
        table = build_table(list(events), calls=calls, annotations=frozenset({CALL_MARK, label} - {""}))
        result = summarise(table, peak_memory_bytes=peak, device=device)
    except Exception as exc:  # a trace we cannot read is a missing profile, not a crash
        return KernelProfile.missing(f"could not analyse the profiler trace: {type(exc).__name__}: {exc}")
    launched = any(r.kind == "runtime" and cat.ANY_LAUNCH.match(r.name) and table.in_call[i]
                   for i, r in enumerate(table.rows))
    if use_cuda and launched and result.level != "kernel":
        return KernelProfile.missing("CUDA kernels were launched but the profiler recorded none "
                                     "(CUPTI busy: is another profiler such as nsys or ncu attached?)")
    return _with_notes(result, notes) if notes else result


def _with_notes(profile: KernelProfile, notes: tuple[str, ...]) -> KernelProfile:
    from dataclasses import replace

    return replace(profile, notes=profile.notes + notes)


# --- terminal output --------------------------------------------------------------------------


def profile_rows(benchmark: str, profile: KernelProfile) -> list[KernelRow]:
    """The kernel profile of one benchmark as kernel rows (counts over the profiled calls); host syncs
    become rows of category ``sync`` so that they show beside the kernels."""
    calls = max(profile.calls_profiled, 1)
    rows = [KernelRow(benchmark, k.name, k.category, k.kind, round(k.count_per_call * calls),
                      k.time_us_per_call * calls / 1e3, k.culprit.describe() if k.culprit else None,
                      {"bytes_per_call": float(k.bytes_per_call)} if k.bytes_per_call else {})
            for k in profile.kernels]
    rows += [KernelRow(benchmark, "(host waits for device)", "sync", s.kind, round(s.count_per_call * calls), 0.0,
                       s.culprit.describe() if s.culprit else None) for s in profile.syncs]
    return rows


def format_profile_table(profile: KernelProfile, benchmark: str = "(profiled call)") -> str:
    """A summary line, then the kernel rows through the one table printer (``perfci.kernelrows``)."""
    if not profile.ok:
        return f"profile missing: {profile.missing_reason}"
    head = (f"level={profile.level} device={profile.device or '?'} calls={profile.calls_profiled} "
            f"launches/call={profile.launches_per_call:g} sdpa={profile.sdpa_backend or '-'} "
            f"copy bytes/call={format_bytes(profile.copy_bytes_per_call)} "
            f"peak mem={'-' if profile.peak_memory_bytes is None else format_bytes(profile.peak_memory_bytes)}")
    lines = [head, format_rows(profile_rows(benchmark, profile), metrics=("bytes_per_call",))]
    lines.extend(f"note: {n}" for n in profile.notes)
    return "\n".join(lines)
