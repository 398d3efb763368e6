#!/usr/bin/env bash
# Session-44 device calls (issue 16; calls 1-2 prepared in session 43, 3-11 added in session 44, all run): bash
# kernels/device_s44.sh CALL (OUT set by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped
# steady state (kernels/tune_ab).
# call1: session 43's split rules for the decode-sized GEMMs (partials summed by a second kernel, up to 8 narrow chunks,
#        64-column split tiles, a whole wave of transposed tiles) were timed with B resident in L2 (the suite's
#        timing).  A model's weights stream from DRAM: the same route against session 42's (`old`: gemm_route.py
#        tmasplit's and swapwave's settings together) and cuBLAS with B cycled over copies filling 3x the L2
#        (`cold.py`: one graph of 20 passes over the copies, microseconds a call), then hot as a check.
# call2: the split partials' second kernel at 128 and 512 elements a program against the shipped 256 (session 43: 256
#        1.01-1.09x 1024), through session 42's gemm_route.py (`reduceblk`).
# call3 (added in session 44): where the Gluon kernel's 64-row tiles trail cuBLAS below the suite's shapes (M 65-128,
#        N <= 512, 96 x 5120-6144 x 4096), the Triton TMA kernel's tiles (64 rows; 32 / 64 / 128 columns; split K with
#        the partials summed by the second kernel) against the route, through session 43's gemm_tma.py.
# call4 (added in session 44): the Gluon kernel's K split with its partials summed by matmul_splitk's second kernel
#        (_matmul_gluon.SPLIT_FUSED False) against the shipped fused sum, wherever the route splits; cuBLAS and
#        call 3's Triton tiles beside (`gluon_fused.py`).
# call5 (added in session 44): with the partials summed by the second kernel, the Gluon route's tiles in 1 / 2 / 4 / 8
#        chunks of K (`gluon_splits.py`), for default_split's rule.
# call6 (added in session 44; SPLIT_FUSED False shipped): default_split's SPLIT_MAX at 8, the 64x128 tiles split,
#        2 chunks at 48-64 tiles (`gluon_rule.py`).
# call7 (added in session 44): M 65-128 x N 4352-7168 (0.75-0.89x cuBLAS on 80-112 unsplit 64x128 tiles): those tiles
#        and the 64x64 ones with K in 2-4 chunks, 3 among them (`gluon_rows96.py`); cuBLAS's kernels there (kern_prof).
# call8 (added in session 44): call 7 found cuBLAS on 64x96 tiles at 96x5120x4096 (B read once, 80 CTAs); the TMA
#        kernel's transposed tiles, one program along M (A through boxes of 64 + 32 rows), at M 65-128 (`swap96.py`).
# call9 (added in session 44, on the change as committed): the route against the one before it, then the GEMM GPU
#        tests.
# call10 (added in session 44): 36-48 64x64 tiles at K = 4096 (64 K steps: unsplit by the rule above a quarter of the
#        SMs) in 2 chunks with the second kernel's sum (call 6: 96 / 80 x 1536 x 4096 1.07), `gluon_splits.py`.
# call11 (added in session 44, on HALF_SPLIT_LOW_FILL 0.375 as committed): call 9's comparison at 36-48 tiles, then
#        the GEMM GPU tests.
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then call 1 here.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s44 "$CALL"  # harnesses: the files under /tmp/s44 only
mkdir -p /tmp/s44
bash kernels/device_s42.sh harnesses > /dev/null || exit 3  # session 42's gemm_route.py (call 2)
bash kernels/device_s43.sh harnesses > /dev/null || exit 3  # session 43's gemm_tma.py (call 3)

