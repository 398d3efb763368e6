#!/usr/bin/env bash
# Session-37 device calls (issue 16), prepared in session 36 for the first H100 lent since session 26 (they run on an
# H200 too): bash kernels/device_s37.sh CALL (OUT set by the tool; carry .whl for calls 1-3).  Every step is guarded
# by `timeout`.  Nothing here has run yet.
# call1: the whole kernel suite (tests/perf: flash, decode, matmul, the 256 MB copy) for README's H100 table, which is
#        from session 26, before sessions 27-36's changes; then fp8 against our bf16 and cuDNN's fp8 forward (through
#        JAX, as session 36's call 1) at d128 L4096 / 8192 / 16384, full and causal.
# call2: the H100 baseline's test_flash.py "ours" entries re-made from two runs: the forward (16-bit, d80 and fp8: the
#        forward's entries predate sessions 27-36, fp8's the codes path) and the backward (d128 and the d64 rows,
#        which the H100 baseline does not have yet).
# call3: likewise test_matmul.py's and test_decode.py's "ours" entries (the ragged GEMM is read in clusters of two
#        CTAs since session 30).
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

case $CALL in
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
