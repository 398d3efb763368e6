#!/usr/bin/env bash
# Session-43 device calls (issue 16), prepared in session 42 (nothing run yet): bash kernels/device_s43.sh CALL (OUT set
# by the tool).  Uses session 42's harnesses (`bash kernels/device_s42.sh harnesses` writes them under /tmp/s42).
# Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns).
# call1: the GEMMs session 42 left below 0.95x cuBLAS: the decode-sized narrow tiles in 8 chunks (NARROW_SPLIT_MAX
#        8; 64x256x8192 0.88x, 64x1024x14336 0.92x at 4), the 64-row Gluon tiles in 8 chunks of 128-wide steps at 8-16
#        tiles (65 / 80 x 1024 x 4096 / 8192 at 0.90 / 0.82x in 4), and 4096x128x4096 (0.75x: 128 64x64 tiles, one
#        round) on 64x128 tiles in 2 chunks and 128x64 tiles of 8 stages in 2 chunks.  Then the 64x64 tiles on K steps
#        of 256 at 3 stages (`k256`, 64 KB stages, 213 KB: built offline, no spills; session 42's 128-wide steps took
#        1.07-1.16x the 64-wide ones) against the shipped 128-wide steps, the same K chunks.
# call2: if an H100 is lent: kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table,
#        the H100 baseline's re-made entries, cuDNN's fp8 forward on an H100), then call 1 here.
# call1 ran (H200): none of it paid (narrow tiles in 8 chunks level, 64x64 tiles in 8 chunks 0.46-0.97, 64x128 /
#        128x64 split at 4096x128x4096 level or slower, K steps of 256 0.82-0.97).
# call2: the M 49-64 GEMMs still below cuBLAS (64x512x14336 0.71x, 64x256x8192 0.87, 64x1024x8192 0.90, 64x1024x14336
#        0.92 on call 1's card): the narrow 32-column tiles read A's 64 x 128 box (16 KB) for every 8 KB of B, so A's
#        re-reads from L2 are two thirds of what the SMs pull; wider tiles (64 / 128 columns) in more K chunks pull
#        less a program.  matmul_splitk_tma with raw configs (gemm_tma.py), unswapped and transposed, against the route.
# call2 ran: every wider tile slower at equal programs (64x1024x14336, 128 programs: 64-col tiles in 8 chunks 13.8 us,
#        128-col in 16 33.6, the route's 32-col in 4 10.6): the last program's reduction grows with the partials.
# call3: where the time goes: torch.profiler's kernels (names, CUPTI durations) of cuBLAS and ours at the M 49-64
#        shapes below cuBLAS (kern_prof.py); ncu --set full of both at 64x512x14336.
# call3 ran: cuBLAS runs the same 64x32 tiles (nvjet ..._64x32_64x16_1x2_h_bz_splitK: K steps of 64, clusters of 2)
#        in 8 chunks at 128 programs (64x512x14336: 4.95 us) and a splitKreduce kernel after (1.6-2.0 us); ours one
#        kernel of 9.5 us (4 chunks, 64 programs).
# call4: matmul_splitk_tma's partials summed by a second kernel (`r`: fused=False, new) and not at all (`x`: the K
#        loops alone), 4-16 chunks, K steps of 64 at 12 stages, 64-col tiles.
# call4 ran: the partials summed by a second kernel beat the fused sum at every split (n4r x n4 1.07-1.14); 64x512x14336
#        8 chunks summed after 7.50 us (cuBLAS 6.99, the route 9.84), 64x256x8192 6.14 (6.78), 64x1024x14336 on 64-col
#        tiles in 8 chunks 9.04 (9.40); the K loops alone (`x`) 5.2 / 3.9 us.
# call5: the second kernel with SPLIT a constexpr (every plane's load in flight; `o`: call 4's runtime loop) and 256-1024
#        elements a program; then the transposed tiles (M <= 48) with their partials summed after.
# call5 ran: SPLIT a constexpr 1.02-1.07x call 4's second kernel, 256 elements a program another 1.01-1.09x; the
#        transposed tiles' partials summed after 1.13-1.36x the fused sum (48x512x14336 7.78 against 10.42 us).
# call6: the committed route (partials summed by a second kernel of 256 elements a program, narrow tiles in up to 8
#        chunks, 64-column split tiles where they make as many programs) against session 42's (`tmasplit`'s `old`),
#        at M 1-64 where the TMA kernel splits and a few where it does not; then the GEMM GPU tests.
# call6 ran: new x old 1.03-1.64 wherever the TMA kernel splits (x cuBLAS 0.94-1.48, 48x512x14336 1.01), level where it
#        does not; 16x2048x14336 (32 transposed tiles in 2 chunks, 64 programs) 0.82x cuBLAS.  GPU tests 585 passed.
# call7: the transposed tiles split up to a whole wave where chunks keep >= 8 K tiles (SWAP_WAVE_MIN_K_TILES) against
#        half the SMs (`swapwave`'s `old`).
# call7 ran: the whole wave 1.16-1.32x where it applies (16x2048x14336 0.84 -> 1.08x cuBLAS); at 64 tiles (48x4096x4096)
#        the rule now leaves K unsplit as before (session 19: split 2 there traded cold for hot).
# call8: the committed rules: session 42's survey of the decode-sized GEMMs against cuBLAS (M 1-64 at LLM
#        projections and the split shapes of calls 6-7); the GEMM GPU tests.
# call8 ran: 69 of 70 survey shapes 0.98-1.49x cuBLAS; 64x4096x4096 0.91 (128 narrow tiles unsplit, unchanged).  GPU
#        tests 585 passed.
# call9: 64x4096x4096's 128 narrow tiles unsplit against 64-column tiles in 2 chunks summed after (128 programs).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
bash kernels/device_s42.sh harnesses > /dev/null || exit 3
[ "$CALL" = harnesses ] || device_env s43 "$CALL"  # harnesses: the files under /tmp/s43 only
mkdir -p /tmp/s43
cat > /tmp/s43/gemm_tma.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...) configs (name=SPLITxBNxBKwWsS[t][x|r[BLOCK][o]],...: matmul_splitk_tma's
config, `t` the tile transposed, `r` the partials summed by a second kernel (fused=False; BLOCK: its REDUCE_BLOCK;
`o`: session 42's second kernel, SPLIT a runtime loop), `x` not summed at all: the K loops alone, wrong sums, timed
anyway).  Each against the route (`ship`) and cuBLAS; `programs`: the grid's size."""
import re
import sys

import torch
import triton

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, module_copy, outputs_and_errors, patched, ratios, steady_in_turns, timings_line


OLD_REDUCE = module_copy("_sk_old_reduce", "kernels/matmul_splitk.py", [
    (r"SPLIT: tl.constexpr, scm, scn, BLOCK", "SPLIT, scm, scn, BLOCK"),
    (r"for s in tl.static_range\(SPLIT\):", "for s in range(SPLIT):")])._splitk_reduce


class NO_REDUCE:  # noqa: N801 (stands in for a launchable kernel: _splitk_reduce[grid](...) does nothing)
    def __class_getitem__(cls, grid):
        return lambda *args, **kw: None


ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CFGS = {}
for item in sys.argv[4].split(","):
    name, spec = item.split("=")
    sp, bn, bk, w, st, t, suf = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)(t?)(x|r\d*o?|)", spec).groups()
    r, blk, o = suf[:1], suf.strip("rxo"), suf.endswith("o")
    CFGS[name] = ((int(sp), int(bn), int(bk), int(w), int(st), True, bool(t), False), r, int(blk or 0), bool(o))
