#!/usr/bin/env bash
# Session-38 device calls (issue 16), H200s only again: bash kernels/device_s38.sh CALL (OUT set by the tool).  Every
# step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns: a graph of 20
# calls replayed back to back for a set time, the variants in turns, medians).
# call1: GEMMs of M 128-1024 that leave SMs idle on the Gluon kernel's 128x128 tiles (session 37's lead): cuBLAS, the
#        shipped route, the Gluon kernel on 128x64 tiles (BLOCK_N 64 patched into WS_BLOCK_N; 4 and 6 stages), and the
#        Triton TMA kernel of the decode-sized GEMMs (matmul_splitk_tma: 64-row tiles, K unsplit or split 2-4); errors
#        against fp32 beside cuBLAS's; cuBLAS's kernel names from torch.profiler (its tiles).
# call2: the Gluon kernel's narrow tiles deeper: 128x64 at 6 and 8 stages and with 128-wide K steps (4 stages), 128x128
#        at 4 (shipped), 5 and 6 stages, at eleven shapes of M 128-2048 (all built offline first).
# call3: the 128x64 tiles as a third default (`_matmul_gluon.WS_SLIM_CONFIG`, `SLIM_EFFICIENCY` 0.80) against the rule
#        before it (SLIM_EFFICIENCY 0) and cuBLAS, steady state, errors against fp32; then the GEMM GPU tests.
# call4: GEMMs of M 65-127 (the Triton kernel's, below GLUON_MIN_M) and call 3's loss at 130x4096x1024 (a second tile
#        row of 2 rows): cuBLAS, the shipped route, the Gluon kernel's 128x64 and 128x128 tiles, the Triton TMA kernel's
#        64-row tiles, as call 1.
# call5: from call 4, the Gluon kernel from M 65 (`matmul.GLUON_MIN_M` SMALL_M + 1, was 128) and the 128x64 tiles only
#        where the last tile row holds 64 rows or more (`_matmul_gluon.SLIM_MIN_LAST_ROWS`), against the rule before
#        (GLUON_MIN_M 128, SLIM_MIN_LAST_ROWS 0) as call 3; then the GEMM GPU tests.
# call6: 128x192 tiles (cuBLAS's at 768-1536 x 4096 x 4096: 132 tiles a round at N 4096), computed as 128 + 64 columns
#        through two descriptors, buffers and accumulators (Gluon's shapes are powers of two; `BLOCK_N2`), 3 and 4
#        stages, against cuBLAS, the shipped route and the 128x256 tiles; then the Gluon GEMM's GPU tests (a 192 config
#        added).  Offline: the kernel's existing builds byte-for-byte the same SASS with the new parameters.  Its first
#        run (`_gemm_192_rejected.log`) had S38_BN64's list replace WS_BLOCK_N, so the 192 configs were refused; the
#        GPU tests ran (192 included); call6b: the timing again.
# call7: the 128x192 tiles as a fourth default (`_matmul_gluon.WS_MID_CONFIG`, `MID_EFFICIENCY` 0.94, B by TMA) against
#        the rule before it (MID_EFFICIENCY 0), steady state; then the GEMM GPU tests.
# call8: GEMMs of N under GLUON_MIN_N (1024; the Triton kernel's) with B that TMA reads: cuBLAS, the shipped route, the
#        Gluon kernel's 128x64, 128x128 and 128x256 tiles, as call 1.
# call9: `default_config` by SM-rounds of work (rounds x tile area / rate: a ragged tile counts whole) instead of the
#        fill of the rounds, and the Gluon kernel from N = 128 (`matmul.GLUON_MIN_N`, was 1024), against the rule
#        before both (the fill rule written out here, GLUON_MIN_N 1024): call 8's shapes and those where the two rules
#        differ; then the GEMM GPU tests.  (Not kept: the SM-rounds rule lost where it took 128x64 tiles over several
#        rounds; call 10's rule instead.)
# call10: `default_config` as the fill of the rounds times the share of the tiles' columns inside N (a ragged tile
#        column counts whole), SLIM_EFFICIENCY 0.72 (call 9: the 128x64 tiles' rate over several rounds), with
#        GLUON_MIN_N 128, against the rule before call 9 (gemm_rule.py's fill_rule, GLUON_MIN_N 1024): call 9's N
#        under 1024 and the shapes of M 384-5120 where the two rules differ.  Not run: no device time was left.
# call11 (prepared for the next H100, or an H200): the session's routing (calls 3-10's rules, calibrated on H200s)
#        against the routes at its start (0487da2: the Gluon kernel from M 128 and N 1024 on 128x256 / 128x128 tiles,
#        else the Triton kernel), steady state, at the shapes of calls 3, 5, 7 and 9; then the GEMM GPU tests.
# Calls 1-11 ran on the kernels of their session (call 11: ad64a47).  Session 39 removed
# `_matmul_gluon.SLIM_MIN_LAST_ROWS` (call 5's "before" patches it: rerun that call from ad64a47) and added the fitted
# edges and K split, which call 10-11's "new" routes now include.  Operands and first-call errors through
# tune_ab.gemm_operands / outputs_and_errors since session 39's review (the same draws and sums as the code that ran).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s38_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s38

