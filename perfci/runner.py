"""Run the benchmark suite in a fresh pytest process and collect its result file."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfci.errors import EXIT_INFRASTRUCTURE, EXIT_USAGE, InfrastructureError, UsageError

DEFAULT_SUITE = "tests/perf"
RESULTS_DIR = Path(".perfci/results")

# pytest's own exit codes
PYTEST_OK, PYTEST_FAILED, PYTEST_INTERRUPTED, PYTEST_INTERNAL, PYTEST_USAGE, PYTEST_NO_TESTS = range(6)


@dataclass(frozen=True)
class SuiteRun:
    results_path: Path
    pytest_exit: int


def results_path(results_dir: Path = RESULTS_DIR, tag: str = "run") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path(results_dir) / f"{stamp}_{tag}.json"


def sibling_results_path(path: Path, tag: str) -> Path:
    """The result file of the same run (same stamp) with another tag: ``<stamp>_<tag>.json``."""
    stamp = Path(path).stem.rsplit("_", 1)[0]
    return Path(path).with_name(f"{stamp}_{tag}.json")


def has_path_argument(pytest_args: list[str], cwd: Path | None = None) -> bool:
    """True when the user named test files/dirs (so the default suite is not added)."""
    takes_value = {"-k", "-m", "-p", "-c", "-o", "--rootdir", "--confcutdir", "--deselect", "--ignore"}
    skip = False
    for arg in pytest_args:
        if skip:
            skip = False
            continue
        if arg in takes_value:
            skip = True
            continue
        if not arg.startswith("-") and (Path(cwd or ".") / arg.split("::")[0]).exists():
            return True
    return False


_ROOT_MARKERS = ("pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini", ".git")


def project_root(start: Path | None = None) -> Path:
    """The nearest directory from ``start`` (default: the cwd) up that holds a project marker
    (pyproject.toml, pytest.ini, setup.cfg, tox.ini, .git); ``start`` itself when none does.
    Default locations (baselines/, .perfci/results/, reports/, tests/perf/) are taken from there."""
    here = Path(start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        if any((directory / marker).exists() for marker in _ROOT_MARKERS):
            return directory
    return here


def with_default_suite(pytest_args: list[str], *, require_dir: bool = True, cwd: Path | None = None) -> list[str]:
    """The pytest arguments, with the default suite (the project root's tests/perf) first when they
    name no test path."""
    args = list(pytest_args)
    if not has_path_argument(args, cwd):
        here = Path(cwd or Path.cwd()).absolute()
        root = project_root(here)
        suite = root / DEFAULT_SUITE
        if require_dir and not suite.is_dir():
            raise UsageError(f"no test path given and the default suite {DEFAULT_SUITE}/ does not exist under "
                             f"the project root {root}",
                             hint="name the tests: perfci run path/to/tests")
        args.insert(0, os.path.relpath(suite, here))
    return args


SELECT_OPTION = "--perfci-select"  # the plugin's option naming the benchmarks a pass measures (repeated)
# pytest options that would stop the confirmation pass early or deselect what it must re-measure
_NOT_FOR_CONFIRMATION = {"-x", "--exitfirst", "--lf", "--last-failed", "--ff", "--failed-first", "--nf",
                         "--new-first", "--sw", "--stepwise", "--sw-skip", "--stepwise-skip"}


def _without(pytest_args: Sequence[str], flags: set[str], valued: set[str]) -> list[str]:
    """``pytest_args`` less ``flags`` and the options of ``valued`` with their values (``--opt V`` or ``--opt=V``)."""
    out, skip = [], False
    for arg in pytest_args:
        if skip:
            skip = False
        elif arg in valued:
            skip = True
        elif arg not in flags and not any(arg.startswith(f"{opt}=") for opt in valued):
            out.append(arg)
    return out


def confirmation_args(pytest_args: list[str]) -> list[str]:
    """The user's pytest arguments for the confirmation pass, less -x, --maxfail and the cache-based
    selections (--lf, --ff, --nf, --sw): the pass must run every benchmark it was given."""
    return _without(pytest_args, _NOT_FOR_CONFIRMATION, {"--maxfail"})


def selecting(pytest_args: Sequence[str], names: Sequence[str]) -> list[str]:
    """``pytest_args`` measuring exactly ``names``: any ``--perfci-select`` already in them (a shard's whole
    selection) replaced by one per name, so a pass over a shard's flagged benchmarks re-measures those only."""
    return [*_without(pytest_args, set(), {SELECT_OPTION}), *(f"{SELECT_OPTION}={name}" for name in names)]


def pytest_command(pytest_args: list[str], *, extra: list[str] | tuple[str, ...] = (),
                   require_suite: bool = True, cwd: Path | None = None) -> list[str]:
    """The one pytest child command line: this interpreter, the user's arguments (the default suite
    first when they name no test path), then perfci's own options."""
    return [sys.executable, "-m", "pytest", *with_default_suite(pytest_args, require_dir=require_suite, cwd=cwd),
            *extra]


def run_suite(pytest_args: list[str], *, out: Path, baselines: Path | None, extra: list[str] | None = None,
              cwd: Path | None = None) -> SuiteRun:
    """Run pytest on the suite in a child process (fresh CUDA context, clean state).

    The result file is written to a ``.part`` file and renamed to ``out`` only when pytest-benchmark
    wrote something: a failed or interrupted pass leaves no empty or torn ``out``. With ``cwd`` (another
    tree: ``perfci.ab``), pytest runs there and imports that tree's packages and tests, while perfci
    itself stays the installed one (``PYTHONSAFEPATH``: the tree is put on ``sys.path`` by pytest's own
    rootdir handling, after perfci's plugin was loaded).
    """
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".part")
    options = [f"--benchmark-json={partial}", "--benchmark-save-data"]
    if baselines is not None and Path(baselines).is_dir():  # none yet: every benchmark is NEW (said by perfci run)
        options.append(f"--perfci-baselines={Path(baselines).absolute()}")
    command = pytest_command(pytest_args, extra=[*options, *(extra or [])], cwd=cwd)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if cwd is not None:
        env["PYTHONSAFEPATH"] = "1"
    try:
        completed = subprocess.run(command, env=env, check=False, cwd=cwd)
    except OSError as exc:
        raise InfrastructureError(f"could not start pytest: {exc}") from None
    except KeyboardInterrupt:
        raise InfrastructureError("interrupted") from None
    finally:
        if partial.exists() and partial.stat().st_size > 0:
            os.replace(partial, out)
        else:
            partial.unlink(missing_ok=True)
    return SuiteRun(results_path=out, pytest_exit=completed.returncode)


def run_scope(args: list[str], invocation_dir: Path, rootdir: Path) -> tuple[str, ...] | None:
    """Node-id prefixes (rootdir-relative) of the paths a pytest session was given; None when one of
    them lies outside the rootdir (then nothing can be said and every baseline benchmark is in scope)."""
    prefixes = []
    for arg in args:
        path, sep, rest = str(arg).partition("::")
        try:
            rel = (Path(invocation_dir) / path).resolve().relative_to(Path(rootdir).resolve()).as_posix()
        except ValueError:
            return None
        rel = "" if rel == "." else rel
        prefixes.append(f"{rel}::{rest}" if sep else rel)
    return tuple(prefixes)


def pytest_exit_to_perfci(code: int) -> int | None:
    """Map pytest's exit codes that settle the outcome alone; None: read the results."""
    if code == PYTEST_USAGE:
        return EXIT_USAGE
    if code == PYTEST_NO_TESTS:
        return EXIT_USAGE
    if code in (PYTEST_INTERRUPTED, PYTEST_INTERNAL) or code < 0 or code > PYTEST_NO_TESTS:
        return EXIT_INFRASTRUCTURE
    return None
