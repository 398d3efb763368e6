#!/usr/bin/env bash
# Session-15 device calls (issue 16): bash kernels/device_s15.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100): decode-sized GEMMs at 1 <= M <= 64, N 4096-6144 (where the wide tiles do not fill the GPU): the TMA
#        kernel (matmul_splitk._splitk_tma) and the pointer split-K kernel with 128- and 256-column tiles split 2-16
#        (each program reads a smaller share of A: at M = 32 the 32-column tiles read all of A, 256 KB, per program,
#        as many bytes as their B), beside the default route and cuBLAS; graph-timed "hot" (one B, resident in the 50
#        MB L2 between replays) and, for the leaders, "cold" (the call cycles over copies of B, > 120 MB together).
# call2 (H100): the TMA kernel with the tile computed transposed (SWAP_AB: B's tile as the product's M side, so
#        wgmma from shared memory instead of mma.sync through registers at M < 64), split 1-4, 64- and 128-column
#        tiles, beside the unswapped tiles, the default route and cuBLAS, hot and cold as call 1.
# call3 (H100) / call4 (H200): the swapped tiles over a grid of M (1-64) and N (2048-14336): unsplit 64- and
#        128-column tiles, split 2 with 64-column ones, beside the narrow 32-column tiles, pointer split-K, the
#        default route and cuBLAS; every variant hot and cold (2 rounds each).  Call 4 also with A read by masked
#        pointer loads (cp.async) instead of A's TMA box (A_PTR: the box's rows past M are zero-filled by TMA).
# call5 (H100): that A_PTR comparison alone, at M = 1-64 (N = 4096) and 40x5120, 48x14336.
# call4 (H200) / call6 (H100): the shipped route (M <= 48: the tiles transposed, A by pointer loads below 3/4 of its
#        box, K split below a quarter of the SMs' worth of tiles) as "default" over a grid of M and N, beside the
#        previous routes (pointer split-K "ptr", the narrow tiles, unswapped wide tiles), the alternatives, cuBLAS.
#        Call 4 ran with A by pointer loads where M < 3/4 of A's box rows (M 1-8, 20, 40 here); shipped: M <= 8.
# call7 (H200) / call8 (H100): the shipped route (A by pointer loads up to M = 8): the GEMM GPU tests, the suite's
#        GEMM rows and the copy, the baselines' 1x4096x4096 and 16x14336x4096 entries re-made from two runs.
# call9 (H100): after a review (swap_split capped at SWAP_MAX_SPLIT, GPU rows with A by pointer loads, K split and
#        ragged K, N below one tile, one tile split 16 ways): the GEMM GPU tests.
# call10 (H100) / call11 (H200): 32 < M <= 48 with the tile transposed and unsplit, A through two TMA boxes of 32
#        and 16 rows (A_TWO_BOXES, then a flag) against one of 64 rows zero-filled past M, hot and cold; the GEMM GPU
#        tests.  Call 11 ran with this script's GPU_TAG line broken by an edit (its two.py heredoc inside the $(...)):
#        it ran the same commands but named its logs kernels_h100_s15_call11_*; they were renamed to h200 (the card
#        is an H200, see its env file).  Shipped afterwards: A_TWO_BOXES_MAX_M = 40, so two.py's "two" / "one" flags
#        no longer run as written.
# call12 (H200): the shipped A_TWO_BOXES_MAX_M = 40 (new GPU rows 33x4096x4096, 40x8192x1000, 47x5120x776): the GEMM
#        GPU tests.
set -o pipefail
source kernels/device_lib.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(case "$CALL" in call4|call7|call11|call12) echo h200;; *) echo h100;; esac)
LOG=$OUT/kernels_${GPU_TAG}_s15_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"

cat > /tmp/wide.py <<'PY'
import math
import sys

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(32, 4096, 4096), (24, 4096, 4096), (48, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096), (1, 4096, 4096),
          (64, 4096, 4096), (32, 5120, 4096), (16, 5120, 4096), (32, 6144, 4096), (32, 4096, 14336),
          (16, 4096, 14336), (64, 4096, 14336)]
