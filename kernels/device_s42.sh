#!/usr/bin/env bash
# Session-42 device calls (issue 16), H200s only again: bash kernels/device_s42.sh CALL (OUT set by the tool).  Every
# step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns: a graph of 20
# calls replayed back to back for a set time, the variants in turns, medians).
# call1: session 41 found the 64x64 tiles' consumer alone (no copies) at 121 ns a 64-wide K step against cuBLAS's 111
#        for its whole kernel, its warps a fifth of their stalls on barriers and waits a step.  K steps of 128
#        (`k128sS`: (64, 64, 128, 8, S, 0), S = 4-6 stages of 32 KB): half the ready waits, wgmma waits and slot releases
#        for the same wgmma work; the same without the copies (`noload`, NOLOAD of session 41's variants, for the chain
#        alone); 64x128 tiles with 128-wide K steps at 4 stages (`w128s4`, 48 KB a stage) where those are the route.
#        Each against the shipped route (`ship`) and the shipped tiles at the same split (`h`), cuBLAS; K split as
#        default_split gives for each config (printed); unsplit outputs bitwise `h`'s (the same k16 wgmma order).
# call2: call 1's 128-wide K steps on 64x64 tiles (1.06-1.17x at 104-512 rows unsplit at 5-6 stages; 0.97-1.00 at
#        4096x128x4096, 512x512x8192 in 2 chunks) at 5 and 6 stages across the shapes the 64x64 tiles take (session
#        41's), in K chunks as many as the shipped tiles' (`/=`) and as default_split gives in 128-wide steps (`k6d`),
#        and below 65 rows (the route: the Triton decode-sized kernel) for the Gluon kernel there.  (Its second step
#        stopped at the parser: `/=` split on "="; fixed, and that step run again as call 3's first.)
# call3: call 2's split shapes again (its parser took `/=` for a name: not run), and N = 64 (below GLUON_MIN_N: the
#        Triton kernel, 42.5 us at 4096x64x4096 against cuBLAS's 10.5 and the 64x64 tiles' 10.4 in call 2) on the
#        64x64 tiles at 64 / 128-wide K steps and the 128x64 tiles.
# call4: the committed route (WS_HALF_CONFIG (64, 64, 128, 8, 5, 0); 64x64 tiles split where they fill at most a
#        quarter of the SMs from 64 K steps (of 64), up to half from 128; N from 64) against session 41's and against
#        the new tiles split as before; then the GEMM GPU tests.
# call5: the 64x64 tiles of 128-wide K steps past one round (160-448 tiles), where the 64x128 tiles (one round) or
#        128-row ones are the route: 96 x 4352-14336 x 4096, 129-192 rows.
# call6: the decode-sized GEMMs (M 1-64) against cuBLAS at LLM projections (N x K: 4096 / 1024 / 6144 / 14336 /
#        28672 / 128256 x 4096, 4096 x 14336): issue 16 asks >= 0.95x at M = 1..64; the suite times 1x4096 and
#        16x14336 only.
# call7: call 6's one shape below 0.95x (64x1024x4096, 0.83): M 49-64 (above SWAP_MAX_M: the narrow 32-column tiles
#        unsplit, 32 programs at N = 1024) against those tiles with K split, the transposed tiles and the Gluon 64x64
#        tiles split.
# call8: call 7's finding as the route (matmul_splitk.default_tma_split: the narrow tiles' K split in up to
#        NARROW_SPLIT_MAX chunks of at least NARROW_SPLIT_MIN_K_TILES K tiles where they leave SMs idle) against
#        the unsplit tiles; then the GEMM GPU tests of tests/kernels/test_matmul.py.
# call9: the GEMM GPU tests on the committed rules (call 8's split also needs K >= NARROW_SPLIT_MIN_K 4096: 2 chunks
#        lost at 64x1024x2048).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s42 "$CALL"  # harnesses: the files under /tmp/s42 only
mkdir -p /tmp/s42
bash kernels/device_s41.sh harnesses || exit 3  # session 41's variants.py (gemm_bk.py's NOLOAD)

