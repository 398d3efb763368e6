#!/usr/bin/env bash
# Session-8 GEMM/decode device calls (issue 16): bash kernels/device_s8_mm.sh CALL  (OUT set by the tool).
# call1: GPU tests of the warp-specialised Gluon GEMM (kernels/_matmul_ws.py: B through cp.async where its pitch
#        is misaligned); sweep PERFCI_MM_SWEEP=s8 (Gluon configs at 4000x5000x3000 and 4096^3 beside the Triton
#        paths; decode kv2048 configs and the read floor of the same bytes) and GEMM finals of the ragged shapes
#        and 4096^3; ncu (clocks not controlled) of cuBLAS at the ragged and an aligned shape, and of ours.
# call2: GPU tests of test_matmul.py, test_matmul_ws.py, test_decode.py (Gluon default for large GEMMs, misaligned B
#        through repack + Gluon); decode kv2048 sweep with read floors and a torch copy of the same bytes; GEMM finals
#        of the ragged shapes and the squares, the session-6 Triton paths and the other Gluon routes beside.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
LOG=$OUT/kernels_h100_s8_mm_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
case "$CALL" in
  call1)
    timeout 75 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 -rs -x 2>&1 \
      | tail -25 | tee "${LOG}_gpu_tests.log"
    PERFCI_MM_SWEEP=s8 PERFCI_MM_FINAL=4000x5000x3000,4000x5000x3072,4096x4096x4096 timeout 140 \
      python3 -m kernels.tune --sections mm,dec --final mm --out "$OUT" --budget 95 > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(BEST|mm |failed|  FAIL|total|mm Gluon|precompile)" "${LOG}_tune.log" | tail -50
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 70 "$NCU" --clock-control none -k regex:'nvjet|gemm|xmma|cutlass|matmul_ws|_matmul_kernel|_repack' -c 5 \
      --section LaunchStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables python3 -m kernels._matmul_ncu > "${LOG}_ncu.log" 2>&1
    echo "ncu rc=$?"
    grep -E "^  [a-zA-Z_].*\(|Grid Size|Block Size|Cluster|Registers|Shared Memory Config|Dynamic Shared|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|lts__t_|ldgsts|L2 Hit" "${LOG}_ncu.log" | head -80
    ;;
  call2)
    timeout 105 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py tests/kernels/test_decode.py \
      -m gpu -q -p no:cacheprovider -n 8 -rs 2>&1 | tail -20 | tee "${LOG}_gpu_tests.log"
    PERFCI_MM_SWEEP=s8dec PERFCI_MM_FINAL=4000x5000x3000,4000x5000x3072,4096x4096x4096,8192x8192x8192,4096x14336x4096 \
      timeout 170 python3 -m kernels.tune --sections dec --final mm --out "$OUT" > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(BEST|mm |total|failed|  FAIL)" "${LOG}_tune.log" | tail -60
    grep "^ROW" "${LOG}_tune.log" | cut -c1-220
    ;;
esac
rm -f "$OUT/tune.log"
