#!/usr/bin/env bash
# Session-20 device calls (issue 16): bash kernels/device_s20.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100): the Gluon backward's dQ post-pass overlapped with the backward's last partial wave
#        (attention_bwd_ws.POST_OVERLAP: a programmatic dependent launch whose programs wait for their kv head's
#        consumers to count themselves done): the backward GPU tests (with the new overlap and CUDA-graph rows), then
#        a graph-timed A/B (overlap off / on / SDPA cuDNN, the variants taking turns, every other round reversed,
#        best of 3 rounds) at the suite's shapes and more.
# call2 (H100): call 1 found the overlap slower at d128 L4096 (2.80 against 2.75 ms) though the post-pass costs
#        0.06 ms: variants to tell why: the kernel's signal alone (post-pass after it), a lighter signal (SIGNAL 2), the
#        post-pass's loads / stores without evict-first, the post-pass persistent over 132 or 264 programs; dq of every
#        variant compared with the post-pass after the kernel; the new GPU rows (-k overlapped).  Ran on an H200.
# call3 (H100): the lighter signal (SIGNAL 2) against no overlap, five rounds, at the shapes without a mask (where the
#        last wave leaves SMs idle) and the two causal ones (python3 ab_post.py call3).
#        Calls 1-3 ran the overlap, which was not kept: `git apply docs/measurements/kernels_s20_bwd_post_overlap.patch`
#        first (call 1 ran an earlier form of it: SIGNAL 1 only and the post-pass's programs one per row block, with
#        loads through L2 and no evict-first hint).
# call4 (H100): the whole kernel perf suite (attention forward / backward / fp8 / d80, decode, GEMMs, the 256 MB
#        copy) through the perfci fixture, for README's table.
# call5 (H100): dK's product with dS^T from registers (attention_bwd_ws.DS_REGISTERS, the kernel's DS_RS) against
#        from shared memory: the backward GPU tests, then a graph-timed A/B beside SDPA cuDNN (python3 ab_ds.py).
# call6 (H100): at head dim 64, each consumer's K and V rows held in registers for the whole program as well
#        (attention_bwd_ws.KV_REGISTERS_HEAD_DIMS, the kernel's KV_RS) against dS^T alone and neither: A/B beside SDPA
#        cuDNN (python3 ab_ds.py d64), then the backward GPU tests (new: the register variants bitwise against smem).
# call7 (H100): after KV_RS was limited to runs with DS_RS (the other combination miscompiled: call 6's failed test):
#        the backward GPU tests, the suite's backward rows through the perfci fixture.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s20_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s20
cat > /tmp/s20/ab_bwd.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_ws, tune_cases
from kernels import reference as ref
from kernels._checks import check_attention
from kernels.tune_bwd import _sdpa_grad, _time

SHAPES = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (4, 16, 4096, 64, False), (4, 16, 4096, 64, True),
          (2, 16, 8192, 128, False), (2, 16, 8192, 128, True), (1, 16, 16384, 128, False), (16, 16, 1024, 128, False),
          (4, 16, 2048, 128, False)]
if len(sys.argv) > 1:
    SHAPES = SHAPES[: int(sys.argv[1])]
for b, h, seq, d, causal in SHAPES:
    q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
    bufs = tuple(torch.empty_like(t) for t in (q, k, v))
    fns = {f"overlap={o}": partial(attention_bwd_ws.backward, do, q, k, v, out, lse, *bufs, dims, "bhld", causal,
                                   d ** -0.5, overlap=o) for o in (False, True)}
    fns["no post-pass (timing only)"] = partial(attention_bwd_ws.backward, do, q, k, v, out, lse, *bufs, dims, "bhld",
                                                causal, d ** -0.5, overlap=False, skip_post=True)
    qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    o = ref.sdpa(*qkv, causal, "cudnn")
    fns["cudnn"] = partial(_sdpa_grad, o, qkv, do)
    flops = tune_cases.flops_bytes(tune_cases.Variant("bwd", (b, h, seq, d, causal)))[0]
    t = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            try:
                t[name] = min(_time(fn)[0], t.get(name, float("inf")))
            except Exception as exc:
                print(f"  {name} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['cudnn'] / ms:.3f} cuDNN"
                                 for n, ms in t.items()), flush=True)
    del q, k, v, do, out, lse, bufs, fns, qkv, o
