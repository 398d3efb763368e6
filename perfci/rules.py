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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from perfci.categories import CATEGORIES, SDPA_BACKENDS
from perfci.errors import UsageError
from perfci.trace import Culprit, KernelProfile, KernelRecord, SyncRecord
from perfci.units import format_bytes

R = TypeVar("R", KernelRecord, SyncRecord)

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


# --- helpers ----------------------------------------------------------------------------------


def _n(value: float) -> int:
    """Counts per call are integers when code is deterministic; round away profiler arithmetic."""
    return round(value)


def _label(record: KernelRecord) -> str:
    what = f"{record.category}/{record.kind}" if record.kind else record.category
    return f"{what} {record.name}"


def _at(culprit: Culprit | None) -> str:
    """`` at <user line>``, and when a library made the call ``<- <its line> via <frames between>``."""
    return f" at {culprit.describe()}" if culprit is not None else " (no user frame found)"


def _record_finding(rule: str, record: KernelRecord, count: int | None = None) -> Finding:
    count = _n(record.count_per_call) if count is None else count
    moved = f", {format_bytes(record.bytes_per_call)}/call" if record.bytes_per_call else ""
    return Finding(rule, f"{count}x {_label(record)} per call{moved}{_at(record.culprit)}", record.culprit, True)


def _missing(profile: KernelProfile, side: str) -> Finding:
    return Finding("not_checked", f"structure not checked: {side} profile missing ({profile.missing_reason})",
                   None, False)


# --- the registry of declared rules ----------------------------------------------------------------
# ``perf.forbid(NAME)`` and ``perf.expect(KEY=VALUE)``: valid names, their help and the marker's help
# all come from these two tables. To add a rule, add an entry (a check returning failed Findings).


@dataclass(frozen=True)
class ForbidRule:
    help: str
    check: Callable[[KernelProfile, str], list[Finding]]  # (profile, rule id) -> failed findings


@dataclass(frozen=True)
class ExpectRule:
    help: str
    parse: Callable[[str, object], object]  # (key, value) -> validated value; raises UsageError
    check: Callable[[KernelProfile, str, Any], list[Finding]]  # (profile, rule id, value) -> failed findings


def _kernels(select: Callable[[KernelRecord], bool]) -> Callable[[KernelProfile, str], list[Finding]]:
    def check(profile: KernelProfile, rule: str) -> list[Finding]:
        return [_record_finding(rule, k) for k in profile.kernels if select(k) and _n(k.count_per_call) > 0]
    return check


def _forbid_sync(profile: KernelProfile, rule: str) -> list[Finding]:
    return [Finding(rule, f"{_n(s.count_per_call)}x host sync ({s.kind}) per call{_at(s.culprit)}", s.culprit, True)
            for s in profile.syncs if _n(s.count_per_call) > 0]


def _forbid_math_sdpa(profile: KernelProfile, rule: str) -> list[Finding]:
    if profile.sdpa_backend is not None and "math" in profile.sdpa_backend.split("+"):
        where = profile.sdpa_culprit
        return [Finding(rule, f"SDPA ran the math backend ({profile.sdpa_backend}){_at(where)}", where, True)]
    return []


FORBID_RULES: dict[str, ForbidRule] = {
    "copy": ForbidRule("any copy kernel (copy, cast, transpose)", _kernels(lambda k: k.category == "copy")),
    "cast": ForbidRule("a dtype-casting copy", _kernels(lambda k: k.category == "copy" and k.kind == "cast")),
    "transpose": ForbidRule("a layout-changing copy (.contiguous() of a transposed view)",
                            _kernels(lambda k: k.category == "copy" and k.kind == "transpose")),
    "sync": ForbidRule("a host-device synchronisation (.item(), .cpu(), bool(tensor), synchronize)", _forbid_sync),
    "memcpy": ForbidRule("a host<->device memcpy", _kernels(lambda k: k.category == "memcpy")),
    "math_sdpa": ForbidRule("SDPA running its math fallback", _forbid_math_sdpa),
    "fp32_gemm": ForbidRule("a GEMM in float32", _kernels(lambda k: k.category == "gemm" and k.kind == "fp32")),
}
for _category in CATEGORIES:  # any kernel category can be forbidden by name
    FORBID_RULES.setdefault(_category, ForbidRule(f"any kernel of category '{_category}'",
                                                  _kernels(lambda k, c=_category: k.category == c)))


def _parse_backend(key: str, value: object) -> object:
    if value not in EXPECTED_BACKENDS:
        raise UsageError(f"expect {key}={value!r} is not a backend", hint=f"valid: {', '.join(EXPECTED_BACKENDS)}")
    return value


def _parse_count(key: str, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"expect {key}={value!r} must be a non-negative integer")
    return value


def _expect_backend(profile: KernelProfile, rule: str, value: Any) -> list[Finding]:
    if profile.sdpa_backend == value:
        return []
    seen = "no SDPA call was seen" if profile.sdpa_backend is None else f"got {profile.sdpa_backend}"
    where = profile.sdpa_culprit
    return [Finding(rule, f"expected SDPA backend {value}, {seen}{_at(where) if where else ''}", where, True)]


