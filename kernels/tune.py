"""Device script: check, sweep and time the kernels on one GPU in a single call.

    PYTHONPATH=. python3 kernels/tune.py --all --out "$OUT"

Phases: (1) environment and the two ceilings (copy bandwidth, cuBLAS); (2) every sweep variant is
compiled and launched once in parallel worker processes (fills Triton's disk cache, and a variant
that fails to compile or faults is dropped there, not in the timing process); (3) each variant is
checked against a reference and timed with ``triton.testing.do_bench`` (median); (4) the default
(autotuned) entry points at the target shapes against SDPA backends / cuBLAS.  A compact table is
printed last; everything is also written to ``OUT/tune.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

T0 = time.time()
DEVICE = "cuda"  # "cpu" with --dry (interpreter, tiny shapes: checks this script, not speed)


@dataclass
class Variant:
    section: str
    case: tuple
    params: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.section}{self.case} " + " ".join(f"{k}={v}" for k, v in self.params.items())


# Sweep candidates (run history and results in kernels/NOTES.md).
# forward: (BLOCK_M, BLOCK_N, num_warps, num_stages), each with TMA on and off
FWD_D = {
    128: [(128, 128, 8, 3), (128, 64, 8, 3), (256, 64, 8, 2), (256, 64, 8, 3), (256, 128, 8, 2)],
    64: [(128, 128, 4, 3), (128, 64, 4, 3), (256, 64, 8, 3)],
}
BWD_D = [64]  # backward head dims swept (d128 was swept in run 1)
DKDV = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 3), (128, 64, 8, 2)]
DQ = [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (64, 64, 4, 3)]
DEC = [(64, 4, 3, 1), (64, 4, 3, 2), (64, 4, 3, 4), (64, 4, 3, 8), (32, 4, 4, 2), (32, 4, 4, 4)]
# GEMM: (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages, EPI, FLATTEN), persistent grid
MM = [(128, 256, 64, 8, 8, 3, 0, False), (128, 256, 64, 8, 8, 3, 0, True), (128, 256, 64, 8, 8, 4, 1, False),
      (128, 256, 64, 8, 8, 4, 1, True), (128, 256, 64, 8, 8, 4, 2, False), (128, 256, 64, 8, 8, 4, 2, True),
      (128, 256, 64, 8, 8, 3, 2, True), (128, 256, 64, 16, 8, 3, 0, False), (256, 128, 64, 8, 8, 4, 1, True)]
FWD_SHAPE = (2, 16, 8192)  # B, H, L for the forward/backward sweeps
DEC_SHAPES = [(8, 16, 16, 2048, 64, torch.float16), (2, 32, 8, 32768, 128, torch.bfloat16)]
MM_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]
FINAL_FWD = [(128, 4096, 4), (128, 8192, 2), (128, 16384, 1), (64, 4096, 4), (64, 16384, 1)]  # d, L, B (H=16)
FINAL_BWD = [(128, 4096, 4), (128, 8192, 2), (64, 4096, 4)]
FINAL_DEC = [(8, 16, 16, 2048, 64, torch.float16), (8, 16, 16, 8192, 128, torch.float16),
             (2, 32, 8, 32768, 128, torch.bfloat16), (1, 8, 8, 131072, 128, torch.float16)]
FINAL_MM = [(4096, 4096, 4096), (8192, 8192, 8192), (6144, 6144, 6144), (4000, 5000, 3000)]


def sweep_variants() -> list[Variant]:
    out: list[Variant] = []
    b, h, seq = FWD_SHAPE
    for d, cfgs in FWD_D.items():
        for causal in (False, True):
            for tma in (True, False):
                for cfg in cfgs:
                    out.append(Variant("fwd", (b, h, seq, d, causal), {"cfg": cfg, "tma": tma}))
    for d in BWD_D:
        for causal in (False, True):
            for tma in (True, False):
                for cfg in DKDV:
                    out.append(Variant("bwd", (b, h, seq, d, causal), {"dkdv": cfg, "dq": DQ[0], "tma": tma}))
                for cfg in DQ[1:]:
                    out.append(Variant("bwd", (b, h, seq, d, causal), {"dkdv": DKDV[0], "dq": cfg, "tma": tma}))
    for shp in DEC_SHAPES:
        for bn, w, s, waves in DEC:
            out.append(Variant("dec", shp, {"bn": bn, "w": w, "s": s, "waves": waves}))
    for shp in MM_SHAPES:
        for cfg in MM:
            out.append(Variant("mm", shp, {"cfg": cfg}))
    return out


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator(device=DEVICE)
    g.manual_seed(seed)
    return g


def _randn(shape, dtype, seed) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE, dtype=dtype, generator=_gen(seed))


_INPUTS: dict[tuple, Any] = {}


def inputs(section: str, case: tuple) -> Any:
    """Random inputs per case, cached (one set per case in a process)."""
    key = (section, case)
    if key in _INPUTS:
        return _INPUTS[key]
    _INPUTS.clear()
    torch.cuda.empty_cache()
    if section in ("fwd", "bwd"):
        b, h, seq, d = case[:4]
        q, k, v, do = (_randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
        val = (q, k, v, do)
    elif section == "dec":
        b, hq, hk, seq, d, dt = case
        val = (_randn((b, hq, 1, d), dt, 1), _randn((b, hk, seq, d), dt, 2), _randn((b, hk, seq, d), dt, 3))
    else:
        m, n, k = case
        val = (_randn((m, k), torch.bfloat16, 1), _randn((k, n), torch.bfloat16, 2))
    _INPUTS[key] = val
    return val


def make_fn(v: Variant):
    """The callable of one sweep variant."""
    from kernels import attention, decode, matmul
    from kernels._checks import sm_count

    p = v.params
    if v.section == "fwd":
        q, k, kk, _ = inputs("fwd", v.case)
        causal = v.case[4]
        return partial(attention.attention_forward, q, k, kk, causal, config=p["cfg"], use_tma=p["tma"])
    if v.section == "bwd":
        q, k, vv, do = inputs("bwd", v.case)
        causal = v.case[4]
        o, lse = attention.attention_forward(q, k, vv, causal, config=(128, 64, 4, 3), use_tma=False)
        return partial(attention.attention_backward, do, q, k, vv, o, lse, causal, configs=(p["dkdv"], p["dq"]),
                       use_tma=p["tma"])
    if v.section == "dec":
        q, k, vv = inputs("dec", v.case)
        b, _, hk, seq = v.case[:4]
        sms = sm_count(q.device, cpu_default=decode.NUM_SMS_DEFAULT)
        ns = decode.choose_splits(b, hk, seq, p["bn"], sms, waves=p["waves"])
        return partial(decode.decode_attention, q, k, vv, num_splits=ns, block_n=p["bn"], num_warps=p["w"],
                       num_stages=p["s"])
    a, bm = inputs("mm", v.case)
    return partial(matmul.matmul, a, bm, config=p["cfg"])


def _warm(idx: int) -> tuple[int, str | None, float]:
    """Worker: compile and launch one variant once; report an error string instead of raising."""
    t = time.time()
    try:
        v = sweep_variants()[idx]
        make_fn(v)()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return idx, None, time.time() - t
    except Exception as exc:
        return idx, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}", time.time() - t


def _worker_init() -> None:
    sys.path.insert(0, os.getcwd())
    torch.cuda.init()


def flops_bytes(v: Variant) -> tuple[float, float]:
    if v.section in ("fwd", "bwd"):
        b, h, seq, d, causal = v.case
        f = 4.0 * b * h * seq * seq * d * (0.5 if causal else 1.0)
        return (f if v.section == "fwd" else 2.5 * f), 0.0
    if v.section == "dec":
        b, hq, hk, seq, d, _ = v.case
        return 4.0 * b * hq * seq * d, 2.0 * (2 * b * hk * seq * d + 2 * b * hq * d)
    m, n, k = v.case
    return 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)


_REFS: dict[tuple, Any] = {}


def reference(v: Variant):
    from kernels import reference as ref

    key = (v.section, v.case)
    if key not in _REFS:
        _REFS.clear()
        if v.section == "fwd":
            q, k, vv, _ = inputs("fwd", v.case)
            _REFS[key] = ref.sdpa(q, k, vv, v.case[4], "flash")
        elif v.section == "bwd":
            q, k, vv, do = inputs("bwd", v.case)
            qq, kk, vvv = (t.detach().clone().requires_grad_() for t in (q, k, vv))
            out = ref.sdpa(qq, kk, vvv, v.case[4], "flash")
            _REFS[key] = torch.autograd.grad(out, (qq, kk, vvv), do)
        elif v.section == "dec":
            q, k, vv = inputs("dec", v.case)
            _REFS[key] = ref.decode_fp32(q, k, vv)
        else:
            a, b = inputs("mm", v.case)
            _REFS[key] = a.float() @ b.float()
    return _REFS[key]


def check(v: Variant, result) -> float:
    from kernels.reference import rel_err

    r = reference(v)
    if v.section == "fwd":
        result = result[0]
    if v.section == "bwd":
        return max(rel_err(x, y) for x, y in zip(result, r, strict=True))
    return rel_err(result, r)


def bench(fn, graph: bool = False) -> float:
    import triton.testing as tt

    if DEVICE == "cpu":
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    if graph:
        return tt.do_bench_cudagraph(fn, rep=60, return_mode="median")
    return tt.do_bench(fn, warmup=20, rep=60, return_mode="median")


def env_report(log) -> dict:
    import triton
    import triton.language as tl

    if DEVICE == "cpu":
        return {"gpu": "none (dry run)"}
    p = torch.cuda.get_device_properties(0)
    info = {"gpu": p.name, "sms": p.multi_processor_count, "torch": torch.__version__, "triton": triton.__version__,
            "make_tensor_descriptor": hasattr(tl, "make_tensor_descriptor"),
            "set_allocator": hasattr(triton, "set_allocator")}
    x = torch.empty(2**30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    info["copy_TBps"] = round(2 * x.nbytes / ms / 1e9, 3)
    a = _randn((8192, 8192), torch.bfloat16, 5)
    ms = bench(lambda: a @ a)
    info["cublas_8192_TFLOPS"] = round(2 * 8192**3 / ms / 1e9, 1)
    log(f"ENV {json.dumps(info)}")
    return info


def run_sweep(args, log) -> list[dict]:
    variants = sweep_variants()
    sel = [i for i, v in enumerate(variants) if v.section in args.sections]
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
            ms = bench(fn, graph=v.section == "dec")
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


def best_rows(rows: list[dict]) -> list[str]:
    """Best variant per (section, case), with its rate."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if "ms" not in r or r.get("rel_err", 1) > 3e-2:
            continue
        key = (r["section"], tuple(r["case"]))
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    out = []
    for (sec, case), r in best.items():
        # decode is memory-bound (GB/s); attention and matmul are judged by TFLOPS
        rate = f"{r['gbps']:.0f} GB/s" if sec == "dec" and "gbps" in r else f"{r['tflops']:.0f} TFLOPS"
        out.append(f"BEST {sec} {','.join(case)} {r['ms']:.4f} ms {rate} err={r['rel_err']:.1e} {r['params']}")
    return out


