"""Structural rules on real CPU profiles (torch.profiler, no mocks) and on stored GPU profiles."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perfci.errors import UsageError
from perfci.rules import (
    VALID_FORBID,
    Finding,
    check_against_baseline,
    check_declared,
    parse_expect,
    parse_forbid,
)
from perfci.trace import KernelProfile, profile_call

DATA = Path(__file__).parent / "data"
torch.manual_seed(1)
X = torch.randn(8, 64, 4, 16)  # BLHD
W = torch.randn(16, 16)


def attention_clean():
    q = X.transpose(1, 2)
    return F.scaled_dot_product_attention(q, q, q)


def attention_with_copy():
    q = X.transpose(1, 2).contiguous()  # the seeded copy
    return F.scaled_dot_product_attention(q, q, q)


def small_copy_next_to_big_gemm():
    big = torch.randn(256, 256)
    y = X[:, :2].contiguous()  # a tiny copy (4 KiB), ~0% of the time
    return big @ big, y


def big_gemm_only():
    big = torch.randn(256, 256)
    return big @ big, X[:, :2]


def with_sync():
    y = X @ W
    n = int((y > 0).sum())  # .item() in disguise
    return y, n


def without_sync():
    return X @ W


def line_of(fn, needle: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return next(start + i for i, text in enumerate(lines) if needle in text)


@pytest.fixture(scope="module")
def p() -> dict[str, KernelProfile]:
    cases = [attention_clean, attention_with_copy, small_copy_next_to_big_gemm, big_gemm_only, with_sync,
             without_sync]
    return {fn.__name__: profile_call(fn) for fn in cases}


def failed(findings: tuple[Finding, ...]) -> list[Finding]:
    return [f for f in findings if f.failed]


# --- declarations -----------------------------------------------------------------------------


def test_parse_forbid_accepts_known_names_and_categories():
    assert parse_forbid("copy") == ("copy",)
    assert parse_forbid(["sync", "math_sdpa", "gemm", "sync"]) == ("sync", "math_sdpa", "gemm")
    assert parse_forbid(None) == ()
    assert {"copy", "cast", "transpose", "sync", "memcpy", "math_sdpa", "fp32_gemm", "triton"} <= set(VALID_FORBID)


@pytest.mark.parametrize("bad", ["copies", ["copy", "kernel"], [3]])
def test_parse_forbid_rejects_unknown_names_listing_the_valid_ones(bad):
    with pytest.raises(UsageError) as info:
        parse_forbid(bad)
    assert "math_sdpa" in str(info.value) and "transpose" in str(info.value)


def test_parse_expect_validates_keys_and_types():
    assert parse_expect({"sdpa_backend": "flash", "max_kernels": 3}) == {"sdpa_backend": "flash", "max_kernels": 3}
    for bad in ({"max_kernel": 1}, {"sdpa_backend": "fast"}, {"max_syncs": -1}, {"max_syncs": True},
                {"max_copy_bytes": 1.5}, ["max_syncs"]):
        with pytest.raises(UsageError):
            parse_expect(bad)


def test_forbid_copy_fails_deterministically_on_a_tiny_copy_next_to_a_big_gemm(p):
    profile = p["small_copy_next_to_big_gemm"]
    (finding,) = check_declared(profile, ["copy"], {})
    assert finding.failed and finding.rule == "forbid:copy"
    assert finding.culprit.line == line_of(small_copy_next_to_big_gemm, ".contiguous()")
    assert f":{finding.culprit.line} (" in finding.message and "B/call" in finding.message
    assert check_declared(p["big_gemm_only"], ["copy"], {}) == ()


def test_forbid_sync_and_max_syncs(p):
    (sync,) = check_declared(p["with_sync"], ["sync"], {})
    assert sync.culprit.line == line_of(with_sync, "int(")
    (limit,) = check_declared(p["with_sync"], [], {"max_syncs": 0})
    assert limit.failed and limit.rule == "expect:max_syncs" and limit.culprit == sync.culprit
    assert check_declared(p["without_sync"], ["sync"], {"max_syncs": 0}) == ()


def test_expect_sdpa_backend_and_math(p):
    assert check_declared(p["attention_clean"], ["math_sdpa"], {"sdpa_backend": "flash"}) == ()
    (wrong,) = check_declared(p["attention_clean"], [], {"sdpa_backend": "cudnn"})
    assert wrong.failed and "got flash" in wrong.message
    assert wrong.culprit.line == line_of(attention_clean, "scaled_dot_product_attention")
    (none,) = check_declared(p["without_sync"], [], {"sdpa_backend": "flash"})
    assert "no SDPA call" in none.message


def test_expect_numeric_limits(p):
    profile = p["attention_with_copy"]
    launches = round(profile.launches_per_call)
    assert check_declared(profile, [], {"max_kernels": launches, "max_copy_bytes": profile.copy_bytes_per_call,
                                        "max_peak_memory_bytes": profile.peak_memory_bytes}) == ()
    found = check_declared(profile, [], {"max_kernels": launches - 1, "max_copy_bytes": 0,
                                         "max_peak_memory_bytes": 0})
    assert [f.rule for f in found] == ["expect:max_kernels", "expect:max_copy_bytes", "expect:max_peak_memory_bytes"]
    assert all(f.failed for f in found)


def test_declared_rules_on_a_missing_profile_are_not_checked():
    (finding,) = check_declared(KernelProfile.missing("CUPTI busy"), ["copy"], {})
    assert (finding.rule, finding.failed) == ("not_checked", False) and "CUPTI busy" in finding.message
    assert check_declared(KernelProfile.missing("x"), [], {}) == ()
    with pytest.raises(UsageError):
        check_declared(KernelProfile.missing("x"), ["nope"], {})


# --- against the stored profile ---------------------------------------------------------------


def test_new_copy_against_baseline_names_bytes_and_line(p):
    findings = check_against_baseline(p["attention_with_copy"], p["attention_clean"])
    new = [f for f in findings if f.rule == "new:transpose"]
    assert len(new) == 1 and new[0].failed
    assert new[0].culprit.line == line_of(attention_with_copy, ".contiguous()")
    assert f"{X.numel() * 4 / 1024:.1f} KiB/call moved" in new[0].message
    assert {f.rule for f in failed(findings)} == {"new:transpose", "more:launches", "more:peak_memory"}


def test_removed_copy_is_an_informational_improvement(p):
    findings = check_against_baseline(p["attention_clean"], p["attention_with_copy"])
    assert failed(findings) == []
    assert {"fewer:transpose", "fewer:launches"} <= {f.rule for f in findings}


def test_new_sync_against_baseline(p):
    findings = check_against_baseline(p["with_sync"], p["without_sync"])
    (sync,) = [f for f in findings if f.rule == "new:sync"]
    assert sync.failed and sync.culprit.line == line_of(with_sync, "int(")
    assert [f for f in failed(check_against_baseline(p["without_sync"], p["with_sync"]))] == []


def test_tiny_copy_fails_against_baseline_although_time_barely_changes(p):
    findings = failed(check_against_baseline(p["small_copy_next_to_big_gemm"], p["big_gemm_only"]))
    (new,) = [f for f in findings if f.rule == "new:transpose"]
    assert new.culprit.line == line_of(small_copy_next_to_big_gemm, ".contiguous()")
    assert "+4.0 KiB/call moved" in new.message


def test_same_profile_has_no_findings(p):
    for profile in p.values():
        assert check_against_baseline(profile, profile) == ()


def test_missing_either_side_is_not_checked_with_reason(p):
    ok = p["attention_clean"]
    for current, baseline, side in [(KernelProfile.missing("no torch"), ok, "current"),
                                    (ok, KernelProfile.missing("old run"), "baseline")]:
        (finding,) = check_against_baseline(current, baseline)
        assert finding.rule == "not_checked" and not finding.failed and side in finding.message


def test_level_mismatch_is_not_checked(p):
    kernel_level = dataclasses.replace(p["attention_clean"], level="kernel")
    (finding,) = check_against_baseline(p["attention_clean"], kernel_level)
    assert finding.rule == "not_checked" and not finding.failed


def test_peak_memory_tolerance(p):
    base = dataclasses.replace(p["attention_clean"], peak_memory_bytes=1_000_000)
    within = dataclasses.replace(base, peak_memory_bytes=1_090_000)
    above = dataclasses.replace(base, peak_memory_bytes=1_200_000)
    assert check_against_baseline(within, base) == ()
    (more,) = check_against_baseline(above, base)
    assert more.rule == "more:peak_memory" and more.failed
    assert check_against_baseline(above, base, peak_memory_tolerance=0.25) == ()


def test_changed_backend_from_stored_profiles():
    stored = json.loads((DATA / "profiles_cpu.json").read_text())
    clean = KernelProfile.from_dict(stored["sdpa_strided_views"])
    broadcast = KernelProfile.from_dict(stored["sdpa_broadcast_kv"])
    (changed,) = [f for f in check_against_baseline(broadcast, clean) if f.rule == "changed:sdpa_backend"]
    assert changed.failed and "flash -> math" in changed.message


@pytest.mark.parametrize("level", ["kernel"])
def test_rules_on_stored_gpu_profiles(level):
    stored = json.loads((DATA / "profiles_gpu.json").read_text())
    clean = KernelProfile.from_dict(stored["sdpa_strided_views"])
    bad = KernelProfile.from_dict(stored["sdpa_transpose_copies"])
    assert clean.level == bad.level == level
    assert clean.copies() == ()
    findings = failed(check_against_baseline(bad, clean))
    (new,) = [f for f in findings if f.rule == "new:transpose"]
    assert "+3 " in new.message and "tests/test_trace_gpu.py" in new.message
    assert failed(check_against_baseline(clean, bad)) == []
    upcast = KernelProfile.from_dict(stored["upcast_matmul"])
    bf16 = KernelProfile.from_dict(stored["bf16_matmul"])
    assert {"new:cast", "new:gemm_dtype"} <= {f.rule for f in failed(check_against_baseline(upcast, bf16))}
    item = KernelProfile.from_dict(stored["item_sync"])
    assert "sync" in {f.rule.split(":")[1] for f in check_declared(item, ["sync"], {})}
