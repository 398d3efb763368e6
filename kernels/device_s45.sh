#!/usr/bin/env bash
# Session-45 device calls (issue 16), prepared in session 44 (nothing run yet): bash kernels/device_s45.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab).
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then the GEMM routing of sessions 38-44 timed there.
# call1: session 44's calls 3-6 found the Triton TMA kernel's 64-row tiles, K split and the partials summed by the
#        second kernel, ahead of the Gluon route's 64x64 tiles at M >= 256 (multiples of 64, no rows past M) with
#        N <= 1024: 64x128 tiles in 4 chunks 1024x256x8192 1.38, 512x512x8192 1.34, 576x256x4096 1.15 (against 2
#        chunks there), 512x512x4096 1.16, 256x1024x8192 1.11, 320x512x4096 1.10 (against 2 chunks), 512x256x8192
#        1.09; behind at M 65-192 and N = 64.  A survey for a rule: M 192-2048 x N 128-1024 x K 4096 / 8192, the
#        route against those tiles (`t64`: 64x64, K steps of 128, 3 stages; `t128`: 64x128, K steps of 64, 4 stages)
#        with K in the most power-of-two chunks whose programs fit one round with at least 8 K steps a chunk
#        (`tma_rows.py`); then call 2 on what it finds.
# call3: (after call 2: ROWS_MIN_M 128, 64x128 tiles only where 128 divides N) the rule at N = 64 mod 128 (64x64
#        tiles alone), at M 128-191 as shipped, below ROWS_MIN_M (M 65-127) the pick forced, two survey shapes again;
#        then the GEMM GPU tests.
# call4: (after call 3: ROWS_MIN_M 65) where the rule's tiles still trail cuBLAS (K 14336-16384 and 2048x128x8192:
#        0.73-0.90x), the Gluon kernel's 128-row tiles split with the second kernel's sums (`g128x128`, `g128x64`: 2-8
#        chunks, one round; session 39 timed them only with fused sums, 0.19-0.76x) and the 64x128 split tiles in 16
#        chunks (`r16`; `big_k.py`); then the GEMM GPU tests on ROWS_MIN_M 65.
# call5: (after call 4: the 64x128 tiles in 16 chunks 1.13 / 1.05x the rule at 256x256x16384 / 512x128x16384, 0.94x
#        at 384x128x8192; the Gluon 128-row split tiles 0.21-1.02x) 16 chunks where they fit one round: M 128-512 x
#        N 128-512 x K 8192-28672 (`chunks16.py`: 64x128 tiles `r16`, 64x64 tiles `h16`).
# call6: (after call 5: ROWS_MAX_CHUNKS 16) the rule as committed against the route before it at shapes of each of its
#        cases, and the GEMM GPU tests.
# call7: (after call 6) where the rule's tiles trail cuBLAS (0.73-0.90x: K 14336-28672 in 4-16 chunks, 2048x128x8192),
#        the rule's config varied (`rows_variants.py`: K steps of 128 for 64x128 tiles / 64 for 64x64, 5-6 stages, 8
#        warps, twice the chunks over two rounds, the other candidate); cuBLAS's and our kernels under torch.profiler
#        (session 43's kern_prof.py).
# call8: (after call 7: two more stages 1.04-1.26x the rule's config at all ten shapes) ROWS_CONFIGS at 5 / 6 stages
#        (64x64 / 64x128) as committed against the same tiles and chunks at 3 / 4 (`prev`), the Gluon route (`before`)
#        and cuBLAS (`rows_stages.py`); the rows route's GPU tests (tests/kernels/test_matmul_rows.py: no other test
#        reaches ROWS_CONFIGS; the full GEMM GPU tests passed on the rule in call 6).
# call2: (after call 1: kernels/matmul_rows.py, the 64-row split tiles taken by matmul's default route where they
#        split K in 4 chunks or more, from 192 rows and 128 columns) the rule off the surveyed grid (`verify_rows.py`:
#        M 200-1536 x N 192-768 x K 5120 / 14336, M 256-1024 x N 128-512 x K 16384), the route as shipped against the
#        route before (the Gluon kernel's default tiles, gluon=True) and cuBLAS, and at M 128 / 160 (below
#        ROWS_MIN_M) the rule's pick forced; then the GEMM GPU tests with tests/kernels/test_matmul_rows.py.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s45 "$CALL"  # harnesses: the files under /tmp/s45 only
mkdir -p /tmp/s45

