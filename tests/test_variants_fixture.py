"""perf.variants through the real fixture (pytester): each variant measured and profiled, compile time
apart, the path in the record; faster_than is judged (host times: reported, not gated)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfci import html_report
from perfci.fingerprint import Fingerprint
from perfci.record import load_results


def _report_page(path: Path) -> str:
    result = load_results(path)
    fp = Fingerprint.recorded(dict(result.fingerprint))
    assert fp is not None
    return html_report.render(None, [result], baseline=None, fingerprint=fp, title="t")

VARIANTS = """
    import torch
    X = torch.randn(256, 256)

    def test_paths(perf):
        runs = perf.variants(faster_than={"views": "copies"}, copies=lambda: X.t().contiguous() + 1,
                             views=lambda: X + 1)
        assert set(runs) == {"copies", "views"}

    def test_needs_two(perf):
        perf.variants(only=lambda: X + 1)
"""


def test_variants_are_each_measured_and_profiled_with_their_path(pytester):
    pytester.makepyfile(test_v=VARIANTS)
    # CPU tensors: the host timer, also on a machine with a GPU (where "auto" would pick a device timer)
    res = pytester.runpytest_subprocess("--perfci-max-time=0.1", "--perfci-min-time=0.02", "--benchmark-json=r.json",
                                        "--perfci-timer=wall")
    res.assert_outcomes(passed=1, failed=1)
    assert "perf.variants needs at least two variants" in res.stdout.str()
    entry = json.loads((pytester.path / "r.json").read_text())["benchmarks"][0]["extra_info"]["perfci"]
    variants = entry["variants"]
    assert set(variants) == {"copies", "views"}
    assert all(v["first_call_ms"] > 0 and v["samples"] > 0 for v in variants.values())
    copies = variants["copies"]["profile"]
    assert any(k["cat"] == "copy" for k in copies["kernels"])  # the transpose copy of that variant
    assert not any(k["cat"] == "copy" for k in variants["views"]["profile"]["kernels"])
    # the terminal says each variant's time, first call and path after perfci's table
    out = res.stdout.str()
    assert "perfci: variants of test_v.py::test_paths" in out
    assert re.search(r"copies: first call +[\d.]+ ms, run [\d.e-]+ ms \(wall\)", out)
    # the HTML report has a Variants section with both variants, their first call and path
    page = _report_page(pytester.path / "r.json")
    section = page[page.index("<section id=\"variants\">"):]
    section = section[:section.index("</section>")]
    assert "test_paths" in section and "first call (compile)" in section and "host wall clock" in section
    rows = re.findall(r"<tr><td>(copies|views)</td>", section)
    assert rows == ["copies", "views"]


@pytest.mark.parametrize("bad", ["copies=1, views=lambda: X + 1", "faster_than={'nope': 'views'}, copies=lambda: X, "
                                 "views=lambda: X"])
def test_bad_variants_are_usage_errors_naming_the_test(pytester, bad):
    pytester.makepyfile(test_b=f"""
        import torch
        X = torch.randn(4)

        def test_bad(perf):
            perf.variants({bad})
    """)
    res = pytester.runpytest_subprocess("--perfci-max-time=0.05", "--perfci-min-time=0.01")
    res.assert_outcomes(failed=1)
    assert "test_b.py::test_bad" in res.stdout.str()


def test_variants_note_the_options_a_cpu_skips_like_perf_does(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine without a GPU, also where the tests run on one
    pytester.makepyfile(test_cpu="""
        import pytest

        @pytest.mark.perf(timer="event")
        def test_v(perf):
            perf.variants(a=lambda: 1 + 1, b=lambda: 2 + 2)
    """)
    res = pytester.runpytest_subprocess("--perfci-max-time=0.05", "--perfci-min-time=0.01", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    assert "perfci: CPU mode: timer='event' skipped (needs a GPU)" in res.stdout.str()
