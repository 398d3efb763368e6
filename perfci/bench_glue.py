"""Where perfci meets pytest-benchmark's internals, kept in one place so an upgrade touches one file.

perfci leaves pytest-benchmark's storage alone (its machine id, folders and JSON are what they are
without perfci); it reads the run pytest-benchmark loaded for ``--benchmark-compare`` to judge the
``perf`` benchmarks against it, and mends one log line of a ``perf`` session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfci.record import ResultFile, load_results, parse_results


def benchmark_session(config: Any) -> Any | None:
    """pytest-benchmark's session object (None when the plugin is not active)."""
    return getattr(config, "_benchmarksession", None)


def compared_run(config: Any) -> ResultFile | None:
    """The run pytest-benchmark loaded for ``--benchmark-compare`` (the newest, when a pattern matched
    several), as perfci records; None when nothing is compared."""
    bs = benchmark_session(config)
    mapping = getattr(bs, "compared_mapping", None) or {}
    if not mapping:
        return None
    path, entries = list(mapping.items())[-1]
    file = Path(str(path))
    root = getattr(getattr(bs, "storage", None), "path", None)  # file storage yields paths relative to it
    if not file.is_absolute() and root is not None:
        file = Path(str(root)) / file
    if file.is_file():
        return load_results(file, "compared run (--benchmark-compare)")
    # another storage backend (elasticsearch): only the entries are known
    return parse_results({"benchmarks": list(entries.values())}, file, "compared run (--benchmark-compare)")


def mend_json_log(config: Any) -> None:
    """pytest-benchmark logs ``Wrote benchmark data in: <_io.BufferedWriter name='out.json'>``: log the name."""
    bs = benchmark_session(config)
    logger = getattr(bs, "logger", None)
    if logger is None or getattr(logger, "_perfci_mended", False):
        return
    original = logger.info

    def info(text: Any, *args: Any, **kwargs: Any) -> Any:
        json_file = getattr(bs, "json", None)
        if isinstance(text, str) and json_file is not None and text == f"Wrote benchmark data in: {json_file}":
            text = f"Wrote benchmark data in: {getattr(json_file, 'name', json_file)}"
        return original(text, *args, **kwargs)

    logger.info = info
    logger._perfci_mended = True