PY
cat > /tmp/s20/ab_post.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_ws, tune_cases
from kernels import reference as ref
from kernels._checks import check_attention
from kernels.reference import rel_err
from kernels.tune_bwd import _sdpa_grad, _time

SHAPES = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (4, 16, 4096, 64, False), (2, 16, 8192, 128, True),
          (4, 16, 2048, 128, False)]
ROUNDS = 3
VARIANTS = {"off": dict(overlap=False), "on": dict(overlap=True, signal=1),
            "on signal2": dict(overlap=True, signal=2), "on no-evict": dict(overlap=True, post_evict=False),
            "on 132 programs": dict(overlap=True, post_programs=132),
            "on 264 programs": dict(overlap=True, post_programs=264),
            "signal1 only": dict(overlap=False, signal_only=True, signal=1),
            "signal2 only": dict(overlap=False, signal_only=True, signal=2),
            "no post-pass (timing only)": dict(overlap=False, skip_post=True)}
if sys.argv[1:] == ["call3"]:
    SHAPES = [(4, 16, 4096, 128, False), (4, 16, 4096, 64, False), (2, 16, 8192, 128, False), (4, 16, 2048, 128, False),
              (16, 16, 1024, 128, False), (1, 16, 16384, 128, False), (4, 16, 4096, 128, True), (4, 16, 4096, 64, True)]
    ROUNDS = 5
    VARIANTS = {n: VARIANTS[n] for n in ("off", "on signal2", "no post-pass (timing only)")}
for b, h, seq, d, causal in SHAPES:
    q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
    fns, grads = {}, {}
    for name, kw in VARIANTS.items():
        grads[name] = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
        fns[name] = partial(attention_bwd_ws.backward, do, q, k, v, out, lse, *grads[name], dims, "bhld", causal,
                            d ** -0.5, **kw)
        fns[name]()
    torch.cuda.synchronize()
    errs = {n: (rel_err(g[0], grads["off"][0]), torch.equal(g[1], grads["off"][1]) and torch.equal(g[2], grads["off"][2]))
            for n, g in grads.items() if not n.startswith(("off", "no post"))}
    qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    o = ref.sdpa(*qkv, causal, "cudnn")
    fns["cudnn"] = partial(_sdpa_grad, o, qkv, do)
    flops = tune_cases.flops_bytes(tune_cases.Variant("bwd", (b, h, seq, d, causal)))[0]
    t = {}
    for r in range(ROUNDS):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    print(f"{tag}: dq rel err vs off / dk, dv equal: " + "; ".join(f"{n} {e:.1e} {eq}" for n, (e, eq) in errs.items()),
          flush=True)
    del q, k, v, do, out, lse, fns, grads, qkv, o
PY
cat > /tmp/s20/ab_ds.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_ws, tune_cases
from kernels import reference as ref
from kernels._checks import check_attention
from kernels.reference import rel_err
from kernels.tune_bwd import _sdpa_grad, _time

