#!/usr/bin/env bash
# Session-23 device calls (issue 16): bash kernels/device_s23.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the Gluon forward's two consumer warpgroups run as one partition of 8 warps (the kernel's MERGED,
#        attention_ws.MERGE_CONSUMERS: one copy of the consumer code, half the SASS) against two partitions, where a
#        config has no ping-pong turns (causal bf16 / fp8, the short causal config, d64 short queries): outputs
#        bitwise against two partitions', a graph-timed A/B beside SDPA cuDNN (tune_cases.in_turns, best of 3
#        rounds); then the attention GPU tests with MERGE_CONSUMERS on (a pytest plugin module that sets it, loaded
#        by every xdist worker).
# call3: the forward at d64 causal L512 / L1024 / L2048 and d32 causal L512 on 64-key tile configs (3 / 4 / 2 stages,
#        persistent or not, ping-pong), "auto", Triton, SDPA cuDNN; the backward rows of call 2 (which failed at its
#        first: SDPA's autograd backward cannot be captured on the legacy stream; now timed by tune_bwd._time, which
#        falls back to perfci's side-stream capture); on an H200 also session 22's routing A/B (device_s22.sh writes
#        its scripts: the backward's preparation "auto" against the pre-pass at L1024 / L2048, d128 / d64, and two Q
#        buffers against one at L512-16384, d80), which was never timed on an H200.
# call4: (meant for an H100) call 3's forward rows with "auto" now taking the Gluon kernel on 64-key tiles for d64 causal
#        attention over fewer than 2048 keys (attention_ws.SHORT_CAUSAL_CONFIGS[64], PREFER_CAUSAL_MIN_BLOCK_D 64);
#        the backward at L512 by each implementation (auto, Gluon, the Triton 2-kernel scheme, fused) against SDPA
#        cuDNN; then the attention GPU tests.
# call6: d64 causal L512 / L1024 on three consumers (64- and 128-key tiles, ping-pong or not), the row sums by wgmma
#        (rowsum_mma's rule for three consumers) or by FADDs, against "auto" (64-key tiles, two consumers), Triton
#        and SDPA cuDNN.
# call7: with a causal mask on key tiles narrower than the row block (the short causal configs: 64-key tiles, 128-row
#        blocks), each consumer skips the row block's last key tiles that lie wholly past its own rows' diagonal
#        (_attn_fwd_ws._own_tiles: the first consumer's last tile, all of its P zeros), releasing their ring slots
#        once landed: the tree against a module copy without it (_skips returning False, sed), outputs bitwise, a
#        graph-timed A/B beside SDPA cuDNN (best of 3 rounds); then the attention GPU tests.
# (call 8 ran commit 7dbd634's tree, call 7 that tree without _own_full; since the reviews _skips also asks
#  pb.NC == 2 and the _own_full switch is gone, so re-run calls 7-8 on a checkout of 7dbd634.)
# call8: call 7's skip plus each consumer counting its unmasked key tiles from its own first row (_own_full: the later
#        consumer's rows run one tile fewer through the masked softmax on 64-key tiles): three module variants, old
#        (_skips False), skip only (_own_full False; not the very SASS of call 7's build, offline: same count), and
#        the tree, outputs bitwise, A/B beside SDPA cuDNN, best of 4 rounds; then the attention GPU tests.
# call2: attention at short lengths beyond the suite's (the issue asks >= 0.9x cuDNN at L512; the suite times L512 at
#        d128 only): the forward at d64 L512 / L1024, full and causal, "auto" (the Triton kernel where the Gluon
#        one is not preferred), Triton, the Gluon kernel on its default config and on others (64-key tiles,
#        persistent, three consumers; MERGED beside), SDPA cuDNN; the backward at L512, d64 / d128, full / causal,
#        ours against SDPA cuDNN (autograd, as the suite times it); best of 3 rounds.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s23_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s23
cat > /tmp/s23/merge_plugin.py <<'PY'
"""pytest plugin (-p merge_plugin): the Gluon forward's consumers merged into one partition wherever allowed."""
from kernels import attention_ws

attention_ws.MERGE_CONSUMERS = True
PY
cat > /tmp/s23/ab_merged.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, heads, length, head dim, causal, fp8)
SHAPES = [(32, 16, 512, 128, True, False), (16, 16, 1024, 128, True, False), (8, 16, 2048, 128, True, False),
          (4, 16, 4096, 128, True, False), (1, 16, 16384, 128, True, False), (4, 16, 4096, 64, True, False),
          (32, 16, 512, 64, True, False), (16, 16, 1024, 64, False, False), (4, 16, 4096, 128, True, True),
          (32, 16, 512, 128, True, True), (4, 16, 4096, 80, True, False)]
if len(sys.argv) > 2:
    SHAPES = SHAPES[:int(sys.argv[2])]


def variant(merged, fn):
    def run():
        with mock.patch.object(attention_ws, "MERGE_CONSUMERS", merged):
            return fn()
    return run


