"""Report stage: terminal table, Markdown summary (GitHub job summary + annotations), plotly HTML."""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfci.fingerprint import Fingerprint
from perfci.gate import BenchmarkOutcome, RunVerdict
from perfci.record import ResultFile, write_atomic
from perfci.units import format_time_ms
from perfci.verdicts import RANK, Verdict

NAME_WIDTH = 70  # the benchmark column of the terminal table, after the common prefix is taken off


def worst_first(o: BenchmarkOutcome) -> tuple[int, int, float]:
    """Sort key of every report's table: failures, then by verdict rank, then the largest slowdown."""
    change = o.comparison.change_pct if o.comparison and o.comparison.change_pct is not None else 0.0
    return (0 if o.failed else 1, RANK[o.verdict], -change)


def _sorted(verdict: RunVerdict) -> list[BenchmarkOutcome]:
    """Worst first: failures, then by change."""
    return sorted(verdict.outcomes, key=worst_first)


def _time(time_ms: float) -> str:
    """A time cell; an ERROR outcome has no time (NaN), shown as '-'."""
    return format_time_ms(time_ms) if math.isfinite(time_ms) else "-"


def _change(o: BenchmarkOutcome) -> str:
    c = o.comparison
    if c is None or c.change_pct is None:
        return ""
    return f"{c.change_pct:+.2f}%"


def _ungated(o: BenchmarkOutcome) -> bool:
    """A timing verdict that does not gate: host wall-clock times (CPU mode)."""
    return o.comparison is not None and not o.device_time and o.error is None


def _verdict_cell(o: BenchmarkOutcome) -> str:
    text = ("FAIL " if o.failed else "") + str(o.verdict)
    return text + " (not gated)" if _ungated(o) and o.verdict in (Verdict.SLOWER, Verdict.FASTER) else text


def _structure(o: BenchmarkOutcome) -> str:
    """Failed findings; else improvements (fewer copies, syncs, launches); else 'not checked'."""
    if o.error is not None:
        return f"raised: {o.error}"
    failed = [f for f in o.findings if f.failed]
    if failed:
        return "; ".join(f"{f.rule}: {f.message}" for f in failed)
    better = [f for f in o.findings if f.rule.startswith("fewer:")]
    if better:
        return "improved: " + "; ".join(f.message for f in better)
    if any(f.rule == "not_checked" for f in o.findings):
        return "not checked"
    return ""


def _count_label(verdict: RunVerdict, name: str, n: int) -> str:
    if name in (str(Verdict.SLOWER), str(Verdict.FASTER)):
        ungated = sum(1 for o in verdict.outcomes if str(o.verdict) == name and _ungated(o))
        if ungated == n:
            return f"{n} {name} (not gated)"
        if ungated:
            return f"{n} {name} ({ungated} not gated)"
    return f"{n} {name}"


def timing_gated(verdict: RunVerdict) -> bool:
    """Whether any timing of the run could fail it (device times); host wall-clock times never do."""
    return any(o.device_time for o in verdict.outcomes if o.error is None)


def headline(verdict: RunVerdict, fingerprint: Fingerprint) -> str:
    """The one line every output starts with; its counts are ``verdict.counts()``, worst first."""
    counts = ", ".join(_count_label(verdict, k, n) for k, n in verdict.counts().items())
    status = verdict.status
    mode = "" if fingerprint.gpu_available else " [CPU mode: host wall-clock times, timing not gated]"
    return f"perfci: {status} on {fingerprint.name}{mode} - {counts or 'nothing run'}"


