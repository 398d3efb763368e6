#!/usr/bin/env bash
# Session-43 device calls (issue 16), prepared in session 42 (nothing run yet): bash kernels/device_s43.sh CALL (OUT set
# by the tool).  Uses session 42's harnesses (`bash kernels/device_s42.sh harnesses` writes them under /tmp/s42).
# Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns).
# call1: the GEMMs session 42 left below 0.95x cuBLAS: the decode-sized narrow tiles in 8 chunks (NARROW_SPLIT_MAX
#        8; 64x256x8192 0.88x, 64x1024x14336 0.92x at 4), the 64-row Gluon tiles in 8 chunks of 128-wide steps at 8-16
#        tiles (65 / 80 x 1024 x 4096 / 8192 at 0.90 / 0.82x in 4), and 4096x128x4096 (0.75x: 128 64x64 tiles, one
#        round) on 64x128 tiles in 2 chunks and 128x64 tiles of 8 stages in 2 chunks.  Then the 64x64 tiles on K steps
#        of 256 at 3 stages (`k256`, 64 KB stages, 213 KB: built offline, no spills; session 42's 128-wide steps took
#        1.07-1.16x the 64-wide ones) against the shipped 128-wide steps, the same K chunks.
# call2: if an H100 is lent: kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table,
#        the H100 baseline's re-made entries, cuDNN's fp8 forward on an H100), then call 1 here.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
bash kernels/device_s42.sh harnesses > /dev/null || exit 3
device_env s43 "$CALL"

case $CALL in
  call1)
    # the narrow tiles: the route (4 chunks) against NARROW_SPLIT_MAX 8 (`max8`)
    timeout 120 python3 /tmp/s42/gemm_route.py 5 0.2 64x256x8192,64x1024x14336,64x512x14336,49x256x8192,64x512x4096 \
      narrow8 2>&1 | tee "${LOG}_gemm_narrow8.log"
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 65x1024x4096,80x1024x8192,100x1024x4096,96x512x4096,64x1024x8192 \
      "k4=64x64x128s5/=,k8=64x64x128s5/8,k2=64x64x128s5/2" 2>&1 | tee "${LOG}_gemm_half8.log"
    timeout 120 python3 /tmp/s42/gemm_bk.py 5 0.2 4096x128x4096,2048x256x4096,4096x128x8192 \
      "k=64x64x128s5,w2=64x128x64s8/2,w1=64x128x64s8,s2=128x64x64s8/2" 2>&1 | tee "${LOG}_gemm_tall.log"
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      104x4096x4096,127x4096x4096,65x4096x4096,512x1024x4096,256x2048x4096,4096x128x4096,104x4096x1024,300x1024x4096,256x1024x8192,100x1024x4096 \
      "k5=64x64x128s5/=,k256=64x64x256s3/=" 2>&1 | tee "${LOG}_gemm_k256.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
