#!/usr/bin/env bash
# Session-40 device calls (issue 16), H200s only again: bash kernels/device_s40.sh CALL (OUT set by the tool).  Every
# step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns: a graph of 20
# calls replayed back to back for a set time, the variants in turns, medians).
# (Since the session's review the harnesses' lines go through kernels/tune_ab's timings_line / ratios / must_run and
# call 6's profiles through device_lib.sh's gemm_ncu: the same sums and prints as the inline code that produced the
# logs.  Call 1's clustered variants need the diff docs/measurements/kernels_s40_cluster64.patch: the shipped host
# refuses clusters with a config, and the kernel lost the B halves by K rows.)
# call1: 64-row tiles for the Gluon GEMM (matmul_ws_kernel with one consumer warpgroup: c_desc's boxes of BLOCK_M
#        rows), cuBLAS's structure at 65-128 rows (session 38 call 4 named nvjet 64x64 tiles, 13 stages, and at 127
#        rows clusters of two along M: 9.8 us against 14.8 at 112 rows with its clusters along N): `c64_12` / `c64_8`
#        64x64 tiles in clusters of two CTAs (the two tile rows of one tile column; each CTA copies half of B's K rows,
#        multicast to both) on 12 / 8 stages, `u64_12` the same unclustered, `c64x128` 64x128 tiles clustered (B's
#        halves by columns) on 8 stages; against the shipped route and cuBLAS; outputs bitwise against the shipped
#        route's where that is the Gluon kernel (the same K order an element), errors against fp32 everywhere.
# call2: the 64x64 tiles as a default (`_matmul_gluon.WS_HALF_CONFIG`, unclustered, 12 stages, where M <= HALF_MAX_M
#        and its tiles fill HALF_MIN_FILL of the SMs to one round) against the routing before it (HALF_MAX_M 0), at
#        the rule's edges (N 1536-8192 at 96 rows, K 1024-8192) and inside it, with `u64_8` (8 stages) and `u64x128`
#        (64x128 tiles, 8 stages) beside; outputs bitwise against the routing before where that is unsplit; then the
#        Gluon GEMM's GPU tests (the 64-row tiles added: bitwise the 128x64 tiles', B by TMA and through cp.async).
#        (Run with the rule's first form: 12 stages, HALF_MIN_FILL 0.5.)
# call3: the rule revised from call 2 (8 stages, HALF_MIN_FILL 0.3; an explicit split takes tiles that split) against
#        the routing before it, 6 and 12 stages beside; then the GEMM GPU tests (test_matmul.py, test_matmul_ws.py).
# call4: K split for the 64x64 tiles (the kernel's SPLIT with one consumer) where they fill under 0.3 of the SMs (N
#        512-2048 at 65-128 rows, K 1024-8192): 2 / 4 / 8 chunks (`h2`..`h8`, EPI 1) and unsplit (`h1`) against the
#        shipped route (128x64 tiles, 4 chunks there) and cuBLAS, errors against fp32; then the split and 64-row GPU
#        tests.
# call5: the session's routing (64x64 tiles wherever M <= 128 and they fit one round, K split by default_split's
#        64-row rule from call 4) against session 39's (HALF_MAX_M 0); then the GEMM GPU tests.
# call5b: the GEMM GPU tests after call 5's two failures (64x128 tiles split by default_split's 64-row rule, so not
#        bitwise the unsplit 128x64 tiles: the rule now splits 64-column tiles only, the test asks for unsplit tiles).
# call6: ncu --set full of 104x4096x4096 and 127x4096x4096, ours as shipped (64x64 tiles, 11.6 us at every M of 65-128)
#        and cuBLAS (9.6-10.1 us there; 13.4-15.0 at 80 / 96 / 112): where do cuBLAS's 15-20 % come from?
# call7: 64x128 tiles (`WS_HALF_WIDE_CONFIG`, 8 stages, unsplit) at 65-128 rows where the 64x64 tiles take more than a
#        round and those fit one (N 4288-8448), against call 5's routing; then the Gluon GEMM's GPU tests.
# call8: after the review (consumer_rows, tune_ab's must_run / timings_line / ratios / gemm-once, device_lib's
#        gemm_ncu): the Gluon GEMM's GPU tests, the route harness at two shapes (2 short rounds: a run, not a timing),
#        gemm_ncu of one GEMM.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s40_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s40

cat > /tmp/s40/gemm_half.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
VARIANTS = {  # name: (config, cluster)
    "c64_12": ((64, 64, 64, 8, 12, 0), True), "c64_8": ((64, 64, 64, 8, 8, 0), True),
    "u64_12": ((64, 64, 64, 8, 12, 0), False), "c64x128": ((64, 128, 64, 8, 8, 0), True)}