for b, h, seq, d, causal, fp8 in SHAPES:
    q, k, v = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    fns = {"sep": variant(False, run), "mrg": variant(True, run)}
    (o1, l1), (o2, l2) = fns["sep"](), fns["mrg"]()
    print(f"  mrg vs sep out bitwise {torch.equal(o1, o2)} (max diff {(o1.float() - o2.float()).abs().max().item():.3e}),"
          f" lse bitwise {torch.equal(l1, l2)}", flush=True)
    del o1, o2, l1, l2
    fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    if fp8:
        fns["bf16 sep"] = variant(False, partial(attention.attention_forward, q, k, v, causal, impl="gluon"))
        fns["bf16 mrg"] = variant(True, partial(attention.attention_forward, q, k, v, causal, impl="gluon"))
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, h, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"{'fp8' if fp8 else 'bf16'} b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['sep'] / ms:.4f} sep "
                                 f"x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY
cat > /tmp/s23/ab_skip.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s23old as old, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
SHAPES = [(32, 512, 128), (16, 1024, 128), (32, 512, 64), (16, 1024, 64), (4, 4096, 128)]
if sys.argv[2:] == ["call8"]:
    from kernels import _attn_fwd_ws_s23skip as skip_only
    SHAPES = SHAPES[:4] + [(8, 2048, 64)]


def with_kernel(kernel, fn):
    def run():
        with mock.patch.object(attention_ws, "attn_fwd_ws", kernel):
            return fn()
    return run


for b, seq, d in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True)
    fns = {"old": with_kernel(old.attn_fwd_ws, run), "skip": run}
    if sys.argv[2:] == ["call8"]:
        fns = {"old": fns["old"], "skip": with_kernel(skip_only.attn_fwd_ws, run), "skip+own": run}
    o1, l1 = fns["old"]()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs old out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
    del o1, o2, l1, l2
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['old'] / ms:.4f} old x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY
cat > /tmp/s23/short.py <<'PY'
import contextlib
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref
from kernels.tune_bwd import _time

ROUNDS = int(sys.argv[1])
FWD = [(32, 512, 64, True), (32, 512, 64, False), (16, 1024, 64, True), (16, 1024, 64, False)]
BWD = [(32, 512, 128, False), (32, 512, 128, True), (32, 512, 64, False), (32, 512, 64, True)]
if sys.argv[2:] in (["call3"], ["call4"]):  # the short causal configs at d64 around the routing's 2048, the backward
    FWD = [(32, 512, 64, True), (16, 1024, 64, True), (8, 2048, 64, True), (32, 512, 32, True)]
BWD_IMPLS = ("auto", "gluon", "triton", "fused") if sys.argv[2:] == ["call4"] else ("auto",)


def gluon(q, k, v, causal, cfg=None, merged=False, rowsum=None):
    def run():  # (MERGE_CONSUMERS only in the tree of calls 1-2: merged only there)
        with (mock.patch.object(attention_ws, "MERGE_CONSUMERS", merged) if merged else contextlib.nullcontext(),
              mock.patch.object(attention_ws, "rowsum_mma", lambda fp8, consumers: rowsum) if rowsum is not None
              else contextlib.nullcontext()):
            if cfg is None:
                return attention.attention_forward(q, k, v, causal, impl="gluon")
            with mock.patch.object(attention_ws, "default_config", lambda *a, **kw: cfg):
                return attention.attention_forward(q, k, v, causal, impl="gluon")
    return run


CFGS = {"g128x3p": (128, 3, 2, True, False), "g64x3p": (64, 3, 2, True, False), "g64x4p": (64, 4, 2, True, False),
        "g128x2nc3p": (128, 2, 3, True, False), "g64x3nc3p": (64, 3, 3, True, False),
        "g128x3": (128, 3, 2, False, False)}
MERGED = True
if sys.argv[2:] == ["call6"]:  # three consumers at d64 short causal, the tensor-core row sums off / on
    FWD = [(32, 512, 64, True), (16, 1024, 64, True)]
    CFGS = {"g64x3nc3p": (64, 3, 3, True, False), "g64x3nc3pp": (64, 3, 3, True, True),
            "g128x2nc3p": (128, 2, 3, True, False), "g128x2nc3pp": (128, 2, 3, True, True)}
    MERGED = False
elif sys.argv[2:] in (["call3"], ["call4"]):
    CFGS = {"g64x3p": (64, 3, 2, True, False), "g64x4p": (64, 4, 2, True, False), "g64x2p": (64, 2, 2, True, False),
            "g64x3": (64, 3, 2, False, False), "g64x3pp": (64, 3, 2, True, True)}
    MERGED = False