def display_names(names: list[str], width: int = NAME_WIDTH) -> tuple[dict[str, str], str]:
    """Short, distinct names for a table: the directories all share taken off (returned as the prefix),
    then a name still too long keeps its start and its end (test name and full parameter id)."""
    prefix = ""
    if len(names) > 1:
        first = names[0]
        common = len(first)
        for n in names[1:]:
            common = min(common, len(n))
            for i in range(common):
                if n[i] != first[i]:
                    common = i
                    break
        cut = max(first.rfind("/", 0, common + 1), -1)
        prefix = first[: cut + 1] if cut >= 0 else ""
    shown = {}
    for n in names:
        text = n[len(prefix):]
        if len(text) > width:
            tail = text[text.rfind("::") + 2:] if "::" in text else text[-(width // 2):]
            if len(tail) > width - 8:
                tail = tail[-(width - 8):]
            text = text[: max(4, width - len(tail) - 1)] + "…" + tail
        shown[n] = text
    return shown, prefix


def terminal_table(verdict: RunVerdict, fingerprint: Fingerprint, note: str = "", *, title: str | None = None) -> str:
    """The table, under the headline (or ``title`` instead: a pass of perfci run, whose verdict comes later)."""
    ordered = _sorted(verdict)
    shown, prefix = display_names([o.name for o in ordered] + list(verdict.missing))
    rows = [("benchmark", "time", "timer", "verdict", "change", "structure")]
    for o in ordered:
        rows.append((shown[o.name], _time(o.median_ms), o.timer or "-", _verdict_cell(o), _change(o),
                     _cut(_structure(o), 100)))
    for name in verdict.missing:
        rows.append((shown[name], "", "", "MISSING", "", "in the baseline, not run"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    out = [headline(verdict, fingerprint) if title is None else title]
    if note:
        out.append(note)
    if prefix:
        out.append(f"(benchmarks under {prefix})")
    out.extend(lines)
    if any(o.comparison is not None and o.comparison.ratio is not None for o in ordered):
        out.append("change: of the midmean (mean of the central half of the samples), the statistic the gate uses")
    return "\n".join(out)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def markdown_summary(verdict: RunVerdict, fingerprint: Fingerprint) -> str:
    lines = [f"## {headline(verdict, fingerprint)}", "",
             "| benchmark | time | timer | verdict | change (midmean) | interval | structure |",
             "|---|---|---|---|---|---|---|"]
    ordered = _sorted(verdict)
    for o in ordered:
        c = o.comparison
        interval = ""
        if c is not None and c.ratio_low is not None and c.ratio_high is not None:
            interval = f"{(c.ratio_low - 1) * 100:+.2f}% .. {(c.ratio_high - 1) * 100:+.2f}%"
        verdict_cell = f"**{_verdict_cell(o)}**" if o.failed else _verdict_cell(o)
        lines.append(f"| `{o.name}` | {_time(o.median_ms)} | {o.timer or '-'} | {verdict_cell} | {_change(o)} "
                     f"| {interval} | {_md(_structure(o))} |")
    for name in verdict.missing:
        lines.append(f"| `{name}` | | | MISSING | | | in the baseline, not run |")
    details = [o for o in ordered if o.failed]
    if details:
        lines += ["", "### Evidence", ""]
        for o in details:
            lines += ["```", o.evidence(), "```", ""]
    better = [o for o in ordered
              if not o.failed and (o.verdict is Verdict.FASTER or _structure(o).startswith("improved"))]
    if better:
        lines += ["", "### Improvements", ""]
        lines += [f"- `{o.name}`: " + "; ".join(x for x in (
            f"{_change(o)} ({o.verdict})" if o.verdict is Verdict.FASTER else "",
            _structure(o) if _structure(o).startswith("improved") else "") if x) for o in better]
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


def _fp_of(results: Sequence[ResultFile]) -> Fingerprint:
    recorded = Fingerprint.recorded(results[-1].fingerprint) if results else None
    return recorded or Fingerprint(False, "unknown", "unknown")


def write_report(results: Sequence[ResultFile], verdict: RunVerdict | None, out_dir: Path, title: str, *,
                 baseline: Path | None = None, history: Sequence[ResultFile] = (),
                 roofline: Mapping[str, Any] | None = None) -> list[Path]:
    """Write report.html, summary.md and verdict.json into ``out_dir``; returns the paths.

    verdict.json has the same counts and headline as the terminal table and summary.md, plus the
    fingerprint of the run, the baseline file (``baseline``, when the caller knows it), whether any
    timing was gated, and when it was written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fingerprint = _fp_of(results)
    summary_md = markdown_summary(verdict, fingerprint) if verdict is not None else None
    paths = [out_dir / "report.html"]
    from perfci.html_report import render  # plotly is imported only when a report is written

    base_file = results[0] if verdict is not None and len(results) >= 2 else None
    paths[0].write_text(render(verdict, results, baseline=base_file, fingerprint=fingerprint, title=title,
                               history=history or (results[:-1] if len(results) > 2 else ()), roofline=roofline),
                        encoding="utf-8")
    if verdict is None:  # no verdict: a summary or verdict.json left from an earlier report would contradict the page
        for stale in ("summary.md", "verdict.json"):
            (out_dir / stale).unlink(missing_ok=True)
    if verdict is not None:
        (out_dir / "summary.md").write_text(summary_md or "", encoding="utf-8")
        recorded = results[-1].fingerprint if results else {}
        doc = {"schema_version": 2, "exit_code": verdict.exit_code, "headline": headline(verdict, fingerprint),
               "counts": verdict.counts(), "missing": list(verdict.missing),
               "fingerprint": dict(recorded) if recorded else fingerprint.machine_info(),
               "baseline": str(baseline) if baseline is not None else None,
               "timing_gated": timing_gated(verdict), "problems": list(verdict.problems),
               "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "benchmarks": [{"name": o.name, "verdict": str(o.verdict), "failed": o.failed,
                               "median_ms": o.median_ms if math.isfinite(o.median_ms) else None,
                               "timer": o.timer, "timing_gated": o.device_time, "error": o.error,
                               "comparison": o.comparison.to_dict() if o.comparison else None,
                               "findings": [{"rule": f.rule, "message": f.message, "failed": f.failed,
                                             "culprit": str(f.culprit) if f.culprit else None}
                                            for f in o.findings]}
                              for o in verdict.outcomes]}
        write_atomic(out_dir / "verdict.json", doc)
        paths += [out_dir / "summary.md", out_dir / "verdict.json"]
    return paths