cat > /tmp/s45/tma_rows.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`) against the Triton TMA kernel's 64-row tiles (`t64`
64x64 on K steps of 128 at 3 stages, `t128` 64x128 on K steps of 64 at 4 stages), K split as the decode-sized narrow
tiles' rule splits it (matmul_splitk.narrow_chunks: the most power-of-two chunks, up to 8, whose programs fit one
round with at least 8 K steps a chunk, K >= 4096), partials summed by the second kernel; and cuBLAS."""
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
TILES = {"t64": (64, 128, 4, 3), "t128": (128, 64, 4, 4)}  # BLOCK_N, BLOCK_K, warps, stages
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    cfgs = {}
    for name, (bn, bk, warps, stages) in TILES.items():
        split = sk.narrow_chunks(sk.tma_tiles(m, n, bn), k, bk, sms)  # the narrow tiles' rule (8 chunks, 8 K tiles)
        cfgs[name] = (split, bn, bk, warps, stages, True)
        fns[name] = lambda cfg=cfgs[name]: sk.matmul_splitk_tma(a, b, c, cfg, fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms, True)
    print(f"{m}x{n}x{k} (route: gluon {mm.gluon_default(m, n, True)}, {cfg}, split "
          f"{mg.default_split(m, n, k, cfg[:3], sms)}; {', '.join(f'{nm} {c_}' for nm, c_ in cfgs.items())}; wrong: "
          f"{bad}; errors {', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, "
          f"us a call median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s45/verify_rows.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  matmul's default route (`ship`, kernels/matmul_rows.py's rule) against
the route before it (`before`: the Gluon kernel, gluon=True) and cuBLAS; `pick`: matmul_rows.rows_pick's config forced
where the rule leaves the route but the pick splits K in ROWS_MIN_CHUNKS or more (M below ROWS_MIN_M)."""
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
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c),
           "before": lambda: mm.matmul(a, b, out=c, gluon=True)}
    rule = mr.rows_split_config(m, n, k, sms)
    pick = mr.rows_pick(m, n, k, sms)
    if rule is None and pick is not None and pick[0] >= mr.ROWS_MIN_CHUNKS:
        fns["pick"] = lambda: sk.matmul_splitk_tma(a, b, c, pick)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {rule}; pick {pick}; wrong: {bad}; errors "
          f"{', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; x before: {ratios(times, 'before')}", flush=True)
PY

cat > /tmp/s45/big_k.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`) against the Gluon kernel's 128x128 / 128x64 tiles with
K split 2-8 ways (the programs one round), partials summed by the second kernel, and the TMA kernel's 64x128 tiles in
16 chunks where those fit one round; cuBLAS."""
import sys

import torch
import triton

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels import matmul_rows as mr
from kernels import matmul_splitk as sk
from kernels.tune_ab import gemm_operands, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in (("g128x128", (128, 128, 64, 8, 4, 0)), ("g128x64", (128, 64, 64, 8, 8, 0))):
        tiles = triton.cdiv(m, 128) * triton.cdiv(n, cfg[1])
        for s in (2, 4, 8):
            if tiles * s <= sms:
                fns[f"{name}s{s}"] = lambda cfg=cfg, s=s: mg.matmul_ws(a, b, c, cfg, split=s, fused=False)
    if sk.tma_tiles(m, n, 128) * 16 <= sms:
        fns["r16"] = lambda: sk.matmul_splitk_tma(a, b, c, (16, 128, 64, 4, 4, True), fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {mr.rows_split_config(m, n, k, sms)}; wrong: {bad}; errors "
          f"{', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s45/chunks16.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`) against the TMA kernel's 64-row tiles in 16 K chunks
where those fit one round (`r16`: 64x128 tiles, K steps of 64, 4 stages; `h16`: 64x64, K steps of 128, 3 stages),
partials summed by the second kernel; cuBLAS."""
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
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in (("r16", (16, 128, 64, 4, 4, True)), ("h16", (16, 64, 128, 4, 3, True))):
        if n % cfg[1] == 0 and sk.tma_tiles(m, n, cfg[1]) * 16 <= sms:
            fns[name] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg, fused=False)
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {mr.rows_split_config(m, n, k, sms)}; wrong: {bad}; errors "
          f"{', '.join(f'{nm} {e:.1e}' for nm, e in errs.items())}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s45/rows_variants.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`: matmul_rows.rows_split_config's config) against that
