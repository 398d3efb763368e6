#!/usr/bin/env bash
# Session-46 device calls (issue 16), prepared in session 45 (nothing run yet): bash kernels/device_s46.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab).
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then session 45's rows rule timed there (call 2 below).
# call1: the full GEMM GPU tests on session 45's last commit (ROWS_CONFIGS at 5 / 6 stages: session 45 ran only the
#        rows route's own tests on them, call 8), then the rows tiles' rings deeper still (`rows_stages_sweep.py`: 64x64
#        tiles at 4-6 stages, 64x128 at 5-8) where the rule's tiles trailed cuBLAS (320x768x14336 0.87x,
#        448x192x14336 0.92, 512x512x16384 0.94-1.00) and at shapes of each rule case.
# call2: session 45's rows rule against the Gluon route (gluon=True) and cuBLAS at session 45 call 8's shapes
#        (`kernels/device_s45.sh` harnesses' rows_stages.py): on an H100 if one is lent, else on another H200 card.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
bash kernels/device_s45.sh harnesses > /dev/null || exit 3  # session 45's rows_stages.py (call 2)
[ "$CALL" = harnesses ] || device_env s46 "$CALL"  # harnesses: the files under /tmp/s46 only
mkdir -p /tmp/s46

cat > /tmp/s46/rows_stages_sweep.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`: matmul_rows.rows_split_config's config) against the
same tiles and chunks at other ring depths (`sN`: N stages; 64x64 tiles 4-6, 64x128 tiles 5-8: up to 192 KB of
shared memory) and cuBLAS."""
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_rows as mr
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    rule = mr.rows_split_config(m, n, k, sms)
    depths = range(4, 7) if rule[1] == 64 else range(5, 9)
    cfgs = {f"s{st}": (*rule[:4], st, *rule[5:]) for st in depths if st != rule[4]}
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in cfgs.items():
        fns[name] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg, fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {rule}; wrong: {bad}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max): "
          f"{timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

S8="96x256x4096,192x128x4096,512x512x4096,144x256x8192,448x192x5120,512x512x8192,384x128x8192,256x256x16384"
S8="$S8,128x128x16384,320x768x14336,512x512x16384,2048x128x8192,1024x128x4096,256x1024x8192"
case $CALL in
  call1)
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py \
      tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    timeout 200 python3 /tmp/s46/rows_stages_sweep.py 3 0.1 \
      "$S8,448x192x14336,640x384x14336,1024x256x16384,512x128x28672" 2>&1 | tee "${LOG}_gemm_rows_stages_sweep.log"
    ;;
  call2)
    timeout 200 python3 /tmp/s45/rows_stages.py 3 0.1 "$S8" 2>&1 | tee "${LOG}_gemm_rows_stages.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
