#!/usr/bin/env bash
# Session-37 device calls (issue 16), prepared in session 36 for the first H100 lent since session 26 (they run on an
# H200 too): bash kernels/device_s37.sh CALL (OUT set by the tool; carry .whl for calls 1-3).  Every step is guarded
# by `timeout`.  Calls 1-3 have not run yet (no H100 lent in session 37).
# call1: the whole kernel suite (tests/perf: flash, decode, matmul, the 256 MB copy) for README's H100 table, which is
#        from session 26, before sessions 27-36's changes; then fp8 against our bf16 and cuDNN's fp8 forward (through
#        JAX, as session 36's call 1) at d128 L4096 / 8192 / 16384, full and causal.
# call2: the H100 baseline's test_flash.py "ours" entries re-made from two runs: the forward (16-bit, d80 and fp8: the
#        forward's entries predate sessions 27-36, fp8's the codes path) and the backward (d128 and the d64 rows,
#        which the H100 baseline does not have yet).
# call3: likewise test_matmul.py's and test_decode.py's "ours" entries (the ragged GEMM is read in clusters of two
#        CTAs since session 30).
# Session 37 got H200s only; its own calls (A/B through kernels/tune_ab.py; graph replays in turns, or from call 7
# graphs replayed back to back for a set time, the power-capped steady state: calls 7-13 ran with that timing written
# out in each script, since session 37's review `tune_ab.steady_in_turns`, the same code):
# call4: the head dim 128 backward with dQ computed by one consumer a row block, in turns (all 128 columns over the
#        block's 128 keys: 8 m64n128 wgmma a step instead of 16 m64n64 across the two consumers, dS^T read once from
#        shared memory, only the owner waiting for the other consumer's rows; `DQ_SPLIT_HEAD_DIMS` ()), also with its
#        part staged as 128-byte rows (`DQ_ROWS_HEAD_DIMS`) and without the release barriers (`LIGHT_BARRIERS`),
#        against the shipped split, at L1024-16384 full and causal; dk / dv bitwise, dq compared; then the clocks and
#        power of the 4096^3 GEMM, ours and cuBLAS, each run back to back for a few seconds (nvidia-smi sampled).
# call5: the Gluon GEMM's tile order (GROUP_M 4 / 8 / 16 / 32) and its clusters of two against cuBLAS at 4096^3, 8192^3
#        and 4096x14336x4096: graph-timed in turns, then each run back to back for 1.5 s with its SM clock and power
#        (nvidia-smi); the DRAM bytes read by one 4096^3 call of each (ncu, three metrics).
# call6: the Gluon GEMM launched as a programmatic dependent launch (`_matmul_gluon.PDL`, the kernel's PDL) against
#        it without and cuBLAS, back to back and each after a one-element add (graph-timed in turns).
# call7: cuBLAS, the shipped Gluon GEMM, GROUP_M 4 and 16, and PDL in the power-capped steady state: graphs of 20 calls
#        each replayed for 0.3 s in turns, 10 rounds, medians (the graph-timed turns of calls 5-6 moved 1-2 % from
#        round to round as the clocks did).  Calls 6-7 ran with docs/measurements/kernels_s37_gemm_pdl.patch applied
#        (PDL not kept: calls 6-7 as written need it); "ours" in calls 5-7 is GROUP_M 8, the default then.
# call8: with GROUP_M 16 in `_matmul_gluon.WS_CONFIG` (then reverted: within -0.3 / +0.7 % of GROUP_M 8; its 2048^3
#        row set the default route, the Triton kernel there, against the Gluon kernel: call 10): it against GROUP_M 8
#        and cuBLAS in the steady state (as call 7) at five GEMM shapes, outputs compared; then the GEMM GPU tests.
# call9: the Gluon GEMM's output stored in two column halves through one half-width buffer a consumer (EPI 2: the
#        accumulator's register halves by gl.split, no data movement), which leaves room for a fourth ring stage
#        (229,560 B of shared memory): 4 and 3 stages against the shipped EPI 0 (3 stages) and cuBLAS in the steady
#        state (as call 8), five shapes; then the Gluon GEMM's GPU tests (EPI 2 configs added).  Calls 9-10 ran with
#        docs/measurements/kernels_s37_gemm_epi2.patch applied (EPI 2 not kept: calls 9-10 as written need it).
# call10: GEMMs of fewer than a wave of the Gluon kernel's 128x256 tiles (`matmul.GLUON_MIN_TILES` 132: the Triton
#        kernel takes them; call 9's 2048^3 ran 8 % faster through the Gluon kernel): cuBLAS, the default route, the
#        Gluon kernel on 128x256 and 128x128 tiles, each also with EPI 2, steady state (6 rounds of 0.25 s).
# call11: the routing made from call 10 (`matmul.GLUON_MIN_DIM`, since call 13 GLUON_MIN_M / GLUON_MIN_N: aligned
#        GEMMs under a wave of 128x256 tiles through the Gluon kernel from M, N >= 1024; `_matmul_gluon.default_config`: its 128x128 tiles where they fill the
#        SMs' rounds better, `NARROW_EFFICIENCY` 0.92) against the routes before it and cuBLAS, steady state, twelve
#        shapes with errors against fp32; then the GEMM GPU tests.
# call12: on the session's last commit (GLUON_MIN_M 128 / GLUON_MIN_N 1024 from call 13): call 11's script at M
#        128-768, then the GEMM GPU tests and the Gluon backward's.
# call13: GEMMs of M 128-768 (N 1024-14336), below call 11's rule (M and N from 1024, GLUON_MIN_DIM then): cuBLAS,
#        their route, the Gluon kernel's two tiles.
# call15 (prepared, not run): the lead for GEMMs of M 128-256 (NOTES, session 37): 128x64 tiles (BLOCK_N 64, 4 and
#        6 stages; built offline only) beside 128x128 and cuBLAS at M 128-512, steady state, outputs compared.
# call14 (for the next H100, not run): the small-GEMM routing (calibrated on H200s) against the routes before it on
#        an H100, call 11's shapes and call 12's, steady state; then the GEMM GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s37_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s37
source kernels/device_lib.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false