cat > /tmp/s38/gemm_smallm.py <<'PY'
import os
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.matmul_splitk import matmul_splitk_tma
from kernels.tune_ab import gemm_operands, steady_in_turns

# argv: rounds, seconds a round, variants, shapes MxNxK,...  Variants: cublas; shipped; ws<BM>_<BN>_<BK>_<G>_<S>_<E>
# (the Gluon kernel); tk<split>_<BN>_<BK>_<warps>_<stages> (matmul_splitk_tma, host descriptors, 64-row tiles)
ROUNDS, SECONDS, NAMES = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(",")
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[4].split(",")]
if os.environ.get("S38_BN64"):  # 128x64 tiles, 128-wide K steps, 5-8 stages: what check_ws_config does not list
    mg.WS_BLOCK_N, mg.WS_BLOCK_K = tuple(sorted({64, 128, 256, *mg.WS_BLOCK_N})), (64, 128)
    mg.WS_STAGES = (3, 4, 5, 6, 7, 8)


def variant(name, a, b, c):
    if name == "cublas":
        return lambda: torch.matmul(a, b, out=c)
    if name == "shipped":
        return lambda: matmul(a, b, out=c)
    cfg = tuple(int(x) for x in name[2:].split("_"))
    if name.startswith("ws"):
        return lambda: mg.matmul_ws(a, b, c, cfg)
    return lambda: matmul_splitk_tma(a, b, c, (*cfg, True))


def cublas_kernels(a, b, c):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    scale = ref.abs().max().item()
    fns = {nm: variant(nm, a, b, c) for nm in NAMES}
    errs, same = {}, {}
    shipped = None
    for name, fn in list(fns.items()):
        c.fill_(float("nan"))
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as exc:  # a config that does not build or launch: said, left out
            print(f"{m}x{n}x{k}: {name} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            del fns[name]
            continue
        errs[name] = (c.float() - ref).abs().max().item() / scale
        if name == "shipped":
            shipped = c.clone()
        elif shipped is not None and name.startswith("ws"):
            same[name] = torch.equal(c, shipped)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    tflops = {nm: 2 * m * n * k / (us * 1e-6) / 1e12 for nm, us in med.items()}
    print(f"{m}x{n}x{k}: cuBLAS kernels {cublas_kernels(a, b, c)}", flush=True)
    print(f"{m}x{n}x{k}, {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [TFLOPS; max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{tflops[nm]:.0f}; {errs[nm]:.1e}]"
                      for nm, v in times.items())
          + "; x cublas: " + ", ".join(f"{nm} {med['cublas'] / med[nm]:.3f}" for nm in med if nm != "cublas")
          + "; x shipped: " + ", ".join(f"{nm} {med['shipped'] / med[nm]:.3f}" for nm in med
                                        if nm not in ("cublas", "shipped"))
          + "; ws bitwise the shipped's: " + ", ".join(f"{nm} {s}" for nm, s in same.items()), flush=True)
PY

cat > /tmp/s38/gemm_route.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import faster_in, gemm_operands, outputs_and_errors, patched, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
# the rule before: module.ATTR=value;... (call 3: the 128x64 tiles off)
MODULES = {"matmul": mm, "_matmul_gluon": mg}
BEFORE = [(MODULES[t.split("=")[0].split(".")[0]], t.split("=")[0].split(".")[1], float(t.split("=")[1])
           if "." in t.split("=")[1] else int(t.split("=")[1]))
          for t in (sys.argv[4] if len(sys.argv) > 4 else "_matmul_gluon.SLIM_EFFICIENCY=0.0").split(";")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    before = new
    for target, attr, value in BEFORE:
        before = patched(before, target, attr, value)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new, "before": before}
    _, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    print(f"{m}x{n}x{k} (new tiles {mg.default_config(m, n, sms)[:2]}), {ROUNDS} rounds of {SECONDS} s, us a call "
          "median (min-max) [max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + f"; x cublas: new {med['cublas'] / med['new']:.3f}, before {med['cublas'] / med['before']:.3f}"
          + f"; new x before {med['before'] / med['new']:.3f} (faster in "
          + f"{faster_in(times, 'new', 'before')})", flush=True)
PY

cat > /tmp/s38/gemm_rule.py <<'PY'
import statistics
import sys

