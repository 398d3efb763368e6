#!/usr/bin/env bash
# Session-47 device calls (issue 16), prepared in session 46 (nothing run yet): bash kernels/device_s47.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then kernels/device_s46.sh call2 (session 45's rows rule
# timed there).
# call1: why session 46's A shared across clusters of two CTAs was slower (0.78x unclustered at 96x5120x4096, bitwise
#        right): ncu --set full of one call each of the clustered 64x128 tiles (docs/measurements/
#        kernels_s46_gemm_cluster_a.patch, applied by the call), the same tiles unclustered (the route there) and
#        cuBLAS (nvjet 64x96 tiles in clusters of four sharing A); the L2 requests and sectors, the copy engine's bytes,
#        the CTAs' stall reasons side by side.
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

case $CALL in
  call1)
    patch -p1 < docs/measurements/kernels_s46_gemm_cluster_a.patch || exit 3
    for who in ca u; do ncu_prof ${who}_96x5120x4096 python3 /tmp/s47/ca_once.py $who 96x5120x4096; done 2>&1 \
      | tee "${LOG}_ncu.log"
    gemm_ncu cublas 96x5120x4096 2>&1 | tee -a "${LOG}_ncu.log"
    tar -C /tmp/ncu -czf "${LOG}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