config varied: `bk` the other K step (128 for 64x128 tiles at 3 stages, 64 for 64x64 tiles at 4), `st+1` / `st+2` more
stages, `w8` 8 warps, `c2` twice the chunks (two rounds), `other` the other candidate at its own chunks; cuBLAS."""
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
    ch, bn, bk, w, st, host = rule
    cfgs = {"bk": (ch, bn, 128, w, 3, host) if bk == 64 else (ch, bn, 64, w, 4, host),
            "st+1": (ch, bn, bk, w, st + 1, host), "st+2": (ch, bn, bk, w, st + 2, host), "w8": (ch, bn, bk, 8, st, host),
            "c2": (2 * ch, bn, bk, w, st, host)}
    cfgs.update({"other": c_ for c_ in mr.rows_candidates(m, n, k, sms) if c_[1] != bn and c_[0] > 1})
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c)}
    for name, cfg in cfgs.items():
        fns[name] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, c, cfg, fused=False)
    try:
        outs, errs = outputs_and_errors(fns, c, ref)
    except Exception as exc:  # a config that does not build (shared memory): said, the shape skipped
        print(f"{m}x{n}x{k}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        continue
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {rule}; {', '.join(f'{nm} {c_}' for nm, c_ in cfgs.items())}; wrong: {bad}), {ROUNDS} "
          f"rounds of {SECONDS} s, us a call median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}",
          flush=True)
PY

cat > /tmp/s45/rows_stages.py <<'PY'
"""argv: rounds seconds shapes (MxNxK,...).  The route (`ship`) against its config at two stages fewer (`prev`, the
rule's stages before session 45 call 8), the Gluon route (`before`, gluon=True) and cuBLAS."""
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
    prev = (*rule[:4], rule[4] - 2, *rule[5:])
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": lambda: mm.matmul(a, b, out=c),
           "prev": lambda: sk.matmul_splitk_tma(a, b, c, prev, fused=False),
           "before": lambda: mm.matmul(a, b, out=c, gluon=True)}
    outs, errs = outputs_and_errors(fns, c, ref)
    bad = [nm for nm, e in errs.items() if not e < 2e-2]
    times = steady_in_turns({nm: f for nm, f in fns.items() if nm not in bad}, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} (rule: {rule}; prev {prev}; wrong: {bad}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max): {timings_line(times)}; x prev: {ratios(times, 'prev')}; x before: {ratios(times, 'before')}",
          flush=True)
PY

VSHAPES=""
for k in 4096 8192; do for m in 128 160; do for n in 128 256 512; do
  VSHAPES="$VSHAPES${VSHAPES:+,}${m}x${n}x${k}"
done; done; done
for k in 5120 14336; do for m in 200 320 448 640 1000 1536; do for n in 192 384 768; do
  VSHAPES="$VSHAPES,${m}x${n}x${k}"
done; done; done
for m in 256 512 1024; do for n in 128 256 512; do VSHAPES="$VSHAPES,${m}x${n}x16384"; done; done

