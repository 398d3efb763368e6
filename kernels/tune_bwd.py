"""Device bench of the attention backward: the 2-kernel Triton scheme vs the fused kernel vs the Gluon kernel vs SDPA.

    python3 -m kernels.tune_bwd check            # correctness vs the fp32 reference (kernels/reference.py)
    python3 -m kernels.tune_bwd bench [--sweep]  # graph-timed: ours (all three) vs SDPA cuDNN / flash
    TRITON_INTERPRET=1 python3 -m kernels.tune_bwd dry   # CPU interpreter, tiny shapes: this script only

``check`` runs every fused candidate config of the case's head dim (pointer atomics, TMA loads, TMA reduce-adds)
and the autotuned path (whose timing runs add into the scratch: the result checks the autotuner's reset), over
GQA, causal, both layouts, head dims 64/80/96/128/256, odd and unequal lengths, fp16/bf16, and the warp-specialised
Gluon backward (``impl="gluon"``) at every case it is eligible for (head dims 64 and 128; "n/a" elsewhere); then
how far two fused runs, and two Gluon runs, differ (dq is accumulated with atomics / TMA reduce-adds).
``bench`` takes the lower median of 2 rounds, implementations taking turns (``kernels.tune_cases.bench(fn,
graph=True)``; where that capture fails, as for SDPA's autograd backward in call 1, perfci's side-stream capture,
else events: the timer is printed).  ``--sweep`` adds each fused config and each 2-kernel dK/dV config at the
d128 / d64 L4096 shapes, and the Gluon backward's other ring depths at every shape; ``--diag`` adds, for the
first fused config, the unstaggered q order and a timing-only run without the dQ part (its dq is wrong), and the
same timing-only run of the Gluon backward at every shape.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_fused, attention_bwd_ws, tune_cases
from kernels import reference as ref
from kernels._checks import check_attention, interpreting, table_for
from kernels.tune_ab import graph_of

TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
# b, hq, hk, lq, lk, d, causal, layout, dtype
CHECK_CASES: list[tuple] = [
    (2, 8, 8, 1024, 1024, 128, False, "bhld", torch.bfloat16),
    (2, 8, 8, 1024, 1024, 128, True, "blhd", torch.bfloat16),
    (1, 16, 4, 1023, 1023, 128, True, "bhld", torch.float16),
    (2, 8, 2, 777, 1029, 64, True, "blhd", torch.bfloat16),
    (1, 8, 8, 1031, 515, 64, True, "bhld", torch.float16),
    (1, 8, 8, 1000, 1000, 80, False, "blhd", torch.bfloat16),
    (1, 4, 4, 513, 513, 96, True, "bhld", torch.bfloat16),
    (1, 4, 2, 300, 300, 256, True, "bhld", torch.float16),
]
GLUON_STAGES = (2, 3)  # --sweep: the Gluon backward's Q/dO ring depths (3 fits in shared memory at d64 only)
BENCH_SHAPES: list[tuple[int, int, int, int]] = [(4, 16, 4096, 128), (4, 16, 4096, 64), (2, 16, 8192, 128)]
SWEEP_SHAPES: list[tuple[int, int, int, int]] = [(4, 16, 4096, 128), (4, 16, 4096, 64)]
# 2-kernel scheme, --sweep: dK/dV kernel configs (BLOCK_M, BLOCK_N, warps, stages, USE_TMA), the dQ kernel autotuned
# (restricted to pointer entries when the dK/dV entry has USE_TMA off: ``use_tma`` applies to both launches)
TRITON_DKDV: dict[int, list[tuple]] = {
    128: [(64, 128, 8, 3, False), (64, 128, 8, 2, False), (64, 128, 8, 2, True), (64, 128, 8, 3, True)],
    64: [(64, 128, 8, 3, False), (64, 64, 4, 3, False), (64, 64, 4, 3, True), (64, 128, 8, 3, True)],
}


def log(s: str) -> None:
    print(s, flush=True)


def _shape(b: int, h: int, seq: int, d: int, layout: str) -> tuple[int, int, int, int]:
    return (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)


def _grads(impl: str, do, q, k, v, out, lse, causal, layout, config=None) -> tuple[torch.Tensor, ...]:
    grads = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
    attention.attention_backward(do, q, k, v, out, lse, causal, None, layout, dq=grads[0], dk=grads[1],
                                 dv=grads[2], impl=impl, configs=(config, None))
    return grads


def _gluon_ok(q, k, v, do) -> bool:
    """The Gluon backward can run these inputs (default scale, fresh contiguous gradient buffers)."""
    d = q.shape[-1]
    return attention_bwd_ws.eligible(q, k, v, do, k, v, d, d ** -0.5)


def check(only: tuple[str, ...] = ()) -> int:
    """Every case against the fp32 reference; ``only``: the implementations to run (default: all)."""
    bad = 0
    for i, (b, hq, hk, lq, lk, d, causal, layout, dt) in enumerate(CHECK_CASES):
        q, do = (tune_cases.randn(_shape(b, hq, lq, d, layout), dt, 10 * i + j) for j in (0, 3))
        k, v = (tune_cases.randn(_shape(b, hk, lk, d, layout), dt, 10 * i + j) for j in (1, 2))
        out, lse = attention.attention_forward(q, k, v, causal, None, layout, impl="triton")
        qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
        ro, _ = ref.attention_fp32(qr, kr, vr, causal, None, layout)
        ro.backward(do.float())
        refs = (qr.grad, kr.grad, vr.grad)
        tag = f"b{b} hq{hq} hk{hk} lq{lq} lk{lk} d{d} causal={causal} {layout} {str(dt)[6:]}"
        runs = [("triton", None), ("fused", None)] if i < 2 else []
        runs += [("fused", c) for c in table_for(attention_bwd_fused.FUSED_CONFIGS, d)]
        runs.append(("gluon", None))
        if only:
            runs = [(impl, cfg) for impl, cfg in (("triton", None), *runs) if impl in only and cfg is None]
            runs = list(dict.fromkeys(runs))
        for impl, cfg in runs:
            if impl == "gluon" and not _gluon_ok(q, k, v, do):
                log(f"n/a  {tag:52s} gluon ({attention_bwd_ws.status()}; head dims {attention_bwd_ws.HEAD_DIMS})")
                continue
            try:
                g = _grads(impl, do, q, k, v, out, lse, causal, layout, cfg)
                errs = [ref.rel_err(x, r) for x, r in zip(g, refs, strict=True)]
            except Exception as exc:  # report, count as a failure, go on
                errs, note = [float("inf")] * 3, f" {type(exc).__name__}: {str(exc)[:160]}"
            else:
                note = ""
            ok = max(errs) < TOL[dt]
            bad += not ok
            name = impl if cfg is None else f"{impl}{cfg}"
            log(f"{'ok  ' if ok else 'FAIL'} {tag:52s} {name:36s} dq {errs[0]:.2e} dk {errs[1]:.2e} "
                f"dv {errs[2]:.2e}{note}")
        if i == 0 and (not only or "fused" in only):  # run-to-run difference of the fused path (atomics)
            g1 = _grads("fused", do, q, k, v, out, lse, causal, layout)
            g2 = _grads("fused", do, q, k, v, out, lse, causal, layout)
            diff = [(x.float() - y.float()).abs().max().item() for x, y in zip(g1, g2, strict=True)]
            log(f"     fused run-to-run max |diff|: dq {diff[0]:.3e} dk {diff[1]:.3e} dv {diff[2]:.3e}")
        if i == 0 and (not only or "gluon" in only) and _gluon_ok(q, k, v, do):
            g1 = _grads("gluon", do, q, k, v, out, lse, causal, layout)
            g2 = _grads("gluon", do, q, k, v, out, lse, causal, layout)
            diff = [(x.float() - y.float()).abs().max().item() for x, y in zip(g1, g2, strict=True)]
            log(f"     gluon run-to-run max |diff|: dq {diff[0]:.3e} dk {diff[1]:.3e} dv {diff[2]:.3e}")
        del q, k, v, do, out, lse, qr, kr, vr, ro, refs
    log(f"check: {'all passed' if bad == 0 else f'{bad} FAILED'}")
    return 1 if bad else 0


def _sdpa_grad(out, inputs, do):
    return torch.autograd.grad(out, inputs, do, retain_graph=True)


def _recover() -> None:
    """After a failed capture: one small capture that succeeds resets the generators left in capture mode."""
    torch.cuda.synchronize()
    scratch = torch.zeros(1, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        scratch.add_(1)
    torch.cuda.synchronize()


def _graph_side_ms(fn, calls: int = 10, reps: int = 15) -> float:
    """perfci's graph timer: warm-up on a side stream, ``calls`` calls captured in one graph from the current
    stream, replays timed with events; median per call."""
    g = graph_of(fn, calls)
    g.replay()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / calls)
    return sorted(ms)[len(ms) // 2]


def _time(fn) -> tuple[float, str]:
    """(ms, timer): ``tune_cases.bench(fn, graph=True)``; where that capture fails (SDPA's autograd backward),
    perfci's side-stream graph capture; else ``tune_cases.bench(fn)`` (events)."""
    if tune_cases.DEVICE != "cuda":
        return tune_cases.bench(fn), "wall"
    try:
        return tune_cases.bench(fn, graph=True), "graph"
    except Exception:  # capture refused: try the other capture, then events
        _recover()
    try:
        return _graph_side_ms(fn), "graph-side"
    except Exception:
        _recover()
    return tune_cases.bench(fn), "event"


def bench(sweep: bool, diag: bool = False, skip: tuple[str, ...] = ()) -> int:
    """Graph-timed backward at BENCH_SHAPES; ``skip``: implementation names (or prefixes) left out."""
    for b, h, seq, d in BENCH_SHAPES:
        for causal in (False, True):
            q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
            out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
            impls = {"triton": partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="triton"),
                     "fused": partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="fused")}
            if _gluon_ok(q, k, v, do):
                impls["gluon"] = partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon")
                if diag:
                    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
                    bufs = tuple(torch.empty_like(t) for t in (q, k, v))
                    impls["gluon no-dQ (timing only)"] = partial(attention_bwd_ws.backward, do, q, k, v, out, lse,
                                                                 *bufs, dims, "bhld", causal, d ** -0.5, skip_dq=True)
                for st in GLUON_STAGES if sweep else ():
                    if st != attention_bwd_ws.CONFIGS.get(d) and (d == 64 or st == 2):
                        dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
                        bufs = tuple(torch.empty_like(t) for t in (q, k, v))
                        impls[f"gluon stages={st}"] = partial(attention_bwd_ws.backward, do, q, k, v, out, lse, *bufs,
                                                              dims, "bhld", causal, d ** -0.5, stages=st)
            if sweep and (b, h, seq, d) in SWEEP_SHAPES:
                dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
                bufs = tuple(torch.empty_like(t) for t in (q, k, v))
                eligible = attention.attention_path(q, k, v, do) == "hopper"
                cfgs = table_for(attention_bwd_fused.FUSED_CONFIGS, d)
                for cfg in cfgs:
                    extra = [("", {}), (" unstaggered", {"stagger": False}),
                             (" no-dQ (timing only)", {"skip_dq": True})] if cfg == cfgs[0] and diag else [("", {})]
                    for suffix, kw in extra:
                        impls[f"fused{cfg}{suffix}"] = partial(attention_bwd_fused.fused_backward, do, q, k, v, out,
                                                               lse, *bufs, dims, "bhld", causal, dims.head_dim ** -0.5,
                                                               eligible, config=cfg, **kw)
                for cfg in TRITON_DKDV.get(d, []):
                    impls[f"triton dkdv{cfg}"] = partial(attention.attention_backward, do, q, k, v, out, lse, causal,
                                                         impl="triton", configs=(cfg[:4], None), use_tma=cfg[4])
            for be in ("cudnn", "flash"):
                try:
                    qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
                    o = ref.sdpa(*qkv, causal, be)
                    _sdpa_grad(o, qkv, do)
                    impls[f"sdpa-{be}"] = partial(_sdpa_grad, o, qkv, do)
                except RuntimeError as exc:
                    log(f"  sdpa {be} bwd not runnable: {str(exc).splitlines()[0][:100]}")
            impls = {name: fn for name, fn in impls.items() if not name.startswith(skip)}
            flops = tune_cases.flops_bytes(tune_cases.Variant("bwd", (b, h, seq, d, causal)))[0]
            times: dict[str, float] = {}
            timers: dict[str, str] = {}
            for _ in range(2):
                for name, fn in impls.items():
                    try:
                        ms, timers[name] = _time(fn)
                    except Exception as exc:  # report and go on
                        log(f"  {name} failed: {type(exc).__name__}: {str(exc)[:160]}")
                        continue
                    times[name] = min(ms, times.get(name, float("inf")))
            base = times.get("sdpa-cudnn")
            tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
            for name, ms in times.items():
                rel = f" x{base / ms:.3f} cuDNN" if base else ""
                log(f"{tag:32s} {name:40s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOPS{rel} ({timers[name]})")
            tuners = (("fused", attention_bwd_fused._fused_tuned), ("triton dkdv", attention._attn_bwd_dkdv_tuned),
                      ("triton dq", attention._attn_bwd_dq_tuned))
            for what, tuner in tuners:
                log(f"{tag:32s} {what} autotuner's last pick: {getattr(tuner, 'best_config', None)}")
            del q, k, v, do, out, lse, impls
    return 0


