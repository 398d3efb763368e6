#!/usr/bin/env bash
# Session-30 device calls (issue 16): bash kernels/device_s30.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the ragged GEMM (4000x5000x3000, B's 10000-byte pitch) through the Gluon GEMM reading B by TMA directly (no
#        repack; "ws-tma", 251 us in session 8) with B's shared tile in 128-, 64- and 32-byte swizzle (boxes of 64, 32
#        and 16 columns: how many 128-byte lines a box row straddles), on that B and on the same values at a 5120-column
#        pitch; outputs against the shipped route's (bitwise: the same products in the same order); graph-timed in
#        turns (best of 3 rounds) beside cuBLAS and the shipped route (repack, then the Gluon GEMM).
# call2: the same GEMM on 256x128 output tiles (two consumers of 128 rows; per K step a 256-row A box and a 64x128 B
#        tile: a fifth fewer 128-byte rows through the copy engine than 128x256 tiles take on the 10000-byte pitch),
#        through TMA on that B and on the repacked B (3 stages with TMA stores, 4 with plain stores), checked bitwise
#        against the shipped route at four shapes, then graph-timed in turns (best of 3 rounds) as in call 1.
# call3: the Gluon GEMM in clusters of two CTAs with B's tiles multicast (kernels/_matmul_ws_mc.py, its PTX rewritten
#        at compile time): a first launch alone under a 60 s limit (a wrong cluster protocol hangs), outputs against the
#        shipped kernel's (bitwise: the same products in the same order) at six shapes (odd tile-row counts, B at 10000-
#        and 10240-byte pitches, three calls in a row); then graph-timed in turns (best of 3 rounds) beside cuBLAS and
#        the shipped kernels at 4000x5000x3000 (B through TMA directly and after the repack), 4096^3 and 8192^3.
#        (Call 3 ran a module no longer in the tree, kernels/_matmul_ws_mc.py: `git apply
#        docs/measurements/kernels_s30_gemm_cluster_experiment.patch`; its first run, kernels_h200_s30_call3_run1_*,
#        launched specialisations compiled after the warm-up without clusters: illegal instruction.)
# call4: the GEMM GPU tests on the tree with the clustered kernel shipped (kernels/_ptx_cluster.py, CLUSTER=2 in
#        kernels/_matmul_ws.py, matmul.MISALIGNED_B "ws-mc").
# call5: the kernel suite (flash, decode, matmul, the 256 MB copy) on that tree.
# call6: aligned GEMMs in clusters or not (the shipped kernel, mg.matmul_ws cluster=True / False; B by TMA either
#        way) at 4096^3, 8192^3, 4096x14336x4096, 4096x5120x3072 and 4000x5000x3072, graph-timed in turns (best of 5
#        rounds) beside cuBLAS.
# call7: the H200 baseline's ragged GEMM entries (test_matmul.py 4000x5000x3000, ours and cuBLAS) re-made from two
#        runs on the tree with ws-mc (baselines/ comes back as $OUT/baseline_h200.tgz).
# call8: the GEMM GPU tests again after kernels/_ptx_cluster.py's rewrite hook became per thread (the change after
#        call 4), and the ragged GEMM's routes once more in turns (best of 5 rounds).
# call9: the GEMM GPU tests after the review's changes (one stage hook installed for good, builds without the rewrite
#        refused, explicit "ws-mc" wherever the kernel runs, the default route's call spied on).
# call10: the clustered kernel's bitwise GPU test with its fp16 rows added.
# call11: after the review of git diff b5bf333.. (the producer's three B paths sharing the expect and A copy, the B
#        descriptor's parameter one constant, the rewrite in three functions, the offline check's signature built
#        once; SASS identical offline): the GEMM GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s30_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s30

cat > /tmp/s30/swz.py <<'PY'
import sys

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import _matmul_gluon as mg, matmul as mm, tune_cases
from kernels._checks import sm_count
from kernels._matmul_ws import matmul_ws_kernel

ROUNDS = int(sys.argv[1])
TALL = len(sys.argv) > 2 and sys.argv[2] == "tall"


def lay(box, sw=None):
    if sw is None:
        return gl.NVMMASharedLayout.get_default_for(box, gl.bfloat16)
    return gl.NVMMASharedLayout(swizzle_byte_width=sw, element_bitwidth=16, rank=2)


