"""Plotly figures of the HTML report, as plain ``{"data": [...], "layout": {...}}`` dicts.

Figures are dicts (not ``plotly.graph_objects``) so that building a page of 68+ benchmarks costs
milliseconds; :mod:`perfci.html_report` serialises them once and plotly.js draws them in the page.
Every chart that lists benchmarks has one horizontal row per benchmark and grows with their count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfci.record import ResultFile
from perfci.trace import KernelProfile, KernelRecord
from perfci.verdicts import Verdict

Figure = dict[str, Any]

VERDICT_COLORS = {
    Verdict.ERROR: "#b71c1c", Verdict.INVALID: "#b71c1c", Verdict.STRUCTURE: "#c62828", Verdict.SLOWER: "#d32f2f",
    Verdict.NOISY: "#ef8f00", Verdict.MISSING: "#6d6d6d", Verdict.NEW: "#1565c0", Verdict.UNCOMPARED: "#6d6d6d",
    Verdict.FASTER: "#2e7d32", Verdict.SAME: "#607d8b",
}
# kernel-mix series: copies, casts, transposes and memcpys stand out; the rest is muted
SERIES_COLORS = {
    "gemm": "#4c78a8", "attention": "#72b7b2", "triton": "#54a24b", "elementwise": "#bab0ac",
    "reduction": "#9d755d", "memset": "#d8d8d8", "other": "#8c8c8c", "copy/cast": "#f58518",
    "copy/transpose": "#e45756", "copy": "#e45756", "memcpy": "#b279a2",
}
ROW_PX = 22  # height of one benchmark row in the per-benchmark charts
_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}


@dataclass(frozen=True)
class ChangeRow:
    label: str
    verdict: Verdict
    change_pct: float
    low_pct: float
    high_pct: float
    hover: str


def series_of(kernel: KernelRecord) -> str:
    """The kernel-mix series a kernel is stacked in: its category, copies split by kind."""
    if kernel.category == "copy":
        return f"copy/{kernel.kind}" if kernel.kind in ("cast", "transpose") else "copy"
    return kernel.category if kernel.category in SERIES_COLORS else "other"


def _layout(height_px: float, **extra: Any) -> dict[str, Any]:
    return {"height": int(height_px), "margin": {"l": 10, "r": 30, "t": 36, "b": 48}, "font": _FONT,
            "paper_bgcolor": "white", "plot_bgcolor": "white", "hovermode": "closest", **extra}


def _cat_axis(labels: Sequence[str]) -> dict[str, Any]:
    return {"type": "category", "automargin": True, "categoryorder": "array", "categoryarray": list(labels),
            "tickfont": {"size": 11}, "showgrid": True, "gridcolor": "#f0f0f0"}


def change_figure(rows: Sequence[ChangeRow], threshold_pct: float, timer_label: str) -> Figure:
    """Change vs baseline per benchmark, its interval as error bars, the ±threshold band shaded.

    Sorted by change, largest slowdown on top, on a linear % axis; points beyond the axis range
    sit at its edge as triangles with their true value written beside them.
    """
    ordered = sorted(rows, key=lambda r: r.change_pct)
    # the axis spans the benchmarks whose intervals resolve the threshold; the others may sit at its edge
    reach = max([max(abs(r.low_pct), abs(r.high_pct)) for r in ordered
                 if r.high_pct - r.low_pct < 5.0 * threshold_pct] + [0.0])
    limit = max(2.5 * threshold_pct, min(reach * 1.2, 60.0))
    xs, symbols, texts = [], [], []
    for r in ordered:
        clipped = abs(r.change_pct) > limit
        xs.append(math.copysign(limit * 0.97, r.change_pct) if clipped else r.change_pct)
        symbols.append(("triangle-right" if r.change_pct > 0 else "triangle-left") if clipped else "circle")
        texts.append(f"{r.change_pct:+.1f}%" if clipped or abs(r.change_pct) >= threshold_pct * 0.75 else "")
    trace = {
        "type": "scatter", "mode": "markers+text", "orientation": "h", "x": xs, "y": [r.label for r in ordered],
        "text": texts, "textposition": "middle right", "textfont": {"size": 10},
        "marker": {"color": [VERDICT_COLORS[r.verdict] for r in ordered], "size": 8, "symbol": symbols},
        "error_x": {"type": "data", "symmetric": False, "thickness": 1.5, "width": 3, "color": "#455a64",
                    "array": [max(r.high_pct - x, 0.0) if abs(r.change_pct) <= limit else 0 for r, x in
                              zip(ordered, xs, strict=True)],
                    "arrayminus": [max(x - r.low_pct, 0.0) if abs(r.change_pct) <= limit else 0 for r, x in
                                   zip(ordered, xs, strict=True)]},
        "hovertext": [r.hover for r in ordered], "hoverinfo": "text", "showlegend": False, "cliponaxis": False,
    }
    band = {"type": "rect", "xref": "x", "yref": "paper", "x0": -threshold_pct, "x1": threshold_pct, "y0": 0,
            "y1": 1, "fillcolor": "rgba(96,125,139,0.13)", "line": {"width": 0}, "layer": "below"}
    zero = {"type": "line", "xref": "x", "yref": "paper", "x0": 0, "x1": 0, "y0": 0, "y1": 1,
            "line": {"color": "#90a4ae", "width": 1}}
    return {"data": [trace], "layout": _layout(
        ROW_PX * len(ordered) + 90, shapes=[band, zero],
        yaxis={**_cat_axis([r.label for r in ordered]), "range": [-0.7, len(ordered) - 0.3]},
        xaxis={"title": {"text": f"change vs baseline, % ({timer_label}); shaded: ±{threshold_pct:g}% threshold"},
               "range": [-limit, limit], "zeroline": False, "ticksuffix": "%", "side": "top",
               "gridcolor": "#eceff1"})}


def samples_figure(base_ms: Sequence[float], now_ms: Sequence[float], timer_label: str) -> Figure:
    """Baseline vs now: the compared samples of each side as a horizontal box with its points."""
    scale, unit = (1e3, "µs") if max([*base_ms, *now_ms, 0.0]) < 1.0 else (1.0, "ms")
    data = []
    for name, values, color in (("baseline", base_ms, "#90a4ae"), ("now", now_ms, "#1e88e5")):
        if values:
            data.append({"type": "box", "name": f"{name} (n={len(values)})", "x": [v * scale for v in values],
                         "orientation": "h", "boxpoints": "outliers", "marker": {"color": color, "size": 3},
                         "line": {"width": 1.5}, "showlegend": False, "hoverinfo": "x"})
    return {"data": data, "layout": _layout(
        70 + 45 * len(data), xaxis={"title": {"text": f"compared time per call ({unit}, {timer_label})"},
                                    "gridcolor": "#eceff1"},
        yaxis={"automargin": True}, margin={"l": 10, "r": 20, "t": 10, "b": 44})}


def _mix(profile: KernelProfile | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in profile.kernels if profile is not None else ():
        key = series_of(k)
        out[key] = out.get(key, 0.0) + k.time_us_per_call
    return out


def kernel_mix_figure(labels: Sequence[str], profiles: Sequence[KernelProfile | None],
                      syncs: Sequence[float]) -> Figure:
    """Share of kernel time per call by category, one row per benchmark, syncs flagged on the right."""
    mixes = [_mix(p) for p in profiles]
    totals = [sum(m.values()) or 1.0 for m in mixes]
    present = [s for s in SERIES_COLORS if any(s in m for m in mixes)]
    data: list[dict[str, Any]] = []
    for series in present:
        us = [m.get(series, 0.0) for m in mixes]
        data.append({"type": "bar", "orientation": "h", "name": series, "y": list(labels),
                     "x": [100.0 * u / t for u, t in zip(us, totals, strict=True)],
                     "marker": {"color": SERIES_COLORS[series],
                                "line": {"width": 1 if series.startswith(("copy", "memcpy")) else 0,
                                         "color": "#5d1a00"}},
                     "customdata": us, "hovertemplate": f"%{{y}}<br>{series}: %{{customdata:.1f}} µs/call "
                                                        "(%{x:.1f}%)<extra></extra>"})
    notes = [{"xref": "paper", "yref": "y", "x": 1.005, "y": lab, "xanchor": "left", "showarrow": False,
              "text": f"⚠ {n:g} sync/call", "font": {"color": "#b71c1c", "size": 10}}
             for lab, n in zip(labels, syncs, strict=True) if n > 0]
    notes += [{"xref": "x", "yref": "y", "x": 1, "y": lab, "xanchor": "left", "showarrow": False,
               "text": "no kernels in the profile", "font": {"color": "#7b8794", "size": 10}}
              for lab, m in zip(labels, mixes, strict=True) if not m]
    return {"data": data, "layout": _layout(
        ROW_PX * len(labels) + 110, barmode="stack", yaxis={**_cat_axis(labels), "autorange": "reversed"},
        xaxis={"title": {"text": "share of kernel time per call, % (hover: µs/call)"}, "range": [0, 100],
               "ticksuffix": "%", "side": "top"},
        legend={"orientation": "h", "y": -0.5 / max(len(labels), 1) - 0.02, "yanchor": "top"}, annotations=notes,
        margin={"l": 10, "r": 110, "t": 40, "b": 30})}


def kernel_compare_figure(base: KernelProfile | None, now: KernelProfile | None) -> Figure:
    """Kernel time per call by category, baseline vs now, stacked (µs)."""
    mixes = [("baseline", _mix(base)), ("now", _mix(now))]
    present = [s for s in SERIES_COLORS if any(s in m for _, m in mixes)]
    data = [{"type": "bar", "orientation": "h", "name": s, "y": [n for n, _ in mixes],
             "x": [m.get(s, 0.0) for _, m in mixes], "marker": {"color": SERIES_COLORS[s]},
             "hovertemplate": f"{s}: %{{x:.1f}} µs/call<extra></extra>"} for s in present]
    return {"data": data, "layout": _layout(
        170, barmode="stack", yaxis={"autorange": "reversed", "automargin": True},
        xaxis={"title": {"text": "kernel time per call (µs, under the profiler)"}, "gridcolor": "#eceff1"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"}, margin={"l": 10, "r": 20, "t": 30, "b": 44})}


def throughput_figure(labels: Sequence[str], compute_pct: Sequence[float | None],
                      memory_pct: Sequence[float | None], hovers: Sequence[str], peak_note: str) -> Figure:
    """% of this GPU's measured peaks, compute and memory side by side, one row per benchmark."""
    data = [{"type": "bar", "orientation": "h", "name": name, "y": list(labels), "x": list(values),
             "marker": {"color": color}, "hovertext": list(hovers), "hoverinfo": "text"}
            for name, values, color in (("compute (% of peak TFLOPS)", compute_pct, "#4c78a8"),
                                        ("memory (% of peak GB/s)", memory_pct, "#f2a03d"))]
    return {"data": data, "layout": _layout(
        2 * ROW_PX * len(labels) / 1.4 + 110, barmode="group", bargap=0.25,
        yaxis={**_cat_axis(labels), "autorange": "reversed"},
        xaxis={"title": {"text": f"% of measured peak ({peak_note})"}, "ticksuffix": "%", "side": "top",
               "range": [0, 110], "gridcolor": "#eceff1"},
        legend={"orientation": "h", "y": 0, "yanchor": "top"}, margin={"l": 10, "r": 20, "t": 44, "b": 40})}