SWAP = "swap" in sys.argv
if SWAP:
    SHAPES = [(32, 4096, 4096), (24, 4096, 4096), (48, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096),
              (1, 4096, 4096), (64, 4096, 4096), (32, 5120, 4096), (16, 5120, 4096), (32, 6144, 4096),
              (16, 14336, 4096), (32, 4096, 14336), (64, 4096, 14336), (16, 10240, 8192)]
TMA = [(2, 64, 128, 4, 6, True), (4, 128, 128, 4, 4, True), (4, 128, 64, 4, 6, True), (4, 128, 128, 8, 4, True),
       (8, 256, 64, 4, 4, True), (8, 256, 64, 8, 4, True), (8, 128, 64, 4, 3, True), (16, 256, 64, 4, 2, True),
       (2, 128, 128, 4, 4, True), (8, 128, 128, 4, 3, True)]
PTR = [(0, (128, 128, 4, 4)), (4, (128, 128, 4, 4)), (8, (128, 64, 4, 4)), (8, (256, 64, 8, 3)), (0, (64, 128, 4, 4))]
if SWAP:
    TMA = [(*cfg, True, True) for cfg in ((1, 64, 128, 4, 6), (2, 64, 128, 4, 6), (2, 64, 128, 4, 4), (4, 64, 128, 4, 4),
                                          (2, 128, 128, 4, 4), (4, 128, 128, 4, 4), (1, 128, 128, 4, 4), (2, 64, 64, 4, 8),
                                          (4, 64, 64, 4, 6), (1, 64, 64, 4, 8))]
    TMA += [(2, 64, 128, 4, 6, True), (1, 32, 128, 4, 6, True), (1, 128, 128, 4, 4, True), (1, 64, 128, 4, 6, True)]
    PTR = [(0, (64, 128, 4, 4))]


def rounds(fns, n=3):
    times = {}
    for r in range(n):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    copies = max(1, math.ceil(120 * 2**20 / b.numel() / 2))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)

    def mk(kind, cfg):
        if kind == "cublas":
            return lambda bb: torch.mm(a, bb, out=c)
        if kind == "default":
            return lambda bb: matmul.matmul(a, bb, out=c)
        if kind == "tma":
            return lambda bb: sk.matmul_splitk_tma(a, bb, c, cfg)
        s_, pc = cfg
        return lambda bb: sk.matmul_splitk(a, bb, c, sms, split=s_ or None, config=pc, fused=True)

    variants = {"cublas": mk("cublas", None), "default": mk("default", None)}
    variants.update({f"tma {cfg[:5]}{' swap' if cfg[6:] else ''}": mk("tma", cfg) for cfg in TMA})
    variants.update({f"ptr split{s_ or 'auto'} {pc}": mk("ptr", (s_, pc)) for s_, pc in PTR})
    for name, fn in list(variants.items()):
        try:
            for _ in range(3):  # arrival counters reset themselves
                res = fn(b)
            err = ((res.float() - ref).norm() / ref.norm()).item()
        except Exception as exc:
            print(f"  {m}x{n}x{k} {name}: failed {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            torch.cuda.synchronize()
            del variants[name]
            continue
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
            del variants[name]
    hot = rounds({name: (lambda fn=fn: fn(b)) for name, fn in variants.items()})
    for name, ms in sorted(hot.items(), key=lambda kv: kv[1]):
        print(f"hot {m}x{n}x{k} {name:36s}: {ms * 1e3:7.2f} us (x{hot['cublas'] / ms:.3f} cuBLAS)", flush=True)
    lead = [nm for nm, _ in sorted(hot.items(), key=lambda kv: kv[1]) if nm not in ("cublas", "default")][:4]
    cold_fns = {name: (lambda fn=variants[name]: [fn(bb) for bb in bs]) for name in ["cublas", "default", *lead]}
    cold = {name: ms / copies for name, ms in rounds(cold_fns).items()}
    for name, ms in sorted(cold.items(), key=lambda kv: kv[1]):
        print(f"cold {m}x{n}x{k} {name:36s}: {ms * 1e3:7.2f} us (x{cold['cublas'] / ms:.3f} cuBLAS; {copies} B)",
              flush=True)
PY

cat > /tmp/grid.py <<'PY'
import math
import sys

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(m, 4096, 4096) for m in (1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 56, 64)]
SHAPES += [(1, 2048, 4096), (16, 2048, 4096), (32, 2048, 4096), (16, 3072, 4096), (32, 3072, 4096),
           (1, 5120, 4096), (8, 5120, 4096), (16, 5120, 4096), (32, 5120, 4096), (64, 5120, 4096),
           (1, 8192, 4096), (16, 8192, 4096), (32, 8192, 4096), (16, 11008, 4096), (32, 14336, 4096),
           (16, 4096, 14336), (16, 4096, 512), (32, 4096, 1024)]
