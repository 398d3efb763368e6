"""The profile stage on CPU, with the real torch.profiler (no mocks).

Each seeded case puts the offending call on its own line; the expected culprit line is computed with
``inspect`` from the source, never hard-coded.
"""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from perfci.errors import BadInputError, UsageError
from perfci.measurement import Measurement, SamplingPolicy
from perfci.rules import check_against_baseline
from perfci.timing import WallTimer
from perfci.trace import Culprit, KernelProfile, KernelRecord, format_profile_table, profile_call
from perfci.variants import (
    VariantRun,
    baseline_profiles,
    check_against_baseline_variants,
    check_faster_than,
    kernel_mix,
    measure_variants,
    parse_faster_than,
    parse_variants,
    summary,
)

B, L, H, D = 2, 64, 4, 32
torch.manual_seed(0)
Q, K, V = (torch.randn(B, L, H, D) for _ in range(3))  # BLHD, as a model's projections give them
MASK = torch.ones(L, L, dtype=torch.bool).tril()
A16 = torch.randn(64, 64, dtype=torch.bfloat16)
X = torch.randn(4096)


def sdpa_transpose_copies():
    q, k, v = (t.transpose(1, 2).contiguous() for t in (Q, K, V))  # BLHD -> BHLD, 3 copies
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_strided_views():
    q, k, v = (t.transpose(1, 2) for t in (Q, K, V))
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_with_mask():
    q, k, v = (t.transpose(1, 2) for t in (Q, K, V))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=MASK)


def sdpa_broadcast_kv():
    q, k, v = (t.transpose(1, 2) for t in (Q, K, V))
    return F.scaled_dot_product_attention(q, k[:1], v[:1])  # K/V broadcast over the batch


def sdpa_forced_math():
    q, k, v = (t.transpose(1, 2) for t in (Q, K, V))
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


def nan_check_sync():
    y = X * 2
    if bool(torch.isnan(y).any()):  # device->host sync on a GPU
        raise AssertionError("nan")
    return y


def item_sync():
    return X.sum().item()


def upcast_matmul():
    return A16.float() @ A16.float()


def bf16_matmul():
    return A16 @ A16


def unfused_chain():
    return ((X * 2 + 1).relu() * 3).sigmoid()


def fused_one_op():
    return torch.sigmoid(X)


def launches_nothing():
    return 42


