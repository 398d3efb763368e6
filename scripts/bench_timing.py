"""`make bench-timing`: how precise is each timing method across fresh processes?

Runs N fresh worker processes (default 10). Each worker measures four kernels (4096^3 bf16 GEMM,
SDPA 8x16x2048x128 bf16, a 256 MB device copy, a ~1 us 4096-element add) with perfci's timer,
triton.testing.do_bench, do_bench_cudagraph and torch.utils.benchmark.Timer, plus the CUPTI kernel
time sum from torch.profiler. The parent prints, per kernel and method, the spread
(max - min) / median of the per-process medians, and each method's median against the CUPTI sum.
Needs a CUDA GPU (exit 3 without one). Results: --out FILE (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNELS = ("gemm_4096_bf16", "sdpa_8x16x2048x128", "copy_256MB", "add_4096")
METHODS = ("perfci", "perfci_raw", "do_bench", "do_bench_cudagraph", "torch_timer")


def make_kernel(name: str):
    import torch
    import torch.nn.functional as F

    dev = "cuda"
    if name == "gemm_4096_bf16":
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        return (lambda: torch.matmul(a, b)), {"flops": 2 * 4096**3, "bytes": 3 * 4096 * 4096 * 2}
    if name == "sdpa_8x16x2048x128":
        q, k, v = (torch.randn(8, 16, 2048, 128, device=dev, dtype=torch.bfloat16) for _ in range(3))
        return (lambda: F.scaled_dot_product_attention(q, k, v)), {"flops": 4 * 8 * 16 * 2048**2 * 128}
    if name == "copy_256MB":
        src = torch.randn(64 * 2**20, device=dev)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), {"bytes": 2 * src.nbytes}
    if name == "add_4096":
        x, y = torch.randn(4096, device=dev), torch.randn(4096, device=dev)
        return (lambda: torch.add(x, y)), {"bytes": 3 * x.nbytes}
    raise ValueError(name)


def cupti_ms(fn, calls: int) -> float:
    """CUPTI kernel-time sum per call, under the same sustained load as the timers.

    The ``calls`` calls perfci put in one graph are captured again, replayed back to back for
    0.5 s (so clocks and power settle as they do while timing), then about a second of replays
    is profiled (at most 20k kernels): the sum of the kernel durations CUPTI reports, per call.
    A short profiled window would catch the clock boost that follows the idle moment before it.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    stop.record()
    stop.synchronize()
    replays = max(5, min(int(1000.0 / max(start.elapsed_time(stop), 1e-3)), 20000 // calls))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    total_us = 0.0
    for evt in prof.events():
        if evt.device_type.name == "CUDA":
            total_us += evt.device_time if hasattr(evt, "device_time") else evt.cuda_time
    return total_us / (replays * calls) / 1e3


def worker(args: argparse.Namespace) -> None:
    import torch
    import triton.testing as tt
    from torch.utils.benchmark import Timer

    from perfci.fingerprint import detect
    from perfci.measurement import SamplingPolicy
    from perfci.normalize import measure_compared
    from perfci.timing import GraphTimer

    fp = detect()
    out: dict = {"pid": os.getpid(), "gpu": fp.name, "kernels": {}}
    policy = SamplingPolicy(max_time_s=args.max_time, min_time_s=min(args.min_time, args.max_time))
    for name in KERNELS:
        fn, work = make_kernel(name)
        row: dict = {}
        t0 = time.perf_counter()
        m = measure_compared(GraphTimer(), fn, policy, fp, bytes_moved=work.get("bytes"))
        row["perfci_s"] = time.perf_counter() - t0
        row["perfci"] = m.compared_median_ms
        row["perfci_raw"] = m.median_ms
        row["perfci_info"] = m.details()
        row["do_bench"] = tt.do_bench(fn, return_mode="median")
        row["do_bench_cudagraph"] = tt.do_bench_cudagraph(fn, return_mode="median")
        row["torch_timer"] = Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=1.0).median * 1e3
        row["cupti"] = cupti_ms(fn, m.calls_per_sample)
        out["kernels"][name] = row
        del fn
        torch.cuda.empty_cache()
    print("RESULT " + json.dumps(out), flush=True)


def parent(args: argparse.Namespace) -> int:
    import torch

    from perfci.stats import median, spread

    if not torch.cuda.is_available():
        print("bench-timing needs a CUDA GPU; none is visible (exit 3)", file=sys.stderr)
        return 3
    runs = []
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--worker", "--max-time", str(args.max_time), "--min-time", str(args.min_time)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
            return 3
        runs.append(json.loads(lines[-1][len("RESULT "):]))
        print(f"process {i + 1}/{args.processes} done", flush=True)
    gpu = runs[0]["gpu"]
    table = {}
    print(f"\nGPU: {gpu}; {args.processes} fresh processes; spread = (max-min)/median of per-process medians")
    header = f"{'kernel':22s}" + "".join(f"{m:>20s}" for m in METHODS) + f"{'cupti ms':>12s}"
    print("perfci = compared figure (at the reference SM clock when normalised); perfci_raw = device time")
    print(header)
    for k in KERNELS:
        table[k] = {}
        cells = []
        cupti = median([r["kernels"][k]["cupti"] for r in runs])
        for m in METHODS:
            vals = [r["kernels"][k][m] for r in runs]
            med = median(vals)
            table[k][m] = {"spread": spread(vals), "median_ms": med, "vs_cupti": med / cupti - 1, "values": vals}
            cells.append(f"{spread(vals) * 100:8.2f}% ({(med / cupti - 1) * 100:+5.1f}%)")
        table[k]["cupti_ms"] = cupti
        print(f"{k:22s}" + "".join(f"{c:>20s}" for c in cells) + f"{cupti:12.5f}")
    print("cells: spread across processes (median vs CUPTI kernel sum)")
    for k in KERNELS:
        info = runs[0]["kernels"][k]["perfci_info"]
        secs = median([r["kernels"][k]["perfci_s"] for r in runs])
        clocks = [r["kernels"][k]["perfci_info"]["median_sm_clock_mhz"] for r in runs]
        print(f"perfci {k}: normalisation={info['normalization']}; median measure time {secs:.2f} s; "
              f"SM clock per process {clocks}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"gpu": gpu, "table": table, "runs": runs}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--max-time", type=float, default=3.0)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--out", default="reports/bench_timing.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
