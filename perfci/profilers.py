"""The profiler registry: ``perfci profile --torch / --nsys / --ncu`` and their help come from here.

A profiler runs selected benchmarks under its tool and returns :class:`ProfileRun`: the same
:class:`perfci.kernelrows.KernelRow` rows whatever the tool, printed by the one table printer, and
the files it kept. To add a profiler, write a class with ``name``, ``help`` and ``run`` (and ``read``
when it can read an existing export) and add it to :data:`PROFILERS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from perfci.kernelrows import KernelRow
from perfci.trace import profile_rows


@dataclass(frozen=True)
class ProfileRun:
    rows: tuple[KernelRow, ...]
    files: tuple[Path, ...] = ()  # what the tool wrote and perfci keeps (traces, reports, exports)
    summary: Path | None = None  # the JSON summary written beside them, if any
    pytest_exit: int = 0
    metrics: tuple[str, ...] = ()  # the metric columns worth printing
    notes: tuple[str, ...] = field(default=())


class Profiler(Protocol):
    name: str
    help: str

    def run(self, pytest_args: list[str], out_dir: Path, options: dict[str, str]) -> ProfileRun: ...


class TorchProfiler:
    name = "torch"
    help = "torch.profiler (CUPTI kernels on a GPU, aten ops on CPU), Chrome/Perfetto traces kept"

    def run(self, pytest_args: list[str], out_dir: Path, options: dict[str, str]) -> ProfileRun:
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
        return ProfileRun(tuple(rows), files, None, code, ("bytes_per_call",), tuple(notes))


class NsightProfiler:
    """Nsight Systems or Nsight Compute (``perfci.nsight``): optional tools, exit 3 when missing."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name, self.help = name, help_text

    def run(self, pytest_args: list[str], out_dir: Path, options: dict[str, str]) -> ProfileRun:
        from perfci import nsight

        code = nsight.profile_with(self.name, pytest_args, out_dir)  # prints its own table
        return ProfileRun((), (out_dir,), None, code)


PROFILERS: dict[str, Profiler] = {
    "torch": TorchProfiler(),
    "nsys": NsightProfiler("nsys", "Nsight Systems: kernels, memcpy and launch overhead per benchmark NVTX range"),
    "ncu": NsightProfiler("ncu", "Nsight Compute: per-kernel metrics and roofline place, clocks left alone"),
}
