#!/usr/bin/env bash
# Session-45 device calls (issue 16), prepared in session 44 (nothing run yet): bash kernels/device_s45.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab).
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then the GEMM routing of sessions 38-44 timed there.
# call1: session 44's calls 3-6 found the Triton TMA kernel's 64-row tiles, K split and the partials summed by the
#        second kernel, ahead of the Gluon route's 64x64 tiles at M >= 256 (multiples of 64, no rows past M) with
#        N <= 1024: 64x128 tiles in 4 chunks 1024x256x8192 1.38, 512x512x8192 1.34, 576x256x4096 1.15 (against 2
#        chunks there), 512x512x4096 1.16, 256x1024x8192 1.11, 320x512x4096 1.10 (against 2 chunks), 512x256x8192
#        1.09; behind at M 65-192 and N = 64.  A survey for a rule: M 192-2048 x N 128-1024 x K 4096 / 8192, the
#        route against those tiles (`t64`: 64x64, K steps of 128, 3 stages; `t128`: 64x128, K steps of 64, 4 stages)
#        with K in the most power-of-two chunks whose programs fit one round with at least 8 K steps a chunk
#        (`tma_rows.py`); then call 2 on what it finds.
# call2: the GEMM GPU tests (on whatever rule call 1 leads to).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s45 "$CALL"  # harnesses: the files under /tmp/s45 only
mkdir -p /tmp/s45

cat > /tmp/s45/tma_rows.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`) against the Triton TMA kernel's 64-row tiles (`t64`
64x64 on K steps of 128 at 3 stages, `t128` 64x128 on K steps of 64 at 4 stages), K split as the decode-sized narrow
tiles' rule splits it (matmul_splitk.narrow_chunks: the most power-of-two chunks, up to 8, whose programs fit one
round with at least 8 K steps a chunk, K >= 4096), partials summed by the second kernel; and cuBLAS."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
TILES = {"t64": (64, 128, 4, 3), "t128": (128, 64, 4, 4)}  # BLOCK_N, BLOCK_K, warps, stages
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    cfgs = {}
    for name, (bn, bk, warps, stages) in TILES.items():
        split = sk.narrow_chunks(sk.tma_tiles(m, n, bn), k, bk, sms)  # the narrow tiles' rule (8 chunks, 8 K tiles)
        cfgs[name] = (split, bn, bk, warps, stages, True)
        fns[name] = lambda cfg=cfgs[name]: sk.matmul_splitk_tma(a, b, c, cfg, fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms, True)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, split "
          f"{mg.default_split(m, n, k, cfg[:3], sms)}; {', '.join(f'{nm} {c_}' for nm, c_ in cfgs.items())}; wrong: "
          f"{bad}; errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, "
          f"us a call median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

SHAPES=""
for k in 4096 8192; do
  for m in 192 256 384 512 768 1024 2048; do
    for n in 128 256 512 1024; do
      SHAPES="$SHAPES${SHAPES:+,}${m}x${n}x${k}"
    done
  done
done
case $CALL in
  call1)
    timeout 500 python3 /tmp/s45/tma_rows.py 3 0.1 "$SHAPES" 2>&1 | tee "${LOG}_gemm_tma_rows.log"
    ;;
  call2)
    timeout 330 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider \
      -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
