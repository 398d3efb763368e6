#!/usr/bin/env bash
# Session-6 device calls (issue 16, attention): bash kernels/device_s6.sh CALL  (on the lent GPU, OUT set by the tool).
# call1: Gluon warp-specialised forward (device-side descriptors, two consumers): correctness
#        (kernels.tune_ws check), then Gluon vs Triton vs SDPA with the config sweep.
# call2: the same on host-side rank-4 descriptors, three consumers at head dims <= 64.
# call3: the same, persistent (one program per SM over the work tiles, Q/O buffers per consumer).
# call4: the same kernel, tiles in head order (causal heaviest first within a head), persistent and
#        one-program-per-tile grids side by side, three rounds.
# call5: tests/kernels -m gpu (Gluon configs, both forwards, the session's GEMM), then the graph-timed bench
#        with the shipped per-(head dim, causal) configs and the sweep.
# call6: the perf suite (perfci fixture, graph timer) over tests/perf/test_flash.py, test_decode.py,
#        test_matmul.py and the 256 MB copy: the figures in README.
# call7: the H100 baseline's FlashAttention entries re-made (the default forward is now the Gluon kernel,
#        a new kernel category for the structure check): perfci baseline update tests/perf/test_flash.py.
# call8: perfci run tests/perf/test_flash.py against that baseline on another card (the gate's verdicts),
#        and the two GPU tests edited after session 5's last run (tests/test_jax_gpu.py, test_plugin_gpu.py).
# call9: causal only, 64-key tiles beside the shipped 128 (less of the diagonal tile masked away).
# call10: after the review mends (host side only): tests/kernels -m gpu, the perfci GPU tests of the fixture
#         and variants, one flash forward through the suite.
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
  call1|call2|call3|call4)
    timeout 240 python3 -m kernels.tune_ws check 2>&1 | tee "${LOG}_ws_check.log"
    echo "check rc=$?"
    timeout 240 python3 -m kernels.tune_ws bench --sweep 2>&1 | tee "${LOG}_ws_bench.log"
    echo "bench rc=$?"
    ;;
  call5)
    timeout 250 python3 -m pytest tests/kernels -m gpu -q -p no:cacheprovider -n 8 -rs 2>&1 | tail -40 \
      | tee "${LOG}_gpu_tests.log"
    echo "gpu tests rc=$?"
    timeout 300 python3 -m kernels.tune_ws bench --sweep 2>&1 | tee "${LOG}_ws_bench.log"
    echo "bench rc=$?"
    ;;
  call6)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
      && timeout 480 python3 -m pytest tests/perf/test_flash.py tests/perf/test_decode.py tests/perf/test_matmul.py \
         "tests/perf/test_torch_ops.py::test_copy_256mb" -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
         > "${LOG}_perf_suite.log" 2>&1
    echo "perf suite rc=$?"
    tail -5 "${LOG}_perf_suite.log"
    [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_suite_table.txt"
    ;;
  call7)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
      && timeout 520 perfci baseline update tests/perf/test_flash.py --runs 2 --force --results-dir /tmp/bl_results \
         > "${LOG}_baseline_update.log" 2>&1
    echo "baseline update rc=$?"
    tail -30 "${LOG}_baseline_update.log"
    tar -czf "$OUT/baseline_h100.tgz" baselines/NVIDIA_H100_80GB_HBM3 && tar -czf "$OUT/bl_results.tgz" -C /tmp bl_results
    ;;
  call9)
    timeout 400 python3 -m kernels.tune_ws bench --sweep --mask causal 2>&1 | tee "${LOG}_ws_bench.log"
    echo "bench rc=$?"
    ;;
  call10)
    timeout 200 python3 -m pytest tests/kernels -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -15 \
      | tee "${LOG}_gpu_tests.log"
    echo "kernel gpu tests rc=$?"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
      && export PYTHONPATH=/tmp/site:. XLA_PYTHON_CLIENT_PREALLOCATE=false \
      && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    timeout 200 python3 -m pytest tests/test_plugin_gpu.py tests/test_variants_fixture.py \
      "tests/perf/test_flash.py::test_flash_forward[L4096-d128-full-ours]" -q -p no:cacheprovider \
      > "${LOG}_perfci_gpu_tests.log" 2>&1
    echo "perfci gpu tests rc=$?"
    tail -8 "${LOG}_perfci_gpu_tests.log"
    ;;
  call8)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
      && export PYTHONPATH=/tmp/site:. XLA_PYTHON_CLIENT_PREALLOCATE=false \
      && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    timeout 260 perfci run tests/perf/test_flash.py --report-dir /tmp/flash_report --results-dir /tmp/flash_results \
      > "${LOG}_flash_gate.log" 2>&1
    echo "perfci run exit $?"
    tail -25 "${LOG}_flash_gate.log"
    cp /tmp/flash_report/summary.md "${LOG}_flash_gate_summary.md" 2>/dev/null
    timeout 250 python3 -m pytest -m gpu tests/test_jax_gpu.py tests/test_plugin_gpu.py -q -rP -p no:cacheprovider \
      > "${LOG}_gpu_tests_i15.log" 2>&1
    echo "gpu tests exit $?"
    tail -15 "${LOG}_gpu_tests_i15.log"
    ;;
esac
