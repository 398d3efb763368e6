"""``kernels.tune_cases.in_turns``: the variants-taking-turns timer the tune scripts and device A/B runs share."""

from __future__ import annotations

import pytest

from kernels import tune_cases


def test_in_turns_alternates_the_order_and_keeps_each_lowest_time():
    calls: list[str] = []
    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 6.0, 4.0])}

    def timer(fn):
        calls.append(fn())
        return next(times[calls[-1]])

    best = tune_cases.in_turns({"a": lambda: "a", "b": lambda: "b"}, 3, timer=timer)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert best == {"a": 1.0, "b": 4.0}


def test_in_turns_reports_a_failed_timing_and_goes_on():
    def timer(fn):
        return fn()

    def broken():
        raise RuntimeError("capture refused")

    seen = []
    best = tune_cases.in_turns({"bad": broken, "ok": lambda: 2.0}, 2, timer=timer,
                               on_error=lambda name, exc: seen.append((name, str(exc))))
    assert best == {"ok": 2.0}
    assert seen == [("bad", "capture refused")] * 2
    with pytest.raises(RuntimeError, match="capture refused"):
        tune_cases.in_turns({"bad": broken}, 1, timer=timer)
