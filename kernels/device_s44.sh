#!/usr/bin/env bash
# Session-44 device calls (issue 16), prepared in session 43 (nothing run yet): bash kernels/device_s44.sh CALL (OUT set
# by the tool).  Every step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab).
# call1: session 43's split rules for the decode-sized GEMMs (partials summed by a second kernel, up to 8 narrow chunks,
#        64-column split tiles, a whole wave of transposed tiles) were timed with B resident in L2 (the suite's
#        timing).  A model's weights stream from DRAM: the same route against session 42's (`old`: gemm_route.py
#        tmasplit's and swapwave's settings together) and cuBLAS with B cycled over copies filling 3x the L2
#        (`cold.py`: one graph of 20 passes over the copies, microseconds a call), then hot as a check.
# call2: the split partials' second kernel at 128 and 512 elements a program against the shipped 256 (session 43: 256
#        1.01-1.09x 1024), through session 42's gemm_route.py (`reduceblk`).
# If an H100 is lent, kernels/device_s37.sh calls 1-3 (carry [".whl"]) and 14 come first (README's H100 table, the H100
# baseline's re-made entries, cuDNN's fp8 forward on an H100), then call 1 here.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s44 "$CALL"  # harnesses: the files under /tmp/s44 only
mkdir -p /tmp/s44
bash kernels/device_s42.sh harnesses > /dev/null || exit 3  # session 42's gemm_route.py (call 2)

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

SHAPES=64x512x14336,64x1024x14336,64x256x8192,64x1024x4096,64x2048x4096,48x512x14336,16x2048x14336,32x1024x14336,1x2048x4096,8x1024x8192,64x4096x4096
case $CALL in
  call1)
    timeout 300 python3 /tmp/s44/cold.py 5 0.2 $SHAPES 2>&1 | tee "${LOG}_gemm_cold.log"
    timeout 150 python3 /tmp/s44/cold.py 3 0.1 $SHAPES hot 2>&1 | tee "${LOG}_gemm_hot.log"
    ;;
  call2)
    timeout 200 python3 /tmp/s42/gemm_route.py 5 0.2 $SHAPES reduceblk 2>&1 | tee "${LOG}_gemm_reduceblk.log"
    ;;
  harnesses) ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
