"""Per-benchmark settings: frozen, built from each source, precedence in one place.

defaults  <  pytest options / ini (``from_pytest_options``)  <  ``@pytest.mark.perf`` (``with_marker``)
          <  calls on the fixture (``perf.forbid``/``perf.expect``, applied by the fixture).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfci.compare import DEFAULT_THRESHOLD
from perfci.errors import UsageError
from perfci.measurement import SamplingPolicy
from perfci.timing import TIMER_NAMES, TIMERS, timers_help
from perfci.units import parse_fraction


@dataclass(frozen=True)
class PerfSettings:
    timer: str = "auto"
    threshold: float = DEFAULT_THRESHOLD
    forbid: tuple[str, ...] = ()
    expect: tuple[tuple[str, Any], ...] = ()
    known_bad: tuple[str, ...] = ()
    torch_profile: bool = True  # run the torch.profiler pass (structure, culprit lines)
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
                       torch_profile=not get("perfci_no_profile"),
                       trace_dir=Path(trace_dir) if trace_dir else None)

    def with_marker(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], test: str) -> PerfSettings:
        """Apply ``@pytest.mark.perf(...)`` through the option registry; a bad option names the test."""
        if args:
            raise UsageError(f"{test}: @pytest.mark.perf takes keyword options only, got {args!r}",
                             hint=marker_help())
        unknown = sorted(set(kwargs) - set(MARKER_OPTIONS))
        if unknown:
            raise UsageError(f"{test}: unknown @pytest.mark.perf option(s) {', '.join(unknown)}", hint=marker_help())
        settings = self
        try:
            for key, value in kwargs.items():
                settings = MARKER_OPTIONS[key].apply(settings, value)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{test}: bad @pytest.mark.perf option: {exc}", hint=marker_help()) from None
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

    def for_machine(self, gpu_available: bool) -> tuple[PerfSettings, tuple[str, ...]]:
        """These settings as this machine can honour them, and what was skipped (CPU mode).

        Without a GPU, a GPU-only timer (event, graph), the L2 flush and an expectation no CPU can
        meet (an SDPA backend the CPU never picks) are dropped, each named once in the run's notes,
        instead of failing every test; everything a CPU can check stays enforced.
        """
        if gpu_available:
            return self, ()
        from perfci.rules import gpu_only_expect

        skipped: list[str] = []
        settings = self
        timer = TIMERS.get(self.timer)
        if timer is not None and timer.needs_gpu:
            skipped.append(f"timer={self.timer!r}")
            settings = replace(settings, timer="auto")
        if self.policy.l2_flush:
            skipped.append("l2_flush (cold L2)")
            settings = replace(settings, policy=replace(settings.policy, l2_flush=False))
        kept = []
        for key, value in self.expect:
            why = gpu_only_expect(key, value)
            if why is None:
                kept.append((key, value))
            else:
                skipped.append(why)
        if len(kept) != len(self.expect):
            known_bad = tuple(n for n in self.known_bad if n in dict(kept) or n not in dict(self.expect))
            settings = replace(settings, expect=tuple(kept), known_bad=known_bad)
        return settings, tuple(skipped)


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


def _with_policy(**fields: Any) -> Any:
    return lambda settings: replace(settings, policy=replace(settings.policy, **fields))


def _set_threshold(s: PerfSettings, v: Any) -> PerfSettings:
    return replace(s, threshold=parse_fraction(v, what="threshold"))


def _set_timer(s: PerfSettings, v: Any) -> PerfSettings:
    if v not in TIMER_NAMES:
        raise ValueError(f"timer {v!r} is not one of {', '.join(TIMER_NAMES)}")
    return replace(s, timer=v)


def _set_expect(s: PerfSettings, v: Any) -> PerfSettings:
    if not isinstance(v, Mapping):
        raise ValueError(f"expect must be a dict, got {type(v).__name__}")
    return s.add_expect(dict(v))


def _set_min_time(s: PerfSettings, v: Any) -> PerfSettings:
    seconds = _as_seconds("min_time", v)
    return _with_policy(min_time_s=seconds, max_time_s=max(s.policy.max_time_s, seconds))(s)


def _set_max_time(s: PerfSettings, v: Any) -> PerfSettings:
    seconds = _as_seconds("max_time", v)
    return _with_policy(max_time_s=seconds, min_time_s=min(s.policy.min_time_s, seconds))(s)


@dataclass(frozen=True)
class MarkerOption:
    help: str
    apply: Any  # (PerfSettings, value) -> PerfSettings; raises ValueError/TypeError/UsageError


def _torch_profile(s: PerfSettings, v: Any) -> PerfSettings:
    return replace(s, torch_profile=_as_bool("torch_profile", v))


# ``@pytest.mark.perf(KEY=VALUE)``: the valid keys and the marker's help come from this table
MARKER_OPTIONS: dict[str, MarkerOption] = {
    "threshold": MarkerOption("minimum slowdown that fails, e.g. '3%' or 0.025", _set_threshold),
    "timer": MarkerOption(f"one of {', '.join(TIMER_NAMES)} ({timers_help()})", _set_timer),
    "forbid": MarkerOption("list of structural rules, e.g. ['copy', 'sync']",
                           lambda s, v: s.add_forbid(*_as_names(v))),
    "expect": MarkerOption("dict, e.g. {'sdpa_backend': 'cudnn', 'max_syncs': 0}", _set_expect),
    "l2_flush": MarkerOption("bool: flush L2 before each call (cold cache; event timer)",
                             lambda s, v: _with_policy(l2_flush=_as_bool("l2_flush", v))(s)),
    "precision": MarkerOption("target relative CI half-width of the median, e.g. '0.5%'",
                              lambda s, v: _with_policy(target_rel_ci=parse_fraction(v, what="precision"))(s)),
    "min_time": MarkerOption("seconds of sampling at least", _set_min_time),
    "max_time": MarkerOption("seconds of sampling at most", _set_max_time),
    "normalize": MarkerOption("auto, sm_clock or none", lambda s, v: _with_policy(normalize=str(v))(s)),
    "torch_profile": MarkerOption("bool: run the torch.profiler pass", _torch_profile),
    "profile": MarkerOption("old name of torch_profile", _torch_profile),
    "known_bad": MarkerOption("rules this seeded bad variant must break, e.g. ['copy']: flagged = pass",
                              lambda s, v: s.declare_known_bad(_as_names(v))),
}


def marker_help() -> str:
    return "valid options: " + "; ".join(f"{k} ({o.help})" for k, o in MARKER_OPTIONS.items())
