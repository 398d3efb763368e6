"""kernels.tune_ab: module copies with lines replaced, and patched calls (CPU)."""

import sys
import types

import pytest

from kernels.tune_ab import module_copy, patched


def _source(tmp_path):
    src = tmp_path / "flagged.py"
    src.write_text("FLAG = 1\n\n\ndef value():\n    return FLAG * 10\n")
    return src


def test_module_copy_replaces_the_flag_and_leaves_the_original(tmp_path):
    src = _source(tmp_path)
    mod = module_copy("_tune_ab_copy_a", str(src), [(r"^FLAG = 1$", "FLAG = 0")], workdir=str(tmp_path / "w"))
    try:
        assert mod.value() == 0
        assert "FLAG = 1" in src.read_text()
        assert (tmp_path / "w" / "_tune_ab_copy_a.py").read_text().startswith("FLAG = 0")
    finally:
        sys.modules.pop("_tune_ab_copy_a", None)


@pytest.mark.parametrize("pattern", [r"^MISSING = 1$", r"1"])
def test_module_copy_wants_exactly_one_match(tmp_path, pattern):
    src = _source(tmp_path)
    src.write_text(src.read_text() + "OTHER = 1\n")
    with pytest.raises(ValueError, match="matched"):
        module_copy("_tune_ab_copy_b", str(src), [(pattern, "X")], workdir=str(tmp_path))
    assert "_tune_ab_copy_b" not in sys.modules


def test_module_copy_refuses_a_name_in_use(tmp_path):
    with pytest.raises(ValueError, match="already imported"):
        module_copy("os", str(_source(tmp_path)))


def test_patched_swaps_for_the_call_only():
    target = types.SimpleNamespace(limit=1)
    run = patched(lambda: target.limit * 2, target, "limit", 5)
    assert run() == 10
    assert target.limit == 1
    with pytest.raises(AttributeError, match="no attribute"):
        patched(run, target, "missing", 0)


def test_patched_restores_after_an_error():
    target = types.SimpleNamespace(limit=1)

    def boom():
        assert target.limit == 7
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        patched(boom, target, "limit", 7)()
    assert target.limit == 1
