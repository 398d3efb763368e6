#!/usr/bin/env bash
# Session-46 device calls (issue 16), prepared in session 45 (nothing run yet): bash kernels/device_s46.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab).
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then session 45's rows rule timed there (call 2 below).
# call1: the full GEMM GPU tests on session 45's last commit (ROWS_CONFIGS at 5 / 6 stages: session 45 ran only the
#        rows route's own tests on them, call 8), then the rows tiles' rings deeper still (`rows_stages_sweep.py`: 64x64
#        tiles at 4-6 stages, 64x128 at 5-8) where the rule's tiles trailed cuBLAS (320x768x14336 0.87x,
#        448x192x14336 0.92, 512x512x16384 0.94-1.00) and at shapes of each rule case.
# call2: session 45's rows rule against the Gluon route (gluon=True) and cuBLAS at session 45 call 8's shapes
#        (`kernels/device_s45.sh` harnesses' rows_stages.py): on an H100 if one is lent, else on another H200 card.
# Run in session 46 (H200s): call1, then (written during the session)
# call3: the Gluon GEMM's 64-row tiles in clusters of two CTAs sharing A's tile (docs/measurements/
#        kernels_s46_gemm_cluster_a.patch, applied by the call; not kept) against the same tiles unclustered, M 64-128.
# call4: the Gluon GEMM's 128x128 / 128x64 tiles with K split, summed by the second kernel, at call 3's shapes.
# call5 (carry [".whl"]): the whole kernel suite on the session's tree (README's H200 table).
# call6: the attention and decode GPU tests after the hosts' ceiling divisions moved to _checks.cdiv.
# call2 waits for an H100.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
bash kernels/device_s45.sh harnesses > /dev/null || exit 3  # session 45's rows_stages.py (call 2)
[ "$CALL" = harnesses ] || device_env s46 "$CALL"  # harnesses: the files under /tmp/s46 only
mkdir -p /tmp/s46

cat > /tmp/s46/wide_split.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The Gluon GEMM's 128x128 tiles (4 stages; under 128 rows two 64-row half
boxes fitted inside A, FIT_M 2: B read once a tile column) with K in 2 / 3 / 4 chunks summed by the second kernel
(`w2`..`w4`), and 128x64 tiles (8 stages) in 2 (`s2`), against the route (`ship`) and cuBLAS."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg, split in (("w2", (128, 128, 64, 8, 4, 1), 2), ("w3", (128, 128, 64, 8, 4, 1), 3),
                             ("w4", (128, 128, 64, 8, 4, 1), 4), ("s2", (128, 64, 64, 8, 8, 1), 2)):
        fns[name] = lambda cfg=cfg, split=split, name=name: must_run(
            mg.matmul_ws(a, b, c, cfg, split=split, fused=False), name)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (wrong: {bad}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max): "
          f"{timings_line(times)}; x ship: {ratios(times, 'ship')}; x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s46/cluster_a.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The Gluon GEMM's 64-row tiles in clusters of two CTAs that share A's
tile (`matmul_ws(..., cluster_a=True)`: two tile columns of a tile row, each CTA copying half of A's rows, multicast)
against the same tiles unclustered (`u`), the route (`ship`) and cuBLAS; `ca` outputs bitwise `u`'s?"""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CONFIGS = {"128s8": (64, 128, 64, 8, 8, 0), "128s6": (64, 128, 64, 8, 6, 0), "64s8": (64, 64, 64, 8, 8, 0),
           "64s12": (64, 64, 64, 8, 12, 0), "64k5": (64, 64, 128, 8, 5, 0)}
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in CONFIGS.items():
        def run(cfg=cfg, ca=False, name=name):
            must_run(mg.matmul_ws(a, b, c, cfg, split=1, cluster_a=ca), f"{name} ca={ca}",
                     lambda: "; ".join(mg._broken_cluster))
        fns[f"u{name}"] = run
        fns[f"ca{name}"] = lambda run=run: run(ca=True)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    same = [nm for nm in CONFIGS if torch.equal(outs[f"u{nm}"], outs[f"ca{nm}"])]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    pairs = ", ".join(f"{nm} {ratios({'u': times[f'u{nm}'], 'c': times[f'ca{nm}']}, 'u').split()[1]}"
                      for nm in CONFIGS if f"u{nm}" in times and f"ca{nm}" in times)
    print(f"{m}x{n}x{k} (wrong: {bad}; ca bitwise u: {same}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; ca x u: {pairs}; x cublas: {ratios(times, 'cublas')}", flush=True)
