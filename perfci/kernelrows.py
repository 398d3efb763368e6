"""The one kernel-row type every profiler produces, and the one table printer for it.

torch.profiler (through :class:`perfci.trace.KernelProfile`), Nsight Systems and Nsight Compute all
report "benchmark X ran kernel Y this many times for this long"; each tool adds its own metrics
(DRAM bytes, SM or tensor-pipe utilisation, occupancy, registers...) under ``metrics``, keyed by
a name that carries its unit (``dram_bytes``, ``sm_pct``, ``registers``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from perfci.units import format_bytes, format_time_ms

NO_RANGE = "(no NVTX range)"


@dataclass(frozen=True)
class KernelRow:
    benchmark: str  # the benchmark's node id (its NVTX range text), or NO_RANGE
    name: str  # the kernel's display name (perfci.categories.display_kernel_name)
    category: str  # perfci.categories.classify_kernel's category
    kind: str  # ... and kind ("" when none)
    count: int  # launches in the profiled window
    time_ms: float  # total device time of those launches
    culprit: str | None = None  # file:line (function) of the user code that launched it, when known
    metrics: Mapping[str, float] = field(default_factory=dict, compare=False)

    @property
    def time_per_launch_ms(self) -> float:
        return self.time_ms / self.count if self.count else 0.0


def by_benchmark(rows: Iterable[KernelRow]) -> dict[str, list[KernelRow]]:
    """Rows grouped per benchmark, each group sorted by total time (largest first)."""
    grouped: dict[str, list[KernelRow]] = defaultdict(list)
    for row in rows:
        grouped[row.benchmark].append(row)
    return {b: sorted(rs, key=lambda r: -r.time_ms) for b, rs in sorted(grouped.items())}


def _metric_cell(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key.endswith("_bytes"):
        return format_bytes(value)
    if key.endswith("_pct"):
        return f"{value:.1f}%"
    return f"{value:.4g}"


def format_rows(rows: Iterable[KernelRow], *, metrics: Sequence[str] = (), name_width: int = 56) -> str:
    """Per benchmark: category, kernel, launches, total and per-launch time, chosen metrics, culprit."""
    out: list[str] = []
    for bench, items in by_benchmark(rows).items():
        total_ms = sum(r.time_ms for r in items)
        out.append(f"\n== {bench}  ({sum(r.count for r in items)} launches, {format_time_ms(total_ms)} kernel time)")
        head = f"  {'category':<18} {'kernel':<{name_width}} {'count':>6} {'total':>10} {'per launch':>11}"
        head += "".join(f" {m:>12}" for m in metrics)
        out.append(head + "  culprit")
        for r in items:
            category = f"{r.category}/{r.kind}" if r.kind else r.category
            name = r.name if len(r.name) <= name_width else r.name[: name_width - 1] + "…"
            line = (f"  {category:<18} {name:<{name_width}} {r.count:>6d} {format_time_ms(r.time_ms):>10} "
                    f"{format_time_ms(r.time_per_launch_ms):>11}")
            line += "".join(f" {_metric_cell(m, r.metrics.get(m)):>12}" for m in metrics)
            out.append(line + f"  {r.culprit or '-'}")
    return "\n".join(out).lstrip("\n") if out else "(no kernels recorded)"


def metric_names(rows: Iterable[KernelRow]) -> list[str]:
    """Every metric key present in ``rows``, in first-seen order."""
    seen: dict[str, None] = {}
    for r in rows:
        for key in r.metrics:
            seen.setdefault(key, None)
    return list(seen)


def merge_metrics(row: KernelRow, extra: Mapping[str, float]) -> KernelRow:
    """``row`` with ``extra`` metrics added (later keys win)."""
    return KernelRow(row.benchmark, row.name, row.category, row.kind, row.count, row.time_ms, row.culprit,
                     {**row.metrics, **extra})
