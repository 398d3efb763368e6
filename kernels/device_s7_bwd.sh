#!/usr/bin/env bash
# Session-7 device calls (issue 16, attention backward): bash kernels/device_s7_bwd.sh CALL  (OUT set by the tool).
# call1: kernels.tune_bwd check (fused backward, every candidate config and the autotuned path, vs the fp32
#        reference), then the graph-timed bench with the config sweep (2-kernel Triton vs fused vs SDPA).
# call2: check, the bench with the sweep (pointer loads with TMA dQ reduce-adds added after call 1, a no-dQ
#        timing diagnostic, SDPA timed through perfci's side-stream capture where Triton's capture fails), then
#        tests/kernels/test_attention_bwd_fused.py -m gpu.
# call3: check in full (call 2's stopped at its 90 s limit), then the bench with the sweep, now also over the
#        2-kernel scheme's dK/dV configs (the fused diagnostics of call 2 left out).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
LOG=$OUT/kernels_h100_s7_bwd_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
case "$CALL" in
  call1)
    timeout 200 python3 -m kernels.tune_bwd check 2>&1 | tee "${LOG}_check.log"
    echo "check rc=$?"
    timeout 200 python3 -m kernels.tune_bwd bench --sweep 2>&1 | tee "${LOG}_bench.log"
    echo "bench rc=$?"
    ;;
  call3)
    timeout 190 python3 -m kernels.tune_bwd check 2>&1 | tee "${LOG}_check.log"
    echo "check rc=$?"
    timeout 220 python3 -m kernels.tune_bwd bench --sweep 2>&1 | tee "${LOG}_bench.log"
    echo "bench rc=$?"
    ;;
  call2)
    timeout 90 python3 -m kernels.tune_bwd check 2>&1 | tee "${LOG}_check.log"
    echo "check rc=$?"
    timeout 210 python3 -m kernels.tune_bwd bench --sweep --diag 2>&1 | tee "${LOG}_bench.log"
    echo "bench rc=$?"
    timeout 100 python3 -m pytest tests/kernels/test_attention_bwd_fused.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -15 | tee "${LOG}_gpu_tests.log"
    echo "gpu tests rc=$?"
    ;;
esac