if "new" in sys.argv:  # the shipped route ("default") against what ran before it and the alternatives
    SHAPES = [(m, 4096, 4096) for m in (1, 2, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64)]
    SHAPES += [(1, 512, 8192), (1, 1024, 4096), (16, 1024, 4096), (32, 1024, 4096), (1, 2048, 4096),
               (16, 2048, 4096), (32, 2048, 4096), (32, 3072, 4096), (1, 5120, 4096), (16, 5120, 4096),
               (32, 5120, 4096), (16, 8192, 4096), (1, 14336, 4096), (16, 14336, 4096), (16, 10240, 8192),
               (16, 4096, 14336), (16, 4096, 512), (32, 4096, 1024)]
if "oob" in sys.argv:  # M where A's box has rows past M: its TMA box against masked pointer loads
    SHAPES = [(m, 4096, 4096) for m in (1, 2, 4, 8, 20, 32, 40, 48, 56, 64)] + [(40, 5120, 4096), (48, 14336, 4096)]
CFGS_OOB = {"w64s": (1, 64, 128, 4, 6, True, True), "w64sp": (1, 64, 128, 4, 6, True, True, True),
            "w128s": (1, 128, 128, 4, 4, True, True), "w128sp": (1, 128, 128, 4, 4, True, True, True)}
CFGS = {"w128s": (1, 128, 128, 4, 4, True, True), "w64s": (1, 64, 128, 4, 6, True, True),
        "s2s": (2, 64, 128, 4, 4, True, True), "w128": (1, 128, 128, 4, 4, True), "w64": (1, 64, 128, 4, 6, True),
        "narrow": (1, 32, 128, 4, 6, True), "w64sp": (1, 64, 128, 4, 6, True, True, True),
        "w128sp": (1, 128, 128, 4, 4, True, True, True)}
if "oob" in sys.argv:
    CFGS = CFGS_OOB
if "new" in sys.argv:
    CFGS = {"narrow": (1, 32, 128, 4, 6, True), "w64": (1, 64, 128, 4, 6, True), "w128": (1, 128, 128, 4, 4, True),
            "w64s": (1, 64, 128, 4, 6, True, True), "w64sp": (1, 64, 128, 4, 6, True, True, True),
            "s2s": (2, 64, 128, 4, 4, True, True), "w128s": (1, 128, 128, 4, 4, True, True)}


def rounds(fns, n):
    times = {}
    for r in range(n):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    copies = max(1, math.ceil(120 * 2**20 / b.numel() / 2))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    route = matmul.default_tma_route(a, b, c, sms)
    label = route if route is not None else ("split-K" if matmul.use_splitk(m, n, k, sms) else "persistent")
    variants = {"cublas": lambda bb: torch.mm(a, bb, out=c), "default": lambda bb: matmul.matmul(a, bb, out=c),
                "ptr": lambda bb: sk.matmul_splitk(a, bb, c, sms, fused=True)}
    variants.update({nm: (lambda bb, cfg=cfg: sk.matmul_splitk_tma(a, bb, c, cfg)) for nm, cfg in CFGS.items()})
    for name, fn in list(variants.items()):
        res = fn(b)
        err = ((res.float() - ref).norm() / ref.norm()).item()
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
            del variants[name]
    hot = rounds({nm: (lambda fn=fn: fn(b)) for nm, fn in variants.items()}, 2)
    cold = {nm: ms / copies for nm, ms in
            rounds({nm: (lambda fn=fn: [fn(bb) for bb in bs]) for nm, fn in variants.items()}, 2).items()}
    row = "  ".join(f"{nm} {hot[nm] * 1e3:.2f}/{cold[nm] * 1e3:.2f} ({hot['cublas'] / hot[nm]:.2f}/"
                    f"{cold['cublas'] / cold[nm]:.2f})" for nm in variants)
    print(f"grid {m}x{n}x{k} [route {label}] {row}", flush=True)
