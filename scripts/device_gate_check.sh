#!/usr/bin/env bash
# The gate on a lent GPU, as a new user meets it (issue 11 targets). Run on the device machine from the
# repository root, with the wheels of .whl (nvtx, plotly) carried. Usage:
#   scripts/device_gate_check.sh OUT_DIR STEP...   steps: env gputests run1 run2 run3 against bdplanted ncu
# OLD_TREE=DIR (optional): copy DIR/kernels and DIR/tests/perf over the checkout first, so the suite is the
# tree the shipped baseline was measured from (an "unchanged tree" with this perfci).
set -uo pipefail
out=$1; shift
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo "perfci install failed"; exit 3; }
if [ -n "${OLD_TREE:-}" ]; then rm -rf kernels tests/perf && cp -r "$OLD_TREE/kernels" kernels && cp -r "$OLD_TREE/tests/perf" tests/perf; fi
export PYTHONUNBUFFERED=1
for step in "$@"; do
  start=$(date +%s)
  case $step in
    env) perfci env --json > "$out/env.json"; nvidia-smi --query-gpu=name,uuid,serial,driver_version,clocks.max.sm --format=csv >> "$out/env.json" ;;
    gputests) python3 -m pytest tests/test_plugin_gpu.py tests/test_timing_gpu.py tests/test_trace_gpu.py ${GPU_TESTS_EXTRA:-} -q -p no:cacheprovider > "$out/gpu_tests.log" 2>&1; echo "gputests exit $?" ;;
    run*) perfci run --report-dir "$out/$step" --results-dir "$out/results_$step" > "$out/$step.log" 2>&1; echo "$step exit $?" ;;
    against)
      git init -q . 2>/dev/null; git -c user.email=d@d -c user.name=d add -A >/dev/null; git -c user.email=d@d -c user.name=d commit -qm tree >/dev/null
      perfci run --against HEAD --report-dir "$out/against" --results-dir "$out/results_against" > "$out/against.log" 2>&1; echo "against exit $?" ;;
    bdplanted)  # planted GEMM slowdowns, one process per job; the per-process files come back as one tarball
      python3 scripts/bench_detect.py --collect-only --dir /tmp/bd --suite-runs 0 --planted-processes "${BD_PROCESSES:-10}" \
        --max-time 1.0 --min-time 0.5 > "$out/bdplanted.log" 2>&1; echo "bdplanted exit $?"
      tar -czf "$out/bdplanted.tgz" -C /tmp/bd planted ;;
    ncu) perfci profile --ncu -k "test_flash_forward and L4096-d128-full-ours or test_copy_256mb" -o /tmp/ncu \
           > "$out/ncu.log" 2>&1; echo "ncu exit $?"; cp /tmp/ncu/ncu_summary.json "$out/ncu_summary.json" 2>/dev/null ;;
  esac
  echo "$step took $(( $(date +%s) - start )) s"
  grep -h "^perfci: \(no regression\|REGRESSION\)" "$out/$step.log" 2>/dev/null | tail -1
done