def _limit(unit: str, actual: Callable[[KernelProfile], int | None],
           blame: Callable[[KernelProfile], Culprit | None]) -> Callable[[KernelProfile, str, Any], list[Finding]]:
    def check(profile: KernelProfile, rule: str, value: Any) -> list[Finding]:
        measured = actual(profile)
        if measured is None:
            return [Finding("not_checked", f"{rule.split(':', 1)[1]} not checked: no {unit} measured", None, False)]
        if measured <= value:
            return []
        where = blame(profile)
        return [Finding(rule, f"{measured} {unit} per call > {value} allowed{_at(where) if where else ''}", where,
                        True)]
    return check


def _worst(select: Callable[[KernelRecord], bool]) -> Callable[[KernelProfile], Culprit | None]:
    def blame(profile: KernelProfile) -> Culprit | None:
        worst = max((k for k in profile.kernels if select(k)), key=lambda k: (k.bytes_per_call, k.count_per_call),
                    default=None)
        return worst.culprit if worst is not None else None
    return blame


EXPECT_RULES: dict[str, ExpectRule] = {
    "sdpa_backend": ExpectRule(f"the SDPA backend that must run ({', '.join(EXPECTED_BACKENDS)})", _parse_backend,
                               _expect_backend),
    "max_kernels": ExpectRule("kernel launches per call at most", _parse_count,
                              _limit("launches", lambda p: _n(p.launches_per_call), _worst(lambda k: True))),
    "max_syncs": ExpectRule("host syncs per call at most", _parse_count,
                            _limit("host syncs", lambda p: _n(p.syncs_per_call()),
                                   lambda p: p.syncs[0].culprit if p.syncs else None)),
    "max_copy_bytes": ExpectRule("bytes copied per call at most", _parse_count,
                                 _limit("bytes copied", lambda p: p.copy_bytes_per_call, _worst(lambda k: k.is_copy))),
    "max_peak_memory_bytes": ExpectRule("peak device memory above the inputs at most", _parse_count,
                                        _limit("bytes peak memory", lambda p: p.peak_memory_bytes, lambda p: None)),
}
# CPU mode: the SDPA backends a CPU can run (flash is ATen's CPU flash kernel); expecting another
# one there cannot pass, so it is skipped with a note (perfci.settings.PerfSettings.for_machine)
CPU_SDPA_BACKENDS = ("flash", "math")


def gpu_only_expect(key: str, value: object) -> str | None:
    """Why ``expect(key=value)`` cannot hold without a GPU (then it is skipped on CPU), or None."""
    if key == "sdpa_backend" and value not in CPU_SDPA_BACKENDS:
        return f"expect sdpa_backend={value!r} (a CPU runs {' or '.join(CPU_SDPA_BACKENDS)})"
    return None


VALID_FORBID = tuple(FORBID_RULES)
EXPECT_KEYS = tuple(EXPECT_RULES)


def rules_help() -> str:
    """The forbid names and expect keys with their meaning, from the registry."""
    special = [n for n in FORBID_RULES if n not in CATEGORIES]
    return (f"forbid: {', '.join(special)} or a kernel category ({', '.join(CATEGORIES)}); "
            f"expect: {'; '.join(f'{k} ({r.help})' for k, r in EXPECT_RULES.items())}")


def parse_forbid(names: str | Iterable[str] | None) -> tuple[str, ...]:
    """Validate ``forbid`` names (a string or an iterable of strings); keeps order, drops duplicates."""
    if names is None:
        return ()
    items = [names] if isinstance(names, str) else list(names)
    bad = [n for n in items if not isinstance(n, str) or n not in FORBID_RULES]
    if bad:
        raise UsageError(f"unknown forbid name(s) {', '.join(map(repr, bad))}",
                         hint=f"valid: {', '.join(VALID_FORBID)}")
    return tuple(dict.fromkeys(items))


def parse_expect(mapping: Mapping[str, object] | None) -> dict[str, object]:
    """Validate ``expect`` against the registry; returns the validated mapping."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise UsageError(f"expect must be a mapping, got {type(mapping).__name__}",
                         hint=f"keys: {', '.join(EXPECT_KEYS)}")
    result: dict[str, object] = {}
    for key, value in mapping.items():
        rule = EXPECT_RULES.get(key)
        if rule is None:
            raise UsageError(f"unknown expect key {key!r}", hint=f"valid: {', '.join(EXPECT_KEYS)}")
        result[key] = rule.parse(key, value)
    return result


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
        findings.extend(FORBID_RULES[name].check(profile, f"forbid:{name}"))
    for key, value in limits.items():
        findings.extend(EXPECT_RULES[key].check(profile, f"expect:{key}", value))
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
    seen = {_where(b.culprit) for b in base}
    fresh = [k for k in current if _where(k.culprit) not in seen]
    return fresh or current


def _where(culprit: Culprit | None) -> tuple[str, str, str | None, str | None] | None:
    """A culprit's place, line numbers left out (edits above it move them): the user function and
    the library function that made the call (several records share the test's line)."""
    if culprit is None:
        return None
    origin = culprit.origin
    return (culprit.file, culprit.function, origin.file if origin else None, origin.function if origin else None)


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
                   f"{f', +{format_bytes(moved)}/call moved' if moved > 0 else ''}{_at(rec.culprit)}")
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
            findings.append(Finding("more:peak_memory", f"peak memory {format_bytes(baseline.peak_memory_bytes)} -> "
                                    f"{format_bytes(profile.peak_memory_bytes)} (+{share:.0%}, tolerance "
                                    f"{peak_memory_tolerance:.0%})", None, True))
    return tuple(findings)