def apply_best(rows: list[dict], log) -> None:
    """Give the autotuners the sweep's winners (top 2 per case, correct results only) before the finals."""
    from kernels import attention, matmul

    variants = sweep_variants()
    ok = [r for r in rows if "ms" in r and r.get("rel_err", 1) < 3e-2]

    def top(section: str, pred, key, n: int = 2) -> list:
        picked: list = []
        cases = sorted({tuple(r["case"]) for r in ok if r["section"] == section})
        for case in cases:
            rs = sorted((r for r in ok if r["section"] == section and tuple(r["case"]) == case
                         and pred(variants[r["idx"]])), key=lambda r: r["ms"])
            for r in rs[:n]:
                c = key(variants[r["idx"]])
                if c not in picked:
                    picked.append(c)
        return picked

    for d in FWD_D:
        cfgs = top("fwd", lambda v, d=d: v.case[3] == d, lambda v: (*v.params["cfg"], v.params["tma"]))
        if cfgs:
            attention.set_configs("fwd", d, cfgs)
            log(f"fwd d{d} autotune candidates: {cfgs}")
    for d in BWD_D:
        dkdv = top("bwd", lambda v, d=d: v.case[3] == d and v.params["dq"] == DQ[0],
                   lambda v: (*v.params["dkdv"], v.params["tma"]))
        dq = top("bwd", lambda v, d=d: v.case[3] == d and v.params["dkdv"] == DKDV[0],
                 lambda v: (*v.params["dq"], v.params["tma"]))
        if dkdv and dq:
            attention.set_configs("dkdv", d, dkdv)
            attention.set_configs("dq", d, dq)
            log(f"bwd d{d} autotune candidates: dkdv {dkdv} dq {dq}")
    mm = top("mm", lambda v: True, lambda v: v.params["cfg"])
    if mm:
        matmul.set_configs(mm)
        log(f"mm autotune candidates: {mm}")


