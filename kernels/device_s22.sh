#!/usr/bin/env bash
# Session-22 device calls (issue 16): bash kernels/device_s22.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the fp8 forward's row sums by wgmma one key tile at a time (ROWSUM_MMA for fp8: P·ones into a zeroed
#        accumulator each step, added to l in fp32; session 21's call 4 carried one fp8 accumulator across every
#        tile and lost the late terms): outputs and lse of both sum forms against the fp64 attention of the
#        dequantised inputs, a graph-timed A/B (fp8 FADD sums, fp8 tile sums, our bf16, SDPA cuDNN; tune_cases.in_turns,
#        best of 4 rounds); then the backward's in-kernel preparation (prep) against the pre-pass at the lengths
#        session 21 did not time (L1024, L2048, L16384, causal L8192), beside SDPA cuDNN, best of 3 rounds.
#        Call 1 ran code that is not in the tree: `git apply docs/measurements/kernels_s22_fwd_fp8_tile_sums.patch`
#        (against commit 0d53f38) first.
# call2: the fp8 forward's row maxima in two halves (_attn_fwd_ws.SPLIT_MAX: the even columns' maximum, their
#        exponentials, then the odd columns' maximum and theirs, the first half rescaled by 2^(m_a - m_b), so the
#        MUFU starts before the whole row's maximum is known): a graph-timed A/B of module copies (old: SPLIT_MAX off;
#        all: on for 16-bit inputs too) with outputs against old's, fp8 and bf16, beside our bf16 / SDPA cuDNN; the
#        backward's preparation forced at L1024 / L2048 with prep_ahead at least one wave of heads; then the backward
#        and the attention fp8 GPU tests.  Call 2 ran code that is not in the tree: `git apply
#        docs/measurements/kernels_s22_fwd_split_max.patch` (against commit 0d53f38) first.
# call3: the shipped routing (attention_bwd_ws.prepares_in_kernel: without a mask from 1024 queries, causal from
#        4096; prep_ahead at least one wave of heads): "auto" against the pre-pass for every head at L1024 / L2048,
#        d128 / d64 (best of 3 rounds); the backward GPU tests; the whole kernel perf suite for README
#        (kernels.tune --perf-json); the H100 baseline's backward entries re-made from two runs.
# call4: meant for an H200 (the routing was never timed there); it ran on call 3's warm H100 GPU-c722a5b3 instead:
#        "auto" against the pre-pass for every head at L1024, L2048, L4096 (d128 / d64, and causal at L4096), best of 3
#        rounds; the backward GPU tests; the baseline's backward entries re-made from two runs (the H100's again, so
#        that tarball was not kept: the baseline holds call 3's).
# call5: the Gluon forward with two Q buffers per consumer (_attn_fwd_ws.Q_BUFS 2: the loader loads the next row
#        block's Q, then its first K/V tiles, while the consumers finish the current one) against one (a module copy
#        with Q_BUFS 1): outputs against one buffer's, a graph-timed A/B beside SDPA cuDNN (best of 3 rounds), bf16 and
#        fp8; then the attention GPU tests on two buffers.  Call 5 ran a first form, Q_BUFS a module constant (2 for
#        every config; the module copy sed it to 1), not in the tree: the tree's kernel takes Q_BUFS as an argument,
#        and the same run is the tree with attention_ws.q_buffers returning 2 everywhere (the GPU test that forces
#        ROWSUM_MMA at d128 then failed: the kernel no longer fit in shared memory).
# call6: two Q buffers as shipped (attention_ws.q_buffers: 16-bit d128 without a mask, CONFIGS' config): "auto"
#        against one buffer (q_buffers forced to 1) at L512-16384 and d80 (padded to 128), beside SDPA cuDNN, best of 3
#        rounds; then the attention GPU tests.  Before TWO_Q_BUFFERS_MIN_KEYS: L512 ran two buffers too.
# call7: after the review: the forward's barriers set up consumer by consumer (one Q buffer: the SASS before Q_BUFS) and
#        a new GPU test (two Q buffers against one, bitwise, several row blocks a persistent program): the Gluon
#        forward GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s22_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s22
cat > /tmp/s22/ab_fp8_tile_sums.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

SHAPES = [(4, 16, 4096, 128, False), (2, 16, 8192, 128, False), (1, 16, 16384, 128, False),
          (4, 16, 4096, 128, True), (1, 16, 16384, 128, True), (4, 16, 4096, 64, False), (32, 16, 512, 128, False)]
