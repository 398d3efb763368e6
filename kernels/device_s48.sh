#!/usr/bin/env bash
# Session-48 device calls (issue 16), calls 1-2 prepared in session 47, 3-5 written in session 48 (1, 3-5 run on H200s,
# kernels/NOTES.md session 48; call 2 waits for an H100): bash kernels/device_s48.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab).
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then kernels/device_s46.sh call2 (session 45's rows rule
# timed there), then call2 below (session 47's SWAP_MAX_M 55 on an H100, where session 15 had 56 rows unswapped ahead).
# call1: the decode-sized GEMMs' unswapped 64-row tiles at M 57-63 (0.82-0.92x cuBLAS at N = K = 4096 in session 47,
#        against 0.96-0.98 at 64 rows: A's 64-row box zero-filled for 1-7 rows) with A by masked pointer loads (the
#        config's a_ptr, `ptr`) and through the two windows forced there (docs/measurements/
#        kernels_s47_gemm_win_unswapped.patch, applied by the call, with A_WINDOWS_MIN_ZERO_ROWS 0: `win`), against
#        the box (`box`, the route) and cuBLAS.
# call2: session 47's swap.py (the transposed tiles against the route's unswapped ones, M 49-60) on an H100.
# call3: K split for the unswapped tiles at M 57-64 (32- and 64-column tiles, 2-8 chunks) and the transposed tiles split.
# call4: every program's K walk rotated by its column tile (needs docs/measurements/kernels_s48_gemm_k_rotate.patch
#        applied: matmul_splitk.K_ROTATE).
# call5: that build's K loop (K_ROTATE 0) against HEAD's, in one process (needs the patch and kernels/_s48_old_splitk.py,
#        `git show 0430292:kernels/matmul_splitk.py`).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
bash kernels/device_s47.sh harnesses > /dev/null || exit 3  # session 47's swap.py (call 2)
[ "$CALL" = harnesses ] || device_env s48 "$CALL"  # harnesses: the files under /tmp/s48 only
mkdir -p /tmp/s48

cat > /tmp/s48/tail_rows.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route's unswapped TMA config at M 57-63: A through one 64-row box
(`box`), by masked pointer loads (`ptr`), through the two windows (`win`: the session-47 patch's flag, the windows'
minimum of zero-filled rows 0), and cuBLAS; ptr / win bitwise box?"""
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
    box = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "box": box,
           "ptr": lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, (*cfg[:6], False, True)),
           "win": patched(patched(box, sk, "A_WINDOWS_UNSWAPPED", True), sk, "A_WINDOWS_MIN_ZERO_ROWS", 0)}
    outs, _, ok = checked_variants(fns, c, ref)
    same = [nm for nm in ("ptr", "win") if nm in outs and torch.equal(outs["box"], outs[nm])]
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} cfg {cfg} (wrong: {[nm for nm in fns if nm not in ok]}; bitwise box: {same}), {ROUNDS} rounds "
          f"of {SECONDS} s, us a call median (min-max): {timings_line(times)}; x box: {ratios(times, 'box')}; "
          f"x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s48/split_tail.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The decode-sized GEMMs at M 57-64 (unswapped 64x32 tiles, one round at
N = 4096: 0.86-0.93x cuBLAS in call 1) with K split: the 32- and 64-column tiles in 2-8 chunks summed by the second
kernel (`nBsS`) or each tile's last program (`nBsSf`), and the transposed tiles (`swap`, swapped_tma_config) in 1-4
chunks (`swapS`), against the route and cuBLAS."""
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import checked_variants, gemm_operands, gemm_shapes, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS, SHAPES = int(sys.argv[1]), float(sys.argv[2]), gemm_shapes(sys.argv[3])
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    sms = mm.num_sms(a.device)
    route = sk.default_tma_config(m, n, k, sms)
    sw = sk.swapped_tma_config(m, n, k, sms)
    cfgs = {"route": (route, None)}
    for s in (2, 4, 8):
        cfgs[f"n32s{s}"] = ((s, 32, 128, 4, 6, True), False)
        cfgs[f"n64s{s}"] = ((s, 64, 128, 4, 4, True), False)
    cfgs["n32s4f"] = ((4, 32, 128, 4, 6, True), True)
    cfgs["n64s2f"] = ((2, 64, 128, 4, 4, True), True)
    cfgs["swap"] = (sw, None)
    for s in (2, 4):
        cfgs[f"swap{s}"] = ((s, *sw[1:4], sk.SWAP_SPLIT_STAGES, *sw[5:]), False)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c)}
    for name, (cfg, fused) in cfgs.items():
        fns[name] = lambda cfg=cfg, fused=fused: sk.matmul_splitk_tma(a, b, c, cfg, fused=fused)
    _, _, ok = checked_variants(fns, c, ref)
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} route {route} swap {sw} (wrong: {[nm for nm in fns if nm not in ok]}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): {timings_line(times)}; x route: {ratios(times, 'route')}; "
          f"x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s48/k_rot.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The TMA route's programs walking their K tiles from a tile rotated by
