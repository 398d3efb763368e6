#!/usr/bin/env bash
# Session-39 device calls (issue 16), H200s only again: bash kernels/device_s39.sh CALL (OUT set by the tool).  Every
# step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns: a graph of 20
# calls replayed back to back for a set time, the variants in turns, medians).  (Session 39 first ran session 38's
# prepared calls 10 and 11: `bash kernels/device_s38.sh call10|call11`.)
# (The scripts' GEMM operands and first-call errors through tune_ab.gemm_operands / outputs_and_errors since the end of
# the session: the same draws and sums as the inline code that produced calls 1-6's logs.)
# call1: the Gluon GEMM's ragged edges fitted inside A and B (`_matmul_gluon.FIT_EDGES`, matmul_ws_kernel's FIT_M /
#        FIT_N: the last tile row moved up to end at M, below 128 rows each half row moved up to end at M at most,
#        the last tile column moved left to end at N) against the same tiles unmoved (FIT_EDGES off: the copy
#        engine zero-fills the box rows past M), cuBLAS beside; `slim0` the 128x64 tiles also where the last tile
#        row holds under 64 rows (SLIM_MIN_LAST_ROWS 0, fitted); `halves` every ragged tile row as two fitted half
#        boxes (FIT_M 2 from 64 rows); outputs bitwise against the unmoved tiles'; then the GEMM GPU tests.
# call2: the fitted edges as shipped (FIT_M 2 only for a single tile row of 64-96 rows: FIT_HALVES_MIN_PAST 32; the
#        128x64 tiles wherever they fill best, the last-row exclusion gone) against session 38's routing (FIT_EDGES
#        off, the 128x64 tiles only where the last tile row holds 64 rows or more), cuBLAS beside, outputs bitwise;
#        then the GEMM GPU tests.
# call3: K split into chunks in the Gluon GEMM (`_matmul_gluon.default_split`, matmul_ws_kernel's SPLIT: fp32
#        partials through a workspace, summed in chunk order by the warpgroup that completes a tile's rows) where the
#        tiles fill under half of the SMs: the rule's split (`auto`) against unsplit (`s1`) and 2 / 4 / 8 chunks forced,
#        cuBLAS beside, errors against fp32; then the GEMM GPU tests (split tests added).
# call4: the session's routing (fitted edges, K split by call 3's revised rule: at most a quarter of the SMs in
#        tiles, SPLIT_MAX 4, chunks of 16 K steps or more) against session 38's (gemm_fit_route.py with `nosplit`:
#        FIT_EDGES off, the 128x64 tiles' last-row rule, unsplit), outputs of unsplit products bitwise; then the GEMM
#        GPU tests; then ncu (SpeedOfLight, MemoryWorkloadAnalysis) of 80x4096x4096 (ours fitted, cuBLAS) and
#        256x4096x4096 (ours): is the fitted 128x64 kernel at 80 rows bound by L2, as call 3's split suggests?
# call5: session 38's lead against the fitted edges: the decode-sized GEMMs' Triton TMA kernel (matmul_splitk_tma,
#        64-row tiles of 64 / 128 columns, K unsplit) at the smallest products beside the shipped route and cuBLAS;
#        then ncu --set full of 80x4096x4096 as shipped (fitted halves, unsplit) and split in 2 (call 3's loss), for
#        what holds the 64-CTA kernel back.
# call6: call 5's ncu had the 64-CTA 80-row kernel at 44 % of DRAM with neither L2 nor shared memory busy, and call 3's
#        split of its 128x64 tiles no faster: wider tiles (fewer CTAs copying the same A rows, longer B rows a box) with
#        K split to fill the SMs instead: 128x256 tiles (EPI 1, 4 stages) in 4 / 8 chunks, 128x128 (EPI 1, 4 stages) in
#        2 / 4, 128x64 (EPI 1, 8 stages) in 2, against the shipped route and cuBLAS, errors against fp32.
# call7: after the review's fix (the split epilogue's M through gl.cast): the Gluon GEMM's GPU tests, the split test
#        with M = 1 added.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s39_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s39