for b, seq, d, causal in FWD:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    fns = {"auto": partial(attention.attention_forward, q, k, v, causal),
           "triton": partial(attention.attention_forward, q, k, v, causal, impl="triton"),
           "gluon": gluon(q, k, v, causal)}
    if MERGED:
        fns["gluon mrg"] = gluon(q, k, v, causal, merged=True)
    for name, cfg in CFGS.items():
        fns[name] = gluon(q, k, v, causal, cfg)
        if cfg[2] == 3 and sys.argv[2:] == ["call6"]:
            fns[name + " fadd"] = gluon(q, k, v, causal, cfg, rowsum=False)
        if cfg[2] == 2 and MERGED:
            fns[name + " mrg"] = gluon(q, k, v, causal, cfg, merged=True)
    fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    base, _ = fns["triton"]()
    for name, fn in list(fns.items()):
        if name.startswith("g"):
            o, _ = fn()
            print(f"  {name} max diff from triton {(o.float() - base.float()).abs().max().item():.2e}")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS, on_error=lambda n, e: print(f"  {n} failed: {e!r}"[:300]))
    tag = f"fwd bf16 b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['cudnn'] / ms:.3f} cuDNN"
                                 for n, ms in sorted(t.items(), key=lambda kv: kv[1])), flush=True)
    torch.cuda.empty_cache()


def sdpa_bwd(out, qkv, do):
    return torch.autograd.grad(out, qkv, do, retain_graph=True)


for b, seq, d, causal in (BWD if sys.argv[2:] != ["call6"] else []):
    q, k, v, do = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal)
    qkv = tuple(t.clone().requires_grad_() for t in (q, k, v))
    o_ref = ref.sdpa(*qkv, causal, "cudnn")
    fns = {("ours" if impl == "auto" else impl): partial(attention.attention_backward, do, q, k, v, out, lse, causal,
                                                         impl=impl) for impl in BWD_IMPLS}
    fns["cudnn"] = partial(sdpa_bwd, o_ref, qkv, do)
    flops = 2.5 * tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS, timer=lambda fn: _time(fn)[0])
    tag = f"bwd bf16 b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['cudnn'] / ms:.3f} cuDNN"
                                 for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY
case $CALL in
  call1)
    timeout 300 python3 /tmp/s23/ab_merged.py 3 2>&1 | tee "${LOG}_ab_merged.log"
    PYTHONPATH=.:/tmp/s23 timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider \
      -p merge_plugin -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_fwd_merged.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s23/short.py 3 2>&1 | tee "${LOG}_short.log"
    ;;
  call3)
    timeout 300 python3 /tmp/s23/short.py 3 call3 2>&1 | tee "${LOG}_short.log"
    if [ "$GPU_TAG" = h200 ]; then
      OUT=/tmp/s23 bash kernels/device_s22.sh none > /dev/null 2>&1  # writes /tmp/s22/*.py, then refuses the call
      sed -i 's/^SHAPES = \[/SHAPES = [(16, 16, 1024, 128, False), (8, 16, 2048, 128, False), (16, 16, 1024, 64, False), (8, 16, 2048, 64, False)] or [/' /tmp/s22/ab_prep.py
      timeout 120 python3 /tmp/s22/ab_prep.py 3 auto 2>&1 | tee "${LOG}_s22_ab_auto.log"
      timeout 150 python3 /tmp/s22/ab_qb_shipped.py 3 2>&1 | tee "${LOG}_s22_ab_qb_shipped.log"
    fi
    ;;
  call4|call5)  # call 4's timing failed at its first row (the script patched MERGE_CONSUMERS, no longer in the tree);
    # call 5 is call 4 again without the tests
    timeout 300 python3 /tmp/s23/short.py 3 call4 2>&1 | tee "${LOG}_short.log"
    [ "$CALL" = call5 ] && exit 0
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call6)
    timeout 300 python3 /tmp/s23/short.py 3 call6 2>&1 | tee "${LOG}_short.log"
    ;;
  call7)
    sed 's/return bool(pb.CAUSAL) and not bool(pingpong) and pb.BLOCK_N < pb.NC \* ROWS/return False/' \
      kernels/_attn_fwd_ws.py > kernels/_attn_fwd_ws_s23old.py
    grep -c 'return False' kernels/_attn_fwd_ws_s23old.py
    timeout 200 python3 /tmp/s23/ab_skip.py 3 2>&1 | tee "${LOG}_ab_skip.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call8)
    sed 's/return bool(pb.CAUSAL) and not bool(pingpong) and pb.BLOCK_N < pb.NC \* ROWS/return False/' \
      kernels/_attn_fwd_ws.py > kernels/_attn_fwd_ws_s23old.py
    sed 's/^    return _skips(pb, pingpong)$/    return False/' kernels/_attn_fwd_ws.py > kernels/_attn_fwd_ws_s23skip.py
    grep -c 'return False' kernels/_attn_fwd_ws_s23old.py kernels/_attn_fwd_ws_s23skip.py
    timeout 240 python3 /tmp/s23/ab_skip.py 4 call8 2>&1 | tee "${LOG}_ab_skip.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
