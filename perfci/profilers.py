"""The profiler registry: ``perfci profile --torch / --nsys / --ncu`` and their help come from here.

A profiler runs selected benchmarks under its tool and returns :class:`ProfileRun`: the same
:class:`perfci.kernelrows.KernelRow` rows whatever the tool, printed by the one table printer, and
the files it kept. To add a profiler, write a class with ``name``, ``help`` and ``run`` (and ``read``
when it can read an existing export, as ``perfci.nsys.NsysProfiler`` does) and add it to
:func:`registry`. torch.profiler is here; Nsight Systems in ``perfci.nsys``, Nsight Compute in
``perfci.ncu`` (their shared runner pieces in ``perfci.nsight``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from perfci.errors import EXIT_OK, EXIT_REGRESSION
from perfci.kernelrows import KernelRow, format_rows
from perfci.trace import profile_rows


@dataclass(frozen=True)
class ProfileRun:
    """One profiler pass over the selected benchmarks (or one export read with ``--from``)."""

    rows: tuple[KernelRow, ...]  # per benchmark, per kernel
    files: tuple[Path, ...] = ()  # what the tool wrote and perfci keeps (traces, reports, exports, summary)
    summary: Path | None = None  # the JSON summary written beside them, if any
    pytest_exit: int = 0  # the profiled pytest's exit status (0 for a file read with --from)
    metrics: tuple[str, ...] = ()  # the metric columns worth printing
    notes: tuple[str, ...] = field(default=())
    tool: str = ""

    @property
    def exit_code(self) -> int:
        """1 when a profiled test failed, else 0."""
        return EXIT_OK if self.pytest_exit == 0 else EXIT_REGRESSION

    def table(self) -> str:
        return format_rows(self.rows, metrics=self.metrics)


class Profiler(Protocol):
    name: str
    help: str

    def run(self, pytest_args: list[str], out_dir: Path, options: Mapping[str, str] | None = None) -> ProfileRun: ...


class TorchProfiler:
    name = "torch"
    help = "torch.profiler (CUPTI kernels on a GPU, aten ops on CPU), Chrome/Perfetto traces kept"

    def run(self, pytest_args: list[str], out_dir: Path, options: Mapping[str, str] | None = None) -> ProfileRun:
        from perfci.pipeline import measure

        traces = out_dir / "traces"
        result, code = measure(pytest_args, out_dir / "results.json",
                               extra=[f"--perfci-trace-dir={traces}", "--perfci-max-time=0.5", "--perfci-min-time=0.1"])
        rows: list[KernelRow] = []
        notes = []
        for name, record in result.benchmarks.items():
            if record.profile is None or not record.profile.ok:
                why = record.profile.missing_reason if record.profile is not None else "no profile recorded"
                notes.append(f"{name}: {why}")
                continue
            rows += profile_rows(name, record.profile)
            p = record.profile
            notes.append(f"{name}: {p.level} level on {p.device or '?'}, {p.launches_per_call:g} launches/call, "
                         f"SDPA {p.sdpa_backend or '-'}, peak memory {p.peak_memory_bytes}")
        files = (result.path, *sorted(traces.glob("*.json"))) if traces.is_dir() else (result.path,)
        return ProfileRun(tuple(rows), files, None, code, ("bytes_per_call",), tuple(notes), self.name)


@functools.cache
def registry() -> dict[str, Profiler]:
    """The profilers by name (the CLI's --torch/--nsys/--ncu and their help come from here)."""
    from perfci.ncu import NcuProfiler
    from perfci.nsys import NsysProfiler

    return {"torch": TorchProfiler(), "nsys": NsysProfiler(), "ncu": NcuProfiler()}