import torch
import triton

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import faster_in, gemm_operands, outputs_and_errors, patched, steady_in_turns


def fill_rule(m, n, sms, b_tma=True):  # default_config as committed before call 9 (dff0b73 + the 128x192 tiles)
    def fill(config):
        tiles = triton.cdiv(m, config[0]) * triton.cdiv(n, config[1])
        return tiles / (triton.cdiv(tiles, sms) * sms)

    rated = [(mg.WS_CONFIG, 1.0)] + ([(mg.WS_MID_CONFIG, mg.MID_EFFICIENCY)] if b_tma else [])
    rated.append((mg.WS_NARROW_CONFIG, mg.NARROW_EFFICIENCY))
    if m % 128 == 0 or m % 128 >= 64:  # SLIM_MIN_LAST_ROWS then (removed in session 39)
        rated.append((mg.WS_SLIM_CONFIG, 0.80))  # SLIM_EFFICIENCY then
    return max(rated, key=lambda cr: fill(cr[0]) * cr[1])[0]


def start_rule(m, n, sms, b_tma=True):  # default_config at the session's start (0487da2)
    def fill(config):
        tiles = triton.cdiv(m, config[0]) * triton.cdiv(n, config[1])
        return tiles / (triton.cdiv(tiles, sms) * sms)

    return mg.WS_NARROW_CONFIG if fill(mg.WS_NARROW_CONFIG) * 0.92 > fill(mg.WS_CONFIG) else mg.WS_CONFIG


ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
START = len(sys.argv) > 4 and sys.argv[4] == "start"  # before: the session's start, else the rule before call 9
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    if START:  # the routes at the session's start (0487da2): GLUON_MIN_M 128, GLUON_MIN_N 1024, 128x256 / 128x128 tiles
        before = patched(patched(patched(new, mm, "GLUON_MIN_N", 1024), mm, "GLUON_MIN_M", 128), mg,
                         "default_config", start_rule)
    else:
        before = patched(patched(new, mm, "GLUON_MIN_N", 1024), mg, "default_config", fill_rule)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new, "before": before}
    _, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    med = {nm: statistics.median(v) for nm, v in times.items()}
    tiles = (lambda cfg: f"{cfg[0]}x{cfg[1]}")
    if START:
        was = tiles(start_rule(m, n, sms)) if m >= 128 and n >= 1024 else "the Triton kernel"
    else:
        was = tiles(fill_rule(m, n, sms)) if mm.gluon_default(m, n, aligned=True) and n >= 1024 else "the Triton kernel"
    print(f"{m}x{n}x{k} (new: {tiles(mg.default_config(m, n, sms))}, before: {was}), {ROUNDS} rounds of {SECONDS} s, "
          "us a call median (min-max) [max err / max |ref|]: "
          + ", ".join(f"{nm} {med[nm]:.2f} ({min(v):.2f}-{max(v):.2f}) [{errs[nm]:.1e}]" for nm, v in times.items())
          + f"; x cublas: new {med['cublas'] / med['new']:.3f}, before {med['cublas'] / med['before']:.3f}"
          + f"; new x before {med['before'] / med['new']:.3f} (faster in "
          + f"{faster_in(times, 'new', 'before')})", flush=True)
PY

