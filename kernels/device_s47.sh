#!/usr/bin/env bash
# Session-47 device calls (issue 16), prepared in session 46, and calls 1-2 run in session 46 itself with its budget
# left (logs kernels_h200_s47_call{1,2}_*): bash kernels/device_s47.sh CALL (OUT set by the tool).  Every step is
# guarded by `timeout`.
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then kernels/device_s46.sh call2 (session 45's rows rule
# timed there).
# call1: why session 46's A shared across clusters of two CTAs was slower (0.78x unclustered at 96x5120x4096, bitwise
#        right): ncu --set full of one call each of the clustered 64x128 tiles (docs/measurements/
#        kernels_s46_gemm_cluster_a.patch, applied by the call), the same tiles unclustered (the route there) and
#        cuBLAS (nvjet 64x96 tiles in clusters of four sharing A); the L2 requests and sectors, the copy engine's bytes,
#        the CTAs' stall reasons side by side.
# call1 ran in session 46 (H200 GPU-594283e5).
# call2 (written in session 46 and run there): a single 128-row tile row of 65-96 rows read as a 64-row and a 32-row
#        box (matmul_ws_kernel's FIT_M 3; 96 rows of A a K step, not 128; docs/measurements/
#        kernels_s46_gemm_fit_quarter.patch, applied by the call; not kept) against the two half boxes and the route.
# call3 (carry [".whl"]): `perfci run` on a fresh card against its baseline (scripts/device_gate_check.sh env run1;
#        session 46's try ran past a 420 s call limit with its log on the device: now under OUT).  Give it the whole
#        600 s call and nothing else.
# call4: the Gluon GEMM's 64x32 tiles (one consumer; K steps of 64 or 128; docs/measurements/kernels_s46_gemm_n32.patch,
#        built offline only) where the route runs the decode-sized GEMMs' Triton kernel on 64x32 tiles (M 49-64:
#        64x4096x4096 0.92-0.95x cuBLAS hot): the Gluon kernel's 64-row tiles streamed 97-105 GB/s a CTA in session
#        46 (64x64, 64x128), the Triton kernel's 64x32 tiles 86 GB/s (768 KB a CTA in 8.9 us); then the
#        patch's bitwise GPU tests.
# Run in session 47 (H200s): call4 then call3 on GPU-f0e4e80a (call3 failed a clean build: kernels/NOTES.md session 47),
# then calls 5-8, written during the session, on GPU-66983945 (call 7: the GEMM GPU tests with SWAP_MAX_M 56, by sed in
# the device command).
# call5 (written and run in session 47): the unswapped 64-row TMA tiles at M 49-63 read A through the two overlapping
#        windows of its first and last 32 rows (matmul_splitk.A_WINDOWS_UNSWAPPED) instead of one 64-row box
#        zero-filled past M (session 47 call 4: 49x4096x4096 13.2 us against 8.9 at M = 64, 0.76x cuBLAS); then the
#        GEMM GPU tests with it on.  (Not kept: the flag lives in docs/measurements/kernels_s47_gemm_win_unswapped.patch,
#        which the call now applies first.)
# call6 (written and run in session 47): the transposed tiles (matmul_splitk.swapped_tma_config, the route's at
#        M <= 48: A through the two windows there) at M 49-56, against the route's unswapped tiles and cuBLAS.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s47 "$CALL"  # harnesses: the files under /tmp/s47 only
mkdir -p /tmp/s47

cat > /tmp/s47/ca_once.py <<'PY'
"""argv: who (ca / u) MxNxK.  One call of the Gluon GEMM's 64x128 tiles (8 stages) in clusters of two CTAs sharing A
(`ca`, the session-46 patch) or unclustered (`u`), warmed up by 20 calls, then once inside the NVTX range "prof"."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.tune_ab import gemm_operands, must_run

who, shape = sys.argv[1], sys.argv[2]
m, n, k = (int(x) for x in shape.split("x"))
a, b, c, _ = gemm_operands(m, n, k)


def run():
    must_run(mg.matmul_ws(a, b, c, (64, 128, 64, 8, 8, 0), split=1, cluster_a=who == "ca"), who,
             lambda: "; ".join(mg._broken_cluster))


for _ in range(20):
    run()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
run()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY

cat > /tmp/s47/quarter.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The Gluon GEMM's 128-row tiles over a single tile row of 65-96 rows read
as a 64-row and a 32-row box (FIT_M 3, `_matmul_gluon.FIT_QUARTER`: `q`) against the two 64-row half boxes (FIT_M 2:
`h`), 128x64 tiles (8 stages: `q64`, `h64`) and 128x128 (4 stages: `q128`, `h128`), the route (`ship`) and cuBLAS;
q outputs bitwise h's?"""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, patched, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CONFIGS = {"64": (128, 64, 64, 8, 8, 0), "128": (128, 128, 64, 8, 4, 0)}
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in CONFIGS.items():
        run = lambda cfg=cfg, name=name: must_run(mg.matmul_ws(a, b, c, cfg, split=1), name)  # noqa: E731
        fns[f"h{name}"] = run
        fns[f"q{name}"] = patched(run, mg, "FIT_QUARTER", True)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    same = [nm for nm in CONFIGS if torch.equal(outs[f"h{nm}"], outs[f"q{nm}"])]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (wrong: {bad}; q bitwise h: {same}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}; x cublas: {ratios(times, 'cublas')}",
          flush=True)
