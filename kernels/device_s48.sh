#!/usr/bin/env bash
# Session-48 device calls (issue 16), prepared in session 47 (nothing run yet): bash kernels/device_s48.sh CALL (OUT set
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
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