SHAPES=""
for k in 4096 8192; do
  for m in 192 256 384 512 768 1024 2048; do
    for n in 128 256 512 1024; do
      SHAPES="$SHAPES${SHAPES:+,}${m}x${n}x${k}"
    done
  done
done
case $CALL in
  call1)
    timeout 500 python3 /tmp/s45/tma_rows.py 3 0.1 "$SHAPES" 2>&1 | tee "${LOG}_gemm_tma_rows.log"
    ;;
  call2)
    timeout 250 python3 /tmp/s45/verify_rows.py 3 0.1 "$VSHAPES" 2>&1 | tee "${LOG}_gemm_verify_rows.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py \
      tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call3)
    S3="448x192x5120,448x192x14336,200x192x5120,320x192x5120,640x320x8192,256x320x4096,384x448x8192,1000x192x14336"
    S3="$S3,128x192x8192,160x320x4096,128x128x4096,144x256x8192,176x512x4096,128x512x14336,65x256x8192,80x128x4096"
    S3="$S3,96x256x4096,96x512x8192,112x128x8192,127x512x4096,512x512x8192,384x128x8192"
    timeout 200 python3 /tmp/s45/verify_rows.py 3 0.1 "$S3" 2>&1 | tee "${LOG}_gemm_verify_rows.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py \
      tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call4)
    S4="320x768x14336,512x512x16384,448x192x14336,640x384x14336,1024x256x16384,2048x128x8192,640x192x14336"
    S4="$S4,256x256x16384,512x128x16384,512x512x8192,1024x256x8192,384x128x8192,1024x128x16384,256x512x16384"
    timeout 240 python3 /tmp/s45/big_k.py 3 0.1 "$S4" 2>&1 | tee "${LOG}_gemm_big_k.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py \
      tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call5)
    S5=""
    for k in 8192 14336 16384 28672; do
      for mn in 128x128 128x256 128x512 192x128 192x256 256x128 256x256 384x128 512x128; do
        S5="$S5${S5:+,}${mn}x${k}"
      done
    done
    timeout 300 python3 /tmp/s45/chunks16.py 3 0.1 "$S5" 2>&1 | tee "${LOG}_gemm_chunks16.log"
    ;;
  call6)
    S6="96x256x4096,144x256x8192,448x192x5120,512x512x8192,384x128x8192,1024x256x8192,256x256x16384,128x128x16384"
    S6="$S6,128x512x14336,512x128x28672,320x384x14336,2048x128x8192,192x1024x8192,1024x512x4096"
    timeout 150 python3 /tmp/s45/verify_rows.py 3 0.1 "$S6" 2>&1 | tee "${LOG}_gemm_verify_rows.log"
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py \
      tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call7)
    bash kernels/device_s43.sh harnesses > /dev/null || exit 3
    S7="320x768x14336,512x512x16384,448x192x14336,640x384x14336,1024x256x16384,2048x128x8192,512x128x28672"
    S7="$S7,640x192x14336,512x512x8192,384x128x8192"
    timeout 240 python3 /tmp/s45/rows_variants.py 3 0.1 "$S7" 2>&1 | tee "${LOG}_gemm_rows_variants.log"
    timeout 90 python3 /tmp/s43/kern_prof.py 320x768x14336,512x512x16384,2048x128x8192 2>&1 | tee "${LOG}_kern_prof.log"
    ;;
  call8)
    S8="96x256x4096,192x128x4096,512x512x4096,144x256x8192,448x192x5120,512x512x8192,384x128x8192,256x256x16384"
    S8="$S8,128x128x16384,320x768x14336,512x512x16384,2048x128x8192,1024x128x4096,256x1024x8192"
    timeout 100 python3 /tmp/s45/rows_stages.py 3 0.1 "$S8" 2>&1 | tee "${LOG}_gemm_rows_stages.log"
    timeout 90 python3 -m pytest tests/kernels/test_matmul_rows.py -m gpu -q -p no:cacheprovider -n 4 2>&1 | tail -4 \
      | tee "${LOG}_gpu_tests_rows.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