cat > /tmp/s39/gemm_fit.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, outputs_and_errors, patched, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
EXTRA = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else []
sms = torch.cuda.get_device_properties(0).multi_processor_count
fit_modes = mg.fit_modes


def halves(m, n, bm, bn, b_tma):  # every ragged tile row as two fitted half boxes
    fm, fn = fit_modes(m, n, bm, bn, b_tma)
    return (2 if fm == 1 else fm), fn


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fit = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "fit": fit, "nofit": patched(fit, mg, "FIT_EDGES", False)}
    if "slim0" in EXTRA:
        fns["slim0"] = patched(fit, mg, "SLIM_MIN_LAST_ROWS", 0)
    if "halves" in EXTRA:
        fns["halves"] = patched(fit, mg, "fit_modes", halves)
    outs, errs = outputs_and_errors(fns, c, ref)
    same = {nm: torch.equal(outs[nm], outs["nofit"]) for nm in fns if nm not in ("cublas", "nofit")}
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    cfg = mg.default_config(m, n, sms)
    route = "gluon" if mm.gluon_default(m, n, aligned=True) else "triton"
    print(f"{m}x{n}x{k} ({route}, tiles {cfg[0]}x{cfg[1]}, fit {mg.fit_modes(m, n, cfg[0], cfg[1], True)}), "
          f"{ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + "; x cublas: " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.3f}" for nm in med if nm != "cublas")
          + "; x nofit: " + ", ".join(f"{nm} {med['nofit'] / med[nm]:.3f}" for nm in med
                                      if nm not in ("cublas", "nofit"))
          + "; bitwise nofit's: " + ", ".join(f"{nm} {s}" for nm, s in same.items()), flush=True)
PY

cat > /tmp/s39/gemm_fit_route.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, outputs_and_errors, patched, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
NOSPLIT = len(sys.argv) > 4 and sys.argv[4] == "nosplit"  # before: unsplit too (call 4)
sms = torch.cuda.get_device_properties(0).multi_processor_count
default_config = mg.default_config


def s38_config(m, n, sms, b_tma=True):  # session 38's rule: the 128x64 tiles only with 64 rows or more in the last
    if m % 128 == 0 or m % 128 >= 64:
        return default_config(m, n, sms, b_tma)
    eff = mg.SLIM_EFFICIENCY
    mg.SLIM_EFFICIENCY = -1.0
    try:
        return default_config(m, n, sms, b_tma)
    finally:
        mg.SLIM_EFFICIENCY = eff


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    before = patched(patched(new, mg, "FIT_EDGES", False), mg, "default_config", s38_config)
    if NOSPLIT:
        before = patched(before, mg, "default_split", lambda *args: 1)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new, "before": before}
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    cfg, old = default_config(m, n, sms), s38_config(m, n, sms)
    route = "gluon" if mm.gluon_default(m, n, aligned=True) else "triton"
    print(f"{m}x{n}x{k} ({route}; new: {cfg[0]}x{cfg[1]} fit {mg.fit_modes(m, n, cfg[0], cfg[1], True)}, before: "
          f"{old[0]}x{old[1]}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + f"; x cublas: new {med['cublas'] / med['new']:.3f}, before {med['cublas'] / med['before']:.3f}"
          + f"; new x before {med['before'] / med['new']:.3f} (faster in "
          + f"{sum(x < y for x, y in zip(times['new'], times['before']))}/{ROUNDS}); bitwise before's: "
          + str(torch.equal(outs['new'], outs['before'])), flush=True)
PY

cat > /tmp/s39/gemm_split.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, outputs_and_errors, patched, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
FORCED = [int(x) for x in sys.argv[4].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    auto = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "auto": auto}
    cfg = mg.default_config(m, n, sms)
    for s in FORCED:
        fns[f"s{s}"] = patched(auto, mg, "default_split",
                               lambda m_, n_, k_, cfg_, sms_, s=s: 1 if cfg_[1] == 192 else s)
    _, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    route = "gluon" if mm.gluon_default(m, n, aligned=True) else "triton"
    print(f"{m}x{n}x{k} ({route}, tiles {cfg[0]}x{cfg[1]}, fit {mg.fit_modes(m, n, cfg[0], cfg[1], True)}, auto split "
          f"{mg.default_split(m, n, k, cfg, sms)}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) "
          "[max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + "; x cublas: " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.3f}" for nm in med if nm != "cublas")
          + "; x s1: " + ", ".join(f"{nm} {med['s1'] / med[nm]:.3f}" for nm in med if nm not in ("cublas", "s1")),
          flush=True)
