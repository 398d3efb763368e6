"""``kernels.tune_cases.in_turns`` / ``rounds_in_turns``: the variants-taking-turns timer the tune scripts and device
A/B runs share, and ``kernels.tune_ab.steady_in_turns`` on it."""

from __future__ import annotations

import pytest

from kernels import tune_ab, tune_cases


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


def test_rounds_in_turns_keeps_every_round():
    calls: list[str] = []
    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 6.0, 4.0])}

    def timer(fn):
        calls.append(fn())
        return next(times[calls[-1]])

    got = tune_cases.rounds_in_turns({"a": lambda: "a", "b": lambda: "b"}, 3, timer=timer)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert got == {"a": [3.0, 1.0, 2.0], "b": [5.0, 6.0, 4.0]}
    assert list(got) == ["a", "b"]


def test_steady_in_turns_captures_once_and_times_the_graphs_in_turns(monkeypatch):
    """Each variant captured once (a stand-in for the CUDA graph), then timed a round each in turns for the given
    seconds: the graphs' replays are what the rounds time, not new captures."""
    captured: list[str] = []
    timed: list[tuple[str, float, int]] = []

    def graph_of(fn, reps):
        captured.append(fn())
        return captured[-1]

    def steady_us(graph, seconds, reps):
        timed.append((graph, seconds, reps))
        return float(len(timed))

    monkeypatch.setattr(tune_ab, "graph_of", graph_of)
    monkeypatch.setattr(tune_ab, "steady_us", steady_us)
    got = tune_ab.steady_in_turns({"x": lambda: "gx", "y": lambda: "gy"}, 2, 0.25, reps=7)
    assert captured == ["gx", "gy"]
    assert timed == [("gx", 0.25, 7), ("gy", 0.25, 7), ("gy", 0.25, 7), ("gx", 0.25, 7)]
    assert got == {"x": [1.0, 4.0], "y": [2.0, 3.0]}