cat > /tmp/s44/cold.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...) [hot].  The route (`new`) against session 42's split rules (`old`) and
cuBLAS, B cycled over copies that fill three times the L2 (each call reads another copy: B streamed from DRAM), or,
with `hot`, one B (resident in L2).  Microseconds a call: a graph of 20 passes over the copies replayed back to back."""
import math
import statistics
import sys

import torch

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, graph_of, patched, rounds_in_turns, steady_us

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
HOT = len(sys.argv) > 4 and sys.argv[4] == "hot"
OLD = [(sk, "TMA_SPLIT_FUSED", True), (sk, "NARROW_SPLIT_MAX", 4), (sk, "MID_SPLIT_CONFIG", None),
       (sk, "SWAP_WAVE_MIN_K_TILES", None)]
l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
sms = torch.cuda.get_device_properties(0).multi_processor_count


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    copies = 1 if HOT else max(2, math.ceil(3 * l2_bytes / (b.numel() * b.element_size())))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    route = {"cublas": lambda bb: torch.matmul(a, bb, out=c), "new": lambda bb: mm.matmul(a, bb, out=c)}

    def under_old(bb):
        fn = lambda: mm.matmul(a, bb, out=c)
        for target, attr, value in OLD:
            fn = patched(fn, target, attr, value)
        return fn()

    route["old"] = under_old
    errs = {}
    for name, fn in route.items():
        c.fill_(float("nan"))
        fn(b)
        torch.cuda.synchronize()
        errs[name] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    passes = {name: (lambda fn=fn: [fn(bb) for bb in bs]) for name, fn in route.items()}
    graphs = {name: graph_of(fn) for name, fn in passes.items()}
    times = rounds_in_turns(graphs, ROUNDS, timer=lambda g: steady_us(g, SECONDS) / copies)
    med = {name: statistics.median(v) for name, v in times.items()}
    how = "hot" if HOT else f"cold ({copies} copies of B)"
    print(f"{m}x{n}x{k} {how} (new: {sk.default_tma_config(m, n, k, sms)}; "
          f"errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call "
          f"median: {', '.join(f'{nm} {t:.2f}' for nm, t in med.items())}; new x old {med['old'] / med['new']:.3f}, "
          f"x cublas: old {med['cublas'] / med['old']:.3f}, new {med['cublas'] / med['new']:.3f}", flush=True)
PY

cat > /tmp/s44/gluon_fused.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route as shipped (`fused`: the Gluon kernel's split partials summed
by each tile's last warpgroup) against the same route with _matmul_gluon.SPLIT_FUSED False (`sep`: summed by
matmul_splitk's second kernel), cuBLAS, and the Triton TMA kernel's 64x64 / 64x128 tiles in 4 chunks (`t64`, `t128`,
second kernel; call 3's best at 256x512x4096 / 512x512x8192)."""
import sys

import torch
import triton

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    cfg = mg.default_config(m, n, sms, True)
    split = mg.default_split(m, n, k, cfg[:3], sms)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "fused": lambda: mm.matmul(a, b, out=c)}
    fns["sep"] = patched(fns["fused"], mg, "SPLIT_FUSED", False)
    fns["t64"] = lambda: sk.matmul_splitk_tma(a, b, c, (4, 64, 128, 4, 3, True), fused=False)
    fns["t128"] = lambda: sk.matmul_splitk_tma(a, b, c, (4, 128, 64, 4, 4, True), fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    same = torch.equal(outs["fused"], outs["sep"])
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, split {split}; sep bitwise fused: {same}; "
          f"wrong: {bad}; errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): {timings_line(times)}; x fused: {ratios(times, 'fused')}",
          flush=True)
PY

cat > /tmp/s44/gluon_splits.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The Gluon kernel's route config with K in 1 / 2 / 4 / 8 chunks, the
partials summed by the second kernel (fused=False), against the route (`ship`, whatever SPLIT_FUSED says) and cuBLAS;
`t128`: the Triton TMA kernel's 64x128 tiles (64-wide K steps) in 4 chunks."""
import sys

