#!/usr/bin/env bash
# Session-6 device calls (issue 16, attention): bash kernels/device_s6.sh CALL  (on the lent GPU, OUT set by the tool).
# call1: Gluon warp-specialised forward: correctness (kernels.tune_ws check), then Gluon vs Triton vs SDPA
#        with the config sweep.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
LOG=$OUT/kernels_h100_s6_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
case "$CALL" in
  call1)
    timeout 150 python3 -m kernels.tune_ws check 2>&1 | tee "${LOG}_ws_check.log"
    echo "check rc=$?"
    timeout 240 python3 -m kernels.tune_ws bench --sweep 2>&1 | tee "${LOG}_ws_bench.log"
    echo "bench rc=$?"
    ;;
esac
