"""The HTML report (perfci.html_report): its structure without a browser, and one real render in
headless Chromium (skipped, with the reason, only when Chromium is absent; CI's .ci/run installs it).

Pages are built from real records of the shipped baselines with planted changes: one benchmark
25 % slower (a SLOWER), one with an added transpose copy kernel (a STRUCTURE regression).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import subprocess
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from perfci import gate, html_report
from perfci.fingerprint import Fingerprint
from perfci.record import BenchmarkRecord, ResultFile, load_results
from perfci.trace import Culprit, KernelRecord

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "baselines/NVIDIA_H100_80GB_HBM3/0001_baseline.json"
CPU = ROOT / "baselines/cpu-x86_64/0001_baseline.json"
CHROMIUM = Path("/usr/bin/chromium")
SLOW = "tests/perf/test_matmul.py::test_matmul[4096x4096x4096-ours]"
COPIED = "tests/perf/test_flash.py::test_flash_forward[L4096-d128-full-ours]"
PICK = (SLOW, COPIED, "tests/perf/test_decode.py::test_decode[b8-hq16-hkv16-kv8192-d128-ours]",
        "tests/perf/test_structure.py::test_hidden_item_sync_is_flagged",
        "tests/perf/test_torch_ops.py::test_copy_256mb")


@functools.cache
def _load(path: Path) -> ResultFile:
    return load_results(path)


def _scaled(r: BenchmarkRecord, factor: float) -> BenchmarkRecord:
    return dataclasses.replace(r, median_ms=r.median_ms * factor,
                               compared_samples_ms=tuple(v * factor for v in r.compared_samples_ms),
                               run_medians_ms=tuple(v * factor for v in r.run_medians_ms))


def _with_copy(r: BenchmarkRecord) -> BenchmarkRecord:
    assert r.profile is not None
    copy = KernelRecord("direct_copy_kernel_cuda", "copy", 3.0, 60.0, 2**26, Culprit("kernels/attention.py", 212,
                                                                                      "flash_attention"), "transpose")
    return dataclasses.replace(r, profile=dataclasses.replace(r.profile, kernels=(*r.profile.kernels, copy)))


def _planted(names: Sequence[str] = PICK) -> tuple[ResultFile, ResultFile]:
    full = _load(H100)
    base = full.with_benchmarks([full.benchmarks[n] for n in names])
    new = base.with_benchmarks([_scaled(r, 1.25) if r.name == SLOW else _with_copy(r) if r.name == COPIED else r
                                for r in base.benchmarks.values()], path=Path("now.json"))
    return base, new


def _fp(result: ResultFile) -> Fingerprint:
    fp = Fingerprint.recorded(dict(result.fingerprint))
    assert fp is not None
    return fp


def _page(base: ResultFile | None, new: ResultFile, **kwargs: Any) -> str:
    verdict = gate.judge_files(new, base) if base is not None else None
    return html_report.render(verdict, [r for r in (base, new) if r is not None], baseline=base, fingerprint=_fp(new),
                              title="t", **kwargs)


def _without_plotlyjs(page: str) -> str:
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()) == 1, "plotly.js is inlined exactly once"
    return page.replace(get_plotlyjs(), "")


def _figures(page: str) -> dict[str, Any]:
    match = re.search(r"<script type='application/json' id='perfci-figs'>(.*?)</script>", page, re.S)
    assert match is not None
    return json.loads(match.group(1))


class _Rows(HTMLParser):
    """data-name of each verdict-table row, scripts (their attributes), and external references."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.external: list[str] = []
        self._table = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and "verdicts" in (a.get("class") or ""):
            self._table = True
        if tag == "tr" and self._table and a.get("data-name"):
            self.rows.append(str(a["data-name"]))
        if tag == "script":
            self.scripts.append(a)
        for key in ("src", "href"):
            if a.get(key) and not str(a[key]).startswith("#"):
                self.external.append(str(a[key]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = False


def _parse(page: str) -> _Rows:
    parser = _Rows()
    parser.feed(page)
    return parser


def test_page_is_self_contained_and_puts_the_regressions_first() -> None:
    base, new = _planted()
    page = _page(base, new)
    parsed = _parse(page)
    assert parsed.external == [] and "<link" not in page
    assert [s.get("type") for s in parsed.scripts] == [None, "application/json", None]  # plotly.js, figures, ours
    rest = _without_plotlyjs(page)
    assert "<pre>" not in rest.split('<section id="verdict">')[1].split("</section>")[0], "the verdict is a real table"
    assert parsed.rows[:2] == [COPIED.lower(), SLOW.lower()]  # STRUCTURE before SLOWER (verdicts.ORDER)
    assert "new:transpose" in rest and "kernels/attention.py:212 (flash_attention)" in rest  # the kernel diff
    assert "REGRESSION: 2 failing" in rest and "device time" in rest
    figures = _figures(page)
    change = next(f for f in figures.values() if "threshold" in str(f["layout"].get("xaxis", {}).get("title")))
    assert change["data"][0]["y"][-1].endswith("4096x4096x4096-ours]")  # sorted by change: the slowest on top
    assert change["layout"]["shapes"][0]["x0"] == -3.0 and change["layout"]["shapes"][0]["x1"] == 3.0


def test_hostile_benchmark_names_are_escaped_everywhere() -> None:
    base, new = _planted()
    hostile = "tests/perf/test_x.py::test_y[<script>alert(1)</script>-\"'&]"
    rec = dataclasses.replace(new.benchmarks[SLOW], name=hostile)
    new = new.with_benchmarks([*new.benchmarks.values(), rec], errors={"tests/perf/test_z.py::t[<img onerror=x>]":
                                                                       "RuntimeError: <b>boom</b>"})
    page = _without_plotlyjs(_page(base, new))
    assert "<script>alert(1)" not in page and "<img onerror" not in page and "<b>boom" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;boom&lt;/b&gt;" in page
    figures = _figures(page)  # the JSON blob still parses and holds the raw name as a label
    assert any(hostile.split("::")[1] in (t.get("y") or []) for f in figures.values() for t in f["data"])
    assert len(_parse(page).scripts) == 3  # plotly.js, figures, ours: no script element smuggled in


def test_cpu_runs_say_host_wall_clock_never_device_time() -> None:
    cpu = _load(CPU)
    new = cpu.with_benchmarks([_scaled(r, 1.1) for r in cpu.benchmarks.values()], path=Path("now.json"))
    page = _without_plotlyjs(_page(cpu, new))
    assert "host wall clock" in page
    assert "device time" not in page.lower()
    assert "Throughput vs this GPU" not in page  # no peaks on a CPU: absolute figures only


def test_error_outcome_is_a_row_with_its_text_and_no_chart() -> None:
    base, new = _planted()
    name = "tests/perf/test_flash.py::test_crashes"
    new = new.with_benchmarks(new.benchmarks.values(), errors={name: "torch.OutOfMemoryError: CUDA out of memory"})
    page = _without_plotlyjs(_page(base, new))
    assert _parse(page).rows[0] == name.lower()  # ERROR first
    row = re.search(rf'<tr data-name="{re.escape(name.lower())}".*?</tr>', page, re.S)
    assert row is not None and "ERROR" in row.group(0) and "CUDA out of memory" in row.group(0)
    block = re.search(rf'<details class="bench" id="[^"]+" data-name="{re.escape(name.lower())}">.*?</details>', page,
                      re.S)
    assert block is not None and "data-fig" not in block.group(0) and "CUDA out of memory" in block.group(0)


def test_history_draws_benchmarks_present_in_two_runs_or_more() -> None:
    base, new = _planted()
    only_once = dataclasses.replace(base.benchmarks[SLOW], name="tests/perf/test_matmul.py::test_once")
    older = [base.with_benchmarks([_scaled(r, 1.0 + 0.01 * i) for r in base.benchmarks.values()],
                                  path=Path(f"run{i}.json")) for i in range(3)]
    older[0] = older[0].with_benchmarks([*older[0].benchmarks.values(), only_once])
    page = _page(base, new, history=older)
    history = next(f for f in _figures(page).values()
                   if f["layout"].get("xaxis", {}).get("title", {}).get("text") == "stored run (oldest first)")
    names = {t["name"] for t in history["data"]}
    assert names == {html_report._short_labels(PICK)[n] for n in PICK}  # not test_once (one run)
    assert len(history["data"][0]["x"]) == 4  # three stored runs + now
    assert sum(t["visible"] is True for t in history["data"]) == min(len(PICK), html_report.HISTORY_TOP_N)


def test_roofline_from_the_ncu_mapping_and_unknown_gpu_shows_absolute_figures_only() -> None:
    base, new = _planted()
    roof = {SLOW: {"_matmul_kernel": {"intensity_flop_per_byte": 700.0, "dram_gbps": 1000.0, "pct_peak_flops": 80.0,
                                      "pct_peak_bandwidth": 30.0, "flops": 1.4e11}}}
    figures = _figures(_page(base, new, roofline=roof))
    rooffig = next(f for f in figures.values() if f["layout"].get("yaxis", {}).get("type") == "log")
    point = rooffig["data"][-1]
    assert point["x"] == [700.0] and point["y"] == [pytest.approx(700.0)]  # 700 FLOP/B x 1 TB/s
    assert rooffig["data"][0]["y"][-1] == html_report.PEAKS["NVIDIA_H100_80GB_HBM3"].tflops
    unknown = dataclasses.replace(_fp(new), slug="Some_New_GPU", name="Some New GPU")
    page = html_report.render(gate.judge_files(new, base), [base, new], baseline=base, fingerprint=unknown, title="t")
    assert "Throughput vs this GPU" not in page and "No measured peaks for Some New GPU" in page


def test_without_a_verdict_every_benchmark_is_uncompared() -> None:
    _, new = _planted()
    page = _without_plotlyjs(_page(None, new))
    assert len(_parse(page).rows) == len(PICK) and "UNCOMPARED" in page and "Change vs baseline" not in page


# --- in a real browser ------------------------------------------------------------------------------


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium; CI's .ci/run "
                                                  "installs it): the report's browser check cannot run")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    base, new = _planted()
    older = [base.with_benchmarks([_scaled(r, 1.0 + 0.01 * i) for r in base.benchmarks.values()],
                                  path=Path(f"run{i}.json")) for i in range(2)]
    roof = {SLOW: {"_matmul_kernel": {"intensity_flop_per_byte": 700.0, "dram_gbps": 1000.0}}}
    page = tmp_path / "report.html"
    page.write_text(_page(base, new, history=older, roofline=roof), encoding="utf-8")
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2400", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=3000", "--dump-dom", page.as_uri() + "#all"]  # #all: open every benchmark
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    body = re.search(r"<body([^>]*)>", dom)
    assert body is not None
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert json.loads(attrs["data-errors"].replace("&quot;", '"')) == []
    charts = re.findall(r'<div class="chart[^"]*" data-fig="(f\d+)"([^>]*)>', dom)
    assert len(charts) == int(attrs["data-charts-total"]) == int(attrs["data-charts-drawn"]) >= 3 + 2 * len(PICK)
    for key, rest in charts:
        size = re.search(r'data-drawn="(\d+)x(\d+)"', rest)
        assert size is not None and int(size.group(1)) > 0 and int(size.group(2)) > 0, (key, rest)
    assert dom.count('class="main-svg"') >= len(charts)
    rows = re.findall(r'<tr data-name="([^"]+)"', dom.split('id="verdict-table"')[1])
    assert rows[:2] == [COPIED.lower(), SLOW.lower()]