import torch
import triton

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    cfg = mg.default_config(m, n, sms, True)
    split = mg.default_split(m, n, k, cfg[:3], sms)
    tiles = triton.cdiv(m, cfg[0]) * triton.cdiv(n, cfg[1])
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for s in (1, 2, 4, 8):
        if cfg[1] in mg.SPLIT_BLOCK_N or s == 1:
            fns[f"s{s}"] = lambda s=s: mg.matmul_ws(a, b, c, None, True, False, s, False)
    fns["t128"] = lambda: sk.matmul_splitk_tma(a, b, c, (4, 128, 64, 4, 4, True), fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, {tiles} tiles, split {split}; wrong: "
          f"{bad}; errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, "
          f"us a call median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s44/gluon_rule.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`: the split partials summed by the second kernel) against
_matmul_gluon.SPLIT_MAX 8 (`max8`), the Gluon kernel's 64x128 tiles (WS_HALF_WIDE_CONFIG) with K in 2 / 4 chunks
(`w2`, `w4`), the route's tiles in 2 chunks (`s2`), cuBLAS, and the Triton TMA kernel's 64x128 tiles in 4 chunks
(`t128`)."""
import sys

import torch
import triton

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    cfg = mg.default_config(m, n, sms, True)
    split = mg.default_split(m, n, k, cfg[:3], sms)
    with_max8 = patched(lambda: mg.default_split(m, n, k, cfg[:3], sms), mg, "SPLIT_MAX", 8)()
    tiles = triton.cdiv(m, cfg[0]) * triton.cdiv(n, cfg[1])
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    if with_max8 != split:
        fns["max8"] = patched(fns["ship"], mg, "SPLIT_MAX", 8)
    if cfg[1] in mg.SPLIT_BLOCK_N and split != 2:
        fns["s2"] = lambda: mg.matmul_ws(a, b, c, None, True, False, 2)
    if m <= 512:
        for s in (2, 4):
            fns[f"w{s}"] = lambda s=s: mg.matmul_ws(a, b, c, mg.WS_HALF_WIDE_CONFIG, True, False, s)
    fns["t128"] = lambda: sk.matmul_splitk_tma(a, b, c, (4, 128, 64, 4, 4, True), fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, {tiles} tiles, split {split}, with "
          f"SPLIT_MAX 8 {with_max8}; wrong: {bad}; errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), "
          f"{ROUNDS} rounds of {SECONDS} s, us a call median (min-max): {timings_line(times)}; x ship: "
          f"{ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s44/gluon_rows96.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  M 65-128 with N 4352-7168 (the Gluon kernel's 64x128 tiles, unsplit: 80-112
tiles, under a round): those tiles (WS_HALF_WIDE_CONFIG) with K in 2 / 3 / 4 chunks (`w2`..`w4`; 3: 240 items, two
rounds of a third of K), the 64x64 tiles (WS_HALF_CONFIG) in 1 / 2 / 3 (`h1`..`h3`), partials summed by the second
kernel, against the route (`ship`) and cuBLAS."""
import sys

import torch
import triton

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    cfg = mg.default_config(m, n, sms, True)
    tiles = triton.cdiv(m, cfg[0]) * triton.cdiv(n, cfg[1])
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for s in (2, 3, 4):
        fns[f"w{s}"] = lambda s=s: mg.matmul_ws(a, b, c, mg.WS_HALF_WIDE_CONFIG, True, False, s)
    for s in (1, 2, 3):
        fns[f"h{s}"] = lambda s=s: mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG, True, False, s)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, {tiles} tiles, split "
          f"{mg.default_split(m, n, k, cfg[:3], sms)}; wrong: {bad}; errors "
          f"{', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s44/swap96.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...) configs (name=BNxBKwWsS[bBOX]).  M 65-128: the TMA kernel's tiles computed