PY

cat > /tmp/s47/n32.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The Gluon GEMM's 64x32 tiles (one consumer warpgroup; session 46's
experiment patch: `g32k128sS` K steps of 128 at S stages, `g32k64sS` of 64) and its 64x64 tiles on K steps of 128
(`g64`, WS_HALF_CONFIG), unsplit, against the route (`ship`: the decode-sized GEMMs' Triton TMA kernel at M <= 64) and
cuBLAS, B resident in L2."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import checked_variants, gemm_operands, gemm_shapes, must_run
from kernels.tune_ab import ratios, steady_in_turns, timings_line

ROUNDS, SECONDS, SHAPES = int(sys.argv[1]), float(sys.argv[2]), gemm_shapes(sys.argv[3])
CONFIGS = {"g32k128s6": (64, 32, 128, 8, 6, 0), "g32k128s8": (64, 32, 128, 8, 8, 0),
           "g32k64s8": (64, 32, 64, 8, 8, 0), "g32k64s12": (64, 32, 64, 8, 12, 0), "g64": mg.WS_HALF_CONFIG}
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in CONFIGS.items():
        fns[name] = lambda cfg=cfg, name=name: must_run(mg.matmul_ws(a, b, c, cfg, split=1), name)
    _, _, ok = checked_variants(fns, c, ref)
    bad = [nm for nm in fns if nm not in ok]
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (wrong: {bad}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max): "
          f"{timings_line(times)}; x ship: {ratios(times, 'ship')}; x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s47/win.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route's TMA config unswapped at M 49-63 with A through one 64-row
box (`box`) or the two windows (`win`, matmul_splitk.A_WINDOWS_UNSWAPPED), and cuBLAS; win bitwise box?"""
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import checked_variants, gemm_operands, gemm_shapes, patched, ratios, steady_in_turns
from kernels.tune_ab import timings_line

ROUNDS, SECONDS, SHAPES = int(sys.argv[1]), float(sys.argv[2]), gemm_shapes(sys.argv[3])
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    cfg = sk.default_tma_config(m, n, k, mm.num_sms(a.device))
    box = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "box": box,
           "win": patched(box, sk, "A_WINDOWS_UNSWAPPED", True)}
    outs, _, ok = checked_variants(fns, c, ref)
    same = torch.equal(outs["box"], outs["win"]) if "box" in outs and "win" in outs else None
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} cfg {cfg} (wrong: {[nm for nm in fns if nm not in ok]}; win bitwise box: {same}), "
          f"{ROUNDS} rounds of {SECONDS} s, us a call median (min-max): {timings_line(times)}; "
          f"x box: {ratios(times, 'box')}; x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s47/swap.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  At M 49-56: the route's config (`route`: unswapped 64-row tiles) against
the transposed tiles the route takes up to M = 48 (`swap`: matmul_splitk.swapped_tma_config) and cuBLAS."""
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import checked_variants, gemm_operands, gemm_shapes, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS, SHAPES = int(sys.argv[1]), float(sys.argv[2]), gemm_shapes(sys.argv[3])
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    sms = mm.num_sms(a.device)
    cfgs = {"route": sk.default_tma_config(m, n, k, sms), "swap": sk.swapped_tma_config(m, n, k, sms)}
    fns = {"cublas": lambda: torch.matmul(a, b, out=c)}
    for name, cfg in cfgs.items():
        fns[name] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg)
    _, _, ok = checked_variants(fns, c, ref)
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} {cfgs} (wrong: {[nm for nm in fns if nm not in ok]}), {ROUNDS} rounds of {SECONDS} s, us a "
          f"call median (min-max): {timings_line(times)}; x route: {ratios(times, 'route')}; x cublas: "
          f"{ratios(times, 'cublas')}", flush=True)
