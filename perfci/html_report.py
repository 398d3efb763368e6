"""The HTML report: one self-contained page a kernel engineer reads after a run.

:func:`render` returns one HTML document: plotly.js inlined once, every figure a JSON blob drawn by
a few lines of page script (the per-benchmark charts when their ``<details>`` opens, or all of
them with ``#all`` in the URL), real escaped tables, a filter box. Top: the verdict (worst first,
by :data:`perfci.verdicts.ORDER`), the machine and the baseline; then the change plot, throughput
against this GPU's measured peaks, the kernel mix, the roofline (Nsight Compute data), history,
and per benchmark (grouped by test file) its samples, kernels and kernel diff against the baseline.

The page checks itself for the browser test: ``<body data-errors>`` collects script errors and
``console.error`` calls, each drawn chart gets ``data-drawn="<w>x<h>"`` of its plotly SVG and
``<body data-charts-drawn>`` counts them.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfci import html_charts as charts
from perfci.fingerprint import Fingerprint
from perfci.gate import BenchmarkOutcome, RunVerdict, error_outcome, judge, run_verdict
from perfci.record import BenchmarkRecord, ResultFile
from perfci.report import worst_first
from perfci.trace import KernelProfile
from perfci.units import format_bytes, format_time_ms, gbps, tflops
from perfci.variants import StoredVariant, stored_variants
from perfci.verdicts import RANK, Verdict


@dataclass(frozen=True)
class Peak:
    tflops: float  # dense bf16 GEMM, measured
    gbps: float  # device-to-device copy, measured
    source: str


# Measured peaks per GPU slug (what our own kernels are held against; not datasheet figures).
PEAKS: dict[str, Peak] = {
    "NVIDIA_H100_80GB_HBM3": Peak(798.0, 3000.0, "shared/device.md: cuBLAS bf16 8192³ ≈ 798 TFLOPS (4096³ ≈ 747), "
                                                 "device-to-device copy ≈ 3.0 TB/s"),
    "NVIDIA_H200": Peak(691.0, 4300.0, "README (baselines/NVIDIA_H200): cuBLAS bf16 8192³ 691 TFLOPS; "
                                       "shared/device.md: device-to-device copy ≈ 4.3 TB/s"),
}
HISTORY_TOP_N = 8


def timer_label(device_time: bool) -> str:
    return "device time" if device_time else "host wall clock"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _short_labels(names: Sequence[str]) -> dict[str, str]:
    """``test_fn[params]`` per benchmark; the file stem is kept where two files share a test name."""
    short = {n: n.split("::", 1)[-1] for n in names}
    seen: dict[str, int] = {}
    for s in short.values():
        seen[s] = seen.get(s, 0) + 1
    return {n: (s if seen[s] == 1 else f"{n.split('::')[0].rsplit('/', 1)[-1]}::{s}") for n, s in short.items()}


def _json(value: Any) -> str:
    """JSON safe inside <script>: non-finite numbers become null, <, > and & are \\u-escaped."""
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, Mapping):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    text = json.dumps(clean(value), separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Page:
    """Collects figures; each becomes a placeholder div drawn by the page script."""

    def __init__(self) -> None:
        self.figures: dict[str, charts.Figure] = {}

    def chart(self, figure: charts.Figure, css: str = "") -> str:
        key = f"f{len(self.figures)}"
        self.figures[key] = figure
        return f'<div class="chart {css}" data-fig="{key}"></div>'


def _sort_key(o: BenchmarkOutcome) -> tuple[int, int, float, str]:
    return (*worst_first(o), o.name)


def _badge(verdict: Verdict | str, failed: bool = False) -> str:
    v = Verdict.parse(str(verdict))
    return f'<span class="badge v-{v.value.lower()}{" fail" if failed else ""}">{v.value}</span>'


def _change(o: BenchmarkOutcome) -> tuple[str, str]:
    c = o.comparison
    if c is None or c.ratio is None or c.ratio_low is None or c.ratio_high is None:
        return "", ""
    return f"{c.change_pct:+.2f}%", f"{(c.ratio_low - 1) * 100:+.2f} … {(c.ratio_high - 1) * 100:+.2f}%"


def _time(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else format_time_ms(value)


def _rates(record: BenchmarkRecord | None, peak: Peak | None) -> tuple[float | None, float | None, str, str]:
    """(% of peak compute, % of peak memory, TFLOPS cell, GB/s cell) from the raw median."""
    if record is None or not record.median_ms > 0:
        return None, None, "", ""
    cpct = mpct = None
    tcell = bcell = ""
    if record.flops:
        t = tflops(record.flops, record.median_ms)
        cpct = 100.0 * t / peak.tflops if peak else None
        tcell = f"{t:.4g}" + (f' <small>{cpct:.0f}%</small>' if cpct is not None else "")
    if record.bytes_moved:
        g = gbps(record.bytes_moved, record.median_ms)
        mpct = 100.0 * g / peak.gbps if peak else None
        bcell = f"{g:.4g}" + (f' <small>{mpct:.0f}%</small>' if mpct is not None else "")
    return cpct, mpct, tcell, bcell


def _structure(o: BenchmarkOutcome) -> str:
    if o.error is not None:
        return f'<span class="err">{_e(o.error)}</span>'
    cells = [f'<span class="{"err" if f.failed else "info"}">{_e(f.rule)}: {_e(f.message)}</span>'
             for f in o.findings]
    return "<br>".join(cells)


# --- sections -----------------------------------------------------------------------------------


def _header(verdict: RunVerdict, fp: Fingerprint, baseline: ResultFile | None, title: str, label: str) -> str:
    words = f"REGRESSION: {len(verdict.regressions)} failing" if verdict.regressions else verdict.status
    status = f'<div class="status {"bad" if verdict.exit_code else "ok"}">{_e(words)}</div>'
    if verdict.problems:  # run-level infrastructure problems (no benchmark outcome of their own)
        status += "".join(f"<div class='err'>{_e(e)}</div>" for e in verdict.problems)
    chips = " ".join(f'{_badge(k)} {n}' for k, n in verdict.counts().items())
    gpu = [("GPU", fp.describe()), ("driver", fp.driver), ("CUDA", fp.cuda), ("torch", fp.torch),
           ("triton", fp.triton), ("power limit", f"{fp.power_limit_w:g} W" if fp.power_limit_w else None),
           ("max SM clock", f"{fp.max_sm_clock_mhz} MHz" if fp.max_sm_clock_mhz else None)]
    base: list[tuple[str, object]] = [("file", "none: nothing compared")]
    if baseline is not None:
        h = baseline.header
        base = [("file", baseline.path), ("GPU", baseline.gpu), ("written", h.get("written")),
                ("runs", h.get("runs")), ("benchmarks", len(baseline.benchmarks))]
    drift = sorted({d for o in verdict.outcomes for d in o.drift})
    if drift:
        base.append(("environment drift", "; ".join(drift)))
    note = ("Times are <b>device time</b>, compared at the reference SM clock where normalised; TFLOPS and GB/s "
            "use the raw median." if label == "device time" else
            f"Times are <b>{_e(label)}</b> (no GPU): reported, never gated.")

    def card(name: str, rows: Sequence[tuple[str, object]]) -> str:
        body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows if v not in (None, ""))
        return f'<div class="card"><h3>{name}</h3><table class="kv">{body}</table></div>'

    return (f"<header><h1>{_e(title)}</h1>{status}<div class='chips'>{chips}</div></header>"
            f"<div class='cards'>{card('Machine', gpu)}{card('Baseline', base)}</div><p class='note'>{note}</p>")


def _verdict_table(rows: Sequence[tuple[BenchmarkOutcome | None, str]], records: Mapping[str, BenchmarkRecord],
                   ids: Mapping[str, str], labels: Mapping[str, str], peak: Peak | None, label: str) -> str:
    head = ("<tr><th>#</th><th>benchmark</th><th>verdict</th><th>change</th><th>95% interval</th>"
            "<th>baseline</th><th>now</th><th>TFLOPS</th><th>GB/s</th><th>evidence</th></tr>")
    body = []
    for i, (o, name) in enumerate(rows, 1):
        link = f'<a href="#{ids[name]}" title="{_e(name)}">{_e(labels[name])}</a><div class="file">' \
               f'{_e(name.split("::")[0])}</div>'
        if o is None:  # MISSING
            body.append(f'<tr data-name="{_e(name.lower())}" class="r-missing"><td>{i}</td><td>{link}</td>'
                        f'<td>{_badge(Verdict.MISSING)}</td><td colspan="7">in the baseline, not run</td></tr>')
            continue
        change, interval = _change(o)
        c = o.comparison
        _, _, tcell, bcell = _rates(records.get(name), peak)
        quiet = o.verdict is Verdict.SAME and not o.failed
        ev = _structure(o) or ("" if quiet else _e(c.reasons[0] if c is not None and c.reasons else ""))
        if not o.device_time and o.error is None:
            ev += '<br><span class="info">host wall clock: not gated</span>' if ev else \
                '<span class="info">host wall clock: not gated</span>'
        css = "r-fail" if o.failed else "quiet" if quiet else ""
        body.append(f'<tr data-name="{_e(name.lower())}" class="{css}"><td>{i}</td>'
                    f"<td>{link}</td><td>{_badge(o.verdict, o.failed)}</td><td class='num'>{change}</td>"
                    f"<td class='num'>{interval}</td><td class='num'>{_time(c.base_median_ms if c else None)}</td>"
                    f"<td class='num'>{_time(c.new_median_ms if c else o.median_ms)}</td><td class='num'>{tcell}"
                    f"</td><td class='num'>{bcell}</td><td class='ev'>{ev}</td></tr>")
    caption = f"baseline / now: medians of the compared samples ({_e(label)}); TFLOPS, GB/s: raw median" + \
              (", small: % of this GPU's measured peak" if peak else "")
    quiet = sum(1 for o, _ in rows if o is not None and o.verdict is Verdict.SAME and not o.failed)
    toggle = f"<button id='show-quiet'>show the {quiet} SAME rows</button>" if quiet else ""
    return f'<table class="verdicts" id="verdict-table"><caption>{caption} {toggle}</caption><thead>{head}' \
           f'</thead><tbody>{"".join(body)}</tbody></table>'


def _kernel_table(base: KernelProfile | None, now: KernelProfile | None) -> str:
    """Kernels now vs baseline (per call): new ones, removed ones, changed counts; copies highlighted."""
    if now is None or not now.ok:
        reason = now.missing_reason if now is not None else "not profiled"
        return f"<p class='note'>No kernel profile: {_e(reason)}.</p>"
    old = {(k.name, k.category, k.kind): k for k in (base.kernels if base is not None and base.ok else ())}
    new = {(k.name, k.category, k.kind): k for k in now.kernels}
    rows = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (k not in new or k in old, k in new,
                                                                -(new.get(k) or old[k]).time_us_per_call)):
        k, b = new.get(key), old.get(key)
        rec = k or b
        assert rec is not None
        status = "" if base is None or not base.ok else ("new" if b is None else "removed" if k is None else
                                                        "changed" if round(b.count_per_call) != round(
                                                            k.count_per_call) else "")
        counts = f"{b.count_per_call:g} → {k.count_per_call:g}" if b and k and status else \
            f"{rec.count_per_call:g}"
        kind = f"{rec.category}/{rec.kind}" if rec.kind else rec.category
        css = " ".join(c for c in ("copy" if rec.is_copy else "", f"k-{status}" if status else "") if c)
        rows.append(f'<tr class="{css}"><td>{status}</td><td class="kname" title="{_e(rec.name)}">'
                    f"{_e(rec.name[:110])}</td><td>{_e(kind)}</td><td class='num'>{counts}</td>"
                    f"<td class='num'>{rec.time_us_per_call:.1f}</td><td class='num'>"
                    f"{format_bytes(rec.bytes_per_call) if rec.bytes_per_call else ''}</td>"
                    f"<td class='at'>{_e(rec.culprit or '')}</td></tr>")
    old_s = {s.kind: s for s in (base.syncs if base is not None and base.ok else ())}
    for s in now.syncs:
        was = old_s.get(s.kind)
        status = "" if base is None or not base.ok else ("new" if was is None else "")
        rows.append(f'<tr class="sync {"k-new" if status else ""}"><td>{status}</td><td>host sync: {_e(s.kind)}</td>'
                    f"<td>sync</td><td class='num'>{s.count_per_call:g}</td><td></td><td></td>"
                    f"<td class='at'>{_e(s.culprit or '')}</td></tr>")
    for kind, s in old_s.items():
        if kind not in {x.kind for x in now.syncs}:
            rows.append(f'<tr class="sync k-removed"><td>removed</td><td>host sync: {_e(kind)}</td><td>sync</td>'
                        f"<td class='num'>{s.count_per_call:g}</td><td></td><td></td>"
                        f"<td class='at'>{_e(s.culprit or '')}</td></tr>")
    facts = [f"{now.launches_per_call:g} launches/call", f"copies {format_bytes(now.copy_bytes_per_call)}/call"]
    if now.sdpa_backend:
        facts.append(f"SDPA backend {now.sdpa_backend}")
    if now.peak_memory_bytes is not None:
        facts.append(f"peak memory {format_bytes(now.peak_memory_bytes)}")
    level = "CUDA kernels" if now.level == "kernel" else "aten ops (no CUDA kernels)"
    return (f"<p class='note'>{_e(level)}; {_e(', '.join(facts))}</p><table class='kernels'><thead><tr><th>vs base"
            "</th><th>kernel</th><th>category</th><th>per call</th><th>µs/call</th><th>bytes/call</th>"
            f"<th>culprit</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _ncu_table(kernels: Mapping[str, Mapping[str, Any]]) -> str:
    cols = ("intensity_flop_per_byte", "pct_peak_flops", "pct_peak_bandwidth", "dram_gbps")
    rows = "".join(f"<tr><td class='kname'>{_e(k)}</td>" + "".join(
        f"<td class='num'>{m[c]:.3g}</td>" if isinstance(m.get(c), (int, float)) else "<td></td>" for c in cols)
        + "</tr>" for k, m in kernels.items())
    return ("<table class='kernels'><thead><tr><th>kernel (Nsight Compute)</th><th>FLOP/byte</th><th>% peak FLOP/s"
            f"</th><th>% peak bandwidth</th><th>DRAM GB/s</th></tr></thead><tbody>{rows}</tbody></table>")


def _variants_table(variants: Sequence[StoredVariant], label: str) -> str:
    """Per variant: run time, first call (tracing + compilation + one run, never in the samples), path."""
    if not variants:
        return ""
    first = variants[0].median_ms
    rows = "".join(
        f"<tr><td>{_e(v.name)}</td><td class='num'>{_time(v.median_ms)}</td><td class='num'>"
        f"{f'{v.median_ms / first:.2f}x' if v.median_ms and first else ''}</td><td class='num'>"
        f"{_time(v.first_call_ms)}</td><td>{_e(v.path or 'not profiled')}</td><td>{_e(v.sdpa_backend or '-')}</td>"
        f"<td>{_e(v.library or '-')}</td><td class='num'>"
        f"{'' if v.generated_per_call is None else f'{v.generated_per_call:g}'}</td></tr>" for v in variants)
    return (f"<table class='variants'><thead><tr><th>variant</th><th>{_e(label)}</th><th>vs {_e(variants[0].name)}"
            "</th><th>first call (compile)</th><th>path</th><th>SDPA backend</th><th>library kernels per call</th>"
            f"<th>generated kernels per call</th></tr></thead><tbody>{rows}</tbody></table>")


def _bench_details(page: _Page, o: BenchmarkOutcome | None, name: str, bid: str, label: str,
                   now: BenchmarkRecord | None, base: BenchmarkRecord | None,
                   ncu: Mapping[str, Mapping[str, Any]] | None, variants: Sequence[StoredVariant] = ()) -> str:
    verdict = o.verdict if o is not None else Verdict.MISSING
    change, _ = _change(o) if o is not None else ("", "")
    median = _time(o.median_ms) if o is not None else ""
    summary = (f"<summary>{_badge(verdict, bool(o and o.failed))} <b>{_e(label)}</b> <span class='num'>{change}"
               f"</span> <span class='muted'>{median}</span></summary>")
    if o is None:
        body = "<p class='note'>In the baseline, not run (removed or crashed).</p>"
    elif o.error is not None:
        body = f"<p class='err'>The benchmark raised: {_e(o.error)}</p>"
    else:
        tl = timer_label(o.device_time)
        parts = [f"<pre>{_e(o.evidence())}</pre>"]
        pair = []
        if now is not None and now.compared_samples_ms:
            pair.append(page.chart(charts.samples_figure(base.compared_samples_ms if base else (),
                                                         now.compared_samples_ms, tl)))
        if now is not None and now.profile is not None and now.profile.ok and now.profile.kernels:
            pair.append(page.chart(charts.kernel_compare_figure(base.profile if base else None, now.profile)))
        parts.append(f"<div class='pair'>{''.join(pair)}</div>")
        parts.append(_variants_table(variants, tl))
        parts.append(_kernel_table(base.profile if base else None, now.profile if now else None))
        if ncu:
            parts.append(_ncu_table(ncu))
        if now is not None:
            parts.append(f"<p class='note'>timer {_e(now.timer)} ({tl}); normalisation {_e(now.normalization)}"
                         f"; {len(now.compared_samples_ms)} compared samples; raw median {_time(now.median_ms)}</p>")
        body = "".join(parts)
    return f'<details class="bench" id="{bid}" data-name="{_e(name.lower())}">{summary}{body}</details>'


# --- the page -----------------------------------------------------------------------------------


def render(verdict: RunVerdict | None, results: Sequence[ResultFile], *, baseline: ResultFile | None,
           fingerprint: Fingerprint, title: str, history: Sequence[ResultFile] = (),
           roofline: Mapping[str, Any] | None = None) -> str:
    """One self-contained HTML page for a run: ``results[-1]`` is "now", ``baseline`` what it was
    judged against, ``history`` older result files (oldest first), ``roofline`` Nsight Compute
    metrics ``{benchmark: {kernel: {intensity_flop_per_byte, dram_gbps, pct_peak_flops, ...}}}``."""
    from plotly.offline import get_plotlyjs

    now = results[-1] if results else None
    if verdict is None:
        outcomes = [judge(r, None, compared=False) for r in (now.benchmarks.values() if now else ())]
        outcomes += [error_outcome(n, m) for n, m in (now.errors.items() if now else ()) if n not in now.benchmarks]
        verdict = run_verdict(outcomes)
    records = dict(now.benchmarks) if now else {}
    base_records = dict(baseline.benchmarks) if baseline else {}
    ordered = sorted(verdict.outcomes, key=_sort_key)
    rows: list[tuple[BenchmarkOutcome | None, str]] = [(o, o.name) for o in ordered]
    rows += [(None, n) for n in verdict.missing]
    rows.sort(key=lambda r: _sort_key(r[0]) if r[0] is not None else (1, RANK[Verdict.MISSING], 0.0, r[1]))
    names = [n for _, n in rows]
    labels = _short_labels(names)
    ids = {n: f"b-{i}" for i, n in enumerate(sorted(names))}
    timed = [o for o in verdict.outcomes if o.error is None]
    kinds = {o.device_time for o in timed}
    label = timer_label(next(iter(kinds))) if len(kinds) == 1 else f"{timer_label(True)} / {timer_label(False)}"
    peak = PEAKS.get(fingerprint.slug) if fingerprint.gpu_available else None
    page = _Page()
    nav, sections = [], []

    def section(sid: str, heading: str, content: str) -> None:
        nav.append(f'<a href="#{sid}">{_e(heading)}</a>')
        sections.append(f'<section id="{sid}"><h2>{_e(heading)}</h2>{content}</section>')

    section("verdict", "Verdict", _verdict_table(rows, records, ids, labels, peak, label))
    change_rows = []
    for o in ordered:
        c = o.comparison
        if c is not None and c.ratio is not None and c.ratio_low is not None and c.ratio_high is not None:
            change_rows.append(charts.ChangeRow(
                labels[o.name], o.verdict, c.change_pct or 0.0, (c.ratio_low - 1) * 100, (c.ratio_high - 1) * 100,
                f"{_e(o.name)}<br>{o.verdict} {c.change_pct:+.2f}% [{(c.ratio_low - 1) * 100:+.2f}, "
                f"{(c.ratio_high - 1) * 100:+.2f}]<br>{_time(c.base_median_ms)} → {_time(c.new_median_ms)}"))
    if change_rows:
        thresholds = sorted(o.comparison.min_effect for o in ordered if o.comparison is not None)
        threshold_pct = 100.0 * thresholds[len(thresholds) // 2]
        section("change", "Change vs baseline", "<p class='note'>Ratio of the two runs' midmeans with its 95 % "
                "interval (between-run noise floor included); SLOWER needs the interval above 0 and the change "
                "≥ 0.75 × threshold.</p>" + page.chart(charts.change_figure(change_rows, threshold_pct, label)))
    rated = [n for n in sorted(records) if records[n].flops or records[n].bytes_moved]
    if rated and peak is not None:
        rates = [_rates(records[n], peak) for n in rated]
        hovers = [f"{_e(n)}<br>{_time(records[n].median_ms)}: {r[2] or '-'} TFLOPS, {r[3] or '-'} GB/s"
                  for n, r in zip(rated, rates, strict=True)]
        section("throughput", "Throughput vs this GPU's peaks", f"<p class='note'>Peaks: {_e(peak.source)}.</p>"
                + page.chart(charts.throughput_figure([labels.get(n, n) for n in rated], [r[0] for r in rates],
                                                      [r[1] for r in rates], hovers, f"{peak.tflops:g} TFLOPS, "
                                                      f"{peak.gbps:g} GB/s")))
    elif rated:
        section("throughput", "Throughput", "<p class='note'>No measured peaks for "
                f"{_e(fingerprint.name)}: absolute TFLOPS and GB/s only (verdict table).</p>")
    profiled = [n for n in sorted(records) if records[n].profile is not None and records[n].profile.ok]
    if profiled:
        profiles = [records[n].profile for n in profiled]
        section("kernels", "Kernel mix", "<p class='note'>Per benchmark, its kernels' time per call by category "
                "(torch.profiler); copies, casts and memcpys outlined, host syncs flagged. Diff against the "
                "baseline profile per benchmark below.</p>" + page.chart(charts.kernel_mix_figure(
                    [labels.get(n, n) for n in profiled], profiles,
                    [p.syncs_per_call() if p else 0.0 for p in profiles])))
    ncu_tables: dict[str, dict[str, Mapping[str, Any]]] = {}
    if roofline:
        ncu_tables, points = charts.roof_points(roofline)
        peak_t, peak_g = charts.roof_peaks(roofline, ncu_tables, peak.tflops if peak else None,
                                           peak.gbps if peak else None)
        if points:
            section("roofline", "Roofline (Nsight Compute)", page.chart(charts.roofline_figure(points, peak_t, peak_g)))
    runs = list(history) + ([now] if now is not None and (not history or history[-1] is not now) else [])
    if len(runs) >= 2:
        run_labels, series = charts.history_series(runs)
        if series:
            section("history", "History", f"<p class='note'>{len(series)} benchmarks in ≥ 2 of {len(runs)} runs."
                    "</p>" + page.chart(charts.history_figure(run_labels, {labels.get(n, n): v for n, v in
                                                                           series.items()}, HISTORY_TOP_N, label)))
    with_variants = {n: stored_variants(records[n].details) for n in sorted(records)}
    with_variants = {n: v for n, v in with_variants.items() if v}
    if with_variants:
        section("variants", "Variants", "<p class='note'>Benchmarks measured as several variants of one computation "
                "(perf.variants): each variant's run time, its first call (tracing, compilation, autotuning and one "
                "run, kept out of the samples) and the path it took.</p>" + "".join(
                    f"<h3>{_e(labels.get(n, n))}</h3>{_variants_table(v, label)}" for n, v in with_variants.items()))
    outcome_of = {o.name: o for o in verdict.outcomes}
    groups: dict[str, list[str]] = {}
    for n in sorted(names):
        groups.setdefault(n.split("::")[0], []).append(n)
    blocks = [f'<section class="group"><h3>{_e(file)}</h3>' + "".join(
        _bench_details(page, outcome_of.get(n), n, ids[n], labels[n], records.get(n), base_records.get(n),
                       ncu_tables.get(n), with_variants.get(n, ())) for n in members) + "</section>"
              for file, members in groups.items()]
    section("benchmarks", "Benchmarks", "<p><button id='open-all'>expand all</button> <button id='close-all'>"
            "collapse all</button></p>" + "".join(blocks))
    toolbar = (f"<nav>{' · '.join(nav)}<input id='filter' type='search' placeholder='filter benchmarks "
               "(substring)'><span id='shown'></span></nav>")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_CSS}</style><script>{get_plotlyjs()}</script></head><body>"
            f"{_header(verdict, fingerprint, baseline, title, label)}{toolbar}{''.join(sections)}"
            f"<script type='application/json' id='perfci-figs'>{_json(page.figures)}</script>"
            f"<script>{_JS}</script></body></html>\n")


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 24px 40px;color:#1f2933}
h1{font-size:22px;margin:18px 0 6px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid #dde3e8}
h3{font-size:15px;margin:16px 0 6px;font-family:ui-monospace,monospace}
header{display:flex;align-items:center;gap:16px;flex-wrap:wrap}
.status{font-weight:700;padding:4px 12px;border-radius:4px;color:#fff}.status.bad{background:#c62828}
.status.ok{background:#2e7d32}.chips{display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.cards{display:flex;gap:16px;flex-wrap:wrap;margin:10px 0}.card{border:1px solid #dde3e8;border-radius:6px;
padding:6px 12px;min-width:360px}.card h3{font-family:inherit;margin:4px 0}
table{border-collapse:collapse}td,th{padding:3px 8px;text-align:left;vertical-align:top}
.kv th{color:#52606d;font-weight:500}.kv td{font-family:ui-monospace,monospace;font-size:12.5px}
table.verdicts,table.kernels{width:100%;font-size:13px}table.verdicts th,table.kernels th{background:#eef2f5;
position:sticky;top:38px}tbody tr:nth-child(even){background:#f8fafb}caption{text-align:left;color:#52606d;
padding:4px 0}.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.file{color:#7b8794;font-size:11px}.ev{max-width:420px;font-size:12px}small{color:#7b8794}
.badge{display:inline-block;padding:1px 7px;border-radius:3px;font-size:11px;font-weight:700;color:#fff;
background:#607d8b}.v-error,.v-invalid,.v-structure,.v-slower{background:#c62828}.v-noisy{background:#ef8f00}
.v-new{background:#1565c0}.v-missing,.v-uncompared{background:#757575}.v-faster{background:#2e7d32}
.badge.fail{outline:2px solid #7f0000}tr.r-fail{background:#fdecea!important}.err{color:#b71c1c}
.info,.muted,.note{color:#52606d}.note{font-size:12.5px}
nav{position:sticky;top:0;background:#fff;z-index:5;padding:8px 0;border-bottom:1px solid #dde3e8;
display:flex;gap:8px;align-items:center;flex-wrap:wrap}nav input{margin-left:auto;width:320px;padding:4px 8px}
details.bench{border:1px solid #e4e7eb;border-radius:5px;margin:4px 0;padding:2px 10px}
details.bench[open]{padding-bottom:10px}summary{cursor:pointer;padding:3px 0}
pre{background:#f5f7fa;padding:8px;font-size:12px;white-space:pre-wrap;overflow-x:auto}
tr.copy td{background:#fff1e0}tr.sync td{background:#fdecea}tr.k-new td:first-child{color:#c62828;font-weight:700}
tr.k-removed td{text-decoration:line-through;color:#7b8794}tr.k-changed td:first-child{color:#ef8f00}
table.verdicts:not(.all) tr.quiet{display:none}.ev{overflow-wrap:anywhere}
.kname{font-family:ui-monospace,monospace;font-size:12px;word-break:break-all}.at{font-family:ui-monospace,
monospace;font-size:11.5px}.chart{width:100%;min-height:40px}.pair{display:flex;gap:12px}
.pair>.chart{flex:1 1 0;min-width:0}[hidden]{display:none!important}
"""