# session 36's call 1 script (cuDNN's fp8 forward through JAX beside ours), taken from its device script
sed -n "/^cat > \/tmp\/s36\/jax_fp8.py <<'PY'$/,/^PY$/p; /^cat > \/tmp\/s36\/cudnn_fp8.py <<'PY'$/,/^PY$/p" \
  kernels/device_s36.sh | sed 's#/tmp/s36#/tmp/s37#g' > /tmp/s37/make_scripts.sh
bash /tmp/s37/make_scripts.sh

cat > /tmp/s37/ab_split.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_ws, tune_cases
from kernels.tune_ab import patched

ROUNDS = int(sys.argv[1])
CASES = [(4096, 4, False), (4096, 4, True), (16384, 1, False), (16384, 1, True), (2048, 8, False), (1024, 16, False),
         (8192, 2, True)]
LIGHT = ((64, False), (128, False), (128, True))
for seq, b, causal in CASES:
    q, k, v, do = (tune_cases.randn((b, 16, seq, 128), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal)
    run = partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon")
    turns = patched(run, attention_bwd_ws, "DQ_SPLIT_HEAD_DIMS", ())
    fns = {"split": run, "turns": turns,
           "turns_rows": patched(turns, attention_bwd_ws, "DQ_ROWS_HEAD_DIMS", (64, 128)),
           "turns_light": patched(turns, attention_bwd_ws, "LIGHT_BARRIERS", LIGHT)}
    ref = run()
    notes = []
    for name, fn in fns.items():
        g = fn()
        same = torch.equal(g[1], ref[1]) and torch.equal(g[2], ref[2])
        err = ((g[0].float() - ref[0].float()).abs().max() / ref[0].float().abs().max()).item()
        notes.append(f"{name} dk dv {'bitwise' if same else 'DIFFER'} dq {err:.1e}")
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"b{b} h16 L{seq} d128 {'causal' if causal else 'full'} ({'; '.join(notes)}): "
          + ", ".join(f"{n} {ms * 1e3:.1f} us" for n, ms in t.items()) + "; x split: "
          + ", ".join(f"{n} {t['split'] / ms:.4f}" for n, ms in t.items() if n != "split"), flush=True)
PY

cat > /tmp/s37/gemm_clocks.py <<'PY'
import subprocess
import time

import torch

