"""Device script for the warp-specialised Gluon attention forward (``kernels/_attn_fwd_ws.py``).

    PYTHONPATH=. python3 -m kernels.tune_ws check            # correctness against the fp32 reference
    PYTHONPATH=. python3 -m kernels.tune_ws bench [--sweep]  # Gluon vs our Triton kernel vs SDPA
    PYTHONPATH=. python3 -m kernels.tune_ws check --fp8      # the fp8 forward (v position-contiguous)
    PYTHONPATH=. python3 -m kernels.tune_ws bench --fp8 [--sweep]  # fp8 Gluon / Triton vs our bf16 forward
    PYTHONPATH=. python3 -m kernels.tune_ws run --seq 512 --dim 128 --mask causal [--fp8] [--impl gluon]
        # a few plain launches of one bench case, for a profiler (ncu -k regex:attn_fwd)

``check`` runs every case in order, smallest first, and prints one line each (a hang in a kernel then
shows which case; run it under ``timeout``).  ``bench`` times (CUDA-graph replays: device time, not the
Python launch path) the default entry point (Gluon where preferred), the Gluon and the Triton kernel
forced, and SDPA's cuDNN and flash backends at the suite's shapes, implementations in turn over
``ROUNDS`` rounds (every other one in reverse order, so no implementation always follows the same one
while clocks settle), lowest median kept; ``--sweep`` adds the Gluon configurations of ``SWEEP``, each
persistent (suffix p) and one program per tile (n); fp8 entries ending in ``-kpl`` read K in key order (the
permuted-K read of ``attention_ws.PERMUTE_K`` off).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

import torch

from kernels import attention, attention_ws
from kernels import reference as ref
from kernels import tune_cases as cases
from kernels._checks import LOG2E, padded_dim
from kernels.tune_cases import randn

# (batch, heads_q, heads_kv, len_q, len_k, head_dim, causal, layout, dtype)
CHECKS = [
    (1, 2, 2, 128, 128, 64, False, "bhld", torch.bfloat16),
    (1, 2, 2, 128, 128, 128, True, "bhld", torch.bfloat16),
    (2, 4, 4, 1000, 1000, 128, False, "bhld", torch.bfloat16),
    (2, 4, 4, 1000, 1000, 128, True, "bhld", torch.float16),
    (2, 4, 2, 1000, 1000, 64, True, "blhd", torch.float16),
    (2, 4, 1, 777, 777, 64, False, "blhd", torch.bfloat16),
    (1, 2, 2, 300, 1000, 96, True, "bhld", torch.bfloat16),
    (1, 2, 2, 1000, 300, 80, True, "bhld", torch.bfloat16),
    (1, 2, 2, 1, 513, 128, False, "bhld", torch.bfloat16),
    (1, 2, 2, 1, 513, 128, True, "bhld", torch.bfloat16),
    (1, 2, 2, 64, 64, 128, True, "bhld", torch.bfloat16),
    (1, 3, 3, 77, 1200, 16, False, "bhld", torch.bfloat16),
    (1, 3, 3, 200, 200, 32, True, "blhd", torch.float16),
    (1, 3, 3, 200, 333, 40, False, "bhld", torch.bfloat16),
    (1, 3, 3, 200, 333, 112, True, "blhd", torch.bfloat16),
    (2, 8, 8, 4096, 4096, 128, False, "bhld", torch.bfloat16),
    (2, 8, 8, 4096, 4096, 128, True, "bhld", torch.bfloat16),
    (1, 8, 8, 4096, 4096, 64, True, "bhld", torch.bfloat16),
]
# fp8: (batch, heads_q, heads_kv, len_q, len_k, head_dim, causal, layout, out dtype); v position-contiguous
CHECKS_FP8 = [
    (1, 2, 2, 128, 128, 128, False, "bhld", torch.bfloat16),
    (2, 4, 4, 1000, 1008, 128, True, "bhld", torch.bfloat16),
    (2, 4, 2, 1000, 1536, 64, True, "blhd", torch.float32),
    (1, 4, 4, 600, 304, 96, True, "bhld", torch.float16),
    (1, 2, 2, 1, 528, 128, False, "blhd", torch.bfloat16),
    (1, 2, 2, 1000, 1000, 128, False, "bhld", torch.bfloat16),
    (2, 8, 8, 4096, 4096, 128, True, "bhld", torch.bfloat16),
]
# (head_dim, len, batch): the forward finals of kernels/tune_cases.py; 16 heads
BENCH = [(128, 4096, 4), (128, 16384, 1), (64, 4096, 4), (96, 4096, 4), (128, 512, 32), (64, 512, 32)]
ROUNDS = 3  # implementations in turn, every other round in reverse order; the lowest median is kept
# BLOCK_D -> Gluon configurations (BLOCK_N, STAGES, consumers) timed with --sweep
# (BLOCK_N, STAGES, consumers, ping-pong); timed persistent (suffix p) without a mask, one program per item (n)
# with one, as measured best in session 7
SWEEP = {128: [(128, 2, 2, False), (64, 3, 2, False), (64, 4, 2, False), (64, 2, 2, False), (64, 3, 2, True)],
         64: [(128, 3, 2, False), (64, 3, 2, False), (64, 4, 2, False)]}
BENCH_FP8 = [(128, 4096, 4), (128, 16384, 1), (64, 4096, 4), (128, 512, 32)]
SWEEP_FP8 = {128: [(128, 2, 2, False), (128, 3, 2, False), (64, 3, 2, False)],
             64: [(128, 3, 2, False), (128, 4, 2, False), (128, 3, 2, True)]}


def make(b, hq, hkv, lq, lk, d, layout, dtype, seed=0):
    def one(h, seq, i):
        shape = (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)
        return randn(shape, dtype, seed + i)

    return one(hq, lq, 0), one(hkv, lk, 1), one(hkv, lk, 2)


def _lse_ok(lse: torch.Tensor, ref_lse: torch.Tensor, tol: float = 1e-2) -> bool:
    """The same rows infinite (no key seen) as the reference, the rest within ``tol``."""
    finite = torch.isfinite(ref_lse)
    return bool(torch.equal(finite, torch.isfinite(lse))) and (
        not finite.any() or float((lse[finite] - ref_lse[finite]).abs().max()) < tol)


def check(log) -> int:
    bad = 0
    for case in CHECKS:
        b, hq, hkv, lq, lk, d, causal, layout, dtype = case
        q, k, v = make(b, hq, hkv, lq, lk, d, layout, dtype)
        t = time.time()
        out, lse = attention.attention_forward(q, k, v, causal, layout=layout, impl="gluon")
        torch.cuda.synchronize()
        ro, rl = ref.attention_fp32(q, k, v, causal, layout=layout)
        err = ref.rel_err(out, ro)
        lse_ok = _lse_ok(lse, rl)
        tri = ref.rel_err(attention.attention_forward(q, k, v, causal, layout=layout, impl="triton")[0], ro)
        ok = err < 1e-2 and lse_ok and bool(torch.isfinite(out).all())
        bad += not ok
        log(f"CHECK {'ok  ' if ok else 'FAIL'} {case[:7]} {layout} {str(dtype)[6:]}: rel err {err:.2e} "
            f"(triton {tri:.2e}), lse {'ok' if lse_ok else 'WRONG'}, {time.time() - t:.1f} s")
    return bad


def _name(bn: int, stages: int, consumers: int, pingpong: bool, persistent: bool) -> str:
    """Sweep entry label, e.g. ws128x3c2ppn: BLOCK_N 128, 3 stages, 2 consumers, ping-pong, one program per item."""
    flags = ("pp" if pingpong else "") + ("p" if persistent else "n")
    return f"ws{bn}x{stages}c{consumers}{flags}"


def fp8_inputs(b, hq, hkv, lq, lk, d, layout, seed=0):
    """e4m3 q, k, v (v stored position-contiguous) and their per-tensor descales."""
    q, k, v = make(b, hq, hkv, lq, lk, d, layout, torch.float32, seed)
    (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
    dim = 2 if layout == "bhld" else 1
    return q8, k8, v8.transpose(dim, 3).contiguous().transpose(dim, 3), sq, sk, sv


def bf16_copies(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Row-major bf16 copies of fp8 inputs, for our bf16 forward and SDPA on the same data.  Row-major because
    the Gluon bf16 kernel refuses fp8's position-contiguous v, and "auto" then ran the slower Triton kernel
    (sessions 7-10 timed "bf16-ours" so: kernels/NOTES.md, session 12)."""
    return tuple(t.to(torch.bfloat16).contiguous() for t in tensors)


