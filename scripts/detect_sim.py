"""Simulated false-alarm and detection rates of perfci's compare rule against pytest-benchmark's median:5%.

Each simulated comparison is two fresh processes of one kernel: a between-run offset per process
(log-normal, sigma_b = spread / 2.326, where "spread" is perfci's (max - min) / median over five runs)
and per-call samples with within-run jitter, a heavy right tail and rare large outliers.

    python scripts/detect_sim.py [--trials 4000] [--samples 200]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfci.compare import D2_FIVE_RUNS, CompareSettings, Sample, Verdict, compare_samples


def process_samples(
    rng: np.random.Generator,
    true_ms: float,
    spread: float,
    n: int,
    *,
    within: float = 0.004,
    tail_prob: float = 0.05,
    tail_scale: float = 0.03,
    outlier_prob: float = 0.005,
) -> np.ndarray:
    """Per-call device times of one fresh process: between-run offset, then within-run noise."""
    level = true_ms * math.exp(rng.normal(0.0, spread / D2_FIVE_RUNS))
    x = level * np.exp(rng.normal(0.0, within, n))
    x *= 1.0 + (rng.random(n) < tail_prob) * rng.exponential(tail_scale, n)
    x *= 1.0 + (rng.random(n) < outlier_prob) * rng.uniform(0.2, 1.0, n)
    return x


def median5_fails(base_ms: float, new_ms: float, pct: float = 5.0) -> bool:
    """pytest-benchmark's ``--benchmark-compare-fail=median:5%`` on two medians."""
    return (new_ms - base_ms) / base_ms * 100.0 > pct


def pytest_benchmark_flags(base: np.ndarray, new: np.ndarray, pct: float = 5.0) -> bool:
    """pytest-benchmark --benchmark-compare-fail=median:5% on two processes' samples."""
    return median5_fails(float(np.median(base)), float(np.median(new)), pct)


def rates(spread: float, slowdown: float, trials: int, n: int, settings: CompareSettings, seed: int):
    """(perfci SLOWER rate, perfci NOISY rate, median:5% rate) over `trials` base/new pairs."""
    rng = np.random.default_rng(seed)
    slower = noisy = pb = 0
    for _ in range(trials):
        base = process_samples(rng, 0.05, spread, n)
        new = process_samples(rng, 0.05 * (1.0 + slowdown), spread, n)
        verdict = compare_samples("k", Sample(tuple(base)), Sample(tuple(new)), settings).verdict
        slower += verdict is Verdict.SLOWER
        noisy += verdict is Verdict.NOISY
        pb += pytest_benchmark_flags(base, new)
    return slower / trials, noisy / trials, pb / trials


def with_run_medians(spread: float, trials: int, n: int, runs: int, seed: int) -> tuple[float, float]:
    """A/A false alarms for a kernel noisier than the default floor: without / with baseline run medians."""
    rng = np.random.default_rng(seed)
    plain = informed = 0
    for _ in range(trials):
        base_runs = [process_samples(rng, 0.05, spread, n) for _ in range(runs)]
        new = Sample(tuple(process_samples(rng, 0.05, spread, n)))
        medians = tuple(float(np.median(r)) for r in base_runs)
        plain += compare_samples("k", Sample(tuple(base_runs[0])), new).failed
        informed += compare_samples("k", Sample(tuple(base_runs[0]), run_medians_ms=medians), new).failed
    return plain / trials, informed / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--threshold", default="3%")
    args = parser.parse_args()
    settings = CompareSettings.from_threshold(args.threshold)
    print(f"threshold {settings.min_effect:.1%}, confidence {settings.confidence}, "
          f"{args.trials} pairs per cell, {args.samples} samples per side")
    print("spread = (max-min)/median over 5 fresh runs; sigma_b = spread/2.326 (one process's median)")
    print(f"{'spread':>7} {'sigma_b':>7} | {'perfci: A/A FA':>14} {'P(>=1 in 100)':>13} {'A/A NOISY':>9} "
          f"{'det 1.5%':>8} {'det 3%':>7} {'det 6%':>7} | {'median:5%: A/A FA':>17} "
          f"{'det 3%':>7} {'det 6%':>7}")
    for i, spread in enumerate((0.003, 0.005, 0.01, 0.02, 0.03)):
        row = {eff: rates(spread, eff, args.trials, args.samples, settings, seed=1000 * i + k)
               for k, eff in enumerate((0.0, 0.015, 0.03, 0.06))}
        fa = row[0.0][0]
        print(f"{spread:7.1%} {spread / D2_FIVE_RUNS:7.2%} | {fa:14.2%} {1 - (1 - fa) ** 100:13.1%} "
              f"{row[0.0][1]:9.1%} {row[0.015][0]:8.1%} {row[0.03][0]:7.1%} {row[0.06][0]:7.1%} | "
              f"{row[0.0][2]:17.2%} {row[0.03][2]:7.1%} {row[0.06][2]:7.1%}")
    plain, informed = with_run_medians(0.05, args.trials // 4, args.samples, runs=5, seed=7)
    print(f"kernel with 5% spread, A/A false alarms: default floor {plain:.1%}, "
          f"baseline with 5 run medians {informed:.2%}")


if __name__ == "__main__":
    main()
