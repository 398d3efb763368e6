"""Per-benchmark settings: frozen, built from each source, precedence in one place.

defaults  <  pytest options / ini (``from_pytest_options``)  <  ``@pytest.mark.perf`` (``with_marker``)
          <  calls on the fixture (``perf.forbid``/``perf.expect``, applied by the fixture).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfci.errors import UsageError
from perfci.measurement import SamplingPolicy
from perfci.timing import TIMER_NAMES
from perfci.units import parse_fraction

MARKER_KEYS = {
    "threshold": "minimum slowdown that fails, e.g. '3%' or 0.025",
    "timer": "one of " + ", ".join(TIMER_NAMES),
    "forbid": "list of structural rules, e.g. ['copy', 'sync']",
    "expect": "dict, e.g. {'sdpa_backend': 'cudnn', 'max_syncs': 0}",
    "l2_flush": "bool: flush L2 before each call (cold cache; event timer)",
    "precision": "target relative CI half-width of the median, e.g. '0.5%'",
    "min_time": "seconds of sampling at least",
    "max_time": "seconds of sampling at most",
    "normalize": "auto, sm_clock or none",
    "profile": "bool: run the torch.profiler pass",
    "known_bad": "rules this seeded bad variant must break, e.g. ['copy']: flagged = pass",
}


@dataclass(frozen=True)
class PerfSettings:
    timer: str = "auto"
    threshold: float = 0.03
    forbid: tuple[str, ...] = ()
    expect: tuple[tuple[str, Any], ...] = ()
    known_bad: tuple[str, ...] = ()
    profile: bool = True
    profile_calls: int = 3
    policy: SamplingPolicy = field(default_factory=SamplingPolicy)
    trace_dir: Path | None = None

    @classmethod
    def from_pytest_options(cls, get: Any) -> PerfSettings:
        """``get(name)`` returns a perfci option's value (the plugin passes config.getoption)."""
        base = cls()
        try:
            max_time_s = float(get("perfci_max_time"))
            policy = SamplingPolicy(
                target_rel_ci=parse_fraction(get("perfci_precision"), what="--perfci-precision"),
                min_time_s=min(float(get("perfci_min_time")), max_time_s),
                max_time_s=max_time_s,
                l2_flush=bool(get("perfci_cold")),
                normalize=str(get("perfci_normalize")),
                warmup_max_s=min(base.policy.warmup_max_s, max_time_s),
                warmup_min_s=min(base.policy.warmup_min_s, max_time_s),
            )
            threshold = parse_fraction(get("perfci_threshold"), what="--perfci-threshold")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        trace_dir = get("perfci_trace_dir")
        return replace(base, timer=get("perfci_timer"), threshold=threshold, policy=policy,
                       profile=not get("perfci_no_profile"),
                       trace_dir=Path(trace_dir) if trace_dir else None)

    def with_marker(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], test: str) -> PerfSettings:
        """Apply ``@pytest.mark.perf(...)``; any bad option is a UsageError naming the test."""
        if args:
            raise UsageError(f"{test}: @pytest.mark.perf takes keyword options only, got {args!r}",
                             hint=_marker_help())
        unknown = sorted(set(kwargs) - set(MARKER_KEYS))
        if unknown:
            raise UsageError(f"{test}: unknown @pytest.mark.perf option(s) {', '.join(unknown)}",
                             hint=_marker_help())
        settings, policy = self, self.policy
        try:
            for key, value in kwargs.items():
                if key == "threshold":
                    settings = replace(settings, threshold=parse_fraction(value, what="threshold"))
                elif key == "timer":
                    if value not in TIMER_NAMES:
                        raise ValueError(f"timer {value!r} is not one of {', '.join(TIMER_NAMES)}")
                    settings = replace(settings, timer=value)
                elif key == "forbid":
                    settings = settings.add_forbid(*_as_names(value))
                elif key == "expect":
                    if not isinstance(value, Mapping):
                        raise ValueError(f"expect must be a dict, got {type(value).__name__}")
                    settings = settings.add_expect(dict(value))
                elif key == "l2_flush":
                    policy = replace(policy, l2_flush=_as_bool(key, value))
                elif key == "precision":
                    policy = replace(policy, target_rel_ci=parse_fraction(value, what="precision"))
                elif key == "min_time":
                    seconds = _as_seconds(key, value)
                    policy = replace(policy, min_time_s=seconds, max_time_s=max(policy.max_time_s, seconds))
                elif key == "max_time":
                    seconds = _as_seconds(key, value)
                    policy = replace(policy, max_time_s=seconds, min_time_s=min(policy.min_time_s, seconds))
                elif key == "normalize":
                    policy = replace(policy, normalize=str(value))
                elif key == "profile":
                    settings = replace(settings, profile=_as_bool(key, value))
                elif key == "known_bad":
                    settings = settings.declare_known_bad(_as_names(value))
            settings = replace(settings, policy=policy)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{test}: bad @pytest.mark.perf option: {exc}", hint=_marker_help()) from None
        except UsageError as exc:
            raise UsageError(f"{test}: bad @pytest.mark.perf option: {exc.message}", hint=exc.hint) from None
        return settings

    def add_forbid(self, *names: str) -> PerfSettings:
        from perfci.rules import parse_forbid

        merged = tuple(dict.fromkeys((*self.forbid, *parse_forbid(names))))
        return replace(self, forbid=merged)

    def declare_known_bad(self, names: tuple[str, ...]) -> PerfSettings:
        """Rules a seeded bad variant must break; forbid names among them are forbidden too."""
        from perfci.rules import EXPECT_KEYS, VALID_FORBID

        unknown = [n for n in names if n not in VALID_FORBID and n not in EXPECT_KEYS]
        if unknown:
            raise ValueError(f"known_bad {unknown!r}: name forbid rules ({', '.join(VALID_FORBID)}) "
                             f"or expect keys ({', '.join(EXPECT_KEYS)})")
        settings = self.add_forbid(*[n for n in names if n in VALID_FORBID])
        return replace(settings, known_bad=tuple(dict.fromkeys((*self.known_bad, *names))))

    def add_expect(self, expect: Mapping[str, Any]) -> PerfSettings:
        from perfci.rules import parse_expect

        merged = dict(self.expect)
        merged.update(parse_expect(expect))
        return replace(self, expect=tuple(merged.items()))


def _marker_help() -> str:
    return "valid options: " + "; ".join(f"{k} ({v})" for k, v in MARKER_KEYS.items())


def _as_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"forbid must be a name or a list of names, got {value!r}")


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{key} must be True or False, got {value!r}")


def _as_seconds(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
    return float(value)