if len(sys.argv) > 2:
    SHAPES = SHAPES[:int(sys.argv[2])]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
orig = attention_ws.rowsum_mma


def forced(on, fn):
    def run():
        attention_ws.rowsum_mma = (lambda fp8, consumers, *a, **k: True) if on else orig
        try:
            return fn()
        finally:
            attention_ws.rowsum_mma = orig
    return run


for b, h, seq, d, causal in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((b, h, seq, d), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
    v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
    fp8 = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    fns = {"fp8 fadd": forced(False, fp8), "fp8 tile-sums": forced(True, fp8),
           "bf16 ours": partial(attention.attention_forward, q, k, v, causal),
           "cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn")}
    deq = [t[:1, :2].double() * s for t, s in ((q8, sq), (k8, sk), (v8, sv))]
    ro, rl = ref.attention_fp32(*deq, causal, None, "bhld", dtype=torch.float64)
    outs = {}
    for name in ("fp8 fadd", "fp8 tile-sums"):
        o, l = fns[name]()
        outs[name] = (o, l)
        print(f"  {name}: out rel err {ref.rel_err(o[:1, :2], ro):.3e}, lse max abs err "
              f"{(l[:1, :2].double() - rl).abs().max().item():.3e}", flush=True)
    (oa, la), (ob, lb) = outs.values()
    print(f"  tile-sums vs fadd (all heads): out rel diff {ref.rel_err(ob, oa):.3e}, lse max abs diff "
          f"{(lb - la).abs().max().item():.3e}", flush=True)
    del deq, ro, rl, outs, oa, ob
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, h, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"fp8 b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['bf16 ours'] / ms:.3f} bf16"
                                 for n, ms in t.items())
          + f"; tile-sums / fadd speed x{t['fp8 fadd'] / t['fp8 tile-sums']:.4f}", flush=True)
PY
cat > /tmp/s22/ab_prep.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_ws, tune_cases
from kernels import reference as ref
from kernels._checks import check_attention
from kernels.tune_bwd import _sdpa_grad, _time

SHAPES = [(16, 16, 1024, 128, False), (8, 16, 2048, 128, False), (1, 16, 16384, 128, False),
          (2, 16, 8192, 128, True), (8, 16, 2048, 64, False), (1, 16, 16384, 64, False)]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
NEW = "auto" if sys.argv[2:] == ["auto"] else "prep"  # call 3: the shipped routing (prep=None) against the pre-pass
for b, h, seq, d, causal in SHAPES:
    q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
    bufs = tuple(torch.empty_like(t) for t in (q, k, v))
    run = partial(attention_bwd_ws.backward, do, q, k, v, out, lse, *bufs, dims, "bhld", causal, d ** -0.5)
    fns = {"pre-pass": partial(run, prep=False), NEW: run if NEW == "auto" else partial(run, prep=True)}
    res = {}
    for name, fn in fns.items():
        fn()
        res[name] = tuple(t.clone() for t in bufs)
    diffs = [(x.float() - y.float()).abs().max().item() for x, y in zip(res["pre-pass"], res[NEW])]
    qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    o = ref.sdpa(*qkv, causal, "cudnn")
    fns["cudnn"] = partial(_sdpa_grad, o, qkv, do)
    flops = tune_cases.flops_bytes(tune_cases.Variant("bwd", (b, h, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS, timer=lambda fn: _time(fn)[0])
    tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['cudnn'] / ms:.3f} cuDNN"
                                 for n, ms in t.items())
          + f"; {NEW} / pre-pass speed x{t['pre-pass'] / t[NEW]:.4f}; max diff dq/dk/dv "
          + "/".join(f"{x:.1e}" for x in diffs), flush=True)
    del q, k, v, do, out, lse, bufs, res, qkv, o
    torch.cuda.empty_cache()
PY
cat > /tmp/s22/ab_split.py <<'PY'
import importlib
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

NEW = attention_ws.attn_fwd_ws
VARIANTS = {"split": NEW}
for name in ("old", "all"):
    VARIANTS[name] = importlib.import_module(f"kernels._attn_fwd_ws_s22{name}").attn_fwd_ws


def kernel(kern, fn):
    def run():
        attention_ws.attn_fwd_ws = kern
        try:
            return fn()
        finally:
            attention_ws.attn_fwd_ws = NEW
    return run


