"""Kernel tests: on a machine without a CUDA GPU they run through Triton's CPU interpreter
(``TRITON_INTERPRET=1``, set by ``tests/conftest.py`` before any kernel module is imported).
Tests marked ``gpu`` are skipped without CUDA.
"""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

DEVICE = "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and str(item.fspath).startswith(os.path.dirname(__file__)):
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture
def gen() -> torch.Generator:
    """A freshly seeded generator per test: new random inputs every run (never zeros)."""
    g = torch.Generator()
    g.seed()
    return g


@pytest.fixture
def hook_slot():
    """Triton's stage-inspection hook as it was, restored after the test (with kernels/_ptx_stage.py's own state)."""
    from triton import knobs

    from kernels import _ptx_stage

    before, ours = knobs.runtime.add_stages_inspection_hook, _ptx_stage._hook
    yield knobs.runtime
    knobs.runtime.add_stages_inspection_hook, _ptx_stage._hook = before, ours


@pytest.fixture
def as_triton36(monkeypatch):
    """This Triton taken for 3.6, the only one the PTX rewrites accept (for their stand-in compile steps here)."""
    import triton

    monkeypatch.setattr(triton, "__version__", "3.6.0")