from kernels.matmul import matmul

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
FNS = {"ours": lambda: matmul(a, b), "cublas": lambda: torch.matmul(a, b, out=c)}
for fn in FNS.values():
    fn()
torch.cuda.synchronize()
QUERY = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
for rnd in range(2):
    for name, fn in FNS.items():
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "100"],
                               stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        t0 = time.time()
        n = 0
        start.record()
        while time.time() - t0 < 3.0:
            for _ in range(50):
                fn()
            n += 50
            torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
        smi.terminate()
        text = smi.communicate()[0]
        rows = [r.split(", ") for r in text.strip().splitlines()]
        busy = [r for r in rows[len(rows) // 3:] if len(r) == 5]  # past the start
        if not busy:
            print(f"nvidia-smi gave no samples: {text[:300]!r}")
            continue
        sm = sorted(float(r[0]) for r in busy)
        pw = sorted(float(r[2]) for r in busy)
        us = start.elapsed_time(end) * 1e3 / n
        print(f"round {rnd} {name}: {us:.1f} us a call ({2 * 4096 ** 3 / us / 1e6:.0f} TFLOPS, {n} calls), "
              f"SM clock MHz median {sm[len(sm) // 2]:.0f} (min {sm[0]:.0f}, max {sm[-1]:.0f}), power W median "
              f"{pw[len(pw) // 2]:.0f} (max {pw[-1]:.0f}), reasons {sorted(set(r[4] for r in busy))}, "
              f"temp {busy[-1][3]} C", flush=True)
PY

cat > /tmp/s37/gemm_energy.py <<'PY'
import subprocess
import sys
import time

import torch

from kernels import _matmul_gluon as mg
from kernels import tune_cases
from kernels.matmul import matmul

ROUNDS = int(sys.argv[1])
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096)]
QUERY = "clocks.sm,power.draw"


def variants(a, b, c):
    out = {"cublas": lambda: torch.matmul(a, b, out=c), "g8": lambda: matmul(a, b, out=c)}
    for g in (4, 16, 32):
        out[f"g{g}"] = lambda g=g: mg.matmul_ws(a, b, c, (128, 256, 64, g, 3, 0))
    out["cluster"] = lambda: mg.matmul_ws(a, b, c, cluster=True)
    return out


def sustained(fn, seconds):
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n, t0 = 0, time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        n += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    rows = [r.split(", ") for r in smi.communicate()[0].strip().splitlines()]
    busy = [r for r in rows[len(rows) // 3:] if len(r) == 2]
    clock = sorted(float(r[0]) for r in busy)[len(busy) // 2]
    watts = sorted(float(r[1]) for r in busy)[len(busy) // 2]
    return start.elapsed_time(end) * 1e3 / n, clock, watts


for m, n, k in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = (a.float() @ b.float())
    fns = variants(a, b, c)
    errs = []
    for name, fn in fns.items():
        c.zero_()
        fn()
        errs.append(f"{name} {((c.float() - ref).abs().max() / ref.abs().max()).item():.1e}")
    del ref
    flop = 2 * m * n * k
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{m}x{n}x{k} (errors: {', '.join(errs)})\n  graph-timed in turns: "
          + ", ".join(f"{nm} {ms * 1e3:.1f} us" for nm, ms in t.items()) + "; x cublas: "
          + ", ".join(f"{nm} {t['cublas'] / ms:.4f}" for nm, ms in t.items() if nm != "cublas"), flush=True)
    for rnd in range(2):
        order = list(fns.items()) if rnd == 0 else list(reversed(fns.items()))
        res = {nm: sustained(fn, 1.5) for nm, fn in order}
        print(f"  sustained 1.5 s each, round {rnd}: " + "; ".join(
            f"{nm} {us:.1f} us {flop / us / 1e6:.0f} TFLOPS {mhz:.0f} MHz {w:.0f} W {flop / us / 1e6 / w:.3f} TFLOPS/W"
            for nm, (us, mhz, w) in res.items()), flush=True)
PY

cat > /tmp/s37/gemm_dram.py <<'PY'
import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
FNS = {"cublas": lambda: torch.matmul(a, b, out=c), "g8": lambda: matmul(a, b, out=c),
       "g16": lambda: mg.matmul_ws(a, b, c, (128, 256, 64, 16, 3, 0)),
       "g32": lambda: mg.matmul_ws(a, b, c, (128, 256, 64, 32, 3, 0)),
       "cluster": lambda: mg.matmul_ws(a, b, c, cluster=True)}
for name, fn in FNS.items():  # each twice: the profiled launches in this order
    fn()
    fn()
    torch.cuda.synchronize()
    print("launched", name, flush=True)
PY

cat > /tmp/s37/gemm_pdl.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import tune_cases
from kernels.matmul import matmul
from kernels.tune_ab import patched

ROUNDS = int(sys.argv[1])
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 5120, 3072)]
tiny = torch.zeros(1, device="cuda")
for m, n, k in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ours = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ours": ours, "pdl": patched(ours, mg, "PDL", True)}
    outs = {}
    for name, fn in fns.items():
        c.zero_()
        fn()
        outs[name] = c.clone()
    same = torch.equal(outs["ours"], outs["pdl"])
    err = ((outs["cublas"].float() - outs["ours"].float()).abs().max() / outs["cublas"].float().abs().max()).item()
    after = {f"{nm}+tiny": (lambda fn=fn: (tiny.add_(1), fn())) for nm, fn in fns.items()}
    t = tune_cases.in_turns({**fns, **after, "tiny": lambda: tiny.add_(1)}, ROUNDS)
    print(f"{m}x{n}x{k} (pdl {'bitwise ours' if same else 'DIFFERS from ours'}, ours vs cublas {err:.1e}): "
          + ", ".join(f"{nm} {ms * 1e3:.1f} us" for nm, ms in t.items()) + "; x cublas: "
          + ", ".join(f"{nm} {t['cublas'] / t[nm]:.4f}" for nm in ("ours", "pdl"))
          + "; after a tiny kernel, x cublas's: "
          + ", ".join(f"{nm} {t['cublas+tiny'] / t[nm + '+tiny']:.4f}" for nm in ("ours", "pdl")), flush=True)
PY

cat > /tmp/s37/gemm_steady.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import patched, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096)]



