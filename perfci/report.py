"""Report stage: terminal table, Markdown summary (GitHub job summary + annotations), plotly HTML."""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path

from perfci.fingerprint import Fingerprint
from perfci.gate import BenchmarkOutcome, RunVerdict
from perfci.record import ResultFile, write_atomic
from perfci.units import format_time_ms
from perfci.verdicts import RANK


def _sorted(verdict: RunVerdict) -> list[BenchmarkOutcome]:
    """Worst first: failures, then by change."""
    def key(o: BenchmarkOutcome) -> tuple[int, int, float]:
        change = o.comparison.change_pct if o.comparison and o.comparison.change_pct is not None else 0.0
        return (0 if o.failed else 1, RANK[o.verdict], -change)

    return sorted(verdict.outcomes, key=key)


def _change(o: BenchmarkOutcome) -> str:
    c = o.comparison
    if c is None or c.change_pct is None:
        return ""
    return f"{c.change_pct:+.2f}%"


def _structure(o: BenchmarkOutcome) -> str:
    failed = [f for f in o.findings if f.failed]
    if failed:
        return "; ".join(f"{f.rule}: {f.message}" for f in failed)
    if any(f.rule == "not_checked" for f in o.findings):
        return "not checked"
    return ""


def headline(verdict: RunVerdict, fingerprint: Fingerprint) -> str:
    counts = ", ".join(f"{n} {k}" for k, n in sorted(verdict.counts().items()))
    status = f"REGRESSION ({len(verdict.regressions)} failing)" if verdict.regressions else "no regression"
    mode = "" if fingerprint.gpu_available else " [CPU mode: host wall-clock times, timing not gated]"
    return f"perfci: {status} on {fingerprint.name}{mode} - {counts or 'nothing run'}"