PY

cat > /tmp/s39/prof.py <<'PY'
"""One GEMM, warmed up, then once inside the NVTX range "prof" (what ncu --nvtx-include profiles)."""
import sys

import torch

from kernels.matmul import matmul

who, m, n, k = sys.argv[1], *(int(x) for x in sys.argv[2].split("x"))
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
fn = (lambda: torch.matmul(a, b, out=c)) if who == "cublas" else (lambda: matmul(a, b, out=c))
for _ in range(20):
    fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
fn()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY

nprof() {  # who shape: ncu SpeedOfLight + MemoryWorkloadAnalysis of the call inside the NVTX range
  local name=$1_$2 dir=/tmp/ncu; mkdir -p $dir
  timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section LaunchStats --nvtx --nvtx-include "prof/" -f -o $dir/$name \
    python3 /tmp/s39/prof.py $1 $2 > $dir/$name.log 2>&1
  echo "ncu $name rc=$?"
  ncu -i $dir/$name.ncu-rep --page details --print-details all > $dir/${name}_details.txt 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Busy|Bandwidth|Hit Rate|Grid Size|Cluster" $dir/${name}_details.txt | head -40
}

cat > /tmp/s39/gemm_tk.py <<'PY'
import statistics
import sys

import torch

from kernels.matmul import matmul
from kernels.matmul_splitk import matmul_splitk_tma
from kernels.tune_ab import gemm_operands, outputs_and_errors, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
TK = {"tk64": (1, 64, 128, 4, 6), "tk128": (1, 128, 128, 4, 4)}  # (split, BLOCK_N, BLOCK_K, warps, stages), host descs
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "shipped": lambda: matmul(a, b, out=c)}
    for name, cfg in TK.items():
        fns[name] = lambda cfg=cfg: matmul_splitk_tma(a, b, c, (*cfg, True))
    _, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    print(f"{m}x{n}x{k}, {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + "; x cublas: " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.3f}" for nm in med if nm != "cublas")
          + "; x shipped: " + ", ".join(f"{nm} {med['shipped'] / med[nm]:.3f}" for nm in TK), flush=True)
PY