ROUNDS = int(sys.argv[1])
for which, b, h, seq, d, causal in [("fp8", 4, 16, 4096, 128, False),
                                    ("fp8", 1, 16, 16384, 128, False), ("fp8", 4, 16, 4096, 128, True),
                                    ("fp8", 4, 16, 4096, 64, False), ("fp8", 32, 16, 512, 128, False),
                                    ("bf16", 4, 16, 4096, 128, False), ("bf16", 4, 16, 4096, 64, False)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((b, h, seq, d), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    if which == "fp8":
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
        names = ("old", "split", "all")[:2]
    else:
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
        names = ("old", "all")
    fns = {n: kernel(VARIANTS[n], run) for n in names}
    outs = {n: fns[n]() for n in names}
    o0, l0 = outs["old"]
    for n in names[1:]:
        o1, l1 = outs[n]
        print(f"  {which} {n}: out rel diff vs old {ref.rel_err(o1, o0):.3e}, lse max abs diff "
              f"{(l1 - l0).abs().max().item():.3e}", flush=True)
    del outs, o0, l0
    fns["bf16 ours"] = partial(attention.attention_forward, q, k, v, causal)
    fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, h, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"{which} b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['old'] / ms:.4f} old "
                                 f"x{t['bf16 ours'] / ms:.3f} bf16" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY
cat > /tmp/s22/ab_qbufs.py <<'PY'
import importlib
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

NEW = attention_ws.attn_fwd_ws
VARIANTS = {"qb2": NEW, "qb1": importlib.import_module("kernels._attn_fwd_ws_s22qb1").attn_fwd_ws}


def kernel(kern, fn):
    def run():
        attention_ws.attn_fwd_ws = kern
        try:
            return fn()
        finally:
            attention_ws.attn_fwd_ws = NEW
    return run


ROUNDS = int(sys.argv[1])
for which, b, h, seq, d, causal in [("bf16", 32, 16, 512, 128, True), ("bf16", 32, 16, 512, 128, False),
                                    ("bf16", 4, 16, 4096, 128, False), ("bf16", 4, 16, 4096, 128, True),
                                    ("bf16", 4, 16, 4096, 64, False), ("bf16", 4, 16, 4096, 64, True),
                                    ("bf16", 16, 16, 1024, 128, True), ("bf16", 1, 16, 16384, 128, False),
                                    ("fp8", 4, 16, 4096, 128, False), ("fp8", 4, 16, 4096, 128, True),
                                    ("fp8", 32, 16, 512, 128, False)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((b, h, seq, d), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    if which == "fp8":
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    fns = {n: kernel(VARIANTS[n], run) for n in ("qb1", "qb2")}
    (o1, l1), (o2, l2) = fns["qb1"](), fns["qb2"]()
    print(f"  {which}: qb2 vs qb1 out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
    del o1, o2, l1, l2
    if which == "fp8":
        fns["bf16 ours"] = partial(attention.attention_forward, q, k, v, causal)
    fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, h, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"{which} b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['qb1'] / ms:.4f} qb1 "
                                 f"x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY
cat > /tmp/s22/ab_qb_shipped.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

orig = attention_ws.q_buffers


def one_buffer(fn):
    def run():
        attention_ws.q_buffers = lambda *a, **k: 1
        try:
            return fn()
        finally:
            attention_ws.q_buffers = orig
    return run


ROUNDS = int(sys.argv[1])
for b, h, seq, d in [(4, 16, 4096, 128), (2, 16, 8192, 128), (1, 16, 16384, 128), (8, 16, 2048, 128),
                     (16, 16, 1024, 128), (32, 16, 512, 128), (4, 16, 4096, 80)]:
    q, k, v = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, False)
    fns = {"qb1": one_buffer(run), "auto": run}
    (o1, l1), (o2, l2) = fns["qb1"](), fns["auto"]()
    print(f"  auto vs qb1 out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
    del o1, o2, l1, l2
    fns["cudnn"] = partial(ref.sdpa, q, k, v, False, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, h, seq, d, False)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"bf16 b{b} h{h} L{seq} d{d} full"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['qb1'] / ms:.4f} qb1 "
                                 f"x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY
case $CALL in
  call1)
    timeout 330 python3 /tmp/s22/ab_fp8_tile_sums.py 4 2>&1 | tee "${LOG}_ab_fp8_tile_sums.log"
    timeout 200 python3 /tmp/s22/ab_prep.py 3 2>&1 | tee "${LOG}_ab_prep.log"
    ;;
  call2)
    sed 's/^SPLIT_MAX: gl.constexpr = gl.constexpr(True)/SPLIT_MAX: gl.constexpr = gl.constexpr(False)/' \
      kernels/_attn_fwd_ws.py > kernels/_attn_fwd_ws_s22old.py
    sed 's/elif SPLIT_MAX and dtype.primitive_bitwidth == 8:/elif SPLIT_MAX:/' kernels/_attn_fwd_ws.py \
      > kernels/_attn_fwd_ws_s22all.py
    grep -c 'constexpr(False)' kernels/_attn_fwd_ws_s22old.py; grep -c 'elif SPLIT_MAX:' kernels/_attn_fwd_ws_s22all.py
    timeout 240 python3 /tmp/s22/ab_split.py 3 2>&1 | tee "${LOG}_ab_split.log"
    sed -i 's/^SHAPES = \[/SHAPES = [(16, 16, 1024, 128, False), (8, 16, 2048, 128, False), (16, 16, 1024, 64, False), (16, 16, 1024, 128, True)] or [/' /tmp/s22/ab_prep.py
    timeout 100 python3 /tmp/s22/ab_prep.py 3 2>&1 | tee "${LOG}_ab_prep.log"
    timeout 100 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_bwd.log"
    timeout 130 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 -k "fp8 or gluon" 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call3)
    sed -i 's/^SHAPES = \[/SHAPES = [(16, 16, 1024, 128, False), (8, 16, 2048, 128, False), (16, 16, 1024, 64, False), (8, 16, 2048, 64, False)] or [/' /tmp/s22/ab_prep.py
    timeout 100 python3 /tmp/s22/ab_prep.py 3 auto 2>&1 | tee "${LOG}_ab_auto.log"
    timeout 100 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_bwd.log"
    source kernels/device_lib.sh  # install_perfci
    install_perfci || exit 3
    timeout 240 python3 -m pytest tests/perf/test_flash.py tests/perf/test_decode.py tests/perf/test_matmul.py \
      "tests/perf/test_torch_ops.py::test_copy_256mb" -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
      > "${LOG}_perf_suite.log" 2>&1
    echo "perf suite rc=$?"
    tail -3 "${LOG}_perf_suite.log"
    [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_suite_table.txt"
    timeout 150 perfci baseline update tests/perf/test_flash.py -k backward --runs 2 --force --results-dir /tmp/bl \
      > "${LOG}_baseline_update_bwd.log" 2>&1
    echo "baseline update bwd rc=$?"
    tail -6 "${LOG}_baseline_update_bwd.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call4)
    sed -i 's/^SHAPES = \[/SHAPES = [(16, 16, 1024, 128, False), (8, 16, 2048, 128, False), (4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (16, 16, 1024, 64, False), (4, 16, 4096, 64, False)] or [/' /tmp/s22/ab_prep.py
    timeout 150 python3 /tmp/s22/ab_prep.py 3 auto 2>&1 | tee "${LOG}_ab_auto.log"
    timeout 100 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_bwd.log"
    source kernels/device_lib.sh  # install_perfci
    install_perfci || exit 3
    timeout 150 perfci baseline update tests/perf/test_flash.py -k backward --runs 2 --force --results-dir /tmp/bl \
      > "${LOG}_baseline_update_bwd.log" 2>&1
    echo "baseline update bwd rc=$?"
    tail -9 "${LOG}_baseline_update_bwd.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call5)
    sed 's/^Q_BUFS: gl.constexpr = gl.constexpr(2)/Q_BUFS: gl.constexpr = gl.constexpr(1)/' kernels/_attn_fwd_ws.py \
      > kernels/_attn_fwd_ws_s22qb1.py
    grep -c 'gl.constexpr(1)' kernels/_attn_fwd_ws_s22qb1.py
    timeout 300 python3 /tmp/s22/ab_qbufs.py 3 2>&1 | tee "${LOG}_ab_qbufs.log"
    timeout 170 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 -k "fp8 or gluon" 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call6)
    timeout 200 python3 /tmp/s22/ab_qb_shipped.py 3 2>&1 | tee "${LOG}_ab_qb_shipped.log"
    timeout 170 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call7)
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "two_q or gluon_forward or fp8" 2>&1 | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
