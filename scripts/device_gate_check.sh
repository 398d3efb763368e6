#!/usr/bin/env bash
# The gate on a lent GPU, as a new user meets it (issue 11 targets). Run on the device machine from the
# repository root, with the wheels of .whl (nvtx, plotly) carried. Usage:
#   scripts/device_gate_check.sh OUT_DIR STEP...
#   steps: env gputests run1 run2 run3 lib rebase gpus single against bdplanted ncu i15 aoti nsight ncu2 shard shardsub pack
# LIB_K: lib's selection (the library benchmarks: their code is torch's, the same on every tree); REBASE_K: the
# entries rebase re-makes on this card (perfci baseline update -k, 5 fresh runs; the file comes back in OUT)
# gpus: perfci run --gpus all (issue 17); single: one plain perfci run per visible GPU, all at once, each pinned
# with CUDA_VISIBLE_DEVICES (the per-card runs gpus is checked against)
# GPU_SELECT: the paths/node ids of i15's gpu tests (default: tests)
# Steps that write many files put them under /tmp/r; `pack` tars /tmp/r into OUT/r.tgz (a device call
# returns at most 8 files).
# OLD_TREE=DIR (optional): copy DIR/kernels and DIR/tests/perf over the checkout first, so the suite is the
# tree the shipped baseline was measured from (an "unchanged tree" with this perfci).
set -uo pipefail
out=$1; shift
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo "perfci install failed"; exit 3; }
if [ -n "${OLD_TREE:-}" ]; then rm -rf kernels tests/perf && cp -r "$OLD_TREE/kernels" kernels && cp -r "$OLD_TREE/tests/perf" tests/perf; fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
NCU_K="test_flash_forward and L4096-d128-full-ours or test_copy_256mb"
baseline_file() { perfci env --json | python3 -c "import json,sys; print(json.load(sys.stdin)['baseline_file'])"; }
mkdir -p /tmp/r
for step in "$@"; do
  start=$(date +%s)
  case $step in
    env) perfci env --json > "$out/env.json"; nvidia-smi --query-gpu=name,uuid,serial,driver_version,clocks.max.sm --format=csv >> "$out/env.json" ;;
    gputests) python3 -m pytest tests/test_plugin_gpu.py tests/test_timing_gpu.py tests/test_trace_gpu.py ${GPU_TESTS_EXTRA:-} -q -p no:cacheprovider > "$out/gpu_tests.log" 2>&1; echo "gputests exit $?" ;;
    run*)  # the log straight into OUT: a call that runs past its limit still brings back how far it got
      perfci run --report-dir "/tmp/r/$step" --results-dir "/tmp/r/results_$step" > "$out/$step.log" 2>&1; echo "$step exit $?"
      grep -h "^perfci: \(no regression\|REGRESSION\)" "$out/$step.log" | tail -1
      cp /tmp/r/results_$step/*_run.json "$out/${step}_run.json" 2>/dev/null ;;
    lib)  # one pass of the library benchmarks against the baseline: this card's offsets from the baseline's cards
      perfci run --no-confirm -k "${LIB_K:-cublas or sdpa or cudnn}" --report-dir /tmp/r/lib --results-dir /tmp/r/results_lib \
        > "$out/lib.log" 2>&1; echo "lib exit $?"; cp /tmp/r/results_lib/*_run.json "$out/lib_run.json" 2>/dev/null ;;
    rebase)
      perfci baseline update -k "${REBASE_K:?REBASE_K names the entries to re-make}" --results-dir /tmp/r/results_rebase \
        > "$out/rebase.log" 2>&1; echo "rebase exit $?"
      cp "$(baseline_file)" "$out/rebased_baseline.json" ;;
    gpus)  # issue 17: a worker per GPU, merged and judged per model; the merged file and the verdict come back
      perfci run --gpus all --report-dir /tmp/r/gpus --results-dir /tmp/r/results_gpus > "$out/gpus.log" 2>&1
      echo "gpus exit $?"; cp /tmp/r/gpus/verdict.json "$out/gpus_verdict.json" 2>/dev/null
      cp /tmp/r/results_gpus/*merged*.json "$out/" 2>/dev/null
      tar -czf "$out/gpus_workers.tgz" -C /tmp/r results_gpus ;;
    single)  # one plain run per GPU, in parallel: each card against its model's baseline, on its own
      devs=($(nvidia-smi --query-gpu=index --format=csv,noheader)); pids=()
      for d in "${devs[@]}"; do
        CUDA_VISIBLE_DEVICES=$d perfci run --report-dir "/tmp/r/single$d" --results-dir "/tmp/r/results_single$d" \
          > "$out/single$d.log" 2>&1 &
        pids+=($!)
      done
      for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "single${devs[$i]} exit $?"; done
      for d in "${devs[@]}"; do
        cp "/tmp/r/single$d/verdict.json" "$out/single${d}_verdict.json" 2>/dev/null
        cp /tmp/r/results_single$d/*_run.json "$out/single${d}_run.json" 2>/dev/null
        grep -h "^perfci: \(no regression\|REGRESSION\)" "$out/single$d.log" | tail -1
      done ;;
    against)
      git init -q . 2>/dev/null; git -c user.email=d@d -c user.name=d add -A >/dev/null; git -c user.email=d@d -c user.name=d commit -qm tree >/dev/null
      perfci run --against HEAD --report-dir "$out/against" --results-dir "$out/results_against" > "$out/against.log" 2>&1; echo "against exit $?" ;;
    bdplanted)  # planted GEMM slowdowns, one process per job; the per-process files come back as one tarball
      python3 scripts/bench_detect.py --collect-only --dir /tmp/bd --suite-runs 0 --planted-processes "${BD_PROCESSES:-10}" \
        --max-time 1.0 --min-time 0.5 > "$out/bdplanted.log" 2>&1; echo "bdplanted exit $?"
      tar -czf "$out/bdplanted.tgz" -C /tmp/bd planted ;;
    ncu) perfci profile --ncu -k "$NCU_K" -o /tmp/ncu \
           > "$out/ncu.log" 2>&1; echo "ncu exit $?"; cp /tmp/ncu/ncu_summary.json "$out/ncu_summary.json" 2>/dev/null ;;
    i15)  # issue 15 on the GPU: every gpu test outside the kernels, compiled/JAX/model/culprit tests, the seed case's report
      python3 -m pytest -m gpu ${GPU_SELECT:-tests} --ignore=tests/kernels --ignore=tests/perf -q -rP -p no:cacheprovider \
        > "$out/gpu_tests.log" 2>&1; echo "gpu tests exit $?"
      python3 -m pytest tests/perf/test_compiled.py tests/perf/test_models.py tests/test_jax_timer.py \
        tests/test_library_culprits.py -q -rP -p no:cacheprovider --benchmark-json=/tmp/r/i15_benchmarks.json \
        > "$out/i15_tests.log" 2>&1; echo "i15 tests exit $?" ;;
    nsight)  # issue 13: ncu standalone, in perfci run, from plain pytest; nsys's known failure paths
      perfci profile --ncu -k "$NCU_K" -o /tmp/r/ncu > /tmp/r/ncu.log 2>&1; echo "ncu exit $?"
      perfci run --profile ncu -k "$NCU_K" --report-dir /tmp/r/ncu_run --results-dir /tmp/r/ncu_run_results \
        > /tmp/r/ncu_run.log 2>&1; echo "ncu run exit $?"
      python3 -m pytest tests/perf/test_torch_ops.py -k test_copy_256mb --perfci-profile=ncu \
        --perfci-profile-dir /tmp/r/ncu_pytest -p no:cacheprovider > /tmp/r/ncu_pytest.log 2>&1; echo "ncu pytest exit $?"
      perfci profile --nsys -k test_copy_256mb -o /tmp/r/nsys > /tmp/r/nsys.log 2>&1; echo "nsys exit $? (3 expected)"
      PATH=$(dirname "$(find / -name nsys -type f -path '*target-linux-x64*' 2>/dev/null | head -1)"):$PATH \
        perfci profile --nsys -k test_copy_256mb -o /tmp/r/nsys_bundled > /tmp/r/nsys_bundled.log 2>&1
      echo "nsys (bundled) exit $? (3 expected)" ;;
    shard)  # issue 14: two shards run one after the other, merged, against one whole run (all against the baseline)
      perfci run --shard 1/2 --report-dir /tmp/r/shard1 --results-dir /tmp/r/shard1_results > /tmp/r/shard1.log 2>&1; echo "shard1 exit $?"
      perfci run --shard 2/2 --report-dir /tmp/r/shard2 --results-dir /tmp/r/shard2_results > /tmp/r/shard2.log 2>&1; echo "shard2 exit $?"
      perfci merge /tmp/r/shard1_results/*_run.json /tmp/r/shard2_results/*_run.json -o /tmp/r/merged.json > /tmp/r/merge.log 2>&1
      echo "merge exit $?"; base=$(baseline_file)
      perfci compare "$base" /tmp/r/merged.json > /tmp/r/merged_compare.log 2>&1; echo "merged compare exit $?" ;;
    aoti) python3 scripts/aoti_probe.py /tmp/r/aoti > "$out/aoti_probe.log" 2>&1; echo "aoti probe exit $?" ;;
    ncu2)  # ncu on the flash forward and a copy *kernel* (the suite's contiguous copy_ is a cudaMemcpy: no kernel)
      perfci profile --ncu tests/perf/test_flash.py tests/data/nsight/bench_nsight.py \
        -k "test_flash_forward and L4096-d128-full-ours or test_copy_256mib" -o /tmp/r/ncu2 > /tmp/r/ncu2.log 2>&1
      echo "ncu2 exit $?"
      python3 -m pytest tests/data/nsight/bench_nsight.py --perfci-profile=ncu --perfci-profile-dir /tmp/r/ncu2_pytest \
        -p no:cacheprovider > /tmp/r/ncu2_pytest.log 2>&1; echo "ncu2 pytest exit $?" ;;
    shardsub)  # issue 14 on a subset that fits one call: shards 1/2 and 2/2 merged against one whole run
      sel="tests/perf/test_matmul.py tests/perf/test_decode.py"
      for i in 1 2; do perfci run --shard $i/2 --report-dir /tmp/r/sub_shard$i --results-dir /tmp/r/sub_shard${i}_results \
        $sel > /tmp/r/sub_shard$i.log 2>&1; echo "sub shard$i exit $?"; done
      perfci merge /tmp/r/sub_shard1_results/*_run.json /tmp/r/sub_shard2_results/*_run.json -o /tmp/r/sub_merged.json \
        > /tmp/r/sub_merge.log 2>&1; echo "sub merge exit $?"
      base=$(baseline_file)
      perfci compare "$base" /tmp/r/sub_merged.json > /tmp/r/sub_merged_compare.log 2>&1; echo "sub merged compare exit $?"
      perfci run --report-dir /tmp/r/sub_whole --results-dir /tmp/r/sub_whole_results $sel > /tmp/r/sub_whole.log 2>&1
      echo "sub whole exit $?" ;;
    pack) tar -czf "$out/r.tgz" -C /tmp r ;;
  esac
  echo "$step took $(( $(date +%s) - start )) s"
  grep -h "^perfci: \(no regression\|REGRESSION\)" "$out/$step.log" 2>/dev/null | tail -1
done
