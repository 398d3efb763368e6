#!/usr/bin/env bash
# Session-35 device calls (issue 16): bash kernels/device_s35.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: ncu (--set full, the kernels of one call inside an NVTX range "prof") of ours beside the reference at the
#        rows level with it: the d128 backward L4096 without a mask (ours / cuDNN), the d64 forward L4096 causal
#        (cuDNN; ours was profiled in session 34 call 6) and the 4096^3 GEMM (ours / cuBLAS): where each spends its
#        cycles (pipes, issue, stalls), for the next steps.
# call2: the 16-bit forward's P converted two values an instruction (PACK16_X 1: cvt.rn.bf16x2.f32 by inline asm)
#        against P.to(dtype) (PACK16_X 0, a module copy), where ptxas packs the pair swapped and swaps it back
#        (a PRMT a register before the P.V wgmma: 32 a step at 128-key tiles, 64 in the masked loop); outputs
#        compared bitwise, graph-timed in turns (4 rounds) beside cuDNN at the suite's shapes, L16384, d80, fp16.
# call3: on the commit with P packed by cvt.rn.bf16x2 (no flag): the attention GPU tests of the forward, then the
#        whole kernel suite (flash, decode, matmul, the 256 MB copy) for README.
# call4: test_gluon_forward_row_sums_either_way_gpu again (its 14 rows failed in call 3: their monkeypatched
#        rowsum_mma took no `codes` keyword since session 33; the test fixed), then the H200 baseline's 16-bit
#        forward "ours" entries (test_flash_forward, d80) re-made from two runs.
# call5: the fp8 forward (fast_exp, as shipped) against our bf16 forward, now that the bf16 one is 2-8 % faster:
#        d128 L4096 / 8192 / 16384 full and causal, graph-timed in turns (4 rounds).
# call6: two Q buffers a consumer (attention_ws.q_buffers patched to 2: the next row block's Q loaded while the
#        current one finishes) for fp8 at d128 (lost 2-3 % in session 22, before the codes path made its steps
#        shorter) and bf16 d128 causal, against one; outputs compared bitwise, in turns (4 rounds).
# call7: call 1's backward pair again with autograd's multithreading off (cuDNN's backward then runs on the thread
#        that holds the NVTX range): ours and cuDNN's d128 L4096 without a mask, side by side.
# call8: the backward's dQ part staged in groups of 8 columns (32-byte rows, 32-byte swizzle; the fp32 scratch viewed
#        as (B*Hq, D/8, Lq, 8) for one 4-D reduce-add) against the 256-byte rows under a 128-byte swizzle, whose
#        stores were two-way bank-conflicted (call 7): `git show 04a270c:kernels/_attn_bwd_ws.py >
#        kernels_s35_old_attn_bwd_ws.py`, likewise attention_bwd_ws.py > kernels_s35_old_attention_bwd_ws.py (the
#        repository root) as module copies, dk / dv compared bitwise, dq against each other, in turns (4 rounds)
#        at d128 / d64 L4096 full and causal and d128 L16384 (`call8 ab`: that only), then the backward GPU tests.
#        The change (not kept) is docs/measurements/kernels_s35_bwd_dq_groups.patch.
# call9: head dim 64 causal on three consumers (LONG_CAUSAL_CONFIGS, patched LONG_CAUSAL_MIN_LEN) against two below
#        8192 queries, now that P's packing dropped the three-consumer build's spills (788 -> 252 B, offline): d64
#        causal L2048 / 4096 / 8192, in turns beside cuDNN (4 rounds).  Not run: no device time was left (for the
#        next session).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s35_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s35
source kernels/device_lib.sh