def check_fp8(log) -> int:
    """The Gluon fp8 forward against the fp32 attention of the dequantised inputs, beside the Triton one: with P's
    exponentials and with its codes (``fast_exp``), the lse within attention.fp8_lse_tolerance."""
    bad = 0
    for case in CHECKS_FP8:
        b, hq, hkv, lq, lk, d, causal, layout, out_dtype = case
        q8, k8, v8, sq, sk, sv = fp8_inputs(b, hq, hkv, lq, lk, d, layout)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, layout=layout,
                      out_dtype=out_dtype)
        if not attention_ws.eligible_fp8(q8, k8, v8, torch.empty(q8.shape, dtype=out_dtype, device=q8.device), d,
                                         layout):
            log(f"CHECK skip fp8 {case[:7]} {layout}: not eligible for the Gluon kernel")
            continue
        ro, rl = ref.attention_fp32(q8.float() * sq, k8.float() * sk, v8.float() * sv, causal, layout=layout)
        tri = ref.rel_err(run(impl="triton")[0], ro)
        for fast in (False, True):
            t = time.time()
            out, lse = run(impl="gluon", fast_exp=fast)
            torch.cuda.synchronize()
            err = ref.rel_err(out, ro)
            lse_ok = _lse_ok(lse, rl, attention.fp8_lse_tolerance(fast))
            ok = err < max(0.1, 1.5 * tri) and lse_ok and bool(torch.isfinite(out).all())
            bad += not ok
            log(f"CHECK {'ok  ' if ok else 'FAIL'} fp8{' fast_exp' if fast else ''} {case[:7]} {layout} "
                f"->{str(out_dtype)[6:]}: rel err {err:.2e} (triton {tri:.2e}), lse {'ok' if lse_ok else 'WRONG'}, "
                f"{time.time() - t:.1f} s")
    return bad