PY

cat > /tmp/two.py <<'PY'
import math

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(m, n, 4096) for m in (33, 40, 48) for n in (4096, 3072, 5120)] + [(40, 8192, 4096), (48, 14336, 4096),
                                                                           (40, 4096, 14336), (48, 4096, 1000)]


def flagged(on, fn):
    def run(bb):
        sk.A_TWO_BOXES = on
        try:
            return fn(bb)
        finally:
            sk.A_TWO_BOXES = True
    return run


def rounds(fns, n=3):
    times = {}
    for r in range(n):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    copies = max(1, math.ceil(120 * 2**20 / b.numel() / 2))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    route = matmul.default_tma_route(a, b, c, sms)
    variants = {"cublas": lambda bb: torch.mm(a, bb, out=c),
                "two": flagged(True, lambda bb: matmul.matmul(a, bb, out=c)),
                "one": flagged(False, lambda bb: matmul.matmul(a, bb, out=c))}
    for name, fn in variants.items():
        c.fill_(float("nan"))
        err = ((fn(b).float() - ref).norm() / ref.norm()).item()
        print(f"  {m}x{n}x{k} {name}: rel err {err:.2e}", flush=True)
    hot = rounds({nm: (lambda fn=fn: fn(b)) for nm, fn in variants.items()})
    cold = {nm: ms / copies for nm, ms in
            rounds({nm: (lambda fn=fn: [fn(bb) for bb in bs]) for nm, fn in variants.items()}).items()}
    row = "  ".join(f"{nm} {hot[nm] * 1e3:.2f}/{cold[nm] * 1e3:.2f} ({hot['cublas'] / hot[nm]:.2f}/"
                    f"{cold['cublas'] / cold[nm]:.2f})" for nm in variants)
    print(f"two {m}x{n}x{k} [route {route}] {row}", flush=True)
PY

case "$CALL" in
  call1)  # wider split tiles for decode-sized GEMMs, hot and cold B
    timeout 560 python3 /tmp/wide.py 2>&1 | tee "${LOG}_wide.log"
    ;;
  call3)  # the swapped tiles over a grid of M and N, hot and cold
    timeout 590 python3 /tmp/grid.py 2>&1 | tee "${LOG}_grid.log"
    ;;
  call4|call6)  # the shipped route against the alternatives, hot and cold
    timeout 590 python3 /tmp/grid.py new 2>&1 | tee "${LOG}_grid_new.log"
    ;;
  call5)  # A's TMA box against A by masked pointer loads in the swapped tiles, at M where the box has rows past M
    timeout 300 python3 /tmp/grid.py oob 2>&1 | tee "${LOG}_grid_oob.log"
    ;;
  call7|call8)  # the shipped route: the GEMM GPU tests, the suite's GEMM rows and the copy, the baselines' decode GEMMs
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    install_perfci || exit 3
    timeout 200 python3 -m pytest tests/perf/test_matmul.py "tests/perf/test_torch_ops.py::test_copy_256mb" -q \
      -p no:cacheprovider --benchmark-json="$OUT/perf_mm.json" > "${LOG}_perf_suite_mm.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_mm.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_mm.json" | tee "${LOG}_perf_suite_mm_table.txt"
    timeout 200 perfci baseline update tests/perf/test_matmul.py -k "1x4096x4096 or 16x14336x4096" --runs 2 --force \
      --results-dir /tmp/bl > "${LOG}_baseline_update_mm.log" 2>&1
    echo "baseline update rc=$?"
    tail -6 "${LOG}_baseline_update_mm.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call10|call11)  # 32 < M <= 48: A through boxes of 32 + 16 rows against one of 64 (A_TWO_BOXES), hot and cold
    timeout 400 python3 /tmp/two.py 2>&1 | tee "${LOG}_two.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call12)  # the shipped A_TWO_BOXES_MAX_M = 40: the GEMM GPU tests
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call9)  # after the review (swap_split capped at 16, more GPU rows): the GEMM GPU tests
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call2)  # the tile computed transposed (SWAP_AB), hot and cold B
    timeout 580 python3 /tmp/wide.py swap 2>&1 | tee "${LOG}_swap.log"
    ;;
esac
