"""pytest plugin: wires pytest's hooks to perfci's session, fixture and report; no logic of its own.

``perf`` measures and judges each benchmark in its own test (``perfci.fixture``, ``perfci.session``);
the run's verdict and table come at the end of the session from the same gate as ``perfci run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfci.errors import PerfCIError

_SESSION = pytest.StashKey["Any"]()
_CLOCK = pytest.StashKey["Any"]()
_DESELECTED = pytest.StashKey[set]()


def pytest_addoption(parser: pytest.Parser) -> None:
    from perfci.compare import DEFAULT_THRESHOLD
    from perfci.timing import TIMER_NAMES, timers_help

    group = parser.getgroup("perfci", "perfci: device-time benchmarks and regression gate")
    group.addoption("--perfci-timer", default="auto", choices=TIMER_NAMES,
                    help="timer (auto: graph on a GPU, wall without): " + timers_help().replace("%", "%%"))
    default_pct = f"{DEFAULT_THRESHOLD:.0%}"
    group.addoption("--perfci-threshold", default=default_pct, metavar="PCT",
                    help=f"minimum slowdown that fails a benchmark, e.g. 3%% or 2.5%% (default {default_pct}%)")
    group.addoption("--perfci-precision", default="0.5%", metavar="PCT",
                    help="stop sampling when the median's CI half-width is below this (default 0.5%%)")
    group.addoption("--perfci-min-time", default=0.5, type=float, metavar="S",
                    help="seconds of sampling at least (default 0.5)")
    group.addoption("--perfci-max-time", default=5.0, type=float, metavar="S",
                    help="seconds of sampling at most per benchmark (default 5)")
    group.addoption("--perfci-cold", action="store_true", help="flush L2 before each call (event timer)")
    group.addoption("--perfci-normalize", default="auto", choices=("auto", "sm_clock", "none"),
                    help="compare compute-bound work at the max SM clock (auto), always, or never")
    group.addoption("--perfci-no-profile", action="store_true", help="skip the torch.profiler pass")
    group.addoption("--perfci-trace-dir", default=None, metavar="DIR",
                    help="also write each benchmark's Chrome/Perfetto trace here")
    group.addoption("--perfci-baselines", default=None, metavar="DIR",
                    help="compare with DIR/<gpu>/ and fail the tests that regressed")
    group.addoption("--perfci-provisional", action="store_true",
                    help="first pass of `perfci run`: a timing-only SLOWER is reported, not failed (perfci run "
                    "re-measures it in a fresh process), and GitHub outputs are left to perfci run")
    group.addoption("--perfci-pool-with", default=None, metavar="RESULTS",
                    help="confirmation pass of `perfci run`: judge each benchmark on this run pooled with its "
                    "entry in RESULTS (an earlier fresh-process run); GitHub outputs are left to perfci run")
    group.addoption("--perfci-select", action="append", default=[], metavar="NODEID",
                    help="run only this benchmark (repeatable; perfci run's confirmation pass)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from perfci.settings import MARKER_OPTIONS

    config.addinivalue_line("markers",
                            f"perf(**options): perfci options for this benchmark ({', '.join(MARKER_OPTIONS)})")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped cleanly without one")
    from perfci.bench_glue import key_storage_by_gpu
    from perfci.fingerprint import detect
    from perfci.session import PerfSession

    try:
        session = PerfSession.from_options(config.getoption, detect())
    except PerfCIError as exc:
        raise pytest.UsageError(f"perfci: {exc}") from None
    config.stash[_SESSION] = session
    key_storage_by_gpu(session.fingerprint.slug)


def pytest_unconfigure(config: pytest.Config) -> None:
    from perfci.bench_glue import unkey_storage

    unkey_storage()


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        machine_info["perfci"] = session.fingerprint.machine_info()
        machine_info["gpu"] = session.fingerprint.name


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        deselected = items[0].config.stash.setdefault(_DESELECTED, set())
        deselected.update(item.nodeid for item in items)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    from perfci.record import DESELECTED_KEY, SCOPE_KEY

    # what this session set out to run (its paths) and deselected (-k, -m, --perfci-select): a baseline
    # benchmark outside the one or inside the other was not run on purpose, so it is not MISSING
    scope = _scope(config)
    output_json[SCOPE_KEY] = list(scope) if scope is not None else None
    output_json[DESELECTED_KEY] = sorted(config.stash.get(_DESELECTED, set()))


def _scope(config: pytest.Config) -> tuple[str, ...] | None:
    from perfci.runner import run_scope

    return run_scope(config.args, config.invocation_params.dir, config.rootpath)


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any,
                                          machine_info: dict[str, Any], compared_benchmark: dict[str, Any]) -> None:
    from perfci.bench_glue import refuse_foreign_gpu

    try:
        refuse_foreign_gpu(machine_info, compared_benchmark)
    except PerfCIError as exc:
        raise pytest.UsageError(f"perfci: {exc}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from perfci.fixture import DeviceClock

    only = set(config.getoption("perfci_select") or ())
    if only:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in only])
        items[:] = [item for item in items if item.nodeid in only]
    for item in items:
        if "perf" in getattr(item, "fixturenames", ()):
            existing = item.get_closest_marker("benchmark")
            options = dict(existing.kwargs) if existing else {}
            clock = options["timer"] = DeviceClock()
            item.stash[_CLOCK] = clock
            item.add_marker(pytest.mark.benchmark(**options))


@pytest.fixture
def perf(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """Measure device time of ``perf(fn, *args)``, profile it once, and gate it (see perfci docs)."""
    from perfci.fixture import Perf

    session = request.config.stash[_SESSION]
    marker = request.node.get_closest_marker("perf")
    settings = session.settings
    if marker is not None:
        settings = settings.with_marker(marker.args, marker.kwargs, request.node.nodeid)
    return Perf(benchmark, request.node.stash[_CLOCK], settings, session, request.node.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and isinstance(call.excinfo.value, PerfCIError):
        report.longrepr = str(call.excinfo.value)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    from perfci.report import github_outputs, in_github_actions, terminal_table

    session = config.stash.get(_SESSION, None)
    if session is None or not session.outcomes:
        return
    from perfci.record import in_scope

    scope, deselected = _scope(config), config.stash.get(_DESELECTED, set())
    verdict = session.verdict(lambda name: in_scope(name, scope, deselected))
    terminalreporter.write_sep("=", "perfci")
    terminalreporter.write_line(terminal_table(verdict, session.fingerprint, session.baseline_note))
    deferred = session.deferred()
    if deferred:
        terminalreporter.write_line(
            f"perfci: {len(deferred)} SLOWER timing verdict(s) of this pass are provisional (their tests passed): "
            "perfci run re-measures them in a fresh process and fails those the two runs pooled confirm")
    if in_github_actions() and not (session.provisional or session.pool_with is not None):
        github_outputs(verdict, session.fingerprint, Path.cwd())