def roofline_figure(points: Sequence[Mapping[str, Any]], peak_tflops: float | None,
                    peak_gbps: float | None) -> Figure:
    """Kernels at (FLOP/byte, achieved TFLOP/s) under the compute and bandwidth roofs, log-log."""
    data: list[dict[str, Any]] = []
    xs = [p["intensity"] for p in points]
    if peak_tflops and peak_gbps:
        lo, hi = min([*xs, 0.1]) / 2, max([*xs, 1000.0]) * 2
        ridge = peak_tflops * 1e3 / peak_gbps
        data.append({"type": "scatter", "mode": "lines", "name": "roof", "x": [lo, ridge, hi],
                     "y": [peak_gbps * lo / 1e3, peak_tflops, peak_tflops], "line": {"color": "#37474f", "width": 2},
                     "hoverinfo": "skip"})
    by_bench: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        by_bench.setdefault(p["benchmark"], []).append(p)
    for bench, items in by_bench.items():
        data.append({"type": "scatter", "mode": "markers", "name": bench, "x": [p["intensity"] for p in items],
                     "y": [p["tflops"] for p in items], "marker": {"size": 9},
                     "hovertext": [f"{bench}<br>{p['kernel']}<br>{p['intensity']:.3g} FLOP/B, {p['tflops']:.3g} "
                                   f"TFLOP/s{p['extra']}" for p in items], "hoverinfo": "text"})
    return {"data": data, "layout": _layout(
        520, xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP per DRAM byte)"}, "automargin": True},
        yaxis={"type": "log", "title": {"text": "achieved TFLOP/s"}, "automargin": True},
        legend={"font": {"size": 10}})}


