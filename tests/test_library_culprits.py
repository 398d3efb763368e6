"""Culprits inside libraries, with the real torch.profiler on CPU (no mocks).

A small fake model package is written to ``tmp_path`` and put on ``sys.path`` (outside the working
directory, as an installed library is); it imitates a model file that copies a transposed view and
reads a scalar back (``.item()``). Every finding must keep the test's line as its culprit (what the
CI annotation points at) and name the library's file, line and function that made the copy or the
sync, with the frames between.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from perfci.categories import file_kind
from perfci.culprits import Culprit, parse_site
from perfci.rules import check_against_baseline, check_declared
from perfci.trace import KernelProfile, format_profile_table, profile_call

MODEL_SOURCE = '''
import torch


def attention(q, k, v):
    q = q.transpose(1, 2).contiguous()  # LAYOUT COPY
    out = torch.nn.functional.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


def guard(x):
    if x.abs().max().item() > 1e6:  # HOST SYNC
        raise FloatingPointError("overflow")
    return x


class Attention(torch.nn.Module):
    def forward(self, x):
        return attention(x, x, x)  # ATTENTION CALL


class Block(torch.nn.Module):
    def __init__(self, checked):
        super().__init__()
        self.attn = Attention()
        self.checked = checked

    def forward(self, x):
        y = self.attn(x)  # BLOCK CALL
        return guard(y) if self.checked else y
'''


def _line(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), start=1) if needle in text)


@pytest.fixture(scope="module")
def fakemodel(tmp_path_factory):
    root = tmp_path_factory.mktemp("libroot")
    package = root / "fakemodel"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "modeling.py").write_text(textwrap.dedent(MODEL_SOURCE))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("fakemodel.modeling")
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == "fakemodel" or n.startswith("fakemodel.")]:
            del sys.modules[name]


X = torch.randn(2, 16, 4, 8)  # (B, L, H, D), as a model's projections give them


def run_checked(block):
    return block(X)  # THE TEST LINE


def run_unchecked(block):
    return block(X)


def _test_line(fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if "block(X)" in text)


@pytest.fixture(scope="module")
def profiles(fakemodel):
    checked, unchecked = fakemodel.Block(checked=True), fakemodel.Block(checked=False)
    return (profile_call(lambda: run_checked(checked), label="checked"),
            profile_call(lambda: run_unchecked(unchecked), label="unchecked"))


def _assert_test_line(culprit: Culprit | None, fn) -> None:
    assert culprit is not None
    assert Path(culprit.file).resolve() == Path(__file__).resolve()
    assert (culprit.line, culprit.function) == (_test_line(fn), fn.__name__)


def test_copy_names_the_test_line_and_the_library_line_below_it(fakemodel, profiles):
    checked, _ = profiles
    (copy,) = checked.copies()
    assert (copy.kind, copy.count_per_call) == ("transpose", 1)
    _assert_test_line(copy.culprit, run_checked)
    origin = copy.culprit.origin
    model_file = Path(fakemodel.__file__).resolve()
    assert Path(origin.file).resolve() == model_file
    assert (origin.line, origin.function) == (_line(MODEL_SOURCE, "LAYOUT COPY"), "attention")
    # the frames between, innermost first, torch's own Module.__call__ frames left out
    assert [(f.line, f.function) for f in copy.culprit.stack] == [
        (_line(MODEL_SOURCE, "LAYOUT COPY"), "attention"),
        (_line(MODEL_SOURCE, "ATTENTION CALL"), "Attention.forward"),
        (_line(MODEL_SOURCE, "BLOCK CALL"), "Block.forward"),
    ]


def test_host_sync_names_the_library_line_that_read_the_scalar(fakemodel, profiles):
    checked, unchecked = profiles
    (sync,) = checked.syncs
    assert (sync.kind, sync.count_per_call) == ("item", 1)
    _assert_test_line(sync.culprit, run_checked)
    assert (sync.culprit.origin.line, sync.culprit.origin.function) == (_line(MODEL_SOURCE, "HOST SYNC"), "guard")
    assert unchecked.syncs == ()


def test_sdpa_call_site_is_the_library_line(profiles):
    checked, _ = profiles
    assert checked.sdpa_backend == "flash"
    assert checked.sdpa_culprit.origin.function == "attention"
    assert "scaled_dot_product_attention" in MODEL_SOURCE.splitlines()[checked.sdpa_culprit.origin.line - 1]


def test_findings_keep_the_test_line_and_name_the_library_frame(fakemodel, profiles):
    checked, unchecked = profiles
    findings = {f.rule: f for f in check_against_baseline(checked, unchecked) if f.failed}
    assert "new:sync" in findings
    sync = findings["new:sync"]
    _assert_test_line(sync.culprit, run_checked)  # the annotation stays at the test's line
    origin = f"{sync.culprit.origin.file}:{_line(MODEL_SOURCE, 'HOST SYNC')} (guard)"
    assert origin in sync.message
    assert "Block.forward" in sync.message  # the short stack is in the evidence
    declared = {f.rule: f for f in check_declared(checked, forbid=["transpose", "sync"]) if f.failed}
    assert f":{_line(MODEL_SOURCE, 'LAYOUT COPY')} (attention)" in declared["forbid:transpose"].message
    assert "(guard)" in declared["forbid:sync"].message
    assert ":" + str(_line(MODEL_SOURCE, "LAYOUT COPY")) in format_profile_table(checked)


def test_stack_survives_the_stored_profile_and_old_profiles_still_load(profiles):
    checked, _ = profiles
    data = json.loads(json.dumps(checked.to_dict()))
    assert KernelProfile.from_dict(data) == checked
    assert data["kernels"] and all("via" in k for k in data["kernels"])  # every op came from the library
    old = {**data, "kernels": [{k: v for k, v in rec.items() if k != "via"} for rec in data["kernels"]],
           "syncs": [{k: v for k, v in rec.items() if k != "via"} for rec in data["syncs"]]}
    old.pop("sdpa_via", None)
    loaded = KernelProfile.from_dict(old)
    assert all(k.culprit.stack == () for k in loaded.kernels)
    assert [str(k.culprit) for k in loaded.kernels] == [str(k.culprit) for k in checked.kernels]
    # an old baseline (no library frames) against a new profile: same structure, no failed finding
    assert [f for f in check_against_baseline(checked, loaded) if f.failed] == []


def test_site_marker_round_trip():
    inner = Culprit("transformers/models/llama/modeling_llama.py", 180, "eager_attention_forward")
    culprit = Culprit("tests/perf/test_models.py", 40, "prefill", (inner, Culprit("m.py", 7, "A.forward")))
    assert parse_site(culprit.marker()) == culprit
    assert parse_site(Culprit("t.py", 3, "f").marker()) == Culprit("t.py", 3, "f")
    assert parse_site("aten::mm") is None
    assert culprit.describe() == ("tests/perf/test_models.py:40 (prefill) <- transformers/models/llama/"
                                  "modeling_llama.py:180 (eager_attention_forward) via m.py:7 (A.forward)")
    assert str(culprit) == "tests/perf/test_models.py:40 (prefill)"


def test_file_kinds(tmp_path):
    installed = tmp_path / "lib" / "python3.11" / "site-packages"
    assert file_kind(str(installed / "transformers" / "modeling_utils.py")) == "installed"
    assert file_kind(str(installed / "torch" / "nn" / "modules" / "module.py")) == "skip"
    assert file_kind(str(tmp_path / "elsewhere" / "lib.py")) == "outside"
    assert file_kind(__file__) == "project"
    assert file_kind(torch.__file__) == "skip"
    assert file_kind(inspect.__file__) == "skip"  # the standard library


def test_real_transformers_llama_eager_copies_are_blamed_on_modeling_llama():
    """A randomly initialised transformers Llama (no download): switching attention from "sdpa" to
    "eager" adds the GQA ``repeat_kv`` copies; the finding names modeling_llama.py's line and
    function and stays at this test's line."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    ids = torch.randint(0, 128, (1, 8))
    models = {}
    for impl in ("sdpa", "eager"):  # one config each: from_config records the implementation on it
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        torch.manual_seed(0)
        models[impl] = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=impl).eval()

    def forward(model):
        with torch.no_grad():
            return model(ids).logits  # LLAMA LINE

    sdpa, eager = (profile_call(lambda m=models[impl]: forward(m)) for impl in ("sdpa", "eager"))
    findings = [f for f in check_against_baseline(eager, sdpa) if f.failed and f.rule == "new:transpose"]
    assert findings, [str(f) for f in check_against_baseline(eager, sdpa)]
    culprit = findings[0].culprit
    lines, start = inspect.getsourcelines(forward)
    assert (Path(culprit.file).resolve(), culprit.function) == (Path(__file__).resolve(), "forward")
    assert culprit.line == start + next(i for i, text in enumerate(lines) if "LLAMA LINE" in text)
    assert culprit.origin.file == "transformers/models/llama/modeling_llama.py"  # relative to site-packages
    assert culprit.origin.function in ("repeat_kv", "eager_attention_forward")
    assert f"modeling_llama.py:{culprit.origin.line} ({culprit.origin.function})" in findings[0].message


