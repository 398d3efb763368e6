"""Device script: check, sweep and time the kernels on one GPU in a single call.

    PYTHONPATH=. python3 -m kernels.tune --all --out "$OUT"

Phases: (1) environment and the two ceilings (copy bandwidth, cuBLAS); (2) every sweep variant is
compiled and launched once in parallel worker processes (fills Triton's disk cache, and a variant
that fails to compile or faults is dropped there, not in the timing process); (3) each variant is
checked against a reference and timed with ``triton.testing.do_bench`` (median); (4) the default
(autotuned) entry points at the target shapes against SDPA backends / cuBLAS (``kernels/tune_finals.py``).
A compact table is printed last; everything is also written to ``OUT/tune.json``.  What is swept and
compared lives in ``kernels/tune_cases.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch

from kernels import tune_cases as cases
from kernels.tune_cases import bench, check, flops_bytes, make_fn, sweep_variants
from kernels.tune_finals import apply_best, best_rows, finals, summarize_perf

T0 = time.time()


def env_report(log) -> dict:
    import triton
    import triton.language as tl

    if cases.DEVICE == "cpu":
        return {"gpu": "none (dry run)"}
    p = torch.cuda.get_device_properties(0)
    info = {"gpu": p.name, "sms": p.multi_processor_count, "torch": torch.__version__, "triton": triton.__version__,
            "make_tensor_descriptor": hasattr(tl, "make_tensor_descriptor"),
            "set_allocator": hasattr(triton, "set_allocator"), "uuid": str(getattr(p, "uuid", "?")),
            "cuda": torch.version.cuda, "capability": list(torch.cuda.get_device_capability(0))}
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
        info["nvml_uuid"] = pynvml.nvmlDeviceGetUUID(h)
        info["sm_clock_max_MHz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception as exc:  # the fingerprint without NVML
        info["driver"] = f"? ({type(exc).__name__})"
    x = torch.empty(2**30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    info["copy_TBps"] = round(2 * x.nbytes / ms / 1e9, 3)
    a = cases.randn((8192, 8192), torch.bfloat16, 5)
    ms = bench(lambda: a @ a)
    info["cublas_8192_TFLOPS"] = round(2 * 8192**3 / ms / 1e9, 1)
    log(f"ENV {json.dumps(info)}")
    return info


def _warm(idx: int) -> tuple[int, str | None, float]:
    """Worker: compile and launch one variant once; report an error string instead of raising."""
    t = time.time()
    try:
        v = sweep_variants()[idx]
        make_fn(v)()
        if cases.DEVICE == "cuda":
            torch.cuda.synchronize()
        return idx, None, time.time() - t
    except Exception as exc:
        return idx, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}", time.time() - t


def _worker_init() -> None:
    sys.path.insert(0, os.getcwd())
    torch.cuda.init()


def run_sweep(args, log) -> list[dict]:
    variants = sweep_variants()
    sel = [i for i, v in enumerate(variants)
           if v.section in args.sections or (v.section == "mmk" and "mm" in args.sections)]
    errors: dict[int, str] = {}
    t = time.time()
    import multiprocessing as mp

    done: set[int] = set()
    if args.workers == 0:  # inline (dry run)
        for idx in sel:
            _, err, _dt = _warm(idx)
            if err:
                errors[idx] = err
                log(f"WARM-FAIL {variants[idx].name}: {err}")
        sel_warm: list[int] = []
    else:
        sel_warm = sel
    try:
        if not sel_warm:
            raise StopIteration
        with ProcessPoolExecutor(max_workers=args.workers, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init) as ex:
            for idx, err, _dt in ex.map(_warm, sel_warm):
                done.add(idx)
                if err:
                    errors[idx] = err
                    log(f"WARM-FAIL {variants[idx].name}: {err}")
    except StopIteration:
        pass
    except Exception as exc:  # a crashed worker breaks the pool: skip the rest
        log(f"precompile pool failed: {type(exc).__name__}: {exc}")
        for idx in sel_warm:
            if idx not in done:
                errors[idx] = "not warmed (pool failed)"
    log(f"precompile: {len(sel)} variants, {len(errors)} failed, {time.time() - t:.1f}s")
    rows = []
    for i in sel:
        v = variants[i]
        row = {"section": v.section, "case": list(map(str, v.case)), "idx": i,
               "params": {k: str(x) for k, x in v.params.items()}}
        if i in errors:
            row["error"] = errors[i]
            rows.append(row)
            continue
        if time.time() - T0 > args.budget:
            row["error"] = "skipped: time budget"
            rows.append(row)
            continue
        try:
            fn = make_fn(v)
            res = fn()
            row["rel_err"] = check(v, res)
            ms = bench(fn, graph=v.section in ("dec", "mmk") or (v.section == "mm" and v.case[0] <= 64))
            f, by = flops_bytes(v)
            row["ms"] = ms
            row["tflops"] = f / ms / 1e9
            if by:
                row["gbps"] = by / ms / 1e6
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        rows.append(row)
        log("ROW " + json.dumps(row))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="sweep all sections and run the finals")
    ap.add_argument("--sections", default="", help="comma list of sweep sections: fwd,fp8,bwd,dec,mm")
    ap.add_argument("--final", default="", help="comma list of final comparisons: fwd,fp8,bwd,dec,mm")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for tune.json and tune.log")
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--budget", type=float, default=330.0, help="seconds after which sweep timing stops")
    ap.add_argument("--dry", action="store_true", help="CPU interpreter, tiny shapes: exercise this script only")
    ap.add_argument("--perf-json", default=None, help="print a compact table of a pytest-benchmark json, exit")
    args = ap.parse_args(argv)
    if args.perf_json:
        return summarize_perf(args.perf_json)
    if args.dry:
        cases.dry_setup()
        args.workers = 0
    if args.all:
        args.sections = args.sections or "fwd,fp8,bwd,dec,mm"
        args.final = args.final or "fwd,fp8,bwd,dec,mm"
    args.sections = [s for s in args.sections.split(",") if s]
    args.final = [s for s in args.final.split(",") if s]
    if cases.DEVICE == "cuda" and not torch.cuda.is_available():
        print("tune.py needs a CUDA GPU")
        return 2
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "tune.log"), "a")  # noqa: SIM115

    def log(s: str) -> None:
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    result: dict[str, Any] = {"env": env_report(log)}
    rows = run_sweep(args, log) if args.sections else []
    result["sweep"] = rows
    if rows:
        apply_best(rows, log)
    try:
        result["final"] = finals(args, log, result["env"].get("copy_TBps", 0.0)) if args.final else []
    except Exception:
        log(traceback.format_exc())
        result["final"] = []
    with open(os.path.join(args.out, "tune.json"), "w") as f:
        json.dump(result, f, indent=1)
    log("\n==== SUMMARY ====")
    log(f"ENV {result['env']}")
    for s in best_rows(rows):
        log(s)
    fails = [r for r in rows if "error" in r]
    log(f"failed variants: {len(fails)}")
    for r in fails[:12]:
        log(f"  FAIL {r['section']} {r['case']} {r['params']}: {r['error'][:100]}")
    for s in result["final"]:
        log(s)
    log(f"total {time.time() - T0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
