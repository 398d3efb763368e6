"""Where perfci meets pytest-benchmark's internals: the GPU-keyed storage id and the refusal of a
compare across GPU models. Kept in one place so a pytest-benchmark upgrade touches one file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfci.fingerprint import require_same_gpu

_original_machine_id: Callable[[], str] | None = None


def key_storage_by_gpu(slug: str) -> None:
    """Make pytest-benchmark's machine id end with the GPU slug: ``Linux-CPython-3.12-64bit-<slug>``.

    pytest-benchmark builds its session (and loads ``--benchmark-compare`` files) in its own
    ``pytest_configure``, which runs after perfci's; the id comes from
    ``pytest_benchmark.session.get_machine_id``, so that is the function wrapped here. Runs saved
    under ``.benchmarks/<id>/`` and compares found by default are then always of this GPU model.
    """
    global _original_machine_id
    import pytest_benchmark.session as pb_session

    if _original_machine_id is None:
        _original_machine_id = pb_session.get_machine_id
    original = _original_machine_id
    pb_session.get_machine_id = lambda: f"{original()}-{slug}"


def unkey_storage() -> None:
    global _original_machine_id
    if _original_machine_id is not None:
        import pytest_benchmark.session as pb_session

        pb_session.get_machine_id = _original_machine_id
        _original_machine_id = None


def refuse_foreign_gpu(machine_info: dict[str, Any], compared: dict[str, Any]) -> None:
    """A compare across GPU models is refused (explicit file paths can point anywhere)."""
    ours = (machine_info.get("perfci") or {}).get("slug")
    theirs = ((compared.get("machine_info") or {}).get("perfci") or {}).get("slug")
    require_same_gpu(theirs, ours, first_what="the compared run", second_what="this machine",
                     hint=f"compare with a run of this GPU (.benchmarks/*-{ours}/)")
