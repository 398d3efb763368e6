# Helpers for the session device scripts (kernels/device_s*.sh): `source kernels/device_lib.sh` from the repository
# root on the device machine.

profile() {  # name, kernel regex, tune_ws run arguments...: ncu --set full of one launch, pages under /tmp/ncu
  local name=$1 regex=$2; shift 2
  local dir=/tmp/ncu; mkdir -p $dir
  timeout 120 ncu --clock-control none --set full --import-source no -k "regex:$regex" --launch-skip 1 \
    --launch-count 1 -f -o $dir/$name python3 -m kernels.tune_ws run "$@" > $dir/$name.log 2>&1
  echo "ncu $name rc=$?"
  ncu -i $dir/$name.ncu-rep --page details --print-details all > $dir/${name}_details.txt 2>&1
  ncu -i $dir/$name.ncu-rep --page raw --csv > $dir/${name}_raw.csv 2>&1
  ncu -i $dir/$name.ncu-rep --page source --csv --print-source sass > $dir/${name}_sass.csv 2>&1
  ls -la $dir | grep $name
}

gemm_ncu() {  # who shape: ncu --set full of one GEMM (kernels.tune_ab gemm-once: its NVTX range "prof"), pages under
  # /tmp/ncu, the headline metrics printed
  ncu_prof $1_$2 python3 -m kernels.tune_ab gemm-once $1 $2
}

ncu_prof() {  # name command...: ncu --set full of the kernels the command launches inside its NVTX range "prof", pages
  # under /tmp/ncu, the headline metrics and warp stall reasons printed
  local name=$1 dir=/tmp/ncu; shift; mkdir -p $dir
  timeout 120 ncu --clock-control none --set full --import-source no --nvtx --nvtx-include "prof/" -f -o $dir/$name \
    "$@" > $dir/$name.log 2>&1
  echo "ncu $name rc=$?"
  ncu -i $dir/$name.ncu-rep --page details --print-details all > $dir/${name}_details.txt 2>&1
  ncu -i $dir/$name.ncu-rep --page raw --csv > $dir/${name}_raw.csv 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Warp Cycles Per Issued|Issue Slots Busy|Hit Rate|Grid Size|Cluster Size|Registers|Shared Memory Config|Mem Busy|Max Bandwidth|Stall" \
    $dir/${name}_details.txt | head -45
}

device_env() {  # session call: GPU_TAG (h200 / h100) and LOG (the call's log prefix under $OUT) set, the machine's
  # fingerprint (date, GPU, driver, clocks, power limit, torch / CUDA / Triton) written to ${LOG}_env.txt
  GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
  LOG=$OUT/kernels_${GPU_TAG}_$1_$2
  {
    date -u
    nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  } 2>&1 | tee "${LOG}_env.txt"
}

install_perfci() {  # the carried wheels (.whl: nvtx, plotly) into /tmp/site, perfci itself editable
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
    && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
}

suite() {  # the kernel suite (tests/perf: flash, decode, matmul, the 256 MB copy) into $OUT/perf.json, and its table
  timeout 270 python3 -m pytest tests/perf/test_flash.py tests/perf/test_decode.py tests/perf/test_matmul.py \
    "tests/perf/test_torch_ops.py::test_copy_256mb" -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
    > "${LOG}_perf_suite.log" 2>&1
  echo "perf suite rc=$?"
  tail -3 "${LOG}_perf_suite.log"
  [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_suite_table.txt"
}

baseline_update() {  # SELECTOR NAME [FILE]: this card model's entries of FILE's rows (default tests/perf/test_flash.py)
  # matching the -k SELECTOR, re-made from two runs (log ${LOG}_baseline_update_NAME.log), and baselines/ as
  # $OUT/baseline_$GPU_TAG.tgz
  timeout 300 perfci baseline update "${3:-tests/perf/test_flash.py}" -k "$1" --runs 2 --force --results-dir /tmp/bl \
    > "${LOG}_baseline_update_$2.log" 2>&1
  echo "baseline update rc=$?"
  tail -8 "${LOG}_baseline_update_$2.log"
  tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
}