for m, n, k in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ours = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ours": ours,
           "g4": lambda: mg.matmul_ws(a, b, c, (128, 256, 64, 4, 3, 0)),
           "g16": lambda: mg.matmul_ws(a, b, c, (128, 256, 64, 16, 3, 0)),
           "pdl": patched(ours, mg, "PDL", True)}
    times = steady_in_turns(fns, ROUNDS, SECONDS)  # "pdl" captured with the flag set (patched)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    print(f"{m}x{n}x{k}, {ROUNDS} rounds of {SECONDS} s each, us a call median (min-max): "
          + ", ".join(f"{nm} {med[nm]:.1f} ({min(v):.1f}-{max(v):.1f})" for nm, v in times.items())
          + "; x cublas (medians): " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.4f}" for nm in med if nm != "cublas")
          + "; rounds won against cublas: " + ", ".join(
              f"{nm} {sum(x < y for x, y in zip(v, times['cublas']))}/{ROUNDS}" for nm, v in times.items()
              if nm != "cublas"), flush=True)
PY

cat > /tmp/s37/gemm_group.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 5120, 3072), (2048, 2048, 2048)]



print("shipped WS_CONFIG", mg.WS_CONFIG, flush=True)
for m, n, k in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "g8": lambda: mg.matmul_ws(a, b, c, (128, 256, 64, 8, 3, 0)),
           "shipped": lambda: matmul(a, b, out=c)}
    outs = {}
    for name, fn in fns.items():
        c.zero_()
        fn()
        outs[name] = c.clone()
    same = torch.equal(outs["g8"], outs["shipped"])
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    print(f"{m}x{n}x{k} (shipped {'bitwise g8' if same else 'DIFFERS from g8'}), {ROUNDS} rounds of {SECONDS} s, "
          "us a call median (min-max): "
          + ", ".join(f"{nm} {med[nm]:.1f} ({min(v):.1f}-{max(v):.1f})" for nm, v in times.items())
          + "; x cublas (medians): " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.4f}" for nm in med if nm != "cublas")
          + f"; shipped / g8 {med['g8'] / med['shipped']:.4f}, rounds shipped faster than g8 "
          + f"{sum(x < y for x, y in zip(times['shipped'], times['g8']))}/{ROUNDS}", flush=True)
