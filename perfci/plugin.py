"""pytest plugin: wires pytest's hooks to perfci's session, fixture and report; no logic of its own.

A good citizen: until a test uses perfci's ``perf`` fixture, nothing heavier than this module is
imported (no torch, no numpy, no CUDA), pytest-benchmark's storage and JSON are untouched, and only
the ``perf`` marker is registered. ``perf`` measures and judges each benchmark in its own test
(``perfci.fixture``, ``perfci.session``) against ``--perfci-baselines DIR`` or, without it, the run
pytest-benchmark loaded for ``--benchmark-compare``; the run's verdict and table come at the end of
the session from the same gate as ``perfci run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfci.errors import PerfCIError, RegressionError

if TYPE_CHECKING:
    from perfci.record import ResultFile
    from perfci.session import PerfSession
    from perfci.settings import PerfSettings

# kept here (perfci.compare imports numpy); tests/test_good_citizen.py checks it agrees with compare's
DEFAULT_THRESHOLD_PCT = "3%"
FIXTURE_NAMES = ("perf", "perfci_perf")  # perfci_perf: the same fixture, for projects with a `perf` of their own

_STATE = pytest.StashKey["_State"]()
_CLOCK = pytest.StashKey["Any"]()
_DESELECTED = pytest.StashKey[set]()


def pytest_addoption(parser: pytest.Parser) -> None:
    # the timer registry imports neither torch nor numpy (tests/test_good_citizen.py holds it to that)
    from perfci.timing import TIMER_NAMES, timers_help

    group = parser.getgroup("perfci", "perfci: device-time benchmarks and regression gate")
    group.addoption("--perfci-timer", default="auto", choices=TIMER_NAMES,
                    help="timer (auto: graph on a GPU, wall without; GPU-only timers are skipped with a note on a "
                    "CPU): " + timers_help().replace("%", "%%"))
    group.addoption("--perfci-threshold", default=DEFAULT_THRESHOLD_PCT, metavar="PCT",
                    help=f"minimum slowdown that fails a benchmark, e.g. 3%% or 2.5%% (default "
                    f"{DEFAULT_THRESHOLD_PCT}%)")
    group.addoption("--perfci-precision", default="0.5%", metavar="PCT",
                    help="stop sampling when the median's CI half-width is below this (default 0.5%%)")
    group.addoption("--perfci-min-time", default=0.5, type=float, metavar="S",
                    help="seconds of sampling at least (default 0.5)")
    group.addoption("--perfci-max-time", default=5.0, type=float, metavar="S",
                    help="seconds of sampling at most per benchmark (default 5)")
    group.addoption("--perfci-cold", action="store_true", help="flush L2 before each call (event timer; GPU only)")
    group.addoption("--perfci-normalize", default="auto", choices=("auto", "sm_clock", "none"),
                    help="compare compute-bound work at the max SM clock (auto), always, or never")
    group.addoption("--perfci-no-profile", action="store_true", help="skip the torch.profiler pass")
    group.addoption("--perfci-trace-dir", default=None, metavar="DIR",
                    help="also write each benchmark's Chrome/Perfetto trace here")
    group.addoption("--perfci-baselines", default=None, metavar="DIR",
                    help="compare with DIR/<gpu>/ (relative to the project root; must exist) and fail the tests "
                    "that regressed. Without it, --benchmark-compare's run is the baseline")
    group.addoption("--perfci-require-baseline", action="store_true",
                    help="fail a benchmark that has no entry in the baseline (a renamed test, a wrong path)")
    group.addoption("--perfci-profile", default=None, choices=("nsys", "ncu"), metavar="TOOL",
                    help="after the session, run the perf benchmarks it measured once more under Nsight Systems "
                    "(nsys) or Nsight Compute (ncu) and print their kernel tables; files in --perfci-profile-dir")
    group.addoption("--perfci-profile-dir", default="reports/profile", metavar="DIR",
                    help="where --perfci-profile keeps the tool's files (default reports/profile, from the rootdir)")
    group.addoption("--perfci-errors", default=None, metavar="PATH",
                    help="write the perf benchmarks that raised to PATH at the end (perfci run)")
    group.addoption("--perfci-provisional", action="store_true",
                    help="first pass of `perfci run`: a timing-only SLOWER is reported, not failed (perfci run "
                    "re-measures it in a fresh process), and GitHub outputs are left to perfci run")
    group.addoption("--perfci-pool-with", default=None, metavar="RESULTS",
                    help="confirmation pass of `perfci run`: judge each benchmark on this run pooled with its "
                    "entry in RESULTS (an earlier fresh-process run); GitHub outputs are left to perfci run")
    group.addoption("--perfci-range-pass", action="store_true",
                    help="with --benchmark-disable: run each perf benchmark once inside its NVTX range and measure "
                    "nothing (the pass perfci profile and --perfci-profile run under Nsight)")
    group.addoption("--perfci-select", action="append", default=[], metavar="NODEID",
                    help="run only this benchmark (repeatable; perfci run's confirmation pass)")


class _State:
    """perfci's state in one pytest session; the heavy part (:class:`PerfSession`) is built on first use."""

    def __init__(self, config: pytest.Config, baselines: Path | None, pool_with: ResultFile | None) -> None:
        self.config = config
        self.baselines = baselines
        self.pool_with = pool_with
        self.session: PerfSession | None = None
        self._settings: PerfSettings | None = None
        self.overridden: list[str] = []  # tests whose `perf` is the project's own fixture
        self.pytest_session: pytest.Session | None = None
        self.test_wall_s: dict[str, float] = {}  # perf tests' setup + call + teardown seconds, by node id

    def settings(self) -> PerfSettings:
        if self._settings is None:
            from perfci.settings import PerfSettings

            self._settings = _usage(lambda: PerfSettings.from_pytest_options(self.config.getoption))
        return self._settings

    def perf_session(self) -> PerfSession:
        """The session, created at the first ``perf`` call (the first import of torch, the first CUDA call)."""
        if self.session is None:
            try:
                from perfci.bench_glue import compared_run, mend_json_log
                from perfci.fingerprint import detect
                from perfci.session import PerfSession

                def make() -> PerfSession:
                    compared = None if self.baselines is not None else compared_run(self.config)
                    return PerfSession.from_options(self.config.getoption, detect(), baselines=self.baselines,
                                                    compared=compared, pool_with=self.pool_with)

                self.session = _usage(make)
            except ImportError as exc:  # perfci's wheel does not require torch: a `perf` benchmark does
                pytest.exit(f"perfci: a `perf` benchmark needs torch, which cannot be imported ({exc}); install a "
                            "torch build for this machine, or `pip install 'perfci[torch]'`",
                            returncode=pytest.ExitCode.USAGE_ERROR)
            mend_json_log(self.config)
        return self.session