their column tile (matmul_splitk.K_ROTATE r: `rotR`; every program from the first: `route`), and the transposed tiles
(`swap`) with and without it, against cuBLAS: do the programs reading A's tiles in step cost the unsplit decode-sized
GEMMs their L2 bandwidth?"""
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import checked_variants, gemm_operands, gemm_shapes, patched, ratios, steady_in_turns
from kernels.tune_ab import timings_line

ROUNDS, SECONDS, SHAPES = int(sys.argv[1]), float(sys.argv[2]), gemm_shapes(sys.argv[3])
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    sms = mm.num_sms(a.device)
    route, sw = sk.default_tma_config(m, n, k, sms), sk.swapped_tma_config(m, n, k, sms)
    run = lambda cfg=route: sk.matmul_splitk_tma(a, b, c, cfg)
    swap = lambda cfg=sw: sk.matmul_splitk_tma(a, b, c, cfg)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "route": run}
    for r in (1, 3, 8):
        fns[f"rot{r}"] = patched(run, sk, "K_ROTATE", r)
    if sw != route:
        fns["swap"] = swap
        fns["swaprot1"] = patched(swap, sk, "K_ROTATE", 1)
    _, _, ok = checked_variants(fns, c, ref)
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} route {route} swap {sw} (wrong: {[nm for nm in fns if nm not in ok]}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): {timings_line(times)}; x route: {ratios(times, 'route')}; "
          f"x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s48/loop_form.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route's config and the transposed tiles (swapped_tma_config) through
the kernel with its K loop as `for i in range(0, n_kt)` and the K_ROT branch (kernels.matmul_splitk, K_ROTATE 0:
`route`, `swap`) and as shipped before (`for kt in range(kt_lo, kt_hi)`: kernels/_s48_old_splitk.py, HEAD's file,
`oroute`, `oswap`), in one process on one card, against cuBLAS."""
import sys

import torch

from kernels import _s48_old_splitk as old
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import checked_variants, gemm_operands, gemm_shapes, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS, SHAPES = int(sys.argv[1]), float(sys.argv[2]), gemm_shapes(sys.argv[3])
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    sms = mm.num_sms(a.device)
    route, sw = sk.default_tma_config(m, n, k, sms), sk.swapped_tma_config(m, n, k, sms)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c),
           "route": lambda: sk.matmul_splitk_tma(a, b, c, route), "oroute": lambda: old.matmul_splitk_tma(a, b, c, route),
           "swap": lambda: sk.matmul_splitk_tma(a, b, c, sw), "oswap": lambda: old.matmul_splitk_tma(a, b, c, sw)}
    _, _, ok = checked_variants(fns, c, ref)
    times = steady_in_turns(ok, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} route {route} swap {sw} (wrong: {[nm for nm in fns if nm not in ok]}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): {timings_line(times)}; x oroute: {ratios(times, 'oroute')}; "
          f"x cublas: {ratios(times, 'cublas')}", flush=True)
PY

case $CALL in
  call1)  # A by pointer loads / through windows for the unswapped tiles at M 57-63
    patch -p1 < docs/measurements/kernels_s47_gemm_win_unswapped.patch || exit 3
    timeout 300 python3 /tmp/s48/tail_rows.py 3 0.1 "57x4096x4096,58x4096x4096,60x4096x4096,63x4096x4096,\
64x4096x4096,60x4096x14336,63x6144x4096,60x5120x4096,60x2048x4096,60x14336x4096,58x3072x4096" 2>&1 \
      | tee "${LOG}_gemm_tail_rows.log"
    ;;
  call2)  # session 47's transposed tiles against the unswapped ones at M 49-60, on an H100
    timeout 300 python3 /tmp/s47/swap.py 3 0.1 "49x4096x4096,52x4096x4096,55x4096x4096,56x4096x4096,57x4096x4096,\
60x4096x4096,49x4096x14336,52x6144x4096,52x5120x4096,49x2048x4096,49x14336x4096" 2>&1 | tee "${LOG}_gemm_swap.log"
    ;;
  call3)  # K split for the unswapped tiles at M 57-64, and the transposed tiles split
    timeout 400 python3 /tmp/s48/split_tail.py 3 0.1 "57x4096x4096,60x4096x4096,63x4096x4096,64x4096x4096,\
52x5120x4096,60x5120x4096,60x3072x4096,60x4096x14336" 2>&1 | tee "${LOG}_gemm_split_tail.log"
    ;;
  call4)  # K order rotated by column tile (matmul_splitk.K_ROTATE)
    timeout 400 python3 /tmp/s48/k_rot.py 3 0.1 "57x4096x4096,60x4096x4096,63x4096x4096,64x4096x4096,52x5120x4096,\
60x5120x4096,32x4096x4096,1x4096x4096,16x14336x4096,60x4096x14336,48x4096x4096,64x1024x4096" 2>&1 \
      | tee "${LOG}_gemm_k_rot.log"
    ;;
  call5)  # the K loop's two forms (session 48's K_ROT build at 0, HEAD's), route and transposed tiles, M 49-64
    [ -f kernels/_s48_old_splitk.py ] || { echo "kernels/_s48_old_splitk.py (git show 0430292:kernels/matmul_splitk.py) missing"; exit 3; }
    timeout 400 python3 /tmp/s48/loop_form.py 3 0.1 "56x4096x4096,57x4096x4096,58x4096x4096,60x4096x4096,\
62x4096x4096,63x4096x4096,64x4096x4096,60x5120x4096,60x4096x14336,52x4096x4096,49x4096x4096,32x4096x4096,\
60x2048x4096,60x14336x4096" 2>&1 | tee "${LOG}_gemm_loop_form.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
