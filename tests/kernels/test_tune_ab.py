"""kernels.tune_ab: module copies with lines replaced, patched calls, and the GEMM cases of the session scripts
(CPU)."""

import sys
import types

import pytest
import torch

from kernels import tune_ab
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


def test_gemm_operands_are_seeded_bf16_with_an_fp32_product():
    a, b, c, ref = tune_ab.gemm_operands(5, 7, 3, device="cpu")
    a2, b2, _, _ = tune_ab.gemm_operands(5, 7, 3, device="cpu")
    assert (a.dtype, b.dtype, c.dtype, ref.dtype) == (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32)
    assert (a.shape, b.shape, c.shape) == ((5, 3), (3, 7), (5, 7))
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a, tune_ab.gemm_operands(5, 7, 3, device="cpu", seed=1)[0])
    assert torch.allclose(ref, a.float() @ b.float())


def test_outputs_and_errors_run_each_once_into_a_nan_filled_output():
    a, b, c, ref = tune_ab.gemm_operands(8, 8, 8, device="cpu")
    seen = []

    def exact():
        seen.append(bool(c.isnan().all()))
        torch.matmul(a, b, out=c)

    def doubled():
        seen.append(bool(c.isnan().all()))
        torch.matmul(a, b * 2, out=c)

    outs, errs = tune_ab.outputs_and_errors({"exact": exact, "doubled": doubled}, c, ref)
    assert seen == [True, True]
    assert errs["exact"] < 1e-2 and 0.9 < errs["doubled"] < 1.1
    assert torch.equal(outs["doubled"], c) and not torch.equal(outs["exact"], outs["doubled"])


def test_checked_variants_keep_those_within_the_tolerance():
    a, b, c, ref = tune_ab.gemm_operands(8, 8, 8, device="cpu")
    fns = {"exact": lambda: torch.matmul(a, b, out=c), "doubled": lambda: torch.matmul(a, b * 2, out=c),
           "nan": lambda: None}  # writes nothing: the output stays NaN-filled
    outs, errs, kept = tune_ab.checked_variants(fns, c, ref)
    assert list(kept) == ["exact"] and kept["exact"] is fns["exact"]
    assert set(outs) == set(errs) == set(fns)
    assert list(tune_ab.checked_variants(fns, c, ref, tol=2.0)[2]) == ["exact", "doubled"]


def test_gemm_shapes():
    assert tune_ab.gemm_shapes("64x4096x4096,1x8x16") == [(64, 4096, 4096), (1, 8, 16)]
    for bad in ("64x4096", "64x0x8", "axbxc", "64x8x8,", "64x-8x8"):
        with pytest.raises(ValueError, match="MxNxK"):
            tune_ab.gemm_shapes(bad)


def test_timing_lines_and_ratios():
    """The session scripts' summary lines: each timing's median (min-max) and error; base median over each other
    median, without base and the skipped names."""
    times = {"cublas": [10.0, 12.0, 11.0], "new": [5.0, 6.0, 5.5], "before": [11.0, 11.0, 11.0]}
    errs = {"cublas": 1e-3, "new": 2e-3, "before": 3e-3}
    assert tune_ab.timings_line(times, errs) == ("cublas 11.00 (10.00-12.00) [1.0e-03], new 5.50 (5.00-6.00) "
                                                 "[2.0e-03], before 11.00 (11.00-11.00) [3.0e-03]")
    assert tune_ab.ratios(times, "cublas") == "new 2.000, before 1.000"
    assert tune_ab.ratios(times, "before", ["cublas"]) == "new 2.000"
    assert tune_ab.timings_line({"new": times["new"]}) == "new 5.50 (5.00-6.00)"
    assert tune_ab.faster_in(times, "new", "before") == "3/3" and tune_ab.faster_in(times, "cublas", "before") == "1/3"


def test_must_run_names_what_did_not_run():
    asked = []
    tune_ab.must_run(True, "x", lambda: asked.append(1) or "why")
    assert not asked  # the reason is asked for only on failure
    with pytest.raises(RuntimeError, match="u64_8 did not run: disabled"):
        tune_ab.must_run(False, "u64_8", lambda: "disabled")


def test_gemm_once_usage():
    import subprocess

    run = subprocess.run([sys.executable, "-m", "kernels.tune_ab", "gemm-once", "nobody", "1x1x1"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "usage: python3 -m kernels.tune_ab gemm-once ours|cublas MxNxK" in run.stderr