def history_figure(runs: Sequence[str], series: Mapping[str, Sequence[float | None]], top_n: int,
                   timer_label: str) -> Figure:
    """Compared median per benchmark over the stored runs, as % of its first run; the ``top_n`` that
    moved most are drawn, the others are one click away in the legend."""
    def moved(values: Sequence[float | None]) -> float:
        known = [v for v in values if v is not None]
        return max(abs(v / known[0] - 1.0) for v in known) if known else 0.0

    ranked = sorted(series, key=lambda n: -moved(series[n]))
    data = []
    for i, name in enumerate(ranked):
        values = series[name]
        first = next(v for v in values if v is not None)
        data.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": list(runs),
                     "y": [None if v is None else 100.0 * (v / first - 1.0) for v in values],
                     "customdata": [None if v is None else v for v in values], "connectgaps": True,
                     "hovertemplate": "%{x}<br>%{y:+.2f}% (%{customdata:.4g} ms)<extra>" + name + "</extra>",
                     "visible": True if i < top_n else "legendonly"})
    return {"data": data, "layout": _layout(
        460, xaxis={"type": "category", "title": {"text": "stored run (oldest first)"}, "automargin": True},
        yaxis={"title": {"text": f"compared median vs its first run, % ({timer_label})"}, "ticksuffix": "%",
               "zerolinecolor": "#90a4ae", "automargin": True},
        legend={"font": {"size": 10}, "title": {"text": f"top {top_n} by change drawn; click to add"}})}


