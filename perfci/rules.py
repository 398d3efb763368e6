"""Structural rules: deterministic findings from a :class:`~perfci.trace.KernelProfile`.

Two sources of rules:

* declared, on the benchmark: ``forbid`` (``copy``, ``cast``, ``sync``, ``math_sdpa``...) and ``expect``
  (``sdpa_backend``, ``max_kernels``...), checked by :func:`check_declared`;
* the stored profile of the baseline, checked by :func:`check_against_baseline`: anything new (a copy,
  cast, sync, memcpy, kernel category, fp32 GEMM), a changed SDPA backend, more launches or more peak
  memory fails; anything removed is an informational improvement.

Counts are compared per call after rounding, so timing noise never changes a finding. A missing
profile on either side is a ``not_checked`` finding that says why, never a silent pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from perfci.categories import CATEGORIES, SDPA_BACKENDS
from perfci.errors import UsageError
from perfci.trace import Culprit, KernelProfile, KernelRecord, SyncRecord

R = TypeVar("R", KernelRecord, SyncRecord)

SPECIAL_FORBID = ("copy", "cast", "transpose", "sync", "memcpy", "math_sdpa", "fp32_gemm")
VALID_FORBID = tuple(dict.fromkeys(SPECIAL_FORBID + CATEGORIES))
EXPECT_KEYS = ("sdpa_backend", "max_kernels", "max_syncs", "max_copy_bytes", "max_peak_memory_bytes")
EXPECTED_BACKENDS = tuple(b for b in SDPA_BACKENDS if b != "unknown")
_STRUCTURE_KINDS = {"copy": "copy", "cast": "cast", "transpose": "transpose", "cat": "copy"}


@dataclass(frozen=True)
class Finding:
    rule: str  # "forbid:copy", "expect:sdpa_backend", "new:copy", "changed:sdpa_backend", "not_checked"...
    message: str  # one line: what is new, bytes moved, culprit file:line
    culprit: Culprit | None
    failed: bool  # False for informational findings (improvements, not checked)

    def __str__(self) -> str:
        return f"[{'FAIL' if self.failed else 'info'}] {self.rule}: {self.message}"


# --- parsing declarations ---------------------------------------------------------------------


def parse_forbid(names: str | Iterable[str] | None) -> tuple[str, ...]:
    """Validate ``forbid`` names (a string or an iterable of strings); keeps order, drops duplicates."""
    if names is None:
        return ()
    items = [names] if isinstance(names, str) else list(names)
    bad = [n for n in items if not isinstance(n, str) or n not in VALID_FORBID]
    if bad:
        raise UsageError(f"unknown forbid name(s) {', '.join(map(repr, bad))}",
                         hint=f"valid: {', '.join(VALID_FORBID)}")
    return tuple(dict.fromkeys(items))


def parse_expect(mapping: Mapping[str, object] | None) -> dict[str, object]:
    """Validate ``expect``: ``sdpa_backend`` (a backend name) and non-negative integer ``max_*`` limits."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise UsageError(f"expect must be a mapping, got {type(mapping).__name__}",
                         hint=f"keys: {', '.join(EXPECT_KEYS)}")
    result: dict[str, object] = {}
    for key, value in mapping.items():
        if key not in EXPECT_KEYS:
            raise UsageError(f"unknown expect key {key!r}", hint=f"valid: {', '.join(EXPECT_KEYS)}")
        if key == "sdpa_backend":
            if value not in EXPECTED_BACKENDS:
                raise UsageError(f"expect sdpa_backend={value!r} is not a backend",
                                 hint=f"valid: {', '.join(EXPECTED_BACKENDS)}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"expect {key}={value!r} must be a non-negative integer")
        result[key] = value
    return result


# --- helpers ----------------------------------------------------------------------------------


def _n(value: float) -> int:
    """Counts per call are integers when code is deterministic; round away profiler arithmetic."""
    return round(value)


def _bytes(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _label(record: KernelRecord) -> str:
    what = f"{record.category}/{record.kind}" if record.kind else record.category
    return f"{what} {record.name}"


def _at(culprit: Culprit | None) -> str:
    return f" at {culprit}" if culprit is not None else " (no user frame found)"


def _record_finding(rule: str, record: KernelRecord, count: int | None = None) -> Finding:
    count = _n(record.count_per_call) if count is None else count
    moved = f", {_bytes(record.bytes_per_call)}/call" if record.bytes_per_call else ""
    return Finding(rule, f"{count}x {_label(record)} per call{moved}{_at(record.culprit)}", record.culprit, True)


def _missing(profile: KernelProfile, side: str) -> Finding:
    return Finding("not_checked", f"structure not checked: {side} profile missing ({profile.missing_reason})",
                   None, False)


# --- declared rules ---------------------------------------------------------------------------


def _forbidden(profile: KernelProfile, name: str) -> list[Finding]:
    rule = f"forbid:{name}"
    if name == "sync":
        return [Finding(rule, f"{_n(s.count_per_call)}x host sync ({s.kind}) per call{_at(s.culprit)}",
                        s.culprit, True) for s in profile.syncs if _n(s.count_per_call) > 0]
    if name == "math_sdpa":
        if profile.sdpa_backend is not None and "math" in profile.sdpa_backend.split("+"):
            where = profile.sdpa_culprit
            return [Finding(rule, f"SDPA ran the math backend ({profile.sdpa_backend}){_at(where)}", where, True)]
        return []
    if name in ("cast", "transpose"):
        chosen = [k for k in profile.kernels if k.category == "copy" and k.kind == name]
    elif name == "fp32_gemm":
        chosen = [k for k in profile.kernels if k.category == "gemm" and k.kind == "fp32"]
    else:
        chosen = [k for k in profile.kernels if k.category == name]
    return [_record_finding(rule, k) for k in chosen if _n(k.count_per_call) > 0]


def _expected(profile: KernelProfile, key: str, value: object) -> list[Finding]:
    rule = f"expect:{key}"
    if key == "sdpa_backend":
        if profile.sdpa_backend == value:
            return []
        seen = "no SDPA call was seen" if profile.sdpa_backend is None else f"got {profile.sdpa_backend}"
        where = profile.sdpa_culprit
        return [Finding(rule, f"expected SDPA backend {value}, {seen}{_at(where) if where else ''}", where, True)]
    assert isinstance(value, int)
    if key == "max_kernels":
        actual, unit = _n(profile.launches_per_call), "launches"
    elif key == "max_syncs":
        actual, unit = _n(profile.syncs_per_call()), "host syncs"
    elif key == "max_copy_bytes":
        actual, unit = profile.copy_bytes_per_call, "bytes copied"
    else:
        if profile.peak_memory_bytes is None:
            return [Finding("not_checked", f"{key} not checked: no peak memory measured", None, False)]
        actual, unit = profile.peak_memory_bytes, "bytes peak memory"
    if actual <= value:
        return []
    worst = max((k for k in profile.kernels if key != "max_copy_bytes" or k.is_copy),
                key=lambda k: (k.bytes_per_call, k.count_per_call), default=None)
    where = worst.culprit if worst is not None and key in ("max_kernels", "max_copy_bytes") else None
    if key == "max_syncs" and profile.syncs:
        where = profile.syncs[0].culprit
    return [Finding(rule, f"{actual} {unit} per call > {value} allowed{_at(where) if where else ''}", where, True)]


def check_declared(profile: KernelProfile, forbid: Sequence[str] = (),
                   expect: Mapping[str, object] | None = None) -> tuple[Finding, ...]:
    """Findings for the benchmark's declared ``forbid`` and ``expect``; validates both first."""
    names = parse_forbid(forbid)
    limits = parse_expect(expect)
    if not names and not limits:
        return ()
    if not profile.ok:
        return (_missing(profile, "current"),)
    findings: list[Finding] = []
    for name in names:
        findings.extend(_forbidden(profile, name))
    for key, value in limits.items():
        findings.extend(_expected(profile, key, value))
    return tuple(findings)


# --- against the stored profile ---------------------------------------------------------------


def _rule_for(record: KernelRecord) -> str:
    if record.category == "memcpy":
        return "memcpy"
    return _STRUCTURE_KINDS.get(record.kind, "copy")


def _group(records: Iterable[KernelRecord]) -> dict[tuple[str, str], list[KernelRecord]]:
    """Copies by (category, kind): kernel names may drift (vectorised or not) without a structural change."""
    groups: dict[tuple[str, str], list[KernelRecord]] = {}
    for k in records:
        groups.setdefault((k.category, k.kind), []).append(k)
    return groups


def _count(records: Iterable[KernelRecord | SyncRecord]) -> int:
    return _n(sum(r.count_per_call for r in records))


def _new_records(current: list[R], base: list[R]) -> list[R]:
    """The current records (kernels or syncs) to blame for an increase: those whose culprit the baseline
    did not have."""
    seen = {(b.culprit.file, b.culprit.function) if b.culprit else None for b in base}
    fresh = [k for k in current if ((k.culprit.file, k.culprit.function) if k.culprit else None) not in seen]
    return fresh or current


def _copy_findings(profile: KernelProfile, baseline: KernelProfile) -> list[Finding]:
    now, before = _group(profile.copies()), _group(baseline.copies())
    findings = []
    for key in sorted(set(now) | set(before)):
        current, base = now.get(key, []), before.get(key, [])
        delta = _count(current) - _count(base)
        if delta > 0:
            rec = _new_records(current, base)[0]
            moved = sum(k.bytes_per_call for k in current) - sum(k.bytes_per_call for k in base)
            rule = f"new:{_rule_for(rec)}"
            msg = (f"+{delta} {_label(rec)} per call ({_count(base)} -> {_count(current)})"
                   f"{f', +{_bytes(moved)}/call moved' if moved > 0 else ''}{_at(rec.culprit)}")
            findings.append(Finding(rule, msg, rec.culprit, True))
        elif delta < 0:
            rec = base[0]
            findings.append(Finding(f"fewer:{_rule_for(rec)}", f"{-delta} fewer {_label(rec)} per call "
                                    f"({_count(base)} -> {_count(current)}); improvement", rec.culprit, False))
    return findings


def _sync_findings(profile: KernelProfile, baseline: KernelProfile) -> list[Finding]:
    findings = []
    for kind in sorted({s.kind for s in profile.syncs} | {s.kind for s in baseline.syncs}):
        current = [s for s in profile.syncs if s.kind == kind]
        base = [s for s in baseline.syncs if s.kind == kind]
        delta = _count(current) - _count(base)
        if delta > 0:
            where = _new_records(current, base)[0].culprit
            findings.append(Finding("new:sync", f"+{delta} host sync ({kind}) per call "
                                    f"({_count(base)} -> {_count(current)}){_at(where)}", where, True))
        elif delta < 0:
            findings.append(Finding("fewer:sync", f"{-delta} fewer host sync ({kind}) per call; improvement",
                                    base[0].culprit, False))
    return findings


def _category_findings(profile: KernelProfile, baseline: KernelProfile) -> list[Finding]:
    findings = []
    for category in sorted(profile.categories() - baseline.categories() - {"copy", "memcpy"}):
        rec = next(k for k in profile.kernels if k.category == category)
        findings.append(Finding("new:category", f"new kernel category '{category}': {_label(rec)}"
                                f"{_at(rec.culprit)}", rec.culprit, True))
    old_gemm = {k.kind for k in baseline.kernels if k.category == "gemm"}
    for kind in sorted({k.kind for k in profile.kernels if k.category == "gemm"} - old_gemm):
        if "gemm" not in baseline.categories() or not kind:
            continue  # a brand-new category is reported above
        rec = next(k for k in profile.kernels if k.category == "gemm" and k.kind == kind)
        findings.append(Finding("new:gemm_dtype", f"GEMM in {kind} (baseline: {', '.join(sorted(old_gemm))}): "
                                f"{rec.name}{_at(rec.culprit)}", rec.culprit, True))
    return findings


def check_against_baseline(profile: KernelProfile, baseline: KernelProfile, *,
                           peak_memory_tolerance: float = 0.10,
                           peak_memory_floor_bytes: int = 4096) -> tuple[Finding, ...]:
    """Structural diff against the stored profile. ``peak_memory_floor_bytes``: smaller growth is ignored."""
    if not profile.ok:
        return (_missing(profile, "current"),)
    if not baseline.ok:
        return (_missing(baseline, "baseline"),)
    if profile.level != baseline.level:
        return (Finding("not_checked", f"structure not checked: profiled at {profile.level} level, baseline at "
                        f"{baseline.level} level (record the baseline on the same kind of device)", None, False),)
    findings = _copy_findings(profile, baseline) + _sync_findings(profile, baseline)
    findings += _category_findings(profile, baseline)
    if profile.sdpa_backend != baseline.sdpa_backend:
        where = profile.sdpa_culprit or baseline.sdpa_culprit
        failed = profile.sdpa_backend is not None and baseline.sdpa_backend is not None
        findings.append(Finding("changed:sdpa_backend", f"SDPA backend {baseline.sdpa_backend} -> "
                                f"{profile.sdpa_backend}{_at(where) if where else ''}", where, failed))
    launches, before = _n(profile.launches_per_call), _n(baseline.launches_per_call)
    if launches != before:
        findings.append(Finding("more:launches" if launches > before else "fewer:launches",
                                f"{before} -> {launches} launches per call", None, launches > before))
    if profile.peak_memory_bytes is not None and baseline.peak_memory_bytes is not None:
        grown = profile.peak_memory_bytes - baseline.peak_memory_bytes
        if grown > max(peak_memory_tolerance * baseline.peak_memory_bytes, peak_memory_floor_bytes):
            share = grown / max(1, baseline.peak_memory_bytes)
            findings.append(Finding("more:peak_memory", f"peak memory {_bytes(baseline.peak_memory_bytes)} -> "
                                    f"{_bytes(profile.peak_memory_bytes)} (+{share:.0%}, tolerance "
                                    f"{peak_memory_tolerance:.0%})", None, True))
    return tuple(findings)