def _chosen(tuner) -> str:
    c = getattr(tuner, "best_config", None)
    return "" if c is None else f" [{c.kwargs} w{c.num_warps} s{c.num_stages}]"


def finals(args, log) -> list[str]:
    """Default entry points (autotuned) vs SDPA backends / cuBLAS at the target shapes.

    Implementations of one case are timed in turn, twice round; the lower median of the two rounds is
    kept for each (a fair comparison when clocks drift with temperature)."""
    from kernels import attention, decode, matmul
    from kernels import reference as ref

    lines = []

    def compare(tag: str, impls: dict, flops: float = 0.0, nbytes: float = 0.0, graph: bool = False,
                tuner=None) -> None:
        times: dict[str, float] = {}
        for _ in range(2):
            for name, fn in impls.items():
                try:
                    ms = bench(fn, graph)
                except Exception as exc:
                    log(f"  {name} {tag} failed: {type(exc).__name__}: {str(exc)[:100]}")
                    continue
                times[name] = min(ms, times.get(name, float("inf")))
        ours = times.get("ours")
        for name, ms in times.items():
            rate = f"{flops / ms / 1e9:7.1f} TFLOPS" if flops else f"{nbytes / ms / 1e6:7.0f} GB/s"
            rel = f" ours x{ms / ours:.2f}" if ours and name != "ours" else ""
            extra = _chosen(tuner) if name == "ours" and tuner is not None else ""
            s = f"{tag:34s} {name:15s} {ms:8.4f} ms {rate}{rel}{extra}"
            lines.append(s)
            log(s)

    for d, seq, b in FINAL_FWD if "fwd" in args.final else []:
        for causal in (False, True):
            q, k, v = (_randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
            impls = {"ours": partial(attention.attention_forward, q, k, v, causal)}
            for be in ("flash", "cudnn"):
                impls[f"sdpa-{be}"] = partial(ref.sdpa, q, k, v, causal, be)
            compare(f"fwd b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}", impls,
                    4.0 * b * 16 * seq * seq * d * (0.5 if causal else 1), tuner=attention._attn_fwd_tuned)
    for d, seq, b in FINAL_BWD if "bwd" in args.final else []:
        for causal in (False, True):
            q, k, v, do = (_randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
            o, lse = attention.attention_forward(q, k, v, causal)
            impls = {"ours": partial(attention.attention_backward, do, q, k, v, o, lse, causal)}
            for be in ("flash", "cudnn"):
                try:
                    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
                    out = ref.sdpa(qq, kk, vv, causal, be)
                    impls[f"sdpa-{be}"] = partial(torch.autograd.grad, out, (qq, kk, vv), do, retain_graph=True)
                except Exception as exc:
                    log(f"  sdpa {be} bwd failed: {exc}")
            compare(f"bwd b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}", impls,
                    2.5 * 4.0 * b * 16 * seq * seq * d * (0.5 if causal else 1), tuner=attention._attn_bwd_dkdv_tuned)
    for b, hq, hk, seq, d, dt in FINAL_DEC if "dec" in args.final else []:
        q, k, v = _randn((b, hq, 1, d), dt, 1), _randn((b, hk, seq, d), dt, 2), _randn((b, hk, seq, d), dt, 3)
        impls = {"ours": partial(decode.decode_attention, q, k, v)}
        for be in ("flash", "efficient", "cudnn"):
            impls[f"sdpa-{be}"] = partial(ref.sdpa, q, k, v, False, be)
        compare(f"dec b{b} hq{hq} hkv{hk} kv{seq} d{d} {str(dt)[6:]}", impls,
                nbytes=2.0 * (2 * b * hk * seq * d + 2 * b * hq * d), graph=True)
    for m, n, k in FINAL_MM if "mm" in args.final else []:
        a, bb = _randn((m, k), torch.bfloat16, 1), _randn((k, n), torch.bfloat16, 2)
        compare(f"mm {m}x{n}x{k}", {"ours": partial(matmul.matmul, a, bb), "cublas": partial(torch.matmul, a, bb)},
                2.0 * m * n * k, tuner=matmul._matmul_tuned)
    return lines


def _dry_setup() -> None:
    global DEVICE, FWD_SHAPE, MM_SHAPES, FINAL_FWD, FINAL_BWD, FINAL_DEC, FINAL_MM
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = "cpu"
    FWD_SHAPE = (1, 2, 40)
    MM_SHAPES = [(40, 48, 56)]
    FINAL_FWD, FINAL_BWD = [(64, 48, 1)], [(64, 48, 1)]
    FINAL_DEC, FINAL_MM = [(1, 2, 2, 100, 64, torch.float16)], [(40, 24, 32)]
    DEC_SHAPES[:] = [(1, 4, 2, 70, 128, torch.float16)]
    for key in FWD_D:
        FWD_D[key] = FWD_D[key][:2]
    MM[:] = [MM[0], MM[3], MM[4]]
    del DEC[2:], DKDV[2:], DQ[2:]


def summarize_perf(path: str) -> int:
    """One line per benchmark of a ``--benchmark-json`` file written through the perfci fixture."""
    with open(path) as f:
        data = json.load(f)
    for b in data.get("benchmarks", []):
        e = b.get("extra_info", {})
        rate = f"{e['tflops']:7.1f} TFLOPS" if "tflops" in e else ""
        rate += f" {e['gbps']:7.0f} GB/s" if "gbps" in e else ""
        print(f"{b['name'][:62]:62s} {e.get('device_time_ms', 0):9.4f} ms {rate} ({e.get('timer', '?')})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="sweep all sections and run the finals")
    ap.add_argument("--sections", default="", help="comma list of sweep sections: fwd,bwd,dec,mm")
    ap.add_argument("--final", default="", help="comma list of final comparisons: fwd,bwd,dec,mm")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for tune.json and tune.log")
    ap.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--budget", type=float, default=330.0, help="seconds after which sweep timing stops")
    ap.add_argument("--dry", action="store_true", help="CPU interpreter, tiny shapes: exercise this script only")
    ap.add_argument("--perf-json", default=None, help="print a compact table of a pytest-benchmark json, exit")
    args = ap.parse_args(argv)
    if args.perf_json:
        return summarize_perf(args.perf_json)
    if args.dry:
        _dry_setup()
        args.workers = 0
    if args.all:
        args.sections = args.sections or "fwd,bwd,dec,mm"
        args.final = args.final or "fwd,bwd,dec,mm"
    args.sections = [s for s in args.sections.split(",") if s]
    args.final = [s for s in args.final.split(",") if s]
    if DEVICE == "cuda" and not torch.cuda.is_available():
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
        result["final"] = finals(args, log) if args.final else []
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
