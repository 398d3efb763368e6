#!/usr/bin/env bash
# Session-18 device calls (issue 16): bash kernels/device_s18.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100): decode-sized GEMMs at 20 <= M <= 48, N 3072-5120 (still below 0.95x cuBLAS with B resident in L2):
#        the transposed TMA tiles (matmul_splitk._splitk_tma, SWAP_AB) 128 and 256 columns wide with K split 2-8,
#        so that A's rows are read by N / width programs' worth of chunks instead of N / 64 whole copies, beside the
#        shipped route and cuBLAS; graph-timed hot (one B, resident in the 50 MB L2 between replays) and cold (the
#        call cycling over copies of B, > 120 MB together), variants taking turns, best of 2 rounds.
# call2 (ran on an H200): each program of the TMA kernel starting its K tiles at its own offset (matmul_splitk.K_ROTATE; the
#        programs otherwise read the same A tile at the same moment) against the sequential order, both through the
#        shipped route (matmul.matmul), beside cuBLAS, over M = 1-64 and N 512-14336, hot and cold as call 1; then the
#        GEMM GPU tests.  Not kept (slower): call 2 runs only on a tree with its diff applied (git apply
#        docs/measurements/kernels_s18_gemm_k_rotate.patch).  It stopped at 1x512x8192, where the split TMA path did not
#        build at M = 1 (fixed afterwards in matmul_splitk._splitk_tma; kernels/NOTES.md, session 18).
# call3 (ran on an H200): fp8 row sums by wgmma from P in bf16 (ROWSUM_MMA for fp8: P converted to bf16 beside its e4m3
#        packing, one cvt a pair, carried to the next step's P·ones wgmma; the FADDs and shuffles of the sums gone:
#        440 SASS instructions in the unmasked step against 452, offline) against the FADDs, graph-timed A/B
#        through attention_ws.forward (attention_ws.rowsum_mma patched), outputs and lse against the fp32
#        reference of the dequantised inputs; our bf16 forward on random bf16 inputs as the suite times it; then
#        the attention and GEMM GPU tests (the GEMM's split TMA path at M = 1 among them).  Not kept (slower): call 3's
#        A/B runs only with its diff applied (git apply docs/measurements/kernels_s18_fwd_fp8_rowsum_bf16.patch).
# call4 (ran on an H200): is the forward's last partial wave a cost?  Graph-timed time per head of our Gluon forward and SDPA
#        cuDNN, d128 L4096 without a mask (bf16, and our fp8), at head counts whose 128-row items fill whole waves of
#        the SMs (66, 33, 132 heads: 16, 8, 32 waves on 132 SMs) or not (64, as the suite: 15.5 waves; 62, 65).
# call5 (ran on an H200): correctness sweep of the default GEMM route (matmul.matmul, no knobs) over every
#        M = 1-64 and odd shapes beside (K and N ragged, N below one tile, a K split's chunks ragged, fp16, B
#        column-major, B with a misaligned pitch), against fp32 products: any build error or wrong result is listed
#        (the M = 1 split failure of this session went unseen for want of such rows).
# call6 (H100 or H200): A through two overlapping windows (matmul_splitk.A_WINDOWS: for the transposed TMA tiles with
#        8 < M < 64 not a power of two, a rank-3 descriptor (2, box / 2, K) whose outer stride is M - box / 2 rows, so
#        A's first and last rows fill the box and no row is zero-filled past M) against the shipped box (one box
#        zero-filled past M; two boxes of 32 and 16 rows at 32 < M <= 40), both through matmul.matmul, beside cuBLAS,
#        hot and cold as call 1; then the GEMM GPU tests with the windows on.  Call 6 ran the windows at every
#        8 < M < box (the rule then).
# call7 (H100): call 6's A/B (box = A_WINDOWS off) with the windows at 17 <= M <= 23 and 33 <= M <= 48 (the rule
#        then), at M = 17-48; then the GEMM GPU tests.  Shipped afterwards: matmul_splitk.a_windows, where the boxes
#        would be zero-filled for more than 8 rows (M = 40 unsplit keeps its two boxes: windows 0.95-0.98x there).
# call8 (H100 or H200): the committed rule: the GEMM GPU tests, and call 6's A/B at the rule's edges.  Calls 6 and 7
#        ran earlier rules (above); windows.py now compares the committed rule with the windows off, so they no longer
#        run as written.
# call9 (H100 or H200): after a review (a_windows never where M <= box / 2; GPU rows for the windows at real shapes,
#        split up to 16 ways): the GEMM GPU tests.
# call10 (H100 or H200): after a second review (A's window rows mapped by _c_tile instead of a near-copy, _win_tile;
#        the two-box rule in one place, two_a_boxes): the GEMM GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s18_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s18
cat > /tmp/s18/wide_split.py <<'PY'
import math
import sys

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(m, n, 4096) for m in (20, 24, 32, 33, 40, 48) for n in (3072, 4096, 5120)]
SHAPES += [(8, 4096, 4096), (16, 4096, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]
# (split, BLOCK_N, BLOCK_K, warps, stages, host descriptors, swap): all transposed, A through its TMA box
CFGS = {"w128s2": (2, 128, 128, 4, 4, True, True), "w128s4": (4, 128, 128, 4, 4, True, True),
        "w128s4k64": (4, 128, 64, 4, 6, True, True), "w256s4k64": (4, 256, 64, 4, 4, True, True),
        "w256s8k64": (8, 256, 64, 4, 4, True, True), "w64s4": (4, 64, 128, 4, 4, True, True)}


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
    variants = {"cublas": lambda bb: torch.mm(a, bb, out=c), "default": lambda bb: matmul.matmul(a, bb, out=c)}
    variants.update({nm: (lambda bb, cfg=cfg: sk.matmul_splitk_tma(a, bb, c, cfg)) for nm, cfg in CFGS.items()})
    for name, fn in list(variants.items()):
        try:
            res = fn(b)
            torch.cuda.synchronize()
        except Exception as exc:  # a config that does not build or launch
            print(f"  {m}x{n}x{k} {name}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del variants[name]
            continue
        err = ((res.float() - ref).norm() / ref.norm()).item()
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
            del variants[name]
    hot = rounds({nm: (lambda fn=fn: fn(b)) for nm, fn in variants.items()}, 2)
    cold = {nm: ms / copies for nm, ms in
            rounds({nm: (lambda fn=fn: [fn(bb) for bb in bs]) for nm, fn in variants.items()}, 2).items()}
    row = "  ".join(f"{nm} {hot[nm] * 1e3:.2f}/{cold[nm] * 1e3:.2f} ({hot['cublas'] / hot[nm]:.2f}/"
                    f"{cold['cublas'] / cold[nm]:.2f})" for nm in variants)
    print(f"grid {m}x{n}x{k} [route {route}] {row}", flush=True)
PY

cat > /tmp/s18/rotate.py <<'PY'
import math
import sys

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(m, n, 4096) for m in (1, 8, 16, 20, 24, 32, 33, 40, 48, 56, 64) for n in (3072, 4096, 5120)]
SHAPES += [(1, 512, 8192), (32, 1024, 4096), (32, 2048, 4096), (1, 14336, 4096), (16, 14336, 4096),
           (48, 14336, 4096), (16, 4096, 14336), (40, 4096, 14336), (16, 4096, 512), (32, 4096, 1024)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]


def rounds(fns, n):
    times = {}
    for r in range(n):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


def ours(a, bb, c, rotate):
    sk.K_ROTATE = rotate
    return matmul.matmul(a, bb, out=c)


for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    copies = max(1, math.ceil(120 * 2**20 / b.numel() / 2))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    route = matmul.default_tma_route(a, b, c, sms)
    variants = {"cublas": lambda bb: torch.mm(a, bb, out=c), "seq": lambda bb: ours(a, bb, c, False),
                "rot": lambda bb: ours(a, bb, c, True)}
    for name, fn in variants.items():
        err = ((fn(b).float() - ref).norm() / ref.norm()).item()
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
    hot = rounds({nm: (lambda fn=fn: fn(b)) for nm, fn in variants.items()}, 3)
    cold = {nm: ms / copies for nm, ms in
            rounds({nm: (lambda fn=fn: [fn(bb) for bb in bs]) for nm, fn in variants.items()}, 2).items()}
    row = "  ".join(f"{nm} {hot[nm] * 1e3:.2f}/{cold[nm] * 1e3:.2f} ({hot['cublas'] / hot[nm]:.2f}/"
                    f"{cold['cublas'] / cold[nm]:.2f})" for nm in variants)
    print(f"rot {m}x{n}x{k} [route {route}] {row}  rot/seq hot x{hot['seq'] / hot['rot']:.3f} "
          f"cold x{cold['seq'] / cold['rot']:.3f}", flush=True)
sk.K_ROTATE = True
PY

cat > /tmp/s18/ab_rowsum.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases as cases
from kernels import reference as ref
from kernels._checks import LOG2E
from kernels.tune_ws import fp8_inputs

shipped_rule = attention_ws.rowsum_mma
for spec in sys.argv[1].split(","):
    d, seq, b, mask = spec.split(":")
    d, seq, b, causal = int(d), int(seq), int(b), mask == "causal"
    tag = f"fp8 b{b} h16 L{seq} d{d} {mask}"
    q8, k8, v8, sq, sk, sv = fp8_inputs(b, 16, 16, seq, seq, d, "bhld")
    dims = attention.check_attention(q8, k8, v8, "bhld", attention.HEAD_DIMS, dtypes=attention.FP8_DTYPES)
    impls, outs = {}, {}
    for name, on in (("fadd", False), ("mma-bf16", True)):
        out = torch.empty(q8.shape, dtype=torch.bfloat16, device=q8.device)
        lse = torch.empty((b, 16, seq), device=q8.device)

        def run(out=out, lse=lse, on=on):
            attention_ws.rowsum_mma = lambda fp8, consumers, on=on: on if fp8 else shipped_rule(fp8, consumers)
            try:
                return attention_ws.forward(q8, k8, v8, out, lse, dims, "bhld", causal,
                                            d ** -0.5 * LOG2E * sq * sk, o_scale=sv)
            finally:
                attention_ws.rowsum_mma = shipped_rule

        impls[name] = run
        run()
        outs[name] = (out.float().clone(), lse.clone())
    exact = None
    if b * seq <= 16384 and seq <= 4096:
        exact = ref.attention_fp32(q8.float() * sq, k8.float() * sk, v8.float() * sv, causal)
    for name, (o, l) in outs.items():
        line = (f"# {tag} {name}: max |out - fadd| {(o - outs['fadd'][0]).abs().max().item():.3e}, "
                f"max |lse - fadd| {(l - outs['fadd'][1]).abs().max().item():.3e}")
        if exact is not None:
            line += (f", rel err against fp32 {ref.rel_err(o, exact[0]):.3e}, "
                     f"max |lse - fp32| {(l - exact[1]).abs().max().item():.3e}")
        print(line, flush=True)
    qb, kb, vb = (cases.randn(q8.shape, torch.bfloat16, i) for i in range(3))
    impls["bf16-rand"] = partial(attention.attention_forward, qb, kb, vb, causal)
    flops = cases.flops_bytes(cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    times = {}
    for rnd in range(4):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (impls.items() if rnd % 2 == 0 else reversed(impls.items())):
            times[name] = min(cases.bench(fn, graph=True), times.get(name, float("inf")))
    for name, ms in times.items():
        print(f"AB {tag:28s} {name:10s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOPS "
              f"bf16-rand/this x{times['bf16-rand'] / ms:.3f} fadd/this x{times['fadd'] / ms:.3f}", flush=True)
    del q8, k8, v8, qb, kb, vb, impls, outs, exact
    torch.cuda.empty_cache()
PY

cat > /tmp/s18/waves.py <<'PY'
from functools import partial

import torch

from kernels import attention, reference, tune_cases as cases
from kernels._checks import LOG2E
from kernels.tune_ws import fp8_inputs

sms = torch.cuda.get_device_properties(0).multi_processor_count
seq, d = 4096, 128
for heads in (64, 66, 62, 65, 33, 132):
    q, k, v = (cases.randn((1, heads, seq, d), torch.bfloat16, i) for i in range(3))
    q8, k8, v8, sq, sk, sv = fp8_inputs(1, heads, heads, seq, seq, d, "bhld")
    impls = {"ours": partial(attention.attention_forward, q, k, v, False, impl="gluon"),
             "cudnn": partial(reference.sdpa, q, k, v, False, "cudnn"),
             "fp8": partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, False)}
    times = {}
    for rnd in range(4):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (impls.items() if rnd % 2 == 0 else reversed(impls.items())):
            times[name] = min(cases.bench(fn, graph=True), times.get(name, float("inf")))
    items = heads * seq // 128
    print(f"waves heads {heads:3d} items {items} ({items / sms:.2f} waves): " + "  ".join(
          f"{nm} {ms * 1e3 / heads:7.2f} us/head" for nm, ms in times.items())
          + f"  ours/cudnn x{times['cudnn'] / times['ours']:.3f}  fp8/ours x{times['ours'] / times['fp8']:.3f}",
          flush=True)
    del q, k, v, q8, k8, v8
    torch.cuda.empty_cache()
PY

cat > /tmp/s18/sweep.py <<'PY'
import itertools
import traceback

import torch

from kernels import matmul, tune_cases

sms = torch.cuda.get_device_properties(0).multi_processor_count
ALL = ((torch.bfloat16, "row"), (torch.float16, "row"), (torch.bfloat16, "colB"), (torch.bfloat16, "pitchB"))
# every M = 1-64 at four N x K (bf16 row-major; every variant at M = 1, 9, 17, ...), then odd shapes, every variant
shapes = [((m, n, k), ALL if m % 8 == 1 else ALL[:1])
          for m in range(1, 65) for n, k in ((4096, 4096), (520, 8192), (2048, 1000), (40, 136))]
shapes += [((m, n, k), ALL) for m, n, k in itertools.product((1, 3, 8, 16, 17, 31, 33, 47, 48, 63, 64, 65, 129),
                                                               (8, 24, 64, 1000, 3000, 5000, 11008),
                                                               (8, 40, 777, 3000, 14336))]
fails, routes = [], {}
for i, ((m, n, k), variants) in enumerate(shapes):
    for dtype, variant in variants:
        a = tune_cases.randn((m, k), dtype, i)
        if variant == "colB":
            b = tune_cases.randn((n, k), dtype, i + 1).t()
        elif variant == "pitchB":
            b = tune_cases.randn((k, n + 8), dtype, i + 1)[:, :n]
        else:
            b = tune_cases.randn((k, n), dtype, i + 1)
        want = a.float() @ b.float()
        try:
            c = torch.empty((m, n), dtype=dtype, device="cuda")
            route = matmul.default_tma_route(a, b, c, sms)
            got = matmul.matmul(a, b)
            torch.cuda.synchronize()
            err = ((got.float() - want).norm() / want.norm().clamp_min(1e-30)).item()
            routes[str(route)] = routes.get(str(route), 0) + 1
            if not err < 1e-2 or got.shape != want.shape:
                fails.append(f"{m}x{n}x{k} {dtype} {variant} route {route}: rel err {err:.3e}")
                print("FAIL", fails[-1], flush=True)
        except Exception as exc:
            fails.append(f"{m}x{n}x{k} {dtype} {variant}: {type(exc).__name__}: {str(exc).splitlines()[-1][:200]}")
            print("FAIL", fails[-1], flush=True)
            traceback.print_exc(limit=1)
            torch.cuda.synchronize()
    if i % 100 == 0:
        print(f"{i} / {len(shapes)} shapes, {len(fails)} failures", flush=True)
print(f"sweep: {len(shapes)} shapes, routes {routes}", flush=True)
print(f"sweep: {len(fails)} failures", flush=True)
PY

cat > /tmp/s18/windows.py <<'PY'
import math
import sys

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES = [(m, n, 4096) for m in (9, 12, 20, 24, 28, 33, 40, 47, 48) for n in (3072, 4096, 5120)]
SHAPES += [(20, 14336, 4096), (40, 14336, 4096), (40, 4096, 14336), (24, 2048, 4096), (12, 1024, 4096),
           (16, 4096, 4096), (32, 4096, 4096)]
if len(sys.argv) > 1:
    SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]