sms = torch.cuda.get_device_properties(0).multi_processor_count

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    splits = {}
    for name, (cfg, r, blk, o) in CFGS.items():
        kt = triton.cdiv(k, cfg[2])
        splits[name] = triton.cdiv(kt, triton.cdiv(kt, cfg[0])) * triton.cdiv(n, cfg[1]) * triton.cdiv(m, 64)
        fns[name] = (lambda cfg=cfg, r=r: sk.matmul_splitk_tma(a, b, c, cfg, fused=not r))
        if r == "x":
            fns[name] = patched(fns[name], sk, "_splitk_reduce", NO_REDUCE)
        if blk:
            fns[name] = patched(fns[name], sk, "REDUCE_BLOCK", blk)
        if o:
            fns[name] = patched(fns[name], sk, "_splitk_reduce", OLD_REDUCE)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2 and CFGS.get(nm, (0, ""))[1] != "x"]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (ship: {sk.default_tma_config(m, n, k, sms)}; programs {splits}; wrong: {bad}; errors "
          f"{', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max): "
          f"{timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY
cat > /tmp/s43/kern_prof.py <<'PY'
"""argv: shapes (MxNxK,...).  cuBLAS's and our kernels for each shape under torch.profiler: 50 calls each after a
warm-up, each kernel's name (cut to 110 characters), count and mean CUPTI duration."""
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from kernels import matmul as mm
from kernels.tune_ab import gemm_operands

for shape in sys.argv[1].split(","):
    m, n, k = (int(x) for x in shape.split("x"))
    a, b, c, _ = gemm_operands(m, n, k)
    for who, fn in (("cublas", lambda: torch.matmul(a, b, out=c)), ("ours", lambda: mm.matmul(a, b, out=c))):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
        kern = defaultdict(list)
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                kern[ev.name].append(ev.device_time)
        parts = "; ".join(f"{nm[:110]} x{len(v)} {sum(v) / len(v):.2f} us" for nm, v in kern.items())
        total = sum(sum(v) for v in kern.values()) / 50
        print(f"{shape} {who}: {total:.2f} us of kernels a call: {parts}", flush=True)
PY

case $CALL in
  call1)
    # the narrow tiles: the route (4 chunks) against NARROW_SPLIT_MAX 8 (`max8`)
    timeout 120 python3 /tmp/s42/gemm_route.py 5 0.2 64x256x8192,64x1024x14336,64x512x14336,49x256x8192,64x512x4096 \
      narrow8 2>&1 | tee "${LOG}_gemm_narrow8.log"
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 65x1024x4096,80x1024x8192,100x1024x4096,96x512x4096,64x1024x8192 \
      "k4=64x64x128s5/=,k8=64x64x128s5/8,k2=64x64x128s5/2" 2>&1 | tee "${LOG}_gemm_half8.log"
    timeout 120 python3 /tmp/s42/gemm_bk.py 5 0.2 4096x128x4096,2048x256x4096,4096x128x8192 \
      "k=64x64x128s5,w2=64x128x64s8/2,w1=64x128x64s8,s2=128x64x64s8/2" 2>&1 | tee "${LOG}_gemm_tall.log"
    timeout 200 python3 /tmp/s42/gemm_bk.py 5 0.2 \
      104x4096x4096,127x4096x4096,65x4096x4096,512x1024x4096,256x2048x4096,4096x128x4096,104x4096x1024,300x1024x4096,256x1024x8192,100x1024x4096 \
      "k5=64x64x128s5/=,k256=64x64x256s3/=" 2>&1 | tee "${LOG}_gemm_k256.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s43/gemm_tma.py 5 0.2 \
      64x1024x14336,64x512x14336,64x256x8192,64x1024x8192,64x1024x4096,56x1024x14336,64x2048x14336,64x4096x4096 \
      "n8=8x32x128w4s6,w4=4x64x128w4s6,w8=8x64x128w4s6,w8s4=8x64x128w4s4,w16=16x64x128w4s4,v8=8x128x128w4s4,v16=16x128x128w4s4,t8=8x64x128w4s4t,t16=16x128x128w4s4t,k8=8x64x64w4s8" \
      2>&1 | tee "${LOG}_gemm_tma.log"
    ;;
  call3)
    timeout 200 python3 /tmp/s43/kern_prof.py 64x512x14336,64x256x8192,64x1024x8192,64x1024x14336,64x1024x4096,64x4096x4096,48x512x14336 \
      2>&1 | tee "${LOG}_kern_prof.log"
    for who in ours cublas; do gemm_ncu $who 64x512x14336; done 2>&1 | tee "${LOG}_ncu.log"
    ;;
  call4)
    timeout 400 python3 /tmp/s43/gemm_tma.py 5 0.2 \
      64x512x14336,64x256x8192,64x1024x8192,64x1024x14336,64x1024x4096,48x512x14336,64x2048x14336 \
      "n4=4x32x128w4s6,n4r=4x32x128w4s6r,n4x=4x32x128w4s6x,n8=8x32x128w4s6,n8r=8x32x128w4s6r,n8x=8x32x128w4s6x,n16r=16x32x128w4s4r,k8r=8x32x64w4s12r,k8x=8x32x64w4s12x,w8r=8x64x128w4s4r" \
      2>&1 | tee "${LOG}_gemm_tma.log"
    ;;
  call5)
    timeout 200 python3 /tmp/s43/gemm_tma.py 5 0.2 64x512x14336,64x256x8192,64x1024x14336,64x1024x4096 \
      "n8o=8x32x128w4s6ro,n8r=8x32x128w4s6r,n8r512=8x32x128w4s6r512,n8r256=8x32x128w4s6r256,n4o=4x32x128w4s6ro,n4r=4x32x128w4s6r,n4r256=4x32x128w4s6r256,w8r=8x64x128w4s4r,w8r256=8x64x128w4s4r256" \
      2>&1 | tee "${LOG}_gemm_reduce.log"
    timeout 200 python3 /tmp/s43/gemm_tma.py 5 0.2 48x512x14336,32x512x14336,16x512x14336,48x256x8192,16x256x8192,32x1024x14336,40x1024x8192 \
      "t8=8x64x128w4s4t,t8r=8x64x128w4s4tr,t4r=4x64x128w4s4tr,t16r=16x64x128w4s4tr,n8r=8x32x128w4s6r,n16r=16x32x128w4s4r" \
      2>&1 | tee "${LOG}_gemm_swap.log"
    ;;
  call6)
    timeout 300 python3 /tmp/s42/gemm_route.py 5 0.2 \
      64x256x8192,64x512x14336,64x1024x4096,64x1024x8192,64x1024x14336,64x2048x4096,64x2048x14336,60x1536x4096,56x1024x14336,49x2048x4096,56x512x4096,64x1024x2048,64x4096x4096,48x512x14336,48x256x8192,40x1024x8192,32x1024x14336,32x2048x4096,16x1024x4096,16x512x14336,8x1024x8192,1x1024x4096,1x512x14336,16x2048x14336,8x4096x4096,32x256x4096 \
      tmasplit 2>&1 | tee "${LOG}_gemm_route.log"
    timeout 280 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call7)
    timeout 200 python3 /tmp/s42/gemm_route.py 5 0.2 \
      16x2048x14336,32x1024x14336,40x1024x8192,32x2048x4096,8x1024x8192,16x2048x4096,1x2048x4096,24x1024x14336,48x1024x4096,4x2048x8192,48x512x14336 \
      swapwave 2>&1 | tee "${LOG}_gemm_swapwave.log"
    ;;
  call8)
    timeout 240 python3 /tmp/s42/gemm_survey.py 3 0.1 1,8,16,32,48,56,64 \
      4096x4096,1024x4096,14336x4096,4096x14336,6144x4096,28672x4096,512x14336,1024x14336,2048x4096,256x8192 \
      2>&1 | tee "${LOG}_gemm_survey.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call9)
    timeout 150 python3 /tmp/s43/gemm_tma.py 5 0.2 64x4096x4096,56x4096x4096,64x3072x4096 \
      "n1=1x32x128w4s6,w2r=2x64x128w4s4r,w2r6=2x64x128w4s6r" 2>&1 | tee "${LOG}_gemm_w2.log"
    ;;
  harnesses) ;;  # the harnesses under /tmp/s43 only (for later sessions' scripts)
  *) echo "unknown call $CALL"; exit 2 ;;
esac