PY

cat > /tmp/s46/rows_stages_sweep.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`: matmul_rows.rows_split_config's config) against the
same tiles and chunks at other ring depths (`sN`: N stages; 64x64 tiles 4-6, 64x128 tiles 5-8: up to 192 KB of
shared memory) and cuBLAS."""
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_rows as mr
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    rule = mr.rows_split_config(m, n, k, sms)
    depths = range(4, 7) if rule[1] == 64 else range(5, 9)
    cfgs = {f"s{st}": (*rule[:4], st, *rule[5:]) for st in depths if st != rule[4]}
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in cfgs.items():
        fns[name] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg, fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {rule}; wrong: {bad}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max): "
          f"{timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

S8="96x256x4096,192x128x4096,512x512x4096,144x256x8192,448x192x5120,512x512x8192,384x128x8192,256x256x16384"
S8="$S8,128x128x16384,320x768x14336,512x512x16384,2048x128x8192,1024x128x4096,256x1024x8192"
case $CALL in
  call1)
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py \
      tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    timeout 200 python3 /tmp/s46/rows_stages_sweep.py 3 0.1 \
      "$S8,448x192x14336,640x384x14336,1024x256x16384,512x128x28672" 2>&1 | tee "${LOG}_gemm_rows_stages_sweep.log"
    ;;
  call2)
    timeout 200 python3 /tmp/s45/rows_stages.py 3 0.1 "$S8" 2>&1 | tee "${LOG}_gemm_rows_stages.log"
    ;;
  call3)  # the experiment's kernel: docs/measurements/kernels_s46_gemm_cluster_a.patch
    patch -p1 < docs/measurements/kernels_s46_gemm_cluster_a.patch || exit 3
    timeout 120 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 -k cluster 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_cluster.log"
    timeout 400 python3 /tmp/s46/cluster_a.py 3 0.1 "96x5120x4096,65x4096x4096,96x4096x4096,104x5120x4096,\
112x6144x4096,128x7168x4096,96x7168x4096,80x6144x4096,96x8192x4096,64x4096x4096,64x8192x4096" 2>&1 \
      | tee "${LOG}_gemm_cluster_a.log"
    ;;
  call4)
    timeout 400 python3 /tmp/s46/wide_split.py 3 0.1 "96x5120x4096,65x4096x4096,96x4096x4096,104x5120x4096,\
112x6144x4096,128x7168x4096,96x7168x4096,80x6144x4096,96x8192x4096,64x4096x4096,120x5120x4096" 2>&1 \
      | tee "${LOG}_gemm_wide_split.log"
    ;;
  call5)  # carry [".whl"]: the whole kernel suite on the session's tree (an H200: README's H100 table waits)
    install_perfci
    suite
    ;;
  call6)  # the attention and decode GPU tests on the hosts' plain ceiling divisions (_checks.cdiv)
    timeout 500 python3 -m pytest tests/kernels/test_attention.py tests/kernels/test_attention_bwd_fused.py \
      tests/kernels/test_attention_bwd_ws.py tests/kernels/test_decode.py tests/kernels/test_decode_tma.py \
      tests/kernels/test_ptx_barriers.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 \
      | tee "${LOG}_gpu_tests_attn_decode.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
