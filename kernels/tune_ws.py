"""Device script for the warp-specialised Gluon attention forward (``kernels/_attn_fwd_ws.py``).

    PYTHONPATH=. python3 -m kernels.tune_ws check            # correctness against the fp32 reference
    PYTHONPATH=. python3 -m kernels.tune_ws bench [--sweep]  # Gluon vs our Triton kernel vs SDPA

``check`` runs every case in order, smallest first, and prints one line each (a hang in a kernel then
shows which case; run it under ``timeout``).  ``bench`` times (CUDA-graph replays: device time, not the
Python launch path) the default entry point (Gluon where preferred), the Gluon and the Triton kernel
forced, and SDPA's cuDNN and flash backends at the suite's shapes, implementations in turn over
``ROUNDS`` rounds (every other one in reverse order, so no implementation always follows the same one
while clocks settle), lowest median kept; ``--sweep`` adds the Gluon configurations of ``SWEEP``, each
persistent (suffix p) and one program per tile (n).
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
# (head_dim, len, batch): the forward finals of kernels/tune_cases.py; 16 heads
BENCH = [(128, 4096, 4), (128, 16384, 1), (64, 4096, 4), (96, 4096, 4), (128, 512, 32), (64, 512, 32)]
ROUNDS = 3  # implementations in turn, every other round in reverse order; the lowest median is kept
# BLOCK_D -> Gluon configurations (BLOCK_N, STAGES, consumers) timed with --sweep
SWEEP = {128: [(128, 2, 2), (64, 3, 2), (64, 4, 2)], 64: [(128, 2, 3), (128, 3, 2), (64, 4, 2)]}


def make(b, hq, hkv, lq, lk, d, layout, dtype, seed=0):
    def one(h, seq, i):
        shape = (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)
        return randn(shape, dtype, seed + i)

    return one(hq, lq, 0), one(hkv, lk, 1), one(hkv, lk, 2)


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
        finite = torch.isfinite(rl)
        lse_ok = bool(torch.equal(finite, torch.isfinite(lse))) and (
            not finite.any() or float((lse[finite] - rl[finite]).abs().max()) < 1e-2)
        tri = ref.rel_err(attention.attention_forward(q, k, v, causal, layout=layout, impl="triton")[0], ro)
        ok = err < 1e-2 and lse_ok and bool(torch.isfinite(out).all())
        bad += not ok
        log(f"CHECK {'ok  ' if ok else 'FAIL'} {case[:7]} {layout} {str(dtype)[6:]}: rel err {err:.2e} "
            f"(triton {tri:.2e}), lse {'ok' if lse_ok else 'WRONG'}, {time.time() - t:.1f} s")
    return bad


def run_bench(log, sweep: bool, masks: tuple[bool, ...] = (False, True)) -> None:
    for d, seq, b in BENCH:
        for causal in masks:
            q, k, v = (randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
            impls = {"ours": partial(attention.attention_forward, q, k, v, causal),
                     "ours-gluon": partial(attention.attention_forward, q, k, v, causal, impl="gluon"),
                     "ours-triton": partial(attention.attention_forward, q, k, v, causal, impl="triton"),
                     "sdpa-cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn"),
                     "sdpa-flash": partial(ref.sdpa, q, k, v, causal, "flash")}
            if sweep:
                for cfg in SWEEP.get(max(64, 1 << (d - 1).bit_length()), []):
                    dims = attention.check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
                    out, lse = torch.empty_like(q), torch.empty((b, 16, seq), device=q.device)
                    for pers in (False, True):
                        impls[f"ws{cfg[0]}x{cfg[1]}c{cfg[2]}{'p' if pers else 'n'}"] = partial(
                            attention_ws.forward, q, k, v, out, lse, dims, "bhld", causal,
                            d ** -0.5 * 1.4426950408889634, (*cfg, pers))
            flops = cases.flops_bytes(cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
            times: dict[str, float] = {}
            for rnd in range(ROUNDS):
                for name, fn in (impls.items() if rnd % 2 == 0 else reversed(impls.items())):
                    try:
                        times[name] = min(cases.bench(fn, graph=True), times.get(name, float("inf")))
                    except Exception as exc:
                        log(f"  {name} failed: {type(exc).__name__}: {str(exc)[:200]}")
            tag = f"fwd b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}"
            for name, ms in times.items():
                rel = f" cudnn/this x{times['sdpa-cudnn'] / ms:.2f}" if "sdpa-cudnn" in times else ""
                log(f"BENCH {tag:30s} {name:12s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOPS{rel}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("check", "bench"))
    ap.add_argument("--sweep", action="store_true", help="also time the Gluon configurations of SWEEP")
    ap.add_argument("--mask", choices=("both", "full", "causal"), default="both", help="which masks to time")
    args = ap.parse_args()

    def log(s: str) -> None:
        print(s, flush=True)

    p = torch.cuda.get_device_properties(0)
    log(f"ENV {p.name} uuid={getattr(p, 'uuid', '?')} torch={torch.__version__} gluon={attention_ws.status()}")
    if args.what == "check":
        bad = check(log)
        log(f"checks failed: {bad}")
        return 1 if bad else 0
    run_bench(log, args.sweep, {"both": (False, True), "full": (False,), "causal": (True,)}[args.mask])
    return 0


if __name__ == "__main__":
    sys.exit(main())