transposed (SWAP_AB), one program along M: A's rows through a box of 64 and a second of the next power of two >= M - 64
(BLOCK_M2; `bBOX`: one box of BOX rows instead), B read once (cuBLAS there: 64x96 tiles, `nvjet_sm90_tst_64x96`);
against the route (`ship`: the Gluon kernel's 64x128 tiles in two tile rows) and cuBLAS."""
import re
import sys

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels._checks import next_pow2
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CFGS = {}
for item in sys.argv[4].split(","):
    name, spec = item.split("=")
    bn, bk, w, st, box = re.fullmatch(r"(\d+)x(\d+)w(\d+)s(\d+)(?:b(\d+))?", spec).groups()
    CFGS[name] = (int(bn), int(bk), int(w), int(st), int(box or 0))


def swapped(a, b, c, bn, bk, warps, stages, box):
    m, k = a.shape
    n = b.shape[1]
    bm, bm2 = (box, 0) if box else (64, max(16, next_pow2(m - 64)))
    da = TensorDescriptor(a, [m, k], [a.stride(0), 1], [bm, bk])
    da2 = TensorDescriptor(a, [m, k], [a.stride(0), 1], [bm2, bk]) if bm2 else None
    db = TensorDescriptor(b, [k, n], [b.stride(0), 1], [bk, bn])
    kt = triton.cdiv(k, bk)
    sk._splitk_tma[(triton.cdiv(n, bn), 1, 1)](da, db, c, c, c, m, n, k, kt, a.stride(0), b.stride(0), c.stride(0),
                                               BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT=1, HOST_DESC=True,
                                               DOT_F32=False, SWAP_AB=True, A_PTR=False, A2=da2, BLOCK_M2=bm2,
                                               A_WIN=False, FUSED=True, num_warps=warps, num_stages=stages)
    return c


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in CFGS.items():
        fns[name] = lambda cfg=cfg: swapped(a, b, c, *cfg)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (programs {', '.join(f'{nm} {triton.cdiv(n, cfg[0])}' for nm, cfg in CFGS.items())}; wrong: "
          f"{bad}; errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, "
          f"us a call median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s44/gluon_final.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route as committed (the Gluon kernel's split partials summed by the
second kernel, up to SPLIT_MAX_FEW chunks at few tiles, 2 chunks at 36-48 tiles) against the route before (`old`:
SPLIT_FUSED True, SPLIT_MAX_FEW 4, HALF_SPLIT_LOW_FILL 0.25) and cuBLAS; outputs compared bitwise."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.tune_ab import gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    cfg = mg.default_config(m, n, sms, True)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    fns["old"] = patched(patched(patched(fns["ship"], mg, "SPLIT_FUSED", True), mg, "SPLIT_MAX_FEW", 4), mg,
                         "HALF_SPLIT_LOW_FILL", 0.25)
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, split "
          f"{mg.default_split(m, n, k, cfg[:3], sms)}; ship bitwise old: {torch.equal(outs['ship'], outs['old'])}; "
          f"errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call "
          f"median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