cat > /tmp/s42/gemm_bk.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...) configs (name=BMxBNxBKsS,...; `noload:` before a config: its NOLOAD copy,
session 41's variants.py under /tmp/s41)."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import GLUON_MIN_M, matmul
from kernels.tune_ab import (faster_in, gemm_operands, module_copy, must_run, outputs_and_errors, patched, ratios,
                             steady_in_turns, timings_line)

sys.path.insert(0, "/tmp/s41")
from variants import NOLOAD  # noqa: E402

mg.WS_BLOCK_K, mg.WS_STAGES = (64, 128, 256), (3, 4, 5, 6, 8, 12)  # 256: session 43's
NOLOAD_KERNEL = module_copy("_mm_noload42", "kernels/_matmul_ws.py", NOLOAD).matmul_ws_kernel
ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CONFIGS = {}
for item in sys.argv[4].split(","):
    name, spec = item.split("=", 1)
    noload = spec.startswith("noload:")
    bm, bn, rest = spec.removeprefix("noload:").split("x")
    rest, _, split = rest.partition("/")  # /N: K in N chunks; /=: as many as the first config's default
    bk, stages = rest.split("s")
    CONFIGS[name] = ((int(bm), int(bn), int(bk), 8, int(stages), 0), noload, split)
sms = torch.cuda.get_device_properties(0).multi_processor_count

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    first = next(iter(CONFIGS))
    splits = {nm: mg.default_split(m, n, k, cfg, sms) for nm, (cfg, _, _) in CONFIGS.items()}
    splits |= {nm: splits[first] if sp == "=" else int(sp) for nm, (_, _, sp) in CONFIGS.items() if sp}

    def run(cfg, noload, split):
        go = lambda: must_run(mg.matmul_ws(a, b, c, cfg, split=split), str(cfg), mg.status)  # noqa: E731
        return patched(go, mg, "matmul_ws_kernel", NOLOAD_KERNEL) if noload else go

    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: matmul(a, b, out=c)}
    fns |= {nm: run(cfg, noload, splits[nm]) for nm, (cfg, noload, _) in CONFIGS.items()}
    real = [nm for nm in fns if not (nm in CONFIGS and CONFIGS[nm][1])]
    outs, errs = outputs_and_errors({nm: fns[nm] for nm in real}, c, ref)
    same = {nm: torch.equal(outs[nm], outs[first]) for nm in real
            if first in real and nm in CONFIGS and nm != first and splits[nm] == splits[first] == 1}
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms)
    route = (f"{cfg[0]}x{cfg[1]}x{cfg[2]} s{cfg[4]} split {mg.default_split(m, n, k, cfg, sms)}"
             if m >= GLUON_MIN_M else "Triton")
    print(f"{m}x{n}x{k} (ship {route}; splits {splits}; max err {max(errs.values()):.1e}; bitwise {first}'s: {same}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): {timings_line(times)}; x {first}: {ratios(times, first)} "
          f"(faster than {first} in: "
          f"{', '.join(f'{nm} {faster_in(times, nm, first)}' for nm in CONFIGS if nm != first)})", flush=True)
PY