cat > /tmp/s35/prof.py <<'PY'
"""One case's call, warmed up, then once inside the NVTX range "prof" (what ncu --nvtx-include profiles)."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels.attention import attention_backward, attention_forward
from kernels.matmul import matmul


def randn(*shape):
    return torch.randn(shape, device="cuda", dtype=torch.bfloat16)


def attn(b, h, seq, d):
    return randn(b, h, seq, d), randn(b, h, seq, d), randn(b, h, seq, d)


case = sys.argv[1]
if case in ("bwd_ours", "bwd_cudnn"):
    q, k, v = attn(4, 16, 4096, 128)
    do = randn(4, 16, 4096, 128)
    if case == "bwd_ours":
        out, lse = attention_forward(q, k, v)
        def fn():
            attention_backward(do, q, k, v, out, lse)
    else:
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(qg, kg, vg)
        torch.autograd.set_multithreading_enabled(False)  # the backward on this thread, inside the NVTX range

        def fn():
            torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
elif case in ("fwd_d64c_ours", "fwd_d64c_cudnn"):
    q, k, v = attn(4, 16, 4096, 64)
    if case == "fwd_d64c_ours":
        def fn():
            attention_forward(q, k, v, causal=True)
    else:
        def fn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
elif case in ("gemm_ours", "gemm_cublas"):
    a, bm = randn(4096, 4096), randn(4096, 4096)
    fn = (lambda: matmul(a, bm)) if case == "gemm_ours" else (lambda: torch.matmul(a, bm))
else:
    raise SystemExit(f"unknown case {case}")
for _ in range(3):
    fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
fn()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("done", case)
PY

cat > /tmp/s35/ab_pack.py <<'PY'
import importlib.util
import re
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])


def load(name, path, sub):
    src, n = re.subn(sub[0], sub[1], open(path).read(), flags=re.M)
    assert n == 1
    path = f"/tmp/s35/{name}.py"
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


X0 = load("_fwd_x0", "kernels/_attn_fwd_ws.py",
          (r"^PACK16_X: gl.constexpr = gl.constexpr\(1\)", "PACK16_X: gl.constexpr = gl.constexpr(0)"))


def variant(run, mod):
    def go():
        with mock.patch.object(attention_ws, "attn_fwd_ws", mod.attn_fwd_ws):
            return run()
    return go


CASES = [(4096, 4, 64, True, torch.bfloat16), (4096, 4, 64, False, torch.bfloat16),
         (4096, 4, 128, False, torch.bfloat16), (4096, 4, 128, True, torch.bfloat16),
         (16384, 1, 128, False, torch.bfloat16), (16384, 1, 64, True, torch.bfloat16),
         (4096, 4, 80, False, torch.bfloat16), (4096, 4, 128, False, torch.float16), (1024, 16, 128, True, torch.bfloat16)]
for seq, b, d, causal, dt in CASES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), dt, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    o1, l1 = run()
    o2, l2 = variant(run, X0)()
    same = torch.equal(o1, o2) and torch.equal(l1, l2)
    fns = {"cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn"), "x0": variant(run, X0), "pack": run}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{str(dt)[6:]} b{b} h16 L{seq} d{d} {'causal' if causal else 'full'} ({'bitwise' if same else 'DIFFERS'}): "
          + ", ".join(f"{n} {ms * 1e3:.1f} us ({t['cudnn'] / ms:.3f}x cuDNN)" for n, ms in t.items())
          + f"; pack / x0 {t['x0'] / t['pack']:.4f}", flush=True)
PY

cat > /tmp/s35/fp8_ratio.py <<'PY'
import sys
from functools import partial

from kernels import attention, tune_cases

ROUNDS = int(sys.argv[1])
for seq, b, causal in [(4096, 4, False), (4096, 4, True), (8192, 2, False), (8192, 2, True), (16384, 1, False),
                       (16384, 1, True)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    fns = {"bf16": partial(attention.attention_forward, q, k, v, causal),
           "fp8": partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal)}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"b{b} h16 L{seq} d128 {'causal' if causal else 'full'}: bf16 {t['bf16'] * 1e3:.1f} us, fp8 "
          f"{t['fp8'] * 1e3:.1f} us: fp8 {t['bf16'] / t['fp8']:.3f}x our bf16", flush=True)
PY

cat > /tmp/s35/ab_qb.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases

ROUNDS = int(sys.argv[1])


def two(run):
    def go():
        with mock.patch.object(attention_ws, "q_buffers", lambda *a: 2):
            return run()
    return go


for seq, b, causal, fp8 in [(4096, 4, False, True), (8192, 2, False, True), (16384, 1, False, True),
                            (4096, 4, True, True), (4096, 4, True, False), (16384, 1, True, False)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    bf = partial(attention.attention_forward, q, k, v, causal)
    run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal) if fp8 else bf
    o1, l1 = run()
    o2, l2 = two(run)()
    same = torch.equal(o1, o2) and torch.equal(l1, l2)
    fns = {"bf16": bf, "qb1": run, "qb2": two(run)} if fp8 else {"qb1": run, "qb2": two(run)}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d128 {'causal' if causal else 'full'} "
          f"({'bitwise' if same else 'DIFFERS'}): " + ", ".join(f"{n} {ms * 1e3:.1f} us" for n, ms in t.items())
          + f"; qb2 / qb1 {t['qb1'] / t['qb2']:.4f}"
          + (f"; x our bf16 {t['bf16'] / t['qb1']:.3f} / {t['bf16'] / t['qb2']:.3f}" if fp8 else ""), flush=True)
PY

cat > /tmp/s35/ab_dq.py <<'PY'
import importlib.util
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_bwd_ws, tune_cases

ROUNDS = int(sys.argv[1])
kern = open("kernels_s35_old_attn_bwd_ws.py").read()  # git show 04a270c:kernels/_attn_bwd_ws.py
host = open("kernels_s35_old_attention_bwd_ws.py").read()  # git show 04a270c:kernels/attention_bwd_ws.py
open("/tmp/s35/_attn_bwd_ws_old.py", "w").write(kern)
assert "from kernels._attn_bwd_ws import" in host
open("/tmp/s35/attention_bwd_ws_old.py", "w").write(host.replace("from kernels._attn_bwd_ws import",
                                                                 "from _attn_bwd_ws_old import"))
sys.path.insert(0, "/tmp/s35")
spec = importlib.util.spec_from_file_location("attention_bwd_ws_old", "/tmp/s35/attention_bwd_ws_old.py")
OLD = importlib.util.module_from_spec(spec)
sys.modules["attention_bwd_ws_old"] = OLD
spec.loader.exec_module(OLD)


def old(run):
    def go():
        with mock.patch.object(attention_bwd_ws, "backward", OLD.backward):
            return run()
    return go


for seq, b, d, causal in [(4096, 4, 128, False), (4096, 4, 128, True), (16384, 1, 128, False), (4096, 4, 64, False),
                          (4096, 4, 64, True)]:
    q, k, v, do = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal)
    run = partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon")
    g_new, g_old = run(), old(run)()
    same = torch.equal(g_new[1], g_old[1]) and torch.equal(g_new[2], g_old[2])
    dq_err = ((g_new[0].float() - g_old[0].float()).abs().max() / g_old[0].float().abs().max()).item()
    t = tune_cases.in_turns({"old": old(run), "new": run}, ROUNDS)  # (cuDNN's autograd backward cannot be captured)
    print(f"b{b} h16 L{seq} d{d} {'causal' if causal else 'full'} (dk dv {'bitwise' if same else 'DIFFER'}, dq "
          f"{dq_err:.1e}): " + ", ".join(f"{n} {ms * 1e3:.1f} us" for n, ms in t.items())
          + f"; new / old {t['old'] / t['new']:.4f}", flush=True)
PY

cat > /tmp/s35/ab_c3.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])


def with_min(run, n):
    def go():
        with mock.patch.object(attention_ws, "LONG_CAUSAL_MIN_LEN", n):
            return run()
    return go


for seq, b in [(2048, 8), (4096, 4), (8192, 2)]:
    q, k, v = (tune_cases.randn((b, 16, seq, 64), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    two, three = with_min(run, 1 << 30), with_min(run, 1)
    o2, o3 = two()[0].float(), three()[0].float()
    err = ((o2 - o3).abs().max() / o2.abs().max()).item()
    t = tune_cases.in_turns({"cudnn": partial(ref.sdpa, q, k, v, True, "cudnn"), "two": two, "three": three}, ROUNDS)
    print(f"b{b} h16 L{seq} d64 causal (three vs two {err:.1e}): " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({t['cudnn'] / ms:.3f}x cuDNN)" for n, ms in t.items())
        + f"; three / two {t['two'] / t['three']:.4f}", flush=True)
PY

nprof() {  # case: ncu --set full of every kernel of the case's call inside the NVTX range
  local name=$1 dir=/tmp/ncu; mkdir -p $dir
  timeout 150 ncu --clock-control none --set full --import-source no --nvtx --nvtx-include "prof/" -f -o $dir/$name \
    python3 /tmp/s35/prof.py $name > $dir/$name.log 2>&1
  echo "ncu $name rc=$?"
  ncu -i $dir/$name.ncu-rep --page details --print-details all > $dir/${name}_details.txt 2>&1
  ncu -i $dir/$name.ncu-rep --page raw --csv > $dir/${name}_raw.csv 2>&1
  ncu -i $dir/$name.ncu-rep --page source --csv --print-source sass > $dir/${name}_sass.csv 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Registers Per|Warp Cycles Per Issued|Issue Slots Busy" \
    $dir/${name}_details.txt | head -40
}

case $CALL in
  call1)
    for c in bwd_ours bwd_cudnn fwd_d64c_cudnn fwd_d64c_ours gemm_ours gemm_cublas; do nprof $c; done
    tar -C /tmp/ncu -czf "$OUT/kernels_${GPU_TAG}_s35_${CALL}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call7)
    for c in bwd_ours bwd_cudnn; do nprof $c; done
    tar -C /tmp/ncu -czf "$OUT/kernels_${GPU_TAG}_s35_${CALL}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call8)
    timeout 300 python3 /tmp/s35/ab_dq.py 4 2>&1 | tee "${LOG}_ab_dq.log"
    [ "$2" = "ab" ] || timeout 250 python3 -m pytest tests/kernels/test_attention_bwd_ws.py tests/kernels/test_attention.py -m gpu -q \
      -p no:cacheprovider -n 8 -k "bwd_ws or test_attention_gpu" 2>&1 | tail -6 | tee "${LOG}_gpu_tests_bwd.log"
    ;;
  call9)
    timeout 200 python3 /tmp/s35/ab_c3.py 4 2>&1 | tee "${LOG}_ab_c3.log"
    ;;
  call2)
    timeout 500 python3 /tmp/s35/ab_pack.py 4 2>&1 | tee "${LOG}_ab_pack.log"
    ;;
  call3)
    install_perfci
    timeout 250 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "not backward and not bwd" 2>&1 | tail -4 | tee "${LOG}_gpu_tests_fwd.log"
    suite
    ;;
  call4)
    install_perfci
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "row_sums_either_way" 2>&1 | tail -4 | tee "${LOG}_gpu_tests_row_sums.log"
    baseline_update "test_flash_forward and ours and not triton and not fp8" fwd16
    ;;
  call5)
    timeout 300 python3 /tmp/s35/fp8_ratio.py 4 2>&1 | tee "${LOG}_fp8_ratio.log"
    ;;
  call6)
    timeout 400 python3 /tmp/s35/ab_qb.py 4 2>&1 | tee "${LOG}_ab_qb.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