WANT = sys.argv[4].split(",") if len(sys.argv) > 4 else list(VARIANTS)
sms = torch.cuda.get_device_properties(0).multi_processor_count

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "shipped": lambda: matmul(a, b, out=c)}
    for nm in WANT:
        cfg, cl = VARIANTS[nm]
        fns[nm] = lambda cfg=cfg, cl=cl: must_run(mg.matmul_ws(a, b, c, cfg, cluster=cl), f"{cfg} cluster={cl}",
                                                  lambda: mg.status(cluster=cl))
    outs, errs = outputs_and_errors(fns, c, ref)
    gluon = mm.gluon_default(m, n, aligned=True)
    same = {nm: torch.equal(outs[nm], outs["shipped"]) for nm in WANT}
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms)
    route = f"gluon {cfg[0]}x{cfg[1]} split {mg.default_split(m, n, k, cfg, sms)}" if gluon else "triton"
    print(f"{m}x{n}x{k} (shipped: {route}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) "
          f"[max err / max |ref|]: {timings_line(times, errs)}; x cublas: {ratios(times, 'cublas')}; x shipped: "
          f"{ratios(times, 'shipped', ['cublas'])}; bitwise shipped's: "
          + ", ".join(f"{nm} {s}" for nm, s in same.items()), flush=True)
PY

cat > /tmp/s40/gemm_half_route.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import (faster_in, gemm_operands, must_run, outputs_and_errors, patched, ratios, steady_in_turns,
                             timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CFGS = {"u64_6": (64, 64, 64, 8, 6, 0), "u64_8": (64, 64, 64, 8, 8, 0), "u64_12": (64, 64, 64, 8, 12, 0),
        "u64x128": (64, 128, 64, 8, 8, 0)}
WANT = [x for x in sys.argv[4].split(",") if x] if len(sys.argv) > 4 else ["u64_8", "u64x128"]  # configs beside
sms = torch.cuda.get_device_properties(0).multi_processor_count

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new, "before": patched(new, mg, "HALF_MAX_M", 0)}
    for nm in WANT:
        fns[nm] = lambda nm=nm: must_run(mg.matmul_ws(a, b, c, CFGS[nm]), nm, mg.status)
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    gluon = mm.gluon_default(m, n, aligned=True)
    cfg = mg.default_config(m, n, sms)
    old = patched(lambda: mg.default_config(m, n, sms), mg, "HALF_MAX_M", 0)()
    split, new_split = mg.default_split(m, n, k, old, sms), mg.default_split(m, n, k, cfg, sms)
    route = (f"gluon; new: {cfg[0]}x{cfg[1]} split {new_split}, before: {old[0]}x{old[1]} split {split}" if gluon
             else "triton")
    print(f"{m}x{n}x{k} ({route}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          f"{timings_line(times, errs)}; x cublas: {ratios(times, 'cublas')}; x before: "
          f"{ratios(times, 'before', ['cublas'])}"
          + f"; new faster in {faster_in(times, 'new', 'before')}"
          + ("; bitwise before's: " + str(torch.equal(outs["new"], outs["before"])) if split == new_split == 1
             else ""),
          flush=True)
PY