cat > /tmp/s39/prof_split.py <<'PY'
"""80x4096x4096 through matmul, as shipped or with K in 2 chunks, warmed up, then once in the NVTX range "prof"."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul

if sys.argv[1] == "split2":
    mg.default_split = lambda *args: 2
a = torch.randn(80, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
c = torch.empty(80, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    matmul(a, b, out=c)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
matmul(a, b, out=c)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY

cat > /tmp/s39/gemm_wide_split.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, outputs_and_errors, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CFGS = {256: (128, 256, 64, 8, 4, 1), 128: (128, 128, 64, 8, 4, 1), 64: (128, 64, 64, 8, 8, 1)}
VARIANTS = [tuple(int(x) for x in v.split("s")) for v in sys.argv[4].split(",")]  # BLOCK_N "s" chunks
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "shipped": lambda: matmul(a, b, out=c)}
    for bn, split in VARIANTS:
        fns[f"{bn}s{split}"] = lambda bn=bn, split=split: mg.matmul_ws(a, b, c, CFGS[bn], split=split)
    _, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    cfg = mg.default_config(m, n, sms)
    print(f"{m}x{n}x{k} (shipped: {cfg[0]}x{cfg[1]}, split {mg.default_split(m, n, k, cfg, sms)}), {ROUNDS} rounds "
          f"of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + "; x cublas: " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.3f}" for nm in med if nm != "cublas")
          + "; x shipped: " + ", ".join(f"{nm} {med['shipped'] / med[nm]:.3f}" for nm in med
                                        if nm not in ("cublas", "shipped")), flush=True)
PY

case "$CALL" in
  call1)
    timeout 300 python3 /tmp/s39/gemm_fit.py 5 0.2 \
      65x4096x4096,80x4096x4096,96x4096x4096,112x4096x4096,127x4096x4096,100x1024x4096,96x14336x4096,130x4096x4096,130x4096x1024,200x2048x1024,1000x3072x1000,4000x5000x3000,4000x4096x4096,4096x4032x4096 \
      slim0,halves 2>&1 | tee "${LOG}_gemm_fit.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call2)
    timeout 250 python3 /tmp/s39/gemm_fit_route.py 5 0.2 \
      65x1024x4096,80x1024x4096,96x2048x4096,80x4096x4096,96x4096x4096,104x4096x4096,96x14336x4096,130x4096x4096,130x4096x1024,150x4096x4096,319x2048x2048,1100x4096x4096,2000x1024x2048,4000x5000x3000 \
      2>&1 | tee "${LOG}_gemm_fit_route.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call3)
    timeout 300 python3 /tmp/s39/gemm_split.py 5 0.2 \
      65x4096x4096,80x4096x4096,96x4096x4096,104x4096x4096,127x4096x4096,65x1024x4096,100x1024x4096,96x2048x4096,512x1024x4096,512x512x8192,256x1024x8192,200x2048x1024,1024x1024x4096,4096x512x4096 \
      1,2,4,8 2>&1 | tee "${LOG}_gemm_split.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call4)
    timeout 200 python3 /tmp/s39/gemm_fit_route.py 5 0.2 \
      65x1024x4096,100x1024x4096,96x2048x4096,256x1024x8192,512x512x8192,128x1024x8192,200x1024x4096,80x4096x4096,130x4096x4096,512x1024x4096,4096x4096x4096 \
      nosplit 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    { for c in "ours 80x4096x4096" "cublas 80x4096x4096" "ours 256x4096x4096"; do nprof $c; done; } 2>&1 \
      | tee "${LOG}_ncu.log"
    tar -C /tmp/ncu -czf "${LOG}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call5)
    timeout 200 python3 /tmp/s39/gemm_tk.py 5 0.2 \
      80x4096x4096,96x4096x4096,104x4096x4096,127x4096x4096,100x1024x4096,128x4096x1024,130x4096x1024,192x4096x1024,200x2048x1024,512x1024x4096,1024x1024x1024 \
      2>&1 | tee "${LOG}_gemm_tk.log"
    mkdir -p /tmp/ncu
    for v in shipped split2; do
      timeout 150 ncu --clock-control none --set full --import-source no --nvtx --nvtx-include "prof/" -f \
        -o /tmp/ncu/gemm80_$v python3 /tmp/s39/prof_split.py $v > /tmp/ncu/gemm80_$v.log 2>&1
      echo "ncu $v rc=$?"
      ncu -i /tmp/ncu/gemm80_$v.ncu-rep --page details --print-details all > /tmp/ncu/gemm80_${v}_details.txt 2>&1
      grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Warp Cycles Per Issued|Issue Slots Busy|Shared|Bank|Occupancy|Stall|Hit Rate" \
        /tmp/ncu/gemm80_${v}_details.txt | head -40
    done 2>&1 | tee "${LOG}_ncu.log"
    tar -C /tmp/ncu -czf "${LOG}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call6)
    timeout 300 python3 /tmp/s39/gemm_wide_split.py 5 0.2 \
      80x4096x4096,96x4096x4096,104x4096x4096,127x4096x4096,130x4096x4096,256x4096x4096,100x1024x4096,512x1024x4096,1024x1024x1024,200x2048x1024 \
      256s4,256s8,128s2,128s4,64s2 2>&1 | tee "${LOG}_gemm_wide_split.log"
    ;;
  call7)
    timeout 250 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -15 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    ;;
  *)
    echo "unknown call $CALL" >&2
    exit 2
    ;;
esac