_JS = """
(function(){
var B=document.body,errs=[];
function err(m){errs.push(String(m).slice(0,400));B.setAttribute('data-errors',JSON.stringify(errs));}
B.setAttribute('data-errors','[]');
window.addEventListener('error',function(e){err(e.message||'error');});
window.addEventListener('unhandledrejection',function(e){err('rejection: '+(e.reason&&e.reason.message||e.reason));});
var ce=console.error;
console.error=function(){err(Array.prototype.join.call(arguments,' '));ce.apply(console,arguments);};
var figs=JSON.parse(document.getElementById('perfci-figs').textContent),drawn=0;
var charts=document.querySelectorAll('div.chart');B.setAttribute('data-charts-total',charts.length);
function shown(d){for(var p=d.parentElement;p;p=p.parentElement){if(p.tagName==='DETAILS'&&!p.open)return false;}
return true;}
function draw(d){if(d.dataset.state)return;d.dataset.state='drawing';var f=figs[d.dataset.fig];
Plotly.newPlot(d,f.data,f.layout,{displaylogo:false,responsive:true}).then(function(){
var s=d.querySelector('.main-svg'),r=s?s.getBoundingClientRect():{width:0,height:0};d.dataset.state='drawn';
d.setAttribute('data-drawn',Math.round(r.width)+'x'+Math.round(r.height));B.setAttribute('data-charts-drawn',++drawn);
},function(e){err('chart '+d.dataset.fig+': '+e);});}
function drawShown(){charts.forEach(function(d){if(shown(d))draw(d);});}
document.querySelectorAll('details').forEach(function(d){d.addEventListener('toggle',function(){if(d.open)drawShown();});});
function openAll(v){document.querySelectorAll('details.bench').forEach(function(d){if(!d.hidden)d.open=v;});}
document.getElementById('open-all').onclick=function(){openAll(true);};
document.getElementById('close-all').onclick=function(){openAll(false);};
if(location.hash==='#all'){openAll(true);}else if(location.hash.indexOf('#b-')===0){
var t=document.getElementById(location.hash.slice(1));if(t)t.open=true;}
document.querySelectorAll('a[href^="#b-"]').forEach(function(a){a.addEventListener('click',function(){
var t=document.getElementById(a.getAttribute('href').slice(1));if(t)t.open=true;});});
var q=document.getElementById('filter'),out=document.getElementById('shown');
q.addEventListener('input',function(){var t=q.value.trim().toLowerCase(),n=0;
document.querySelectorAll('[data-name]').forEach(function(el){el.hidden=!!t&&el.dataset.name.indexOf(t)<0;
if(el.tagName==='TR'&&!el.hidden)n++;});
document.querySelectorAll('section.group').forEach(function(g){g.hidden=!g.querySelector('details.bench:not([hidden])');});
out.textContent=t?n+' shown':'';
document.getElementById('verdict-table').classList.toggle('all',!!t||showQuiet);});
var showQuiet=false,sq=document.getElementById('show-quiet');if(sq)sq.onclick=function(){showQuiet=!showQuiet;
document.getElementById('verdict-table').classList.toggle('all',showQuiet);
sq.textContent=showQuiet?'hide the SAME rows':sq.dataset.label;};if(sq)sq.dataset.label=sq.textContent;
drawShown();
})();
"""