cat > /tmp/s42/gemm_route.py <<'PY'
"""argv: rounds seconds shapes variants.  The route as committed (`new`) against itself under the module settings of
`variants`: `gluon` (call 4): session 41's route (`old`: 64x64 tiles of 64-wide K steps at 8 stages, K split at 64
steps up to half the SMs, N from 128) and the new tiles split as before (`newq`); `narrow` (call 8): the decode-sized
narrow TMA tiles unsplit (`old`: NARROW_SPLIT_MAX 1); `narrow8` (session 43): in up to 8 chunks (`max8`); `tmasplit` (session 43): the TMA kernel's split partials summed
by each tile's last program, the narrow tiles in up to 4 chunks, no 64-column split tiles (`old`: session 42's);
`swapwave` (session 43): the transposed tiles split within half the SMs only (`old`: SWAP_WAVE_MIN_K_TILES None);
`reduceblk` (session 44): the split partials' second kernel at 128 / 512 elements a program (`b128`, `b512`)."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import faster_in, gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
GLUON_OLD = [(mg, "WS_HALF_CONFIG", (64, 64, 64, 8, 8, 0)), (mg, "HALF_SPLIT_MIN_K_STEPS", (64, 64)),
             (mm, "GLUON_MIN_N", 128)]
VARIANTS = {"gluon": {"old": GLUON_OLD, "newq": GLUON_OLD[1:2]}, "narrow": {"old": [(sk, "NARROW_SPLIT_MAX", 1)]},
            "narrow8": {"max8": [(sk, "NARROW_SPLIT_MAX", 8)]},
            "tmasplit": {"old": [(sk, "TMA_SPLIT_FUSED", True), (sk, "NARROW_SPLIT_MAX", 4),
                                 (sk, "MID_SPLIT_CONFIG", None)]},
            "swapwave": {"old": [(sk, "SWAP_WAVE_MIN_K_TILES", None)]},
            "reduceblk": {"b128": [(sk, "REDUCE_BLOCK", 128)], "b512": [(sk, "REDUCE_BLOCK", 512)]}}[sys.argv[4]]
BASE = "old" if "old" in VARIANTS else "new"
sms = torch.cuda.get_device_properties(0).multi_processor_count


def under(fn, subs):
    for target, attr, value in subs:
        fn = patched(fn, target, attr, value)
    return fn


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    route = lambda: mm.matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c)} | {nm: under(route, subs) for nm, subs in VARIANTS.items()}
    fns["new"] = route
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    if mm.gluon_default(m, n, True):
        cfg = mg.default_config(m, n, sms)
        new = f"{cfg[0]}x{cfg[1]}x{cfg[2]} s{cfg[4]} split {mg.default_split(m, n, k, cfg, sms)}"
    else:
        new = f"TMA kernel {sk.default_tma_config(m, n, k, sms)}"
    same = ", ".join(f"{nm} {torch.equal(outs[nm], outs['new'])}" for nm in VARIANTS)
    wins = ", ".join(f"{faster_in(times, 'new', nm)} of {nm}" for nm in VARIANTS)
    print(f"{m}x{n}x{k} (new: {new}; new bitwise: {same}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) "
          f"[error]: {timings_line(times, errs)}; x {BASE}: {ratios(times, BASE)} (new faster in {wins})", flush=True)
PY

cat > /tmp/s42/gemm_survey.py <<'PY'
"""argv: rounds seconds Ms NKs (N x K pairs): ours (kernels.matmul.matmul) against cuBLAS at every M x (N, K)."""
import statistics
import sys

import torch

from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, outputs_and_errors, steady_in_turns

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
MS = [int(x) for x in sys.argv[3].split(",")]
NKS = [tuple(int(x) for x in s.split("x")) for s in sys.argv[4].split(",")]
for n, k in NKS:
    for m in MS:
        a, b, c, ref = gemm_operands(m, n, k)
        fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ours": lambda: matmul(a, b, out=c)}
        errs = outputs_and_errors(fns, c, ref)[1]
        t = {nm: statistics.median(v) for nm, v in steady_in_turns(fns, ROUNDS, SECONDS).items()}
        print(f"{m}x{n}x{k}: cublas {t['cublas']:.2f} us, ours {t['ours']:.2f} us, x cublas "
              f"{t['cublas'] / t['ours']:.3f}; errors {errs['cublas']:.1e} / {errs['ours']:.1e}", flush=True)
PY

cat > /tmp/s42/gemm_m64.py <<'PY'
"""argv: rounds seconds shapes.  M 49-64 (above SWAP_MAX_M) where the narrow unsplit tiles leave SMs idle: the route
against the narrow tiles with K split (`n2`, `n4`), the transposed tiles (`swap`: swapped_tma_config, K split by
swap_split) and the Gluon 64x64 tiles of 128-wide K steps in 2 / 4 / 8 chunks (`g2`, `g4`, `g8`)."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul_splitk as sk
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    swap = sk.swapped_tma_config(m, n, k, sms)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: matmul(a, b, out=c),
           "n2": lambda: sk.matmul_splitk_tma(a, b, c, (2, *sk.SPLITK_TMA_CONFIG[1:])),
           "n4": lambda: sk.matmul_splitk_tma(a, b, c, (4, *sk.SPLITK_TMA_CONFIG[1:])),
           "swap": lambda: sk.matmul_splitk_tma(a, b, c, swap)}
    for s in (2, 4, 8):
        fns[f"g{s}"] = lambda s=s: must_run(mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG, split=s), "g", mg.status)
    errs = outputs_and_errors(fns, c, ref)[1]
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (route {sk.default_tma_config(m, n, k, sms)}, swap {swap}), {ROUNDS} rounds of {SECONDS} s, "
          f"us a call median (min-max) [error]: {timings_line(times, errs)}; x ship: {ratios(times, 'ship')}",
          flush=True)
PY