# --- roofline and history data ------------------------------------------------------------------


def roof_points(roofline: Mapping[str, Any]) -> tuple[dict[str, dict[str, Mapping[str, Any]]], list[dict]]:
    """``{bench: {kernel: metrics}}`` (or ncu's summary JSON with ``ranges``) -> per-bench tables, points."""
    if isinstance(roofline.get("ranges"), Mapping):
        table = {b: {str(k.get("name")): dict(k.get("metrics") or {}) for k in r.get("kernels", ())}
                 for b, r in roofline["ranges"].items()}
    else:
        table = {b: {str(k): dict(m) for k, m in ks.items() if isinstance(m, Mapping)}
                 for b, ks in roofline.items() if isinstance(ks, Mapping)}
    points = []
    for bench, kernels in table.items():
        for kernel, m in kernels.items():
            intensity = m.get("intensity_flop_per_byte")
            rate = m.get("tflops")
            if rate is None and m.get("dram_gbps") is not None and intensity is not None:
                rate = float(m["dram_gbps"]) * float(intensity) / 1e3  # FLOP/B x GB/s
            if rate is None and m.get("flops") is not None:
                rate = float(m["flops"]) / (float(m["time_ms"]) * 1e9) if m.get("time_ms") else float(m["flops"]) / 1e12
            if intensity and rate and intensity > 0 and rate > 0:
                extra = "".join(f"<br>{k} {float(m[k]):.1f}%" for k in ("pct_peak_flops", "pct_peak_bandwidth")
                                if m.get(k) is not None)
                points.append({"benchmark": bench, "kernel": kernel, "intensity": float(intensity),
                               "tflops": float(rate), "extra": extra})
    return {b: k for b, k in table.items() if k}, points


def roof_peaks(roofline: Mapping[str, Any], table: Mapping[str, Mapping[str, Mapping[str, Any]]],
               peak_tflops: float | None, peak_gbps: float | None) -> tuple[float | None, float | None]:
    """Peak TFLOP/s and GB/s for the roofs: given with the data, else the kernels' own, else ours."""
    metrics = [m for ks in table.values() for m in ks.values()]
    t = roofline.get("peak_tflops") or (float(roofline["peak_flops"]) / 1e12 if roofline.get("peak_flops") else None)
    g = roofline.get("peak_bandwidth_gbps")
    t = t or max((float(m["peak_tflops"]) for m in metrics if m.get("peak_tflops")), default=None)
    g = g or max((float(m["peak_bandwidth_gbps"]) for m in metrics if m.get("peak_bandwidth_gbps")), default=None)
    return t or peak_tflops, g or peak_gbps


def history_series(runs: Sequence[ResultFile]) -> tuple[list[str], dict[str, list[float | None]]]:
    labels = [f"{i + 1}: {r.path.stem}" + (f" ({str(r.header['written'])[:10]})" if r.header.get("written") else "")
              for i, r in enumerate(runs)]
    names = sorted({n for r in runs for n in r.benchmarks})
    series = {n: [r.benchmarks[n].compared_median_ms if n in r.benchmarks else None for r in runs] for n in names}
    return labels, {n: v for n, v in series.items() if sum(x is not None for x in v) >= 2}