def ws_tma(a, b, c, sw, stages=3, epi=0, bk=64, bm=128, bn=256):
    m, k = a.shape
    n = b.shape[1]
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [bm, bk], lay([bm, bk]))
    b_desc = TensorDescriptor(b, [k, n], [b.stride(0), 1], [bk, bn], lay([bk, bn], sw))
    c_desc = TensorDescriptor(c, [m, n], [c.stride(0), 1], [bm // 2, bn], lay([bm // 2, bn]))
    grid = (min(triton.cdiv(m, bm) * triton.cdiv(n, bn), sm_count(a.device, 1)),)
    matmul_ws_kernel[grid](a_desc, b_desc, c_desc, b, c, m, n, k, n // 8, b.stride(0) // 8, c.stride(0),
                           BLOCK_N=bn, GROUP_M=8, STAGES=stages, B_TMA=True, EPI=epi,
                           CONSUMER_REGS=mg.CONSUMER_REGS, num_warps=4, maxnreg=mg.MAXNREG)
    return c


g = torch.Generator(device="cuda").manual_seed(0)
for (m, n, k) in [(4000, 5000, 3000), (1000, 4104, 776), (129, 5000, 72), (300, 1000, 3000)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    want = mm.matmul(a, b)
    if TALL:
        bp = mm.repack_rows(b)
        for name, bb, stages, epi in (("tma", b, 3, 0), ("tma", b, 4, 1), ("repacked", bp, 3, 0),
                                      ("repacked", bp, 4, 1)):
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            ws_tma(a, bb, c, 128, stages, epi, bm=256, bn=128)
            torch.cuda.synchronize()
            print(f"  {m}x{n}x{k} 256x128 {name} s{stages} epi{epi}: bitwise the shipped route's "
                  f"{torch.equal(c, want)}", flush=True)
        continue
    for sw in (128, 64, 32):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ws_tma(a, b, c, sw)
        torch.cuda.synchronize()
        print(f"  {m}x{n}x{k} pitch {b.stride(0)} sw{sw}: bitwise the shipped route's {torch.equal(c, want)}",
              flush=True)

M, N, K = 4000, 5000, 3000
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)
bal = torch.empty(K, 5120, device="cuda", dtype=torch.bfloat16)[:, :N]
bal.copy_(b)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
fns = {"cublas": lambda: torch.matmul(a, b), "shipped route (repack + gluon)": lambda: mm.matmul(a, b)}
if TALL:
    bp = mm.repack_rows(b)
    view = mm._pitched_empty(b)
    fns["128x256 on repacked B"] = lambda: ws_tma(a, bp, c, 128)
    fns["128x256 tma pitch 5000"] = lambda: ws_tma(a, b, c, 128)
    for stages, epi in ((3, 0), (4, 1)):
        fns[f"256x128 s{stages} epi{epi} tma pitch 5000"] = lambda s_=stages, e_=epi: ws_tma(a, b, c, 128, s_, e_,
                                                                                             bm=256, bn=128)
        fns[f"256x128 s{stages} epi{epi} on repacked B"] = lambda s_=stages, e_=epi: ws_tma(a, bp, c, 128, s_, e_,
                                                                                            bm=256, bn=128)
        fns[f"route 256x128 s{stages} epi{epi}"] = lambda s_=stages, e_=epi: (
            mm._repack_into(b, view, None), ws_tma(a, view, c, 128, s_, e_, bm=256, bn=128))
for sw in (() if TALL else (128, 64, 32)):
    fns[f"ws-tma sw{sw} pitch 5000"] = lambda sw=sw: ws_tma(a, b, c, sw)
    fns[f"ws-tma sw{sw} pitch 5120"] = lambda sw=sw: ws_tma(a, bal, c, sw)
if not TALL:
    fns["ws-tma sw64 pitch 5000 4 stages epi1"] = lambda: ws_tma(a, b, c, 64, 4, 1)
t = tune_cases.in_turns(fns, ROUNDS, on_error=lambda name, exc: print(f"   {name}: failed {exc}", flush=True))
cub = t["cublas"]
for name, ms in t.items():
    print(f"   {name:40s} {ms * 1e3:8.2f} us  {2 * M * N * K / ms / 1e9:6.1f} TFLOPS  {cub / ms:.3f}x cuBLAS",
          flush=True)
PY

cat > /tmp/s30/mc.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, _matmul_ws_mc as mc, matmul as mm, tune_cases

MODE = sys.argv[1]
g = torch.Generator(device="cuda").manual_seed(0)


def mk(m, n, k, pitch=None):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, pitch or n, device="cuda", dtype=torch.bfloat16, generator=g)[:, :n]
    return a, b


if MODE == "first":
    a, b = mk(1000, 1024, 512)
    c = mc.matmul_mc(a, b, torch.empty(1000, 1024, device="cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    print("first launch returned; err", ((c.float() - a.float() @ b.float()).abs().max()).item(), flush=True)
    sys.exit(0)

if MODE == "check":
    for (m, n, k, pitch) in [(4000, 5000, 3000, None), (4000, 5000, 3000, 5120), (300, 1000, 3000, None),
                             (129, 5000, 72, None), (1000, 4104, 776, None), (4096, 4096, 4096, None)]:
        a, b = mk(m, n, k, pitch)
        want = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        assert mg.matmul_ws(a, b, want, b_tma=True)
        res = []
        for _ in range(3):
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            mc.matmul_mc(a, b, c)
            res.append(torch.equal(c, want))
        torch.cuda.synchronize()
        err = ((want.float() - a.float() @ b.float()).abs().max() / (a.float() @ b.float()).abs().max()).item()
        print(f"  {m}x{n}x{k} pitch {b.stride(0)}: bitwise the shipped kernel's (B by TMA) {res}  (err {err:.1e})",
              flush=True)
    sys.exit(0)

ROUNDS = int(MODE)
fns = {}
M, N, K = 4000, 5000, 3000
a, b = mk(M, N, K)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
view = mm._pitched_empty(b)
bp = mm.repack_rows(b)
fns["ragged cublas"] = lambda: torch.matmul(a, b)
fns["ragged shipped route (repack + gluon)"] = lambda: mm.matmul(a, b)
fns["ragged gluon, B by TMA"] = lambda: mg.matmul_ws(a, b, c, b_tma=True)
fns["ragged mc, B by TMA"] = lambda: mc.matmul_mc(a, b, c)
fns["ragged gluon on repacked B"] = lambda: mg.matmul_ws(a, bp, c)
fns["ragged mc on repacked B"] = lambda: mc.matmul_mc(a, bp, c)
fns["ragged route repack + mc"] = lambda: (mm._repack_into(b, view, None), mc.matmul_mc(a, view, c))
for s_ in (4096, 8192):
    a2, b2 = mk(s_, s_, s_)
    c2 = torch.empty(s_, s_, device="cuda", dtype=torch.bfloat16)
    fns[f"{s_}^3 cublas"] = lambda a2=a2, b2=b2: torch.matmul(a2, b2)
    fns[f"{s_}^3 shipped"] = lambda a2=a2, b2=b2: mm.matmul(a2, b2)
    fns[f"{s_}^3 mc"] = lambda a2=a2, b2=b2, c2=c2: mc.matmul_mc(a2, b2, c2)
t = tune_cases.in_turns(fns, ROUNDS, on_error=lambda name, exc: print(f"   {name}: failed {exc}", flush=True))
for name, ms in t.items():
    shape = name.split()[0]
    ref = t[f"{shape} cublas"]
    flops = 2 * M * N * K if shape == "ragged" else 2 * int(shape[:-2]) ** 3
    print(f"   {name:40s} {ms * 1e3:8.2f} us  {flops / ms / 1e9:6.1f} TFLOPS  {ref / ms:.3f}x cuBLAS", flush=True)
PY

cat > /tmp/s30/aligned.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, tune_cases

ROUNDS = int(sys.argv[1])
g = torch.Generator(device="cuda").manual_seed(0)
fns, flops = {}, {}
for (m, n, k) in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 5120, 3072), (4000, 5000, 3072)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n + (120 if n == 5000 else 0), device="cuda", dtype=torch.bfloat16, generator=g)[:, :n]
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    name = f"{m}x{n}x{k}"
    flops[name] = 2 * m * n * k
    fns[f"{name} cublas"] = lambda a=a, b=b: torch.matmul(a, b)
    fns[f"{name} gluon"] = lambda a=a, b=b, c=c: mg.matmul_ws(a, b, c)
    fns[f"{name} gluon clusters"] = lambda a=a, b=b, c=c: mg.matmul_ws(a, b, c, cluster=True)
t = tune_cases.in_turns(fns, ROUNDS)
for name, ms in t.items():
    shape = name.split()[0]
    print(f"   {name:36s} {ms * 1e3:9.2f} us  {flops[shape] / ms / 1e9:6.1f} TFLOPS  "
          f"{t[shape + ' cublas'] / ms:.3f}x cuBLAS", flush=True)
PY

case $CALL in
  call1)
    timeout 400 python3 /tmp/s30/swz.py 3 2>&1 | tee "${LOG}_swz.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s30/swz.py 3 tall 2>&1 | tee "${LOG}_tall.log"
    ;;
  call3)
    export TRITON_CACHE_DIR=/tmp/s30/cache
    timeout 60 python3 /tmp/s30/mc.py first 2>&1 | tail -3 | tee "${LOG}_mc.log"
    rc=$?
    if grep -q "first launch returned" "${LOG}_mc.log"; then
      timeout 120 python3 /tmp/s30/mc.py check 2>&1 | tail -12 | tee -a "${LOG}_mc.log"
      timeout 300 python3 /tmp/s30/mc.py 3 2>&1 | tail -24 | tee -a "${LOG}_mc.log"
    else
      echo "first launch did not return (rc $rc)" | tee -a "${LOG}_mc.log"
    fi
    ;;
  call4)
    timeout 560 python3 -m pytest tests/kernels/test_matmul_ws.py tests/kernels/test_matmul.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_mm.log"
    ;;
  call5)
    source kernels/device_lib.sh
    install_perfci
    suite
    ;;
  call6)
    timeout 400 python3 /tmp/s30/aligned.py 5 2>&1 | tail -16 | tee "${LOG}_aligned.log"
    ;;
  call7)
    source kernels/device_lib.sh
    install_perfci
    timeout 300 perfci baseline update tests/perf/test_matmul.py -k "4000x5000x3000" --runs 2 --force \
      --results-dir /tmp/bl > "${LOG}_baseline_update_mm.log" 2>&1
    echo "baseline update rc=$?"
    tail -8 "${LOG}_baseline_update_mm.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call8)
    timeout 300 python3 -m pytest tests/kernels/test_matmul_ws.py tests/kernels/test_matmul.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_mm.log"
    cat > /tmp/s30/route.py <<'PY'