@pytest.mark.gpu
def test_gpu_llama_seed_case_eager_vs_sdpa_names_lines_inside_transformers():
    """The issue's seed case on a GPU: a randomly initialised Llama (2 layers, hidden 1024, GQA 16/4,
    batch 4 x 1024 tokens, bf16), attention switched from "sdpa" to "eager". Every new layout copy
    keeps this test's line as its culprit and names a line of transformers' modeling_llama.py as its
    origin; casts and syncs that come from inside transformers name their line too (printed, -rP)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    ids = torch.randint(0, 32000, (4, 1024), device="cuda")
    models = {}
    for impl in ("sdpa", "eager"):
        config = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                          num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=4,
                                          max_position_embeddings=2048)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=impl)
        models[impl] = model.to(device="cuda", dtype=torch.bfloat16).eval()

    def forward(model):
        with torch.no_grad():
            return model(ids).logits  # SEED LINE

    sdpa, eager = (profile_call(lambda m=models[impl]: forward(m)) for impl in ("sdpa", "eager"))
    assert sdpa.level == eager.level == "kernel"
    findings = [f for f in check_against_baseline(eager, sdpa) if f.failed]
    for f in findings:
        print(f)
    lines, start = inspect.getsourcelines(forward)
    seed_line = start + next(i for i, text in enumerate(lines) if "SEED LINE" in text)
    layout = [f for f in findings if f.rule in ("new:transpose", "new:copy")]
    assert layout, [str(f) for f in findings]
    for f in findings:
        if f.culprit is not None:
            assert (Path(f.culprit.file).resolve(), f.culprit.line) == (Path(__file__).resolve(), seed_line), str(f)
    for f in layout:
        assert f.culprit.origin is not None and f.culprit.origin.file.startswith("transformers/"), str(f)
        assert f"{Path(f.culprit.origin.file).name}:{f.culprit.origin.line}" in f.message