def line_of(fn, needle: str) -> int:
    """The absolute line number of the first line of ``fn`` containing ``needle``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if needle in text]
    assert hits, f"{needle!r} not in {fn.__name__}"
    return hits[0]


def assert_points_at(culprit: Culprit | None, fn, needle: str) -> None:
    assert culprit is not None
    assert Path(culprit.file).resolve() == Path(__file__).resolve()
    assert culprit.line == line_of(fn, needle)
    assert culprit.function in (fn.__name__, "<genexpr>")
    assert culprit.stack == ()  # project code only: no library frames below the line


@pytest.fixture(scope="module")
def profiles() -> dict[str, KernelProfile]:
    cases = [sdpa_transpose_copies, sdpa_strided_views, sdpa_with_mask, sdpa_broadcast_kv, sdpa_forced_math,
             nan_check_sync, item_sync, upcast_matmul, bf16_matmul, unfused_chain, fused_one_op,
             launches_nothing]
    return {fn.__name__: profile_call(fn, label=fn.__name__) for fn in cases}


def test_cpu_profiles_are_op_level(profiles):
    for name, profile in profiles.items():
        assert profile.status == "ok", (name, profile.missing_reason)
        assert profile.level == "op"
        assert profile.calls_profiled == 3


def test_transpose_contiguous_is_one_copy_per_tensor_with_bytes_and_line(profiles):
    profile = profiles["sdpa_transpose_copies"]
    (copy,) = profile.copies()  # contiguous -> clone -> copy_ counted once per tensor
    assert (copy.category, copy.kind, copy.name) == ("copy", "transpose", "aten::contiguous")
    assert copy.count_per_call == 3
    assert copy.bytes_per_call == 3 * Q.numel() * Q.element_size()
    assert profile.copy_bytes_per_call == copy.bytes_per_call
    assert_points_at(copy.culprit, sdpa_transpose_copies, ".contiguous()")
    assert "aten::contiguous" in format_profile_table(profile)


def test_strided_view_variant_reports_zero_copies(profiles):
    clean = profiles["sdpa_strided_views"]
    assert clean.copies() == ()
    assert clean.copy_bytes_per_call == 0
    assert clean.syncs == ()
    bad = profiles["sdpa_transpose_copies"]
    assert clean.launches_per_call == bad.launches_per_call - 3


def test_cpu_sdpa_backends_as_torch_really_dispatches(profiles):
    # verified on torch 2.13 CPU: a boolean attn_mask stays on the CPU flash kernel; broadcasting K/V
    # over the batch (or forcing MATH) falls back to the math path
    assert profiles["sdpa_strided_views"].sdpa_backend == "flash"
    assert profiles["sdpa_with_mask"].sdpa_backend == "flash"
    assert any("for_cpu" in note for note in profiles["sdpa_with_mask"].notes)
    assert profiles["sdpa_broadcast_kv"].sdpa_backend == "math"
    assert profiles["sdpa_forced_math"].sdpa_backend == "math"
    assert profiles["item_sync"].sdpa_backend is None


def test_math_sdpa_is_flagged_against_flash_baseline_with_its_copies(profiles):
    findings = check_against_baseline(profiles["sdpa_broadcast_kv"], profiles["sdpa_strided_views"])
    rules = {f.rule for f in findings if f.failed}
    assert "changed:sdpa_backend" in rules
    assert "more:launches" in rules
    assert "new:transpose" in rules  # the math path's reshape of broadcast K/V copies
    changed = next(f for f in findings if f.rule == "changed:sdpa_backend")
    assert_points_at(changed.culprit, sdpa_broadcast_kv, "k[:1]")


def test_hidden_sync_from_bool_any_names_the_if_line(profiles):
    (sync,) = profiles["nan_check_sync"].syncs
    assert sync.kind == "item"
    assert sync.count_per_call == 1
    assert_points_at(sync.culprit, nan_check_sync, "if bool(")


def test_item_sync(profiles):
    (sync,) = profiles["item_sync"].syncs
    assert (sync.kind, sync.count_per_call) == ("item", 1)
    assert_points_at(sync.culprit, item_sync, ".item()")


def test_float_upcast_is_two_casts_and_an_fp32_gemm(profiles):
    profile = profiles["upcast_matmul"]
    (cast,) = profile.copies()
    assert (cast.kind, cast.count_per_call) == ("cast", 2)
    assert cast.bytes_per_call == 2 * A16.numel() * 4  # written as fp32
    assert_points_at(cast.culprit, upcast_matmul, ".float()")
    gemms = [k for k in profile.kernels if k.category == "gemm"]
    assert [g.kind for g in gemms] == ["fp32"]
    baseline_gemms = [k for k in profiles["bf16_matmul"].kernels if k.category == "gemm"]
    assert [g.kind for g in baseline_gemms] == ["bf16"]
    rules = {f.rule for f in check_against_baseline(profile, profiles["bf16_matmul"]) if f.failed}
    assert {"new:cast", "new:gemm_dtype"} <= rules


def test_unfused_chain_launch_count_and_no_scalar_copies(profiles):
    chain = profiles["unfused_chain"]
    ops = [k for k in chain.kernels if k.category == "elementwise"]
    assert sum(k.count_per_call for k in ops) == chain.launches_per_call == 5  # mul add relu mul sigmoid
    assert chain.copies() == ()  # python scalars wrapped into 0-dim tensors are not copies
    findings = check_against_baseline(chain, profiles["fused_one_op"])
    (more,) = [f for f in findings if f.rule == "more:launches"]
    assert more.failed and "1 -> 5" in more.message


def test_function_launching_nothing_is_an_empty_ok_profile(profiles):
    empty = profiles["launches_nothing"]
    assert (empty.status, empty.kernels, empty.syncs, empty.launches_per_call) == ("ok", (), (), 0)
    assert empty.sdpa_backend is None


def test_cpu_peak_memory_from_profiler_memory_events(profiles):
    bad, clean = profiles["sdpa_transpose_copies"], profiles["sdpa_strided_views"]
    assert clean.peak_memory_bytes is not None and clean.peak_memory_bytes > 0
    assert bad.peak_memory_bytes >= clean.peak_memory_bytes + bad.copy_bytes_per_call


def test_structure_is_identical_over_five_runs():
    runs = [profile_call(sdpa_transpose_copies) for _ in range(5)] + [profile_call(nan_check_sync) for _ in range(5)]

    def structure(p: KernelProfile) -> dict:
        data = p.to_dict()
        for k in data["kernels"]:
            del k["us"]
        return data

    for group in (runs[:5], runs[5:]):
        assert all(structure(p) == structure(group[0]) for p in group)
        for p in group[1:]:
            assert [f for f in check_against_baseline(p, group[0]) if f.failed] == []


def test_to_dict_round_trips_small_json_and_tolerates_unknown_keys(profiles):
    for profile in profiles.values():
        data = json.loads(json.dumps(profile.to_dict()))
        assert KernelProfile.from_dict(data) == profile
        assert KernelProfile.from_dict({**data, "future_key": 1}) == profile
    assert len(json.dumps(profiles["sdpa_broadcast_kv"].to_dict())) < 4000
    missing = KernelProfile.missing("no profiler")
    assert KernelProfile.from_dict(missing.to_dict()) == missing


@pytest.mark.parametrize("bad", [[], {"schema": 99}, {"schema": 1, "status": "ok"},
                                 {**KernelProfile.missing("x").to_dict(), "kernels": [{"name": "k"}]},
                                 {**KernelProfile.missing("x").to_dict(), "status": "maybe"}])
def test_from_dict_rejects_malformed_input(bad):
    with pytest.raises(BadInputError):
        KernelProfile.from_dict(bad)


def test_profiler_already_running_gives_missing_not_an_exception():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        profile = profile_call(sdpa_strided_views)
    assert profile.status == "missing"
    assert "already running" in profile.missing_reason


def test_raising_function_gives_missing():
    def broken():
        raise RuntimeError("boom")

    profile = profile_call(broken)
    assert profile.status == "missing" and "boom" in profile.missing_reason
    assert "missing" in format_profile_table(profile)


def test_calls_must_be_positive():
    with pytest.raises(UsageError):
        profile_call(launches_nothing, calls=0)


def test_trace_is_written_for_perfetto(tmp_path):
    path = tmp_path / "deep" / "dir" / "trace.json"
    profile = profile_call(sdpa_transpose_copies, calls=2, label="sdpa", trace_path=path)
    assert profile.calls_profiled == 2 and profile.copies()[0].count_per_call == 3
    names = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert {"sdpa", "aten::contiguous"} <= names


def test_profile_overhead_per_benchmark_is_under_a_second():
    cases = [sdpa_transpose_copies, sdpa_strided_views, nan_check_sync, upcast_matmul, unfused_chain]
    started = time.perf_counter()
    for fn in cases:
        profile_call(fn)
    mean_s = (time.perf_counter() - started) / len(cases)
    print(f"profile_call: {mean_s * 1e3:.1f} ms per benchmark on CPU (3 profiled calls + warm-up)")
    assert mean_s < 1.0


# --- variants of one benchmark (perfci.variants) ----------------------------------------------

A128, B128 = torch.randn(128, 128), torch.randn(128, 128)


def one_matmul():
    return A128 @ B128


def ten_matmuls():
    out = A128
    for _ in range(10):
        out = A128 @ B128 + out
    return out


def _record(name: str, category: str, kind: str = "", n: float = 1.0) -> KernelRecord:
    return KernelRecord(name, category, n, 1.0, 0, None, kind)


def _kernel_profile(*records: KernelRecord, sdpa: str | None = None) -> KernelProfile:
    return KernelProfile("ok", None, "kernel", 3, records, (), sdpa, sum(r.count_per_call for r in records), None, 0)


def test_kernel_mix_tells_generated_kernels_from_library_calls():
    library = _kernel_profile(_record("flash_fwd_kernel", "attention", "flash"), _record("nvjet_gemm", "gemm", "bf16"),
                              sdpa="flash")
    generated = _kernel_profile(_record("triton_red_fused_bmm_0", "triton", n=2),
                                _record("triton_poi_fused_1", "triton"))
    assert kernel_mix(library).path == "library"
    assert kernel_mix(library).library_per_call == (("attention/flash", 1.0), ("gemm/bf16", 1.0))
    assert kernel_mix(generated).path == "generated" and kernel_mix(generated).generated_per_call == 3
    assert "SDPA flash" in kernel_mix(library).describe()
    run = VariantRun("aoti", 900.0, Measurement("wall", "cpu", (1.0, 1.1), 1, "precision", 0.01, 0.1, True),
                     generated)
    findings = check_against_baseline_variants((run,), {"aoti": library})
    failed = {f.rule for f in findings if f.failed}
    assert {"aoti/changed:path", "aoti/new:category"} <= failed  # flash -> Inductor's own Triton kernels
    assert "aoti/changed:sdpa_backend" not in failed  # no SDPA call at all now: reported, as for any benchmark
    changed = next(f for f in findings if f.rule == "aoti/changed:path")
    assert "library" in changed.message and "generated" in changed.message
    assert check_against_baseline_variants((run,), {})[0].failed is False  # a new variant is only noted
    stored = {"aoti": json.loads(json.dumps(run.to_dict()))}
    assert baseline_profiles(stored) == {"aoti": generated}


@pytest.fixture
def one_thread():
    """Timing on a shared 2-core machine: one intra-op thread, so that a busy core does not stall an
    OpenMP barrier for a whole time slice (seen: a 128^2 matmul reading 16 ms)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_variants_are_measured_alike_with_compile_time_apart_and_faster_than_judged(one_thread):
    policy = SamplingPolicy(min_time_s=0.2, max_time_s=1.0, warmup_min_s=0.05, warmup_max_s=0.3)
    compiled = torch.compile(ten_matmuls)
    runs = measure_variants({"one": one_matmul, "ten": ten_matmuls, "compiled": compiled}, timer=WallTimer(),
                            policy=policy, profile=lambda name, fn: profile_call(fn, label=name))
    by = {r.name: r for r in runs}
    print("\n" + summary(runs))
    assert by["compiled"].first_call_ms > 20 * by["compiled"].measurement.median_ms  # compilation kept apart
    assert by["ten"].mix.library_per_call == (("gemm/fp32", 10.0),)
    assert by["compiled"].mix.level == "op" and "compiled regions" in by["compiled"].mix.describe()
    (ok,) = check_faster_than(runs, {"one": "ten"}, threshold=0.03)
    assert not ok.failed and "FASTER" in ok.message
    (bad,) = check_faster_than(runs, {"ten": "one"}, threshold=0.03)
    assert bad.failed and "expected FASTER" in bad.message
    (host,) = check_faster_than(runs, {"ten": "one"}, threshold=0.03, gated=False)
    assert not host.failed and "not gated" in host.message


def test_variant_usage_errors():
    with pytest.raises(UsageError):
        parse_variants({"only": one_matmul})
    with pytest.raises(UsageError):
        parse_variants({"a": one_matmul, "b": one_matmul()})
    with pytest.raises(UsageError):
        parse_faster_than({"c": "a"}, ("a", "b"))
    with pytest.raises(UsageError):
        parse_faster_than({"a": "a"}, ("a", "b"))