def rounds(fns, n):
    times = {}
    for r in range(n):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


def ours(a, bb, c, windows):
    sk.A_WINDOWS = windows
    return matmul.matmul(a, bb, out=c)


for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    copies = max(1, math.ceil(120 * 2**20 / b.numel() / 2))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    route = matmul.default_tma_route(a, b, c, sms)
    variants = {"cublas": lambda bb: torch.mm(a, bb, out=c), "box": lambda bb: ours(a, bb, c, False),
                "win": lambda bb: ours(a, bb, c, True)}
    for name, fn in variants.items():
        c.fill_(float("nan"))
        err = ((fn(b).float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
    hot = rounds({nm: (lambda fn=fn: fn(b)) for nm, fn in variants.items()}, 3)
    cold = {nm: ms / copies for nm, ms in
            rounds({nm: (lambda fn=fn: [fn(bb) for bb in bs]) for nm, fn in variants.items()}, 2).items()}
    row = "  ".join(f"{nm} {hot[nm] * 1e3:.2f}/{cold[nm] * 1e3:.2f} ({hot['cublas'] / hot[nm]:.2f}/"
                    f"{cold['cublas'] / cold[nm]:.2f})" for nm in variants)
    print(f"win {m}x{n}x{k} [route {route}] {row}  win/box hot x{hot['box'] / hot['win']:.3f} "
          f"cold x{cold['box'] / cold['win']:.3f}", flush=True)
sk.A_WINDOWS = True
PY

case "$CALL" in
  call1)
    timeout 560 python3 /tmp/s18/wide_split.py 2>&1 | tee "${LOG}_wide_split.log"
    ;;
  call2)
    timeout 420 python3 /tmp/s18/rotate.py 2>&1 | tee "${LOG}_rotate.log"
    timeout 170 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -15 | tee "${LOG}_gpu_tests.log"
    ;;
  call3)
    timeout 300 python3 /tmp/s18/ab_rowsum.py "128:4096:4:full,128:16384:1:full,128:4096:4:causal,128:512:32:full,64:4096:4:causal,128:16384:1:causal" \
      2>&1 | tee "${LOG}_ab_rowsum.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py tests/kernels/test_matmul.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests.log"
    ;;
  call4)
    timeout 400 python3 /tmp/s18/waves.py 2>&1 | tee "${LOG}_waves.log"
    ;;
  call5)
    timeout 560 python3 /tmp/s18/sweep.py 2>&1 | tee "${LOG}_sweep.log"
    ;;
  call6)
    timeout 330 python3 /tmp/s18/windows.py 2>&1 | tee "${LOG}_windows.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -15 | tee "${LOG}_gpu_tests.log"
    ;;
  call7)
    timeout 330 python3 /tmp/s18/windows.py "17x4096x4096,20x3072x4096,20x4096x4096,20x5120x4096,23x4096x4096,24x4096x4096,33x3072x4096,33x4096x4096,33x5120x4096,40x3072x4096,40x4096x4096,40x5120x4096,47x4096x4096,48x3072x4096,48x4096x4096,48x5120x4096,40x4096x14336,40x14336x4096,20x14336x4096,33x2048x4096" \
      2>&1 | tee "${LOG}_windows.log"
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -15 | tee "${LOG}_gpu_tests.log"
    ;;
  call8)
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -15 | tee "${LOG}_gpu_tests.log"
    timeout 200 python3 /tmp/s18/windows.py "23x4096x4096,24x4096x4096,39x4096x4096,40x4096x4096,41x4096x4096,48x4096x4096,40x2048x4096" \
      2>&1 | tee "${LOG}_windows.log"
    ;;
  call9|call10)
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -15 | tee "${LOG}_gpu_tests.log"
    ;;
esac