PY

case $CALL in
  call1)
    patch -p1 < docs/measurements/kernels_s46_gemm_cluster_a.patch || exit 3
    for who in ca u; do ncu_prof ${who}_96x5120x4096 python3 /tmp/s47/ca_once.py $who 96x5120x4096; done 2>&1 \
      | tee "${LOG}_ncu.log"
    gemm_ncu cublas 96x5120x4096 2>&1 | tee -a "${LOG}_ncu.log"
    tar -C /tmp/ncu -czf "${LOG}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call2)  # (written and run in session 46) FIT_M 3 against FIT_M 2 and the route at M 65-96, then its GPU tests
    patch -p1 < docs/measurements/kernels_s46_gemm_fit_quarter.patch || exit 3
    timeout 300 python3 /tmp/s47/quarter.py 3 0.1 "96x5120x4096,65x5120x4096,80x6144x4096,96x6144x4096,\
96x7168x4096,96x8192x4096,72x14336x4096,96x4096x4096,80x4096x4096,96x14336x4096,96x4096x14336" 2>&1 \
      | tee "${LOG}_gemm_quarter.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 -k "fit or quarter" 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_fit.log"
    ;;
  call3)  # carry [".whl"]: `perfci run` (make bench's job) on a fresh card against its baseline, the log into OUT
    timeout 590 bash scripts/device_gate_check.sh "$OUT" env run1
    ;;
  call4)  # the Gluon GEMM's 64x32 tiles (docs/measurements/kernels_s46_gemm_n32.patch, applied here) at M 49-64
    patch -p1 < docs/measurements/kernels_s46_gemm_n32.patch || exit 3
    timeout 300 python3 /tmp/s47/n32.py 3 0.1 "64x4096x4096,64x3072x4096,56x4096x4096,64x6144x4096,64x14336x4096,\
64x4096x14336,49x4096x4096,64x2048x4096,64x5120x4096,60x4096x8192" 2>&1 | tee "${LOG}_gemm_n32.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 -k "n32" 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_n32.log"
    ;;
  call5)  # unswapped windows at M 49-63, then the GEMM GPU tests with them on
    patch -p1 < docs/measurements/kernels_s47_gemm_win_unswapped.patch || exit 3
    timeout 200 python3 /tmp/s47/win.py 3 0.1 "49x4096x4096,52x4096x4096,56x4096x4096,60x4096x4096,63x4096x4096,\
64x4096x4096,49x4096x14336,56x4096x14336,49x14336x4096,56x14336x4096,49x6144x4096,49x2048x4096,56x1024x4096,\
49x1024x14336,60x4096x8192" 2>&1 | tee "${LOG}_gemm_win.log"
    sed -i 's/^A_WINDOWS_UNSWAPPED = False/A_WINDOWS_UNSWAPPED = True/' kernels/matmul_splitk.py
    grep -n "^A_WINDOWS_UNSWAPPED" kernels/matmul_splitk.py
    timeout 240 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_win.log"
    ;;
  call6)  # the transposed tiles at M 49-56
    timeout 240 python3 /tmp/s47/swap.py 3 0.1 "49x4096x4096,50x4096x4096,52x4096x4096,54x4096x4096,55x4096x4096,\
56x4096x4096,49x4096x14336,52x4096x14336,49x6144x4096,52x6144x4096,49x2048x4096,49x1024x14336,49x14336x4096,\
52x5120x4096,60x4096x4096" 2>&1 | tee "${LOG}_gemm_swap.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
