"""How well does the in-band clock probe explain batch times? (a diagnostic; needs a CUDA GPU)

For each workload, CUDA-graph batches are timed with events, each preceded by a probe of S spin
cycles, for several S. Printed per workload and S: the batches' time spread (CV), the spread of
time x probe clock (what normalisation compares), the mean probe reading against NVML's clock and
the card's max, and the slope of log time on log clock (-1: the time follows the clock fully).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--spins", default="20000,100000,400000")
    ap.add_argument("--out", default="reports/clock_probe_check.json")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from perfci import stats
    from perfci.baseline import write_atomic
    from perfci.clockprobe import ClockProbe
    from perfci.fingerprint import detect
    from perfci.nvml import Nvml

    if not torch.cuda.is_available():
        print("needs a CUDA GPU (exit 3)", file=sys.stderr)
        return 3
    fp = detect()
    nvml = Nvml.for_torch_device(0)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    q, k, v = (torch.randn(32, 16, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    x = torch.randn(1 << 26, device="cuda")
    y = torch.empty_like(x)
    workloads = {
        "gemm4096 x8": lambda: [torch.matmul(a, a, out=c) for _ in range(8)],
        "sdpa L512 d128 x10": lambda: [F.scaled_dot_product_attention(q, k, v) for _ in range(10)],
        "copy 256MB x4": lambda: [y.copy_(x) for _ in range(4)],
    }
    result = {"gpu": fp.name, "max_sm_clock_mhz": fp.max_sm_clock_mhz, "rows": []}
    for name, fn in workloads.items():
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        for _ in range(50):  # settle the clock under this load
            graph.replay()
        torch.cuda.synchronize()
        for spin in (int(s) for s in args.spins.split(",")):
            probe = ClockProbe("cuda:0", spin_cycles=spin)
            slots, pairs = [], []
            for _ in range(args.batches):
                slots.append(probe.enqueue())
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                pairs.append((start, end))
            nvml_mhz = nvml.sm_clock_mhz() if nvml else None
            torch.cuda.synchronize()
            times = [s.elapsed_time(e) for s, e in pairs]
            clocks = probe.read(slots)
            cycles = [t * m for t, m in zip(times, clocks, strict=True)]
            fit = stats.loglog_fit(clocks, times)
            slope = fit[0] if fit else float("nan")
            row = {"workload": name, "spin_cycles": spin, "batch_ms": statistics.median(times),
                   "cv_time": _cv(times), "cv_time_x_clock": _cv(cycles),
                   "probe_mhz_mean": statistics.fmean(clocks), "probe_mhz_min": min(clocks),
                   "probe_mhz_max": max(clocks), "probe_mhz_distinct": len(set(round(m, 3) for m in clocks)),
                   "nvml_mhz": nvml_mhz, "slope": slope}
            result["rows"].append(row)
            print(f"{name:20s} spin {spin:7d}: batch {row['batch_ms']:.3f} ms  CV time {row['cv_time']:.2%}  "
                  f"CV time*clock {row['cv_time_x_clock']:.2%}  probe {row['probe_mhz_mean']:.0f} MHz "
                  f"({row['probe_mhz_min']:.0f}-{row['probe_mhz_max']:.0f}, {row['probe_mhz_distinct']} values)  "
                  f"NVML {nvml_mhz}  slope {slope:+.2f}", flush=True)
    write_atomic(Path(args.out), result)
    return 0


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


if __name__ == "__main__":
    sys.exit(main())
