"""What the Nsight runners share: the result type, the tool check, the pytest child, NVTX names.

The tools themselves live in :mod:`perfci.nsys` (Nsight Systems: per-benchmark kernel mix and
launch overhead from a SQLite export) and :mod:`perfci.ncu` (Nsight Compute: per-kernel hardware
metrics and roofline place). Both profile the selected benchmarks once each (pytest-benchmark
disabled, so ``perf`` makes one call inside its NVTX range) and give :class:`perfci.profilers.ProfileRun`.

Benchmark ranges. perfci pushes one NVTX range per benchmark, named after its pytest node id, in
the ``perfci`` domain with a registered string (``nvtx`` package), or in the default domain with an
inline string (``torch.cuda.nvtx`` fallback); its torch.profiler pass runs inside a nested range
``NAME [profile]``. A range is a benchmark range when its text is a pytest node id: a ``.py`` file
path, ``::``, a test name (so ``aten::mm`` from torch's own NVTX emission is not one). The
``[profile]`` range is kept apart from ``NAME`` (its own entry): it is another workload (torch's
profiler calls the benchmark ``profile_calls`` times), and folding it in would double launches.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from perfci.errors import InfrastructureError

SCHEMA_VERSION = 1
# options for the pytest child: one eager call per benchmark, no torch.profiler pass, no cache dir
CHILD_OPTIONS = ("--benchmark-disable", "--perfci-range-pass", "--perfci-no-profile", "-q", "-p", "no:cacheprovider")

_NODE_ID = re.compile(r"^[^:\s][^:]*\.py::\S")
_INSTALL_HINT = {
    "nsys": "install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the CUDA toolkit's "
            "nsight-systems package) and put nsys on PATH, or use `perfci profile --torch`",
    "ncu": "install Nsight Compute (https://developer.nvidia.com/nsight-compute, or the CUDA toolkit's "
           "nsight-compute package) and put ncu on PATH, or use `perfci profile --torch`",
}


def is_benchmark_range(text: str) -> bool:
    """True for a perfci benchmark range: a pytest node id (``path/file.py::test[...]``), with or
    without the ``[profile]`` suffix."""
    return bool(_NODE_ID.match(text))


def require_tool(tool: str) -> str:
    """The tool's executable, or an InfrastructureError saying how to install it."""
    exe = shutil.which(tool)
    if exe is None:
        raise InfrastructureError(f"{tool} is not on PATH", hint=_INSTALL_HINT[tool])
    return exe


def pytest_child(pytest_args: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """The pytest child the tools launch: this interpreter, the user's selection (the default suite
    when it names no path), one eager call per benchmark."""
    from perfci.runner import pytest_command

    return pytest_command(list(pytest_args), extra=[*CHILD_OPTIONS, *extra], require_suite=False)


def run_tool(cmd: Sequence[str], *, env: Mapping[str, str] | None = None) -> int:
    """Run a profiler command with its output on our terminal; its exit status."""
    merged = dict(os.environ)
    merged.setdefault("PYTHONUNBUFFERED", "1")
    merged.update(env or {})
    try:
        return subprocess.run(list(cmd), env=merged, check=False).returncode
    except OSError as exc:
        raise InfrastructureError(f"could not start {cmd[0]}: {exc}") from None
    except KeyboardInterrupt:
        raise InfrastructureError(f"{Path(cmd[0]).name} was interrupted") from None


def tool_failed(what: str, done: subprocess.CompletedProcess[str], hint: str) -> InfrastructureError:
    """The error for a captured tool command that failed: ``WHAT (exit N: its last line of output)``."""
    reason = (done.stderr or done.stdout).strip().splitlines()
    return InfrastructureError(f"{what} (exit {done.returncode}{': ' + reason[-1] if reason else ''})", hint=hint)
