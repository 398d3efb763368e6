#!/usr/bin/env bash
# Session-6 GEMM device calls (issue 16): bash kernels/device_s6_mm.sh CALL  (on the lent GPU, OUT set by the tool).
# call1: GPU tests of the TMA split-K kernel; sweep (PERFCI_MM_SWEEP=s6: TMA split-K at 64x4096x4096, the repack
#        copy alone and inside the ragged GEMM) and finals of the two shapes below 0.95x, sweep winners beside
#        the session-5 defaults.
# call2: all of tests/kernels/test_matmul.py -m gpu on the shipped defaults, finals of every GEMM shape with the
#        previous defaults side by side.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
LOG=$OUT/kernels_h100_s6_mm_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
case "$CALL" in
  call1)
    timeout 60 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "split_k_tma or small_m_default" 2>&1 | tail -15 | tee "${LOG}_gpu_tests.log"
    PERFCI_MM_FINAL=64x4096x4096,4000x5000x3000 timeout 205 python3 -m kernels.tune --sections mm --final mm \
      --out "$OUT" --budget 140 > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(BEST|mm |failed|  FAIL|total|mm autotune|mm split-K|mm repack|precompile)" "${LOG}_tune.log" | tail -60
    ;;
  call2)
    timeout 115 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 -rs 2>&1 \
      | tail -20 | tee "${LOG}_gpu_tests.log"
    timeout 165 python3 -m kernels.tune --final mm --out "$OUT" > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(mm |total)" "${LOG}_tune.log" | tail -45
    ;;
esac
rm -f "$OUT/tune.log"