def _usage(make: Any) -> Any:
    """Build a session-wide object; a bad option or file stops the whole run once (exit 4), not per test."""
    try:
        return make()
    except PerfCIError as exc:
        pytest.exit(f"perfci: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


def _project_root(config: pytest.Config) -> Path:
    """The project root: the config file's directory, else the common directory of the paths given."""
    if config.inipath is not None:
        return config.inipath.parent
    base = config.invocation_params.dir
    dirs = []
    for arg in config.args:
        path = (base / str(arg).split("::", 1)[0]).resolve()
        if path.exists():
            dirs.append(path if path.is_dir() else path.parent)
    if not dirs:
        return base
    common = dirs[0]
    for d in dirs[1:]:
        while common not in (d, *d.parents):
            common = common.parent
    return common


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perf(**options): perfci options for this benchmark (threshold, timer, forbid, "
                            "expect, l2_flush, precision, min_time, max_time, normalize, torch_profile, known_bad)")
    baselines = None
    value = config.getoption("perfci_baselines", None)
    if value:
        from perfci.session import resolve_baselines

        try:
            baselines = resolve_baselines(value, _project_root(config))
        except PerfCIError as exc:
            raise pytest.UsageError(f"perfci: {exc}") from None
    pool_with = None
    value = config.getoption("perfci_pool_with", None)
    if value:  # perfci run's confirmation pass: a bad file stops the run before any test
        from perfci.record import load_results

        try:
            pool_with = load_results(Path(value), "first-pass result file")
        except PerfCIError as exc:
            raise pytest.UsageError(f"perfci: {exc}") from None
    config.stash[_STATE] = _State(config, baselines, pool_with)


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state.pytest_session = session


def _active(config: pytest.Config) -> PerfSession | None:
    """The perfci session when a ``perf`` benchmark ran; None leaves pytest-benchmark's files untouched."""
    state = config.stash.get(_STATE, None)
    return state.session if state is not None else None


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    session = _active(config)
    if session is not None:
        machine_info["perfci"] = session.fingerprint.machine_info()


@pytest.hookimpl(tryfirst=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: dict[str, Any],
                                          compared_benchmark: dict[str, Any]) -> None:
    """perfci's block of the compared run is checked by perfci itself (at the first perf call, which refuses
    another GPU model); before it, this session has no block yet, which is no machine difference."""
    theirs = (compared_benchmark.get("machine_info") or {}).get("perfci")
    if theirs is not None and "perfci" not in machine_info:
        machine_info["perfci"] = theirs


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        deselected = items[0].config.stash.setdefault(_DESELECTED, set())
        deselected.update(item.nodeid for item in items)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    session = _active(config)
    if session is None:
        return
    from perfci.record import DESELECTED_KEY, ERRORS_KEY, SCOPE_KEY, stamp_test_wall_s

    # what this session set out to run (its paths) and deselected (-k, -m, --perfci-select): a baseline
    # benchmark outside the one or inside the other was not run on purpose, so it is not MISSING
    scope = _scope(config)
    output_json[SCOPE_KEY] = list(scope) if scope is not None else None
    output_json[DESELECTED_KEY] = sorted(config.stash.get(_DESELECTED, set()))
    state = config.stash.get(_STATE, None)
    if state is not None:
        stamp_test_wall_s(output_json, state.test_wall_s)
    if session.errors:
        output_json[ERRORS_KEY] = dict(session.errors)


def _scope(config: pytest.Config) -> tuple[str, ...] | None:
    from perfci.runner import run_scope

    return run_scope(config.args, config.invocation_params.dir, config.rootpath)


def _uses_perfci(item: pytest.Item) -> bool:
    """Whether the test uses perfci's fixture (a project's own ``perf`` fixture wins, and perfci yields)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) if info is not None else {}
    for name in FIXTURE_NAMES:
        chain = defs.get(name)
        if chain and getattr(chain[-1].func, "__module__", None) == __name__:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = set(config.getoption("perfci_select") or ())
    if only:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in only])
        items[:] = [item for item in items if item.nodeid in only]
    state = config.stash.get(_STATE, None)
    for item in items:
        if not _uses_perfci(item):
            if state is not None and "perf" in getattr(item, "fixturenames", ()):
                state.overridden.append(item.nodeid)
            continue
        from perfci.fixture import DeviceClock

        existing = item.get_closest_marker("benchmark")
        options = dict(existing.kwargs) if existing else {}
        clock = options["timer"] = DeviceClock()
        item.stash[_CLOCK] = clock
        item.add_marker(pytest.mark.benchmark(**options))


def _make_perf(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    from perfci.fixture import Perf

    state = request.config.stash[_STATE]
    marker = request.node.get_closest_marker("perf")
    settings = state.settings()
    if marker is not None:
        settings = settings.with_marker(marker.args, marker.kwargs, request.node.nodeid)
    return Perf(benchmark, request.node.stash[_CLOCK], settings, state.perf_session, request.node.nodeid,
                range_pass=bool(request.config.getoption("perfci_range_pass")))


@pytest.fixture
def perf(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """perfci: measure device time of ``perf(fn, *args)``, profile it once, and gate it (see perfci docs)."""
    return _make_perf(benchmark, request)


@pytest.fixture
def perfci_perf(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """perfci's ``perf`` under a name no project uses (when a project has a ``perf`` fixture of its own)."""
    return _make_perf(benchmark, request)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    state = item.config.stash.get(_STATE, None)
    if state is not None and _CLOCK in item.stash:  # a perf test: its phases' seconds (what a shard of it costs)
        state.test_wall_s[item.nodeid] = state.test_wall_s.get(item.nodeid, 0.0) + report.duration
    excinfo = call.excinfo
    if excinfo is None:
        return
    if isinstance(excinfo.value, PerfCIError):
        report.longrepr = str(excinfo.value)
    # a perf benchmark that raised (not a perfci regression, not a skip/xfail) is broken: ERROR
    if (state is not None and call.when in ("setup", "call") and report.failed and _CLOCK in item.stash
            and not isinstance(excinfo.value, RegressionError)):
        message = excinfo.value.message if isinstance(excinfo.value, PerfCIError) else _one_line(excinfo.value)
        state.perf_session().record_error(item.nodeid, message)


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    path = session.config.getoption("perfci_errors", None)
    if state is None or not path:
        return
    from perfci.record import write_errors

    errors = state.session.errors if state.session is not None else {}
    write_errors(session.config.invocation_params.dir / path, errors)


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> Any:
    state = config.stash.get(_STATE, None)
    regression: BaseException | None = None
    try:
        result = yield
    except Exception as exc:  # pytest-benchmark's --benchmark-compare-fail raises from its summary
        if state is None or state.session is None or type(exc).__name__ != "PerformanceRegression":
            raise
        regression, result = exc, None
    if state is not None:
        _summary(terminalreporter, config, state)
        if regression is not None:
            terminalreporter.write_line(f"pytest-benchmark --benchmark-compare-fail: {regression} (see above)",
                                        red=True, bold=True)
            if state.pytest_session is not None and state.pytest_session.exitstatus == pytest.ExitCode.OK:
                state.pytest_session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return result


def _summary(terminalreporter: Any, config: pytest.Config, state: _State) -> None:
    session = state.session
    if state.overridden and session is None:
        terminalreporter.write_sep("=", "perfci")
    if state.overridden:
        terminalreporter.write_line(
            f"perfci: {len(state.overridden)} test(s) use this project's own `perf` fixture, which overrides perfci's: "
            "perfci leaves them alone (perfci's fixture is also available as `perfci_perf`)")
    if session is None or not session.outcomes:
        return
    from perfci.record import in_scope
    from perfci.report import github_outputs, in_github_actions, terminal_table

    scope, deselected = _scope(config), config.stash.get(_DESELECTED, set())
    verdict = session.verdict(lambda name: in_scope(name, scope, deselected))
    terminalreporter.write_sep("=", "perfci")
    for line, count in session.notes.items():
        terminalreporter.write_line(f"perfci: {line}" + (f" ({count} benchmarks)" if count > 1 else ""))
    warning = session.unmatched_warning()
    if warning:
        terminalreporter.write_line(warning, yellow=True, bold=True)
    title = None  # perfci run's passes: the run's one headline is perfci run's, after the confirmation
    if session.provisional:
        title = "perfci run, first pass: per-benchmark results below; perfci run prints the run's verdict"
    elif session.pool_with is not None:
        title = "perfci run, confirmation pass (pooled with the first pass); perfci run prints the run's verdict"
    terminalreporter.write_line(terminal_table(verdict, session.fingerprint, session.baseline_note, title=title))
    for name, lines in session.variants.items():
        terminalreporter.write_line(f"perfci: variants of {name} (first call = tracing + compilation + one run, "
                                    f"kept out of the samples):\n{lines}")
    deferred = session.deferred()
    if deferred:
        terminalreporter.write_line(
            f"perfci: {len(deferred)} SLOWER timing verdict(s) of this pass are provisional (their tests passed): "
            "perfci run re-measures them in a fresh process and fails those the two runs pooled confirm")
    if in_github_actions() and not (session.provisional or session.pool_with is not None):
        github_outputs(verdict, session.fingerprint, Path.cwd())
    tool = config.getoption("perfci_profile")
    if tool:
        _nsight_pass(terminalreporter, config, tool, sorted(session.executed - set(session.errors)))


def _nsight_pass(terminalreporter: Any, config: pytest.Config, tool: str, names: list[str]) -> None:
    """``--perfci-profile``: the measured benchmarks once more under Nsight, their kernel tables printed.
    A missing or failing tool is said in one line (``perfci run --profile`` exits 3 for it)."""
    from perfci.profilers import registry

    out = config.rootpath / config.getoption("perfci_profile_dir")
    terminalreporter.write_sep("-", f"perfci --perfci-profile {tool}: {len(names)} benchmark(s)")
    try:
        done = registry()[tool].run([str(config.rootpath / name) for name in names], out)
    except PerfCIError as exc:
        terminalreporter.write_line(f"perfci: --perfci-profile {tool}: {exc}", red=True, bold=True)
        return
    terminalreporter.write_line(done.table())
    terminalreporter.write_line(f"perfci: {tool} files in {out}")