import torch

from kernels import _matmul_gluon as mg, matmul as mm, tune_cases

g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(4000, 3000, device="cuda", dtype=torch.bfloat16, generator=g)
b = torch.randn(3000, 5000, device="cuda", dtype=torch.bfloat16, generator=g)
fns = {"cublas": lambda: torch.matmul(a, b), "ours (ws-mc, the default)": lambda: mm.matmul(a, b),
       "ws-repack": lambda: mm.matmul(a, b, misaligned_b="ws-repack"),
       "ws-tma": lambda: mm.matmul(a, b, misaligned_b="ws-tma")}
t = tune_cases.in_turns(fns, 5)
for name, ms in t.items():
    print(f"   {name:28s} {ms * 1e3:8.2f} us  {t['cublas'] / ms:.3f}x cuBLAS", flush=True)
print("status(cluster=True):", mg.status(cluster=True))
PY
    timeout 200 python3 /tmp/s30/route.py 2>&1 | tail -6 | tee "${LOG}_route.log"
    ;;
  call9)
    timeout 300 python3 -m pytest tests/kernels/test_matmul_ws.py tests/kernels/test_matmul.py \
      tests/kernels/test_ptx_cluster.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -4 \
      | tee "${LOG}_gpu_tests_mm.log"
    ;;
  call10)
    timeout 300 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "cluster" 2>&1 | tail -4 | tee "${LOG}_gpu_tests_cluster.log"
    ;;
  call11)
    timeout 300 python3 -m pytest tests/kernels/test_matmul_ws.py tests/kernels/test_matmul.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests_mm.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