case $CALL in
  call1)
    H="h=64x64x64s8,k128s4=64x64x128s4,k128s5=64x64x128s5,k128s6=64x64x128s6"
    timeout 330 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      104x4096x4096,127x4096x4096,80x4096x4096,104x4096x1024,104x4096x8192,512x1024x4096,512x512x8192,4096x128x4096,256x1024x8192,65x1024x4096 \
      "$H" 2>&1 | tee "${LOG}_gemm_bk.log"
    timeout 60 python3 /tmp/s42/gemm_bk.py 5 0.2 104x4096x4096,104x4096x8192 \
      "h=noload:64x64x64s8,k128s6=noload:64x64x128s6,k128s4=noload:64x64x128s4" 2>&1 | tee -a "${LOG}_gemm_bk.log"
    timeout 120 python3 /tmp/s42/gemm_bk.py 5 0.2 129x4096x4096,150x4096x4096,96x5120x4096,96x6144x4096 \
      "w=64x128x64s8,w128s4=64x128x128s4,w128s3=64x128x128s3" 2>&1 | tee -a "${LOG}_gemm_bk.log"
    ;;
  call2)
    K="h=64x64x64s8,k5=64x64x128s5,k6=64x64x128s6"
    timeout 250 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      65x4096x4096,96x4096x4096,128x4096x4096,128x4096x1024,384x1024x4096,256x2048x4096,200x2048x1024,1024x512x1024,1024x512x4096,640x512x4096,300x1024x4096,4096x128x1024,2048x256x4096,4096x128x4096,512x1024x2048,100x1024x2048,4096x64x4096 \
      "$K" 2>&1 | tee "${LOG}_gemm_bk.log"
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      512x512x8192,256x1024x8192,65x1024x4096,256x512x4096,96x2048x4096,100x1024x4096,128x1024x8192,96x512x4096,128x2048x4096 \
      "h=64x64x64s8,k5=64x64x128s5/=,k6=64x64x128s6/=,k6d=64x64x128s6" 2>&1 | tee -a "${LOG}_gemm_bk.log"
    timeout 150 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      64x4096x4096,48x4096x4096,32x4096x4096,16x4096x4096,1x4096x4096,64x1024x4096,32x2048x4096 \
      "$K" 2>&1 | tee -a "${LOG}_gemm_bk.log"
    ;;
  call3)
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      512x512x8192,256x1024x8192,65x1024x4096,256x512x4096,96x2048x4096,100x1024x4096,128x1024x8192,96x512x4096,128x2048x4096 \
      "h=64x64x64s8,k5=64x64x128s5/=,k6=64x64x128s6/=,k5d=64x64x128s5" 2>&1 | tee "${LOG}_gemm_bk.log"
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      4096x64x4096,16384x64x4096,1024x64x4096,2048x64x2048,8192x64x1024,512x64x8192,8192x64x4096 \
      "h=64x64x64s8,k5=64x64x128s5/=,k5d=64x64x128s5,slim=128x64x64s8" 2>&1 | tee -a "${LOG}_gemm_bk.log"
    ;;
  call4)
    timeout 240 python3 /tmp/s42/gemm_route.py 5 0.2 \
      96x2048x4096,128x2048x4096,4096x64x4096,96x1536x4096,512x512x8192,256x1024x8192,80x1024x8192,65x1024x4096,104x4096x4096,512x1024x4096,4096x128x4096,2048x64x2048,300x1024x4096,256x512x4096 \
      gluon 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 > "${LOG}_gpu_tests_matmul.log" 2>&1
    echo "gpu tests rc=$?"; tail -15 "${LOG}_gpu_tests_matmul.log"
    ;;
  call5)
    timeout 240 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      96x5120x4096,96x6144x4096,96x4352x4096,96x8192x4096,129x4096x4096,150x4096x4096,192x4096x1024,160x4096x2048,96x14336x4096 \
      "w=64x128x64s8,k5=64x64x128s5,k6=64x64x128s6" 2>&1 | tee "${LOG}_gemm_bk.log"
    ;;
  call6)
    timeout 300 python3 /tmp/s42/gemm_survey.py 3 0.1 1,8,16,32,48,64 \
      4096x4096,1024x4096,14336x4096,4096x14336,6144x4096,28672x4096,128256x4096 2>&1 | tee "${LOG}_gemm_survey.log"
    ;;
  call7)
    timeout 240 python3 /tmp/s42/gemm_m64.py 5 0.2 \
      64x1024x4096,56x1024x4096,49x1024x4096,64x2048x4096,64x1024x14336,64x4096x4096,64x1024x1024 \
      2>&1 | tee "${LOG}_gemm_m64.log"
    ;;
  call8)
    timeout 200 python3 /tmp/s42/gemm_route.py 5 0.2 \
      64x1024x4096,56x1024x4096,49x1024x4096,64x2048x4096,64x1024x14336,64x1024x2048,64x512x4096,60x1536x4096,64x1024x1024,64x4096x4096,64x2048x14336,64x256x8192 \
      narrow 2>&1 | tee "${LOG}_gemm_route64.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 \
      > "${LOG}_gpu_tests_matmul.log" 2>&1
    echo "gpu tests rc=$?"; tail -6 "${LOG}_gpu_tests_matmul.log"
    ;;
  call9)
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 > "${LOG}_gpu_tests_matmul.log" 2>&1
    echo "gpu tests rc=$?"; tail -6 "${LOG}_gpu_tests_matmul.log"
    ;;
  harnesses) ;;  # the harnesses under /tmp/s42 only (for later sessions' scripts)
  *) echo "unknown call $CALL"; exit 2 ;;
esac
