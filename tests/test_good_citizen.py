"""perfci installed next to other projects: a session without `perf` benchmarks is pytest-benchmark's alone."""

from __future__ import annotations

import json

import pytest

from perfci import plugin

PLAIN = """
def work():
    return sum(range(100))

def test_plain(benchmark):
    benchmark(work)

def test_not_a_benchmark():
    assert True
"""

# the conftest reports what the session imported, at its very end (after pytest-benchmark saved)
IMPORT_PROBE = """
import sys

def pytest_unconfigure(config):
    heavy = sorted(m for m in ("torch", "numpy", "triton") if m in sys.modules)
    print("HEAVY_IMPORTS=" + ",".join(heavy))
"""


def _heavy(res: pytest.RunResult) -> set[str]:
    """The heavy modules a session had imported by its end (from IMPORT_PROBE's line)."""
    line = next(x for x in res.stdout.lines if x.startswith("HEAVY_IMPORTS="))
    return set(filter(None, line.split("=", 1)[1].split(",")))


def test_a_session_without_perf_imports_no_torch_or_numpy_and_keeps_pytest_benchmarks_files(pytester):
    pytester.makeconftest(IMPORT_PROBE)
    pytester.makepyfile(test_plain=PLAIN)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "--benchmark-autosave",
                                        "--benchmark-json=out.json", "--benchmark-max-time=0.01")
    res.assert_outcomes(passed=2)
    assert _heavy(res) == _heavy(pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "-p", "no:perfci")), \
        "perfci imported torch/numpy/triton in a session without perf tests"
    assert "perfci" not in res.stdout.str().replace("plugins: perfci", "")
    from pytest_benchmark.utils import get_machine_id

    assert [p.name for p in (pytester.path / ".benchmarks").iterdir()] == [get_machine_id()]
    doc = json.loads((pytester.path / "out.json").read_text())
    assert "perfci" not in doc["machine_info"] and "gpu" not in doc["machine_info"]
    assert not [k for k in doc if k.startswith("perfci")]
    assert "perfci" not in doc["benchmarks"][0]["extra_info"]


def test_collect_only_and_help_import_nothing_heavy(pytester):
    pytester.makeconftest(IMPORT_PROBE)
    pytester.makepyfile(test_plain=PLAIN)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q", "-s")
    assert _heavy(res) == _heavy(
        pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q", "-s", "-p", "no:perfci"))


def test_project_own_perf_fixture_wins_and_perfci_says_so_once(pytester):
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def perf(benchmark):
            return benchmark
    """)
    pytester.makepyfile(test_mine="""
        def test_own_one(perf):
            perf(lambda: sum(range(50)))

        def test_own_two(perf):
            perf(lambda: sum(range(60)))
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-max-time=0.01")
    res.assert_outcomes(passed=2)
    out = res.stdout.str()
    assert out.count("use this project's own `perf` fixture") == 1 and "perfci_perf" in out


def test_no_gpu_marker_is_forced_on_projects(pytester):
    pytester.makepyfile(test_m="""
        import pytest

        @pytest.mark.gpu
        def test_x():
            pass
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    assert "'gpu' not found in `markers`" in res.stdout.str()


def test_benchmark_disable_gives_no_pytest_benchmark_warning(pytester):
    pytester.makepyfile(test_ops="""
        def test_once(perf):
            assert perf(lambda: 7) == 7
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-disable", "-W", "error")
    res.assert_outcomes(passed=1)
    assert "was not used" not in res.stdout.str() + res.stderr.str()


def test_option_constants_agree_with_the_registries():
    from perfci.compare import DEFAULT_THRESHOLD

    assert f"{DEFAULT_THRESHOLD:.0%}" == plugin.DEFAULT_THRESHOLD_PCT


def test_the_wheel_ships_perfci_only_and_torch_is_an_extra():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["perfci", "perfci.*"]
    deps = " ".join(project["project"]["dependencies"])
    assert "torch" not in deps and "triton" not in deps
    assert any(d.startswith("torch") for d in project["project"]["optional-dependencies"]["torch"])


@pytest.mark.parametrize("module", ["perfci", "perfci.plugin", "perfci.errors", "perfci.timing"])
def test_plugin_modules_import_without_torch(module):
    import subprocess
    import sys

    code = (f"import sys, {module}; bad = [m for m in ('torch', 'numpy') if m in sys.modules]; "
            "print(bad); raise SystemExit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_cuda_is_not_initialised_before_the_first_perf_call(pytester):
    """A plain test that forks a CUDA child works next to perf tests (CUDA is first touched by `perf`)."""
    pytester.makepyfile(test_mixed="""
        import multiprocessing as mp

        def child(q):
            import torch
            q.put(float(torch.ones(1, device="cuda").sum()))

        def test_a_forks_a_cuda_child():
            import torch
            assert not torch.cuda.is_initialized()
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            p.join(60)
            assert p.exitcode == 0 and q.get(timeout=5) == 1.0

        def test_b_perf(perf):
            import torch
            perf(torch.neg, torch.ones(1024, device="cuda"))
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--perfci-max-time=0.2", "--perfci-min-time=0.05")
    res.assert_outcomes(passed=2)


RANGE_SPY = """
import nvtx

OPEN = []
_get_domain = nvtx.get_domain


class Spy:  # records the perfci domain's open push/pop ranges around the real domain
    def __init__(self, domain):
        self._domain = domain

    def get_event_attributes(self, message):
        return message, self._domain.get_event_attributes(message=message)

    def push_range(self, attributes):
        OPEN.append(attributes[0])
        self._domain.push_range(attributes[1])

    def pop_range(self):
        OPEN.pop()
        self._domain.pop_range()


nvtx.get_domain = lambda name: Spy(_get_domain(name))
"""

RANGE_SUITE = """
import json
from conftest import OPEN

SEEN = {}


def test_one(perf):
    perf(lambda: SEEN.setdefault("one", list(OPEN)))


def test_variants(perf):
    perf.variants(a=lambda: SEEN.setdefault("a", list(OPEN)), b=lambda: SEEN.setdefault("b", list(OPEN)))


def test_zz_report():
    open("seen.json", "w").write(json.dumps(SEEN))
"""


@pytest.mark.parametrize("range_pass", [False, True])
def test_range_pass_runs_each_disabled_benchmark_once_inside_its_nvtx_range(pytester, range_pass):
    """The Nsight pass (--benchmark-disable --perfci-range-pass) calls each benchmark once inside the
    NVTX range named after it (what ncu's --nvtx-include and nsys select by); --benchmark-disable alone
    starts nothing of perfci (no range, no session)."""
    pytest.importorskip("nvtx", reason="the nvtx package is not installed")
    pytester.makeconftest(RANGE_SPY)
    pytester.makepyfile(test_ranges=RANGE_SUITE)
    args = ["-p", "no:cacheprovider", "--benchmark-disable", *(["--perfci-range-pass"] if range_pass else [])]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=3)
    seen = json.loads((pytester.path / "seen.json").read_text())
    if range_pass:
        assert seen == {"one": ["test_ranges.py::test_one"], "a": ["test_ranges.py::test_variants"],
                        "b": ["test_ranges.py::test_variants"]}
    else:
        assert seen == {"one": [], "a": [], "b": []}