PY

cat > /tmp/s37/gemm_variants.py <<'PY'
import os
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import steady_in_turns

# argv: rounds, seconds a round, variants (cublas, shipped, or a ws config as ws128_256_64_8_4_2)
ROUNDS, SECONDS, NAMES = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(",")
if os.environ.get("S37_BN64"):  # call 15: 128x64 tiles, which check_ws_config does not list
    mg.WS_BLOCK_N = (64, *mg.WS_BLOCK_N)
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 5120, 3072), (2048, 2048, 2048)]
if len(sys.argv) > 4:  # MxNxK,...
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[4].split(",")]



def variant(name, a, b, c):
    if name == "cublas":
        return lambda: torch.matmul(a, b, out=c)
    if name == "shipped":
        return lambda: matmul(a, b, out=c)
    cfg = tuple(int(x) for x in name[2:].split("_"))
    return lambda: mg.matmul_ws(a, b, c, cfg)


print("shipped WS_CONFIG", mg.WS_CONFIG, flush=True)
for m, n, k in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {nm: variant(nm, a, b, c) for nm in NAMES}
    outs = {}
    for name, fn in fns.items():
        c.zero_()
        fn()
        outs[name] = c.clone()
    same = all(torch.equal(o, outs["shipped"]) for nm, o in outs.items() if nm != "cublas")
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    print(f"{m}x{n}x{k} (ours {'bitwise the same' if same else 'NOT bitwise the same'}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): "
          + ", ".join(f"{nm} {med[nm]:.1f} ({min(v):.1f}-{max(v):.1f})" for nm, v in times.items())
          + "; x cublas (medians): " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.4f}" for nm in med if nm != "cublas")
          + "; x shipped: " + ", ".join(
              f"{nm} {med['shipped'] / med[nm]:.4f} (faster in {sum(x < y for x, y in zip(v, times['shipped']))}"
              f"/{ROUNDS})" for nm, v in times.items() if nm not in ("cublas", "shipped")), flush=True)
PY

cat > /tmp/s37/gemm_route.py <<'PY'
import os
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import patched, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [(1024, 1024, 1024), (1536, 1536, 1536), (1024, 2048, 2048), (2048, 2048, 2048), (2048, 3072, 2048),
          (1536, 4096, 4096), (3072, 3072, 3072), (2560, 2560, 2560), (1024, 1024, 4096), (512, 4096, 4096),
          (256, 4096, 4096), (4096, 4096, 4096)]
if os.environ.get("S37_SHAPES"):  # MxNxK,...
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in os.environ["S37_SHAPES"].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    new = lambda: mm.matmul(a, b, out=c)  # noqa: E731
    old = patched(patched(new, mm, "GLUON_MIN_M", 1 << 40), mg, "NARROW_EFFICIENCY", 0.0)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "old": old, "new": new}
    ref = a.float() @ b.float()
    errs = []
    for name, fn in fns.items():
        c.zero_()
        fn()
        errs.append(f"{name} {((c.float() - ref).abs().max() / ref.abs().max()).item():.1e}")
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    route = ("gluon " + str(mg.default_config(m, n, sms))) if mm.gluon_default(m, n, aligned=True) else "as before"
    print(f"{m}x{n}x{k} (new: {route}; errors {', '.join(errs)}): "
          + ", ".join(f"{nm} {med[nm]:.1f} us ({min(v):.1f}-{max(v):.1f})" for nm, v in times.items())
          + f"; x cublas: old {med['cublas'] / med['old']:.3f}, new {med['cublas'] / med['new']:.3f}; new / old "
          + f"{med['old'] / med['new']:.3f} (faster in {sum(x < y for x, y in zip(times['new'], times['old']))}"
          + f"/{ROUNDS})", flush=True)
PY

