#!/usr/bin/env bash
# Session-5 device calls (issue 16): bash kernels/device_s5.sh CALL  (on the lent GPU, OUT set by the tool).
# call1: GPU tests of matmul/decode, sweeps (dec, mm incl. ragged-GEMM diagnosis), finals dec+mm.
# call2: all tests/kernels -m gpu, sweeps (dec, mm: fused decode merge, misaligned-B paths, fused split-K),
#        finals dec+mm with the candidates side by side.
# call3: tests/kernels -m gpu on the shipped defaults, finals, perf suite (decode, matmul).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
LOG=$OUT/kernels_h100_s5_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
case "$CALL" in
  call1)
    timeout 120 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_decode.py -m gpu -q \
      -p no:cacheprovider 2>&1 | tee "${LOG}_gpu_tests.log"
    timeout 380 python3 -m kernels.tune --sections dec,mm --final dec,mm --out "$OUT" --budget 230 > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(BEST|mm |dec |ENV|failed|  FAIL|total|mm autotune)" "${LOG}_tune.log" | grep -v "^ENV {'" | tail -80
    ;;
  call2)
    timeout 200 python3 -m pytest tests/kernels -m gpu -q -p no:cacheprovider 2>&1 | tee "${LOG}_gpu_tests.log"
    timeout 300 python3 -m kernels.tune --sections dec,mm --final dec,mm --out "$OUT" --budget 200 \
      > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(BEST|mm |dec |failed|  FAIL|total|mm autotune)" "${LOG}_tune.log" | tail -120
    ;;
  call3)
    timeout 250 python3 -m pytest tests/kernels -m gpu -q -p no:cacheprovider -n 8 -rs 2>&1 | tee "${LOG}_gpu_tests.log"
    timeout 150 python3 -m kernels.tune --final dec,mm --out "$OUT" > "${LOG}_tune.log" 2>&1
    echo "tune rc=$?"
    grep -E "^(mm |dec |total)" "${LOG}_tune.log" | tail -60
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
      && timeout 110 python3 -m pytest tests/perf/test_matmul.py tests/perf/test_decode.py \
         "tests/perf/test_torch_ops.py::test_copy_256mb" -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
         > "${LOG}_perf_suite.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_suite_table.txt"
    ;;
esac
rm -f "$OUT/tune.log"