def terminal_table(verdict: RunVerdict, fingerprint: Fingerprint, note: str = "") -> str:
    rows = [("benchmark", "time", "timer", "verdict", "change", "structure")]
    for o in _sorted(verdict):
        rows.append((o.name, format_time_ms(o.median_ms), o.timer, ("FAIL " if o.failed else "") + str(o.verdict),
                     _change(o), _structure(o)[:80]))
    for name in verdict.missing:
        rows.append((name, "", "", "MISSING", "", "in the baseline, not run"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[0] = min(widths[0], 70)
    lines = ["  ".join(cell[: widths[i]].ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    out = [headline(verdict, fingerprint)]
    if note:
        out.append(note)
    out.extend(lines)
    return "\n".join(out)


def markdown_summary(verdict: RunVerdict, fingerprint: Fingerprint) -> str:
    lines = [f"## {headline(verdict, fingerprint)}", "",
             "| benchmark | time | timer | verdict | change | interval | structure |",
             "|---|---|---|---|---|---|---|"]
    ordered = _sorted(verdict)
    for o in ordered:
        c = o.comparison
        interval = ""
        if c is not None and c.ratio_low is not None and c.ratio_high is not None:
            interval = f"{(c.ratio_low - 1) * 100:+.2f}% .. {(c.ratio_high - 1) * 100:+.2f}%"
        verdict_cell = f"**{o.verdict}**" if o.failed else o.verdict
        lines.append(f"| `{o.name}` | {format_time_ms(o.median_ms)} | {o.timer} | {verdict_cell} | {_change(o)} "
                     f"| {interval} | {_md(_structure(o))} |")
    for name in verdict.missing:
        lines.append(f"| `{name}` | | | MISSING | | | in the baseline, not run |")
    details = [o for o in ordered if o.failed]
    if details:
        lines += ["", "### Evidence", ""]
        for o in details:
            lines += ["```", o.evidence(), "```", ""]
    drift = sorted({d for o in verdict.outcomes for d in o.drift})
    if drift:
        lines += ["", "Environment drift vs baseline: " + "; ".join(drift)]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def github_annotations(verdict: RunVerdict, root: Path) -> list[str]:
    """GitHub ``::error`` lines at the culprit lines of structural regressions (others: no file)."""
    out = []
    for o in verdict.regressions:
        placed = False
        for f in o.findings:
            if f.failed and f.culprit is not None:
                path = Path(f.culprit.file)
                try:
                    path = path.resolve().relative_to(root.resolve())
                except ValueError:
                    pass
                out.append(f"::error file={path},line={f.culprit.line},title=perfci {f.rule}::"
                           f"{_gh(o.name + ': ' + f.message)}")
                placed = True
        if not placed:
            out.append(f"::error title=perfci {o.verdict}::{_gh(o.evidence())}")
    return out


def _gh(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true" or bool(os.environ.get("GITHUB_STEP_SUMMARY"))


def github_outputs(verdict: RunVerdict, fingerprint: Fingerprint, root: Path) -> None:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(markdown_summary(verdict, fingerprint))
    for line in github_annotations(verdict, root):
        print(line)


def html_report(results: Sequence[ResultFile], summary_md: str | None, title: str) -> str:
    """A self-contained plotly page: the verdict summary, then median device time per benchmark per run."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        go = None
    names = sorted({n for r in results for n in r.benchmarks})
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if summary_md is not None:
        parts.append("<pre>" + html.escape(summary_md) + "</pre>")
    if go is None:
        parts.append("<p>plotly is not installed: charts omitted (pip install plotly).</p>")
    else:
        fig = go.Figure()
        for r in results:
            medians = [r.benchmarks[n].median_ms if n in r.benchmarks else None for n in names]
            fig.add_bar(name=str(r.path.name), x=names, y=medians)
        fig.update_layout(barmode="group", yaxis_title="median device time (ms)", yaxis_type="log",
                          height=600, margin={"b": 250})
        parts.append(fig.to_html(full_html=False, include_plotlyjs=True))
        box = go.Figure()
        for r in results:
            for n in names:
                b = r.benchmarks.get(n)
                if b is not None and b.compared_samples_ms:
                    box.add_box(y=list(b.compared_samples_ms), name=f"{n} [{r.path.name}]", boxpoints=False)
        box.update_layout(yaxis_title="samples compared (ms)", yaxis_type="log", showlegend=False, height=600)
        parts.append(box.to_html(full_html=False, include_plotlyjs=False))
    body = "\n".join(parts)
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>" \
           f"<body>{body}</body></html>\n"


def _fp_of(results: Sequence[ResultFile]) -> Fingerprint:
    recorded = Fingerprint.recorded(results[-1].fingerprint) if results else None
    return recorded or Fingerprint(False, "unknown", "unknown")


def write_report(results: Sequence[ResultFile], verdict: RunVerdict | None, out_dir: Path, title: str) -> list[Path]:
    """Write report.html, summary.md and verdict.json into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_md = markdown_summary(verdict, _fp_of(results)) if verdict is not None else None
    paths = [out_dir / "report.html"]
    paths[0].write_text(html_report(results, summary_md, title), encoding="utf-8")
    if verdict is not None:
        (out_dir / "summary.md").write_text(summary_md, encoding="utf-8")
        doc = {"schema_version": 1, "exit_code": verdict.exit_code, "counts": verdict.counts(),
               "missing": list(verdict.missing),
               "benchmarks": [{"name": o.name, "verdict": str(o.verdict), "failed": o.failed, "median_ms": o.median_ms,
                               "timer": o.timer,
                               "comparison": o.comparison.to_dict() if o.comparison else None,
                               "findings": [{"rule": f.rule, "message": f.message, "failed": f.failed,
                                             "culprit": str(f.culprit) if f.culprit else None}
                                            for f in o.findings]}
                              for o in verdict.outcomes]}
        write_atomic(out_dir / "verdict.json", doc)
        paths += [out_dir / "summary.md", out_dir / "verdict.json"]
    return paths