def _time_all(log, impls: dict, tag: str, flops: float, against: str) -> None:
    times = cases.in_turns(impls, ROUNDS, on_error=lambda name, exc: log(
        f"  {name} failed: {type(exc).__name__}: {str(exc)[:200]}"))
    for name, ms in times.items():
        rel = f" {against}/this x{times[against] / ms:.2f}" if against in times else ""
        log(f"BENCH {tag:30s} {name:12s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOPS{rel}")


def _without(flag: str, fn):
    """``fn`` with the switch ``attention_ws.<flag>`` off (PERMUTE_K: the fp8 kernel reads K in key order)."""
    def run():
        was = getattr(attention_ws, flag)
        setattr(attention_ws, flag, False)
        try:
            return fn()
        finally:
            setattr(attention_ws, flag, was)
    return run


def run_bench_fp8(log, sweep: bool, masks: tuple[bool, ...], seqs: tuple[int, ...] = (),
                  head_dims: tuple[int, ...] = ()) -> None:
    """fp8 forward (default, Triton, Gluon with its codes (``fast_exp``, the default) and with exponentials, the
    sweep's Gluon configs with the codes: persistent without a mask, one program per item with one) beside our bf16
    forward and SDPA cuDNN (bf16) on the same data."""
    for d, seq, b in BENCH_FP8:
        if (seqs and seq not in seqs) or (head_dims and d not in head_dims):
            continue
        for causal in masks:
            q8, k8, v8, sq, sk, sv = fp8_inputs(b, 16, 16, seq, seq, d, "bhld")
            q, k, v = bf16_copies(q8, k8, v8)
            run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal)
            impls = {"fp8": run, "fp8-triton": partial(run, impl="triton"), "fp8-gluon": partial(run, impl="gluon"),
                     "fp8-gluon-exact": partial(run, impl="gluon", fast_exp=False),
                     "fp8-gluon-kpl": _without("PERMUTE_K", partial(run, impl="gluon")),
                     "bf16-ours": partial(attention.attention_forward, q, k, v, causal),
                     "sdpa-cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn")}
            if sweep:
                dims = attention.check_attention(q8, k8, v8, "bhld", attention.HEAD_DIMS,
                                                 dtypes=attention.FP8_DTYPES)
                out, lse = torch.empty_like(q), torch.empty((b, 16, seq), device=q.device)
                for bn, st, nc, pp in SWEEP_FP8.get(max(64, padded_dim(d)), []):
                    for pers in (False,) if causal else (True,):  # as measured best for bf16
                        fn = partial(attention_ws.forward, q8, k8, v8, out, lse, dims, "bhld", causal,
                                     d ** -0.5 * LOG2E * sq * sk, (bn, st, nc, pers, pp), o_scale=sv,
                                     fast_exp=True)
                        impls[_name(bn, st, nc, pp, pers)] = fn
                        impls[_name(bn, st, nc, pp, pers) + "-kpl"] = _without("PERMUTE_K", fn)
            flops = cases.flops_bytes(cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
            _time_all(log, impls, f"fp8 b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}", flops, "bf16-ours")


def run_bench(log, sweep: bool, masks: tuple[bool, ...] = (False, True), seqs: tuple[int, ...] = (),
              head_dims: tuple[int, ...] = (), both_grids: bool = False) -> None:
    for d, seq, b in BENCH:
        if (seqs and seq not in seqs) or (head_dims and d not in head_dims):
            continue
        for causal in masks:
            q, k, v = (randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
            impls = {"ours": partial(attention.attention_forward, q, k, v, causal),
                     "ours-gluon": partial(attention.attention_forward, q, k, v, causal, impl="gluon"),
                     "ours-triton": partial(attention.attention_forward, q, k, v, causal, impl="triton"),
                     "sdpa-cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn"),
                     "sdpa-flash": partial(ref.sdpa, q, k, v, causal, "flash")}
            if sweep:
                dims = attention.check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
                out, lse = torch.empty_like(q), torch.empty((b, 16, seq), device=q.device)
                for bn, st, nc, pp in SWEEP.get(max(64, padded_dim(d)), []):
                    for pers in (False, True) if both_grids else (False,) if causal else (True,):
                        impls[_name(bn, st, nc, pp, pers)] = \
                            partial(attention_ws.forward, q, k, v, out, lse, dims, "bhld", causal,
                                    d ** -0.5 * LOG2E, (bn, st, nc, pers, pp))
            flops = cases.flops_bytes(cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
            _time_all(log, impls, f"fwd b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}", flops, "sdpa-cudnn")


def run_once(fp8: bool, seq: int, d: int, causal: bool, impl: str, reps: int) -> None:
    """``reps`` launches of one bench case (batch as in BENCH, 16 heads): the default entry point, a kernel
    forced (``impl``), or SDPA's cuDNN backend (``impl="cudnn"``, bf16 on the same data), for a profiler."""
    b = dict(((dd, ss), bb) for dd, ss, bb in BENCH).get((d, seq), 4)
    if fp8:
        q8, k8, v8, sq, sk, sv = fp8_inputs(b, 16, 16, seq, seq, d, "bhld")
        q, k, v = bf16_copies(q8, k8, v8)
        fn = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl=impl)
    else:
        q, k, v = (randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
        fn = partial(attention.attention_forward, q, k, v, causal, impl=impl)
    if impl == "cudnn":
        fn = partial(ref.sdpa, q, k, v, causal, "cudnn")
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("check", "bench", "run"))
    ap.add_argument("--sweep", action="store_true", help="also time the Gluon configurations of SWEEP")
    ap.add_argument("--mask", choices=("both", "full", "causal"), default="both", help="which masks to time")
    ap.add_argument("--fp8", action="store_true", help="check / time the fp8 forward instead of bf16")
    ap.add_argument("--seq", type=int, nargs="*", default=[], help="time only these sequence lengths")
    ap.add_argument("--dim", type=int, nargs="*", default=[], help="time only these head dims")
    ap.add_argument("--impl", choices=("auto", "gluon", "triton", "cudnn"), default="auto",
                    help="run: the entry point's impl, or SDPA's cuDNN backend")
    ap.add_argument("--reps", type=int, default=3, help="run: launches")
    ap.add_argument("--both-grids", action="store_true",
                    help="bench --sweep (bf16): time each configuration persistent and one program per item")
    args = ap.parse_args()

    def log(s: str) -> None:
        print(s, flush=True)

    p = torch.cuda.get_device_properties(0)
    log(f"ENV {p.name} uuid={getattr(p, 'uuid', '?')} torch={torch.__version__} gluon={attention_ws.status()}")
    if args.what == "run":
        if len(args.seq) != 1 or len(args.dim) != 1 or args.mask == "both":
            ap.error("run needs one --seq, one --dim and --mask full or causal")
        run_once(args.fp8, args.seq[0], args.dim[0], args.mask == "causal", args.impl, args.reps)
        return 0
    if args.what == "check":
        bad = check_fp8(log) if args.fp8 else check(log)
        log(f"checks failed: {bad}")
        return 1 if bad else 0
    masks = {"both": (False, True), "full": (False,), "causal": (True,)}[args.mask]
    if args.fp8:
        run_bench_fp8(log, args.sweep, masks, tuple(args.seq), tuple(args.dim))
    else:
        run_bench(log, args.sweep, masks, tuple(args.seq), tuple(args.dim), args.both_grids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