SHAPES=64x512x14336,64x1024x14336,64x256x8192,64x1024x4096,64x2048x4096,48x512x14336,16x2048x14336,32x1024x14336,1x2048x4096,8x1024x8192,64x4096x4096
case $CALL in
  call1)
    timeout 300 python3 /tmp/s44/cold.py 5 0.2 $SHAPES 2>&1 | tee "${LOG}_gemm_cold.log"
    timeout 150 python3 /tmp/s44/cold.py 3 0.1 $SHAPES hot 2>&1 | tee "${LOG}_gemm_hot.log"
    ;;
  call2)
    timeout 200 python3 /tmp/s42/gemm_route.py 5 0.2 $SHAPES reduceblk 2>&1 | tee "${LOG}_gemm_reduceblk.log"
    ;;
  call3)
    timeout 400 python3 /tmp/s43/gemm_tma.py 5 0.2 \
      96x5120x4096,96x6144x4096,104x4096x4096,65x1024x4096,80x1024x8192,256x512x4096,512x512x8192,4096x128x4096,2048x64x2048 \
      "n1=1x32x128w4s6,m1=1x64x128w4s4,m1c=1x64x128w4s3,m2=2x64x128w4s3r,m4=4x64x128w4s3r,w1=1x128x64w4s4,w2=2x128x64w4s4r,w4=4x128x64w4s4r" \
      2>&1 | tee "${LOG}_gemm_tma_m65.log"
    ;;
  call4)
    timeout 400 python3 /tmp/s44/gluon_fused.py 5 0.2 \
      65x1024x4096,80x1024x8192,100x1024x4096,96x1536x4096,96x2048x4096,128x2048x4096,128x1024x8192,256x512x4096,256x1024x8192,512x512x8192,512x1024x4096,1024x64x4096,512x64x8192,4096x64x4096,200x2048x1024 \
      2>&1 | tee "${LOG}_gemm_gluon_fused.log"
    ;;
  call5)
    timeout 450 python3 /tmp/s44/gluon_splits.py 4 0.15 \
      65x1024x4096,80x1024x8192,96x1536x4096,96x2048x4096,104x4096x4096,128x1024x8192,256x512x4096,256x1024x8192,512x512x8192,512x1024x4096,1024x64x4096,512x64x8192,4096x64x4096,4096x128x4096,2048x64x2048,200x2048x1024,1024x1024x4096 \
      2>&1 | tee "${LOG}_gemm_gluon_splits.log"
    ;;
  call6)
    timeout 450 python3 /tmp/s44/gluon_rule.py 4 0.15 \
      512x64x8192,1024x64x8192,65x512x8192,128x512x8192,256x256x8192,512x256x8192,1024x256x8192,256x128x16384,96x1536x4096,80x1536x4096,96x2048x4096,256x512x4096,256x1024x8192,512x512x8192,128x1024x8192,512x512x4096 \
      2>&1 | tee "${LOG}_gemm_gluon_rule.log"
    ;;
  call7)
    timeout 300 python3 /tmp/s44/gluon_rows96.py 4 0.15 \
      96x4352x4096,96x5120x4096,96x6144x4096,96x7168x4096,65x5120x4096,128x5120x4096,96x5120x8192,112x6144x4096 \
      2>&1 | tee "${LOG}_gemm_rows96.log"
    timeout 100 python3 /tmp/s43/kern_prof.py 96x5120x4096,96x6144x4096,128x5120x4096 2>&1 | tee "${LOG}_kern_prof.log"
    ;;
  call8)
    timeout 300 python3 /tmp/s44/swap96.py 4 0.15 \
      96x5120x4096,96x4352x4096,96x6144x4096,96x7168x4096,65x5120x4096,80x5120x4096,112x6144x4096,128x5120x4096,96x5120x8192 \
      "k128s4=64x128w4s4,k128s3=64x128w4s3,k64s6=64x64w4s6,k64s8=64x64w4s8,w8=64x128w8s4,box128=64x128w4s4b128,n32=32x128w4s6" \
      2>&1 | tee "${LOG}_gemm_swap96.log"
    ;;
  call9)
    timeout 200 python3 /tmp/s44/gluon_final.py 4 0.15 \
      65x1024x4096,80x1024x8192,100x1024x4096,128x1024x8192,256x512x4096,256x1024x8192,512x512x8192,1024x64x4096,512x64x8192,256x128x16384,2048x64x8192,96x2048x4096,512x1024x4096,4096x4096x4096 \
      2>&1 | tee "${LOG}_gemm_gluon_final.log"
    timeout 330 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider \
      -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call10)
    timeout 250 python3 /tmp/s44/gluon_splits.py 4 0.15 \
      96x1536x4096,80x1536x4096,128x1536x4096,192x1024x4096,256x768x4096,128x1280x4096,320x512x4096,2560x64x4096,576x256x4096,2304x64x4096 \
      2>&1 | tee "${LOG}_gemm_gluon_splits40.log"
    ;;
  call11)
    timeout 150 python3 /tmp/s44/gluon_final.py 4 0.15 \
      96x1536x4096,80x1536x4096,192x1024x4096,320x512x4096,576x256x4096,2304x64x4096,128x1280x4096,96x2048x4096,65x1024x4096,512x64x8192 \
      2>&1 | tee "${LOG}_gemm_gluon_final.log"
    timeout 330 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider \
      -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