def dry() -> int:
    """CPU interpreter at tiny shapes (checks the script, not speed); needs TRITON_INTERPRET=1 set before start."""
    if not interpreting():
        log("dry needs TRITON_INTERPRET=1 in the environment (the kernels are built at import)")
        return 2
    tune_cases.DEVICE = "cpu"
    CHECK_CASES[:] = [(1, 2, 1, 37, 45, 64, True, "blhd", torch.float16), (1, 2, 2, 30, 30, 80, False, "bhld",
                                                                           torch.bfloat16)]
    BENCH_SHAPES[:] = [(1, 2, 40, 64)]
    SWEEP_SHAPES[:] = [(1, 2, 40, 64)]
    attention_bwd_fused.FUSED_CONFIGS[64] = [(32, 16, 4, 1, False, False)]
    attention_bwd_fused.FUSED_CONFIGS[128] = [(32, 16, 4, 1, False, False)]
    rc = check()
    TRITON_DKDV[64] = [(32, 16, 4, 1, False)]
    return rc or bench(sweep=True, diag=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("check", "bench", "dry"))
    ap.add_argument("--sweep", action="store_true",
                    help="also time each fused config and each 2-kernel dK/dV config at the sweep shapes")
    ap.add_argument("--diag", action="store_true",
                    help="the Gluon backward without its dQ part (timing only); with --sweep also the unstaggered q "
                         "order and a no-dQ timing-only run of the first fused config")
    ap.add_argument("--only", default="", help="check: comma-separated implementations to run (triton,fused,gluon)")
    ap.add_argument("--skip", default="", help="bench: comma-separated implementation names (or prefixes) to leave out")
    args = ap.parse_args(argv)
    if args.mode == "dry":
        return dry()
    if args.mode == "check":
        return check(tuple(x for x in args.only.split(",") if x))
    return bench(args.sweep, args.diag, tuple(x for x in args.skip.split(",") if x))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