case $CALL in
  call15)
    S37_BN64=1 timeout 300 python3 /tmp/s37/gemm_variants.py 6 0.25 \
      cublas,shipped,ws128_128_64_8_4_0,ws128_64_64_8_4_0,ws128_64_64_8_6_0 \
      128x4096x4096,256x4096x4096,512x4096x4096,256x14336x4096,128x14336x4096,256x1024x4096,512x1024x4096 \
      2>&1 | tee "${LOG}_gemm_bn64.log"
    ;;
  call14)
    timeout 250 python3 /tmp/s37/gemm_route.py 6 0.25 2>&1 | tee "${LOG}_gemm_route.log"
    S37_SHAPES=128x4096x4096,256x4096x4096,512x4096x4096,768x4096x4096,256x14336x4096,512x1024x4096,200x2048x1024 \
      timeout 150 python3 /tmp/s37/gemm_route.py 6 0.25 2>&1 | tee -a "${LOG}_gemm_route.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call13)
    timeout 300 python3 /tmp/s37/gemm_variants.py 6 0.25 cublas,shipped,ws128_256_64_8_3_0,ws128_128_64_8_4_0 \
      256x4096x4096,512x4096x4096,768x4096x4096,256x14336x4096,512x14336x4096,512x1024x4096,128x4096x4096 \
      2>&1 | tee "${LOG}_gemm_m256.log"
    ;;
  call12)
    S37_SHAPES=128x4096x4096,256x4096x4096,512x4096x4096,768x4096x4096,256x14336x4096,512x1024x4096,200x2048x1024 \
      timeout 200 python3 /tmp/s37/gemm_route.py 6 0.25 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    timeout 250 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_bwd.log"
    ;;
  call11)
    timeout 400 python3 /tmp/s37/gemm_route.py 6 0.25 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call10)
    timeout 400 python3 /tmp/s37/gemm_variants.py 6 0.25 \
      cublas,shipped,ws128_256_64_8_3_0,ws128_128_64_8_4_0,ws128_256_64_8_4_2,ws128_128_64_8_3_2 \
      1024x1024x1024,1024x2048x2048,2048x2048x2048,1024x4096x4096,4096x1024x4096,2048x2048x8192,2048x3072x2048,1536x4096x4096 \
      2>&1 | tee "${LOG}_gemm_small.log"
    ;;
  call9)
    timeout 300 python3 /tmp/s37/gemm_variants.py 10 0.3 cublas,shipped,ws128_256_64_8_4_2,ws128_256_64_8_3_2 2>&1 \
      | tee "${LOG}_gemm_epi.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -4 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    ;;
  call8)
    timeout 240 python3 /tmp/s37/gemm_group.py 10 0.3 2>&1 | tee "${LOG}_gemm_group.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call7)
    timeout 300 python3 /tmp/s37/gemm_steady.py 10 0.3 2>&1 | tee "${LOG}_gemm_steady.log"
    ;;
  call6)
    timeout 300 python3 /tmp/s37/gemm_pdl.py 4 2>&1 | tee "${LOG}_gemm_pdl.log"
    ;;
  call5)
    timeout 300 python3 /tmp/s37/gemm_energy.py 3 2>&1 | tee "${LOG}_gemm_energy.log"
    timeout 200 ncu --clock-control none --kernel-name regex:"matmul_ws|nvjet" \
      --metrics dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum --csv \
      python3 /tmp/s37/gemm_dram.py > /tmp/s37/dram.csv 2> /tmp/s37/dram.err
    echo "ncu rc=$?" | tee "${LOG}_gemm_dram.log"
    grep -E '"(dram|lts|gpu__time)' /tmp/s37/dram.csv | awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' \
      | cut -c1-160 | tee -a "${LOG}_gemm_dram.log"
    tail -3 /tmp/s37/dram.err | tee -a "${LOG}_gemm_dram.log"
    ;;
  call4)
    timeout 420 python3 /tmp/s37/ab_split.py 4 2>&1 | tee "${LOG}_ab_split.log"
    timeout 90 python3 /tmp/s37/gemm_clocks.py 2>&1 | tee "${LOG}_gemm_clocks.log"
    ;;
  call1)
    install_perfci
    suite
    timeout 240 python3 /tmp/s37/cudnn_fp8.py 3 2>&1 | tee "${LOG}_cudnn_fp8.log"
    ;;
  call2)
    install_perfci
    baseline_update "(test_flash_forward and ours and not triton) or test_flash_forward_fp8" fwd
    baseline_update "test_flash_backward and ours" bwd
    ;;
  call3)
    install_perfci
    baseline_update "ours" matmul tests/perf/test_matmul.py
    baseline_update "ours" decode tests/perf/test_decode.py
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