SHAPES = [(4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (4, 16, 4096, 64, False), (4, 16, 4096, 64, True),
          (2, 16, 8192, 128, False), (2, 16, 8192, 128, True), (1, 16, 16384, 128, False), (4, 16, 2048, 128, False),
          (16, 16, 1024, 128, False)]
VARIANTS = (("dS smem", dict(ds_registers=False)), ("dS registers", dict(ds_registers=True)))
if sys.argv[1:] == ["d64"]:
    SHAPES = [(4, 16, 4096, 64, False), (4, 16, 4096, 64, True), (2, 16, 8192, 64, False), (2, 16, 8192, 64, True),
              (8, 16, 2048, 64, False), (8, 16, 2048, 64, True), (1, 16, 16384, 64, False)]
    VARIANTS = (("dS smem", dict(ds_registers=False, kv_registers=False)),
                ("dS registers", dict(ds_registers=True, kv_registers=False)),
                ("dS, K, V registers", dict(ds_registers=True, kv_registers=True)))
for b, h, seq, d, causal in SHAPES:
    q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
    fns, grads = {}, {}
    for name, kw in VARIANTS:
        grads[name] = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
        fns[name] = partial(attention_bwd_ws.backward, do, q, k, v, out, lse, *grads[name], dims, "bhld", causal,
                            d ** -0.5, **kw)
        fns[name]()
    torch.cuda.synchronize()
    last = VARIANTS[-1][0]
    diff = [rel_err(a, b_) for a, b_ in zip(grads[last], grads["dS smem"], strict=True)]
    eq = [torch.equal(a, b_) for a, b_ in zip(grads[last], grads["dS smem"], strict=True)]
    qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    o = ref.sdpa(*qkv, causal, "cudnn")
    fns["cudnn"] = partial(_sdpa_grad, o, qkv, do)
    flops = tune_cases.flops_bytes(tune_cases.Variant("bwd", (b, h, seq, d, causal)))[0]
    t = {}
    for r in range(4):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['cudnn'] / ms:.3f} cuDNN"
                                 for n, ms in t.items()) + f"; {last} vs smem: dq/dk/dv rel {diff[0]:.1e} / "
          f"{diff[1]:.1e} / {diff[2]:.1e}, bitwise {eq}", flush=True)
    del q, k, v, do, out, lse, fns, grads, qkv, o
PY
case "$CALL" in
call1)
  timeout 400 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x 2>&1 \
    | tail -15 | tee "${LOG}_gpu_tests.log"
  timeout 400 python3 /tmp/s20/ab_bwd.py 2>&1 | tee "${LOG}_ab_bwd.log"
  ;;
call3)
  timeout 500 python3 /tmp/s20/ab_post.py call3 2>&1 | tee "${LOG}_ab_post.log"
  ;;
call4)
  source kernels/device_lib.sh  # install_perfci
  install_perfci || exit 3
  timeout 500 python3 -m pytest tests/perf/test_flash.py tests/perf/test_decode.py tests/perf/test_matmul.py \
    "tests/perf/test_torch_ops.py::test_copy_256mb" -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
    > "${LOG}_perf_suite.log" 2>&1
  echo "perf suite rc=$?"
  tail -3 "${LOG}_perf_suite.log"
  [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_suite_table.txt"
  ;;
call5)
  timeout 400 python3 /tmp/s20/ab_ds.py 2>&1 | tee "${LOG}_ab_ds.log"
  timeout 400 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x 2>&1 \
    | tail -4 | tee "${LOG}_gpu_tests.log"
  ;;
call6)
  timeout 400 python3 /tmp/s20/ab_ds.py d64 2>&1 | tee "${LOG}_ab_ds.log"
  timeout 400 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x 2>&1 \
    | tail -4 | tee "${LOG}_gpu_tests.log"
  ;;
call7)
  timeout 400 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider 2>&1 \
    | tail -4 | tee "${LOG}_gpu_tests.log"
  source kernels/device_lib.sh  # install_perfci
  install_perfci || exit 3
  timeout 200 python3 -m pytest tests/perf/test_flash.py -k backward -q -p no:cacheprovider \
    --benchmark-json="$OUT/perf_bwd.json" > "${LOG}_perf_suite_bwd.log" 2>&1
  echo "perf suite rc=$?"
  [ -f "$OUT/perf_bwd.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_bwd.json" \
    | tee "${LOG}_perf_suite_bwd_table.txt"
  ;;
call2)
  timeout 400 python3 /tmp/s20/ab_post.py 2>&1 | tee "${LOG}_ab_post.log"
  timeout 200 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -k overlapped -q -p no:cacheprovider \
    2>&1 | tail -4 | tee "${LOG}_gpu_tests.log"
  ;;
esac