cat > /tmp/s40/gemm_half_split.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
SPLITS = [int(x) for x in sys.argv[4].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "shipped": lambda: matmul(a, b, out=c)}
    for sp in SPLITS:
        fns[f"h{sp}"] = lambda sp=sp: must_run(mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG, split=sp), f"h{sp}",
                                               mg.status)
    _, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms)
    tiles = -(-m // 64) * -(-n // 64)
    print(f"{m}x{n}x{k} (shipped: {cfg[0]}x{cfg[1]} split {mg.default_split(m, n, k, cfg, sms)}; {tiles} 64x64 tiles), "
          f"{ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          f"{timings_line(times, errs)}; x cublas: {ratios(times, 'cublas')}; x shipped: "
          f"{ratios(times, 'shipped', ['cublas'])}", flush=True)
PY

cat > /tmp/s40/gemm_half_wide.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import (faster_in, gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns,
                             timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
default_config = mg.default_config


def call5_config(m, n, sms, b_tma=True):  # call 5's rule: the 64x64 tiles in one round, else the 128-row tiles
    if b_tma and m <= mg.HALF_MAX_M and -(-m // 64) * -(-n // 64) <= sms:
        return mg.WS_HALF_CONFIG
    return patched(lambda: default_config(m, n, sms, b_tma), mg, "HALF_MAX_M", 0)()


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new,
           "before": patched(new, mg, "default_config", call5_config)}
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg, old = default_config(m, n, sms), call5_config(m, n, sms)
    print(f"{m}x{n}x{k} (new: {cfg[0]}x{cfg[1]}, before: {old[0]}x{old[1]} split "
          f"{mg.default_split(m, n, k, old, sms)}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) "
          f"[max err / max |ref|]: {timings_line(times, errs)}; x cublas: {ratios(times, 'cublas')}"
          + f"; new x before {statistics.median(times['before']) / statistics.median(times['new']):.3f} (faster in "
          + f"{faster_in(times, 'new', 'before')}); bitwise before's: "
          + str(torch.equal(outs['new'], outs['before'])), flush=True)
PY

case "$CALL" in
  call1)
    timeout 420 python3 /tmp/s40/gemm_half.py 5 0.2 \
      65x4096x4096,80x4096x4096,96x4096x4096,104x4096x4096,112x4096x4096,127x4096x4096,128x4096x4096,48x4096x4096,64x4096x4096,100x1024x4096,96x2048x4096,128x4096x1024,96x14336x4096,192x4096x4096,256x4096x4096 \
      2>&1 | tee "${LOG}_gemm_half.log"
    ;;
  call2)
    timeout 200 python3 /tmp/s40/gemm_half_route.py 5 0.2 \
      96x1536x4096,96x2048x4096,96x2560x4096,96x3072x4096,96x4096x4096,96x4224x4096,96x4352x4096,96x8192x4096,65x3072x4096,128x2560x4096,127x4096x4096,104x4096x4096,96x4096x1024,96x4096x2048,96x4096x8192,100x4096x4096,64x8192x4096 \
      2>&1 | tee "${LOG}_gemm_half_route.log"
    timeout 330 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -15 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    ;;
  call3)
    timeout 220 python3 /tmp/s40/gemm_half_route.py 5 0.2 \
      65x4096x4096,80x4096x4096,96x4096x4096,104x4096x4096,112x4096x4096,127x4096x4096,128x4096x4096,96x1536x4096,96x2048x4096,100x1024x4096,128x4096x1024,96x4096x8192,80x3072x4096,128x11008x4096 \
      u64_6,u64_12 2>&1 | tee "${LOG}_gemm_half_route.log"
    timeout 340 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call4)
    timeout 240 python3 /tmp/s40/gemm_half_split.py 5 0.2 \
      100x1024x4096,65x1024x4096,128x1024x4096,96x1536x4096,96x2048x4096,128x2048x4096,80x1024x8192,128x1024x8192,96x512x4096,100x1024x2048,96x4096x4096,128x4096x1024 \
      1,2,4,8 2>&1 | tee "${LOG}_gemm_half_split.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "split_k or half_tiles" 2>&1 | tail -15 | tee "${LOG}_gpu_tests_split.log"
    ;;
  call5)
    timeout 220 python3 /tmp/s40/gemm_half_route.py 5 0.2 \
      65x4096x4096,80x4096x4096,104x4096x4096,127x4096x4096,128x4096x4096,65x1024x4096,100x1024x4096,96x512x4096,96x1536x4096,96x2048x4096,128x2048x4096,80x1024x8192,100x1024x2048,128x4096x1024,96x4096x8192,96x14336x4096 \
      "" 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 340 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call5b)
    timeout 340 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call6)
    for c in "ours 104x4096x4096" "cublas 104x4096x4096" "ours 127x4096x4096" "cublas 127x4096x4096"; do
      gemm_ncu $c
    done 2>&1 | tee "${LOG}_ncu.log"
    tar -C /tmp/ncu -czf "${LOG}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call7)
    timeout 200 python3 /tmp/s40/gemm_half_wide.py 5 0.2 \
      96x4352x4096,96x5120x4096,96x6144x4096,96x7168x4096,96x8192x4096,128x8192x4096,65x8192x4096,80x8448x4096,96x8192x1024,128x8192x8192,96x6144x8192 \
      2>&1 | tee "${LOG}_gemm_half_wide.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -15 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    ;;
  call8)
    timeout 150 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -5 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    timeout 40 python3 /tmp/s40/gemm_half_route.py 2 0.05 104x4096x4096,96x1536x4096 u64_8 2>&1 \
      | tee "${LOG}_gemm_half_route.log"
    gemm_ncu ours 104x4096x4096 2>&1 | head -8 | tee "${LOG}_ncu.log"
    ;;
  *)
    echo "unknown call $CALL" >&2
    exit 2
    ;;
esac