case "$CALL" in
  call1)
    S38_BN64=1 timeout 420 python3 /tmp/s38/gemm_smallm.py 5 0.2 \
      cublas,shipped,ws128_64_64_8_4_0,ws128_64_64_8_6_0,tk1_128_128_4_4,tk1_64_128_4_6,tk2_128_128_4_4,tk4_128_64_4_4 \
      128x4096x4096,256x4096x4096,512x4096x4096,128x14336x4096,256x14336x4096,512x1024x4096,1024x1024x1024,1024x2048x2048,2048x2048x2048 \
      2>&1 | tee "${LOG}_gemm_smallm.log"
    ;;
  call2)
    S38_BN64=1 timeout 420 python3 /tmp/s38/gemm_smallm.py 5 0.2 \
      cublas,shipped,ws128_64_64_8_6_0,ws128_64_64_8_8_0,ws128_64_128_8_4_0,ws128_128_64_8_4_0,ws128_128_64_8_5_0,ws128_128_64_8_6_0 \
      128x4096x4096,256x4096x4096,512x4096x4096,128x14336x4096,512x1024x4096,1024x1024x1024,1024x2048x2048,1024x1024x4096,1536x4096x4096,768x4096x4096,2048x3072x2048 \
      2>&1 | tee "${LOG}_gemm_stages.log"
    ;;
  call3)
    timeout 200 python3 /tmp/s38/gemm_route.py 6 0.25 \
      128x4096x4096,256x4096x4096,768x4096x4096,1024x1024x1024,1024x1024x4096,512x1024x4096,200x2048x1024,130x4096x1024,256x11008x4096,2048x1024x1024 \
      2>&1 | tee "${LOG}_gemm_route.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call4)
    S38_BN64=1 timeout 420 python3 /tmp/s38/gemm_smallm.py 5 0.2 \
      cublas,shipped,ws128_64_64_8_8_0,ws128_128_64_8_4_0,tk1_64_128_4_6,tk1_128_128_4_4,tk2_128_128_4_4 \
      80x4096x4096,96x4096x4096,112x4096x4096,127x4096x4096,96x14336x4096,130x4096x1024,130x4096x4096,192x4096x1024,128x4096x1024,512x1024x4096,200x2048x1024 \
      2>&1 | tee "${LOG}_gemm_m65.log"
    ;;
  call5)
    timeout 200 python3 /tmp/s38/gemm_route.py 6 0.25 \
      65x4096x4096,80x4096x4096,96x4096x4096,112x4096x4096,127x4096x4096,96x14336x4096,100x1024x4096,130x4096x4096,130x4096x1024,192x4096x1024,256x4096x4096 \
      "matmul.GLUON_MIN_M=128;_matmul_gluon.SLIM_MIN_LAST_ROWS=0" 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call6)
    S38_BN64=1 timeout 400 python3 /tmp/s38/gemm_smallm.py 5 0.2 \
      cublas,shipped,ws128_192_64_8_4_0,ws128_192_64_8_3_0,ws128_256_64_8_3_0 \
      768x4096x4096,1536x4096x4096,2048x3072x2048,3072x3072x3072,768x14336x4096,6144x4096x4096,4096x4096x4096,4096x14336x4096,8192x8192x8192,1024x4096x4096 \
      2>&1 | tee "${LOG}_gemm_192.log"
    timeout 150 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -4 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    ;;
  call6b)
    S38_BN64=1 timeout 400 python3 /tmp/s38/gemm_smallm.py 5 0.2 \
      cublas,shipped,ws128_192_64_8_4_0,ws128_192_64_8_3_0,ws128_256_64_8_3_0 \
      768x4096x4096,1536x4096x4096,2048x3072x2048,3072x3072x3072,768x14336x4096,6144x4096x4096,4096x4096x4096,4096x14336x4096,8192x8192x8192,1024x4096x4096 \
      2>&1 | tee "${LOG}_gemm_192.log"
    ;;
  call7)
    timeout 200 python3 /tmp/s38/gemm_route.py 6 0.25 \
      768x4096x4096,1536x4096x4096,2048x3072x2048,3072x3072x3072,1536x1536x1536,2304x4096x4096,1000x3072x1000,1280x5120x5120,4096x4096x4096 \
      "_matmul_gluon.MID_EFFICIENCY=0.0" 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call8)
    S38_BN64=1 timeout 300 python3 /tmp/s38/gemm_smallm.py 5 0.2 \
      cublas,shipped,ws128_64_64_8_8_0,ws128_128_64_8_4_0,ws128_256_64_8_3_0 \
      4096x512x4096,2048x512x2048,8192x256x4096,4096x768x4096,1024x512x1024,16384x128x4096,512x512x8192,4096x896x4096 \
      2>&1 | tee "${LOG}_gemm_small_n.log"
    ;;
  call9)
    timeout 250 python3 /tmp/s38/gemm_rule.py 6 0.25 \
      4096x512x4096,2048x512x2048,8192x256x4096,4096x768x4096,1024x512x1024,16384x128x4096,512x512x8192,4096x896x4096,1280x4096x4096,5120x2560x4096,2304x2048x2048,2048x2560x2560 \
      2>&1 | tee "${LOG}_gemm_rule.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call10)
    timeout 170 python3 /tmp/s38/gemm_rule.py 5 0.2 \
      4096x512x4096,8192x256x4096,16384x128x4096,2048x512x2048,768x6144x4096,1536x3072x3072,1024x5120x4096,5120x2560x4096 \
      2>&1 | tee "${LOG}_gemm_rule.log"
    ;;
  call11)
    timeout 280 python3 /tmp/s38/gemm_rule.py 5 0.2 \
      128x4096x4096,256x4096x4096,1024x1024x1024,512x1024x4096,80x4096x4096,112x4096x4096,130x4096x4096,768x4096x4096,3072x3072x3072,1000x3072x1000,1536x1536x1536,4096x512x4096,16384x128x4096,2048x512x2048,1280x4096x4096,4096x4096x4096 \
      start 2>&1 | tee "${LOG}_gemm_session.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  *)
    echo "unknown call $CALL" >&2
    exit 2
    ;;
esac
