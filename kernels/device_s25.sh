#!/usr/bin/env bash
# Session-25 device calls (issue 16): bash kernels/device_s25.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: (an H100) every tile of the forward's short causal configs through one masked loop (session 24's prepared
#        docs/measurements/kernels_s24_fwd_one_loop.patch: the module copies kernels/_attn_fwd_ws_s25ol.py, ONE_LOOP
#        on the short causal configs only, and _attn_fwd_ws_s25ola.py, ONE_LOOP_ALL: every config; present only for
#        this session's calls) against the tree: outputs compared, a graph-timed A/B beside SDPA cuDNN, best of 3
#        rounds, at the short causal shapes (also on 128-key configs, which the instruction cache cost the tree in
#        session 24) and at L4096 (bf16 d128 / d64, fp8 d128).  Then the backward at L512 / L768 d128 causal, "auto"
#        (the Gluon backward from 512 keys since session 24, timed only on an H200) against the Triton scheme, Gluon
#        and SDPA cuDNN, on an H100.
# call2: call 1's one loop lost at L1024 to the masked softmax's cost on unmasked tiles: a cheaper mask (one compare
#        a score against its row's key bound, the tile's columns being constants, and the scale fused as in the
#        unmasked softmax, so that an unmasked tile gives the same bits either way; the module copies
#        kernels/_attn_fwd_ws_s25cm0.py (the tree's loops), _s25cm.py (one loop on the short causal configs),
#        _s25cma.py (one loop on every config)): against the tree and call 1's one loop, short causal shapes L512 /
#        768 / 1024 and L4096 (bf16 d128 / d64, fp8 d128), best of 3 rounds.
# (the module copies of calls 1-2 were removed after call 2: the one loop is docs/measurements/kernels_s24_fwd_one_loop.patch,
#  the cheap mask the tree's MASK_BOUND since call 3)
# call3: the tree (MASK_BOUND on the short causal configs, ONE_LOOP up to 512 keys) against the kernel before
#        (kernels/_attn_fwd_ws_s25old.py, d337679's kernel with an ignored ONE_LOOP parameter, present only for this call):
#        outputs compared, graph-timed A/B beside SDPA cuDNN at d64 / d128 causal L256-2048 (the short causal
#        configs' range) and one L4096 shape (identical SASS offline), best of 3 rounds; then the attention GPU tests.
# call4: the kernel suite (tests/perf: flash, decode, matmul, the 256 MB copy) on the tree, its table
#        (kernels.tune --perf-json), and this card model's baseline entries of the L512 causal forward rows re-made
#        from two runs (the row the one loop moved).
# call5: the fp8 forward's warp states (ncu, one launch each, d128 L4096 without a mask and causal): is the instruction
#        cache ("no instruction" stalls) a lever there too?
# call6: (an H200) call 3's A/B (kernels/_attn_fwd_ws_s25old.py again, only for this call), and this card model's
#        baseline entries of the L512 causal forward rows re-made from two runs.
# call7: after the review (a zero sm_scale left to the Triton forward, negative / non-finite scales refused): the
#        attention GPU tests and the validation tests on the GPU.
# call8: after the review of the sessions' diff (the consumer's one-loop branch folded into the two-loop code, SASS
#        identical offline; the tests' bitwise-either-way helper): the forward GPU tests that changed.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s25_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s25

cat > /tmp/s25/ab_ol.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s25ol as ol, _attn_fwd_ws_s25ola as ola, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
KERNELS = {"tree": attention_ws.attn_fwd_ws, "ol": ol.attn_fwd_ws, "ola": ola.attn_fwd_ws}
C128 = {"c128x3p": (128, 3, 2, True, False)}
C128D = {"c128x2p": (128, 2, 2, True, False)}
# (batch, length, head dim, causal, fp8, kernels, {extra config name: config} run on "tree" and "ola")
if "--cm" in sys.argv:  # call 2: the cheap mask (one compare a score against its row's bound, the scale fused)
    sys.argv.remove("--cm")
    from kernels import _attn_fwd_ws_s25cm as cm, _attn_fwd_ws_s25cm0 as cm0, _attn_fwd_ws_s25cma as cma
    KERNELS.update(cm0=cm0.attn_fwd_ws, cm=cm.attn_fwd_ws, cma=cma.attn_fwd_ws)
    S, L = ("tree", "ol", "cm0", "cm"), ("tree", "cm0", "cma")
    SHAPES = [(32, 512, 64, True, False, S, {}), (22, 768, 64, True, False, S, {}),
              (16, 1024, 64, True, False, S, {}), (32, 512, 128, True, False, S, {}),
              (22, 768, 128, True, False, S, {}), (16, 1024, 128, True, False, S, {}),
              (4, 4096, 128, True, False, L, {}), (4, 4096, 128, False, False, L, {}),
              (4, 4096, 64, True, False, L, {}), (4, 4096, 64, False, False, L, {}),
              (4, 4096, 128, True, True, L, {}), (4, 4096, 128, False, True, L, {}),
              (32, 512, 128, False, False, L, {})]
else:  # call 1
    SHAPES = [(32, 512, 64, True, False, ("tree", "ol"), C128), (16, 1024, 64, True, False, ("tree", "ol"), C128),
              (32, 512, 128, True, False, ("tree", "ol"), C128D), (16, 1024, 128, True, False, ("tree", "ol"), {}),
              (4, 4096, 128, True, False, ("tree", "ola"), {}), (4, 4096, 128, False, False, ("tree", "ola"), {}),
              (4, 4096, 64, True, False, ("tree", "ola"), {}), (4, 4096, 128, True, True, ("tree", "ola"), {}),
              (4, 4096, 128, False, True, ("tree", "ola"), {})]
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]


def variant(kernel, fn, cfg=None):
    def run():
        with mock.patch.object(attention_ws, "attn_fwd_ws", kernel):
            if cfg is None:
                return fn()
            with mock.patch.object(attention_ws, "default_config", lambda *a, **kw: cfg):
                return fn()
    return run


for b, seq, d, causal, fp8, names, extra in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    fns = {n: variant(KERNELS[n], run) for n in names}
    for name, cfg in extra.items():
        fns[f"tree {name}"] = variant(KERNELS["tree"], run, cfg)
        fns[f"ola {name}"] = variant(KERNELS["ola"], run, cfg)
    o1, l1 = fns["tree"]()
    if "cm" in fns:  # the same bits expected: unmasked tiles give the same values through either softmax
        o2, l2 = fns["cm0"]()
        o3, l3 = fns["cm"]()
        print(f"  cm vs cm0 out bitwise {torch.equal(o2, o3)}, lse bitwise {torch.equal(l2, l3)}", flush=True)
        del o2, o3, l2, l3
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs tree out bitwise {torch.equal(o1, o2)} (max diff "
              f"{(o1.float() - o2.float()).abs().max().item():.2e}), lse bitwise {torch.equal(l1, l2)} (max diff "
              f"{(l1 - l2).abs().max().item():.2e})", flush=True)
    del o1, o2, l1, l2
    fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree "
                                 f"x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s25/bwd_short.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, tune_cases
from kernels.tune_bwd import _sdpa_grad, _time

ROUNDS = int(sys.argv[1])
for b, seq, d, causal in [(32, 512, 128, True), (16, 768, 128, True), (32, 512, 128, False)]:
    q, k, v, do = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal)
    qkv = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        ref_out = torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal)
    fns = {"auto": partial(attention.attention_backward, do, q, k, v, out, lse, causal),
           "gluon": partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon"),
           "triton": partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="triton"),
           "cudnn": partial(_sdpa_grad, ref_out, qkv, do)}
    timers = {}

    def timer(fn):
        ms, how = _time(fn)
        timers[fn] = how
        return ms

    t = tune_cases.in_turns(fns, ROUNDS, timer=timer)
    print(f"bwd bf16 b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}: " + "; ".join(
        f"{n} {ms:.4f} ms ({timers[fns[n]]}) x{t['cudnn'] / ms:.3f} cuDNN x{t['triton'] / ms:.3f} triton"
        for n, ms in t.items()), flush=True)
PY

cat > /tmp/s25/ab_new.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s25old as old, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
SHAPES = [(64, 256, 64), (32, 512, 64), (22, 768, 64), (16, 1024, 64), (8, 2000, 64), (64, 256, 128),
          (32, 512, 128), (22, 768, 128), (16, 1024, 128), (8, 2000, 128), (4, 4096, 128)]
for b, seq, d in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")

    def before(run=run):
        with mock.patch.object(attention_ws, "attn_fwd_ws", old.attn_fwd_ws):
            return run()

    fns = {"old": before, "new": run}
    o1, l1 = before()
    o2, l2 = run()
    print(f"  new vs old out bitwise {torch.equal(o1, o2)} (max diff {(o1.float() - o2.float()).abs().max().item():.2e})"
          f", lse bitwise {torch.equal(l1, l2)}; one loop {seq <= attention_ws.ONE_LOOP_MAX_KEYS}", flush=True)
    del o1, o2, l1, l2
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['old'] / ms:.4f} old x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s25/one_fp8.py <<'PY'
"""python3 one_fp8.py full|causal: three fp8 d128 L4096 forwards (B4 H16) on the default config."""
import sys

import torch

from kernels import attention, tune_cases

causal = sys.argv[1] == "causal"
q, k, v = (tune_cases.randn((4, 16, 4096, 128), torch.bfloat16, i) for i in range(3))
(q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
for _ in range(3):
    attention.attention_forward_fp8(q8, k8, v8, sq, sk, sv, causal, impl="gluon")
torch.cuda.synchronize()
PY

source kernels/device_lib.sh  # suite, baseline_update, install_perfci

case $CALL in
  call1)
    timeout 360 python3 /tmp/s25/ab_ol.py 3 2>&1 | tee "${LOG}_ab_ol.log"
    timeout 120 python3 /tmp/s25/bwd_short.py 3 2>&1 | tee "${LOG}_bwd_short.log"
    ;;
  call2)
    timeout 420 python3 /tmp/s25/ab_ol.py 3 --cm 2>&1 | tee "${LOG}_ab_cm.log"
    ;;
  call3)
    timeout 240 python3 /tmp/s25/ab_new.py 3 2>&1 | tee "${LOG}_ab_new.log"
    timeout 220 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call4)
    install_perfci || exit 3
    suite
    baseline_update "test_flash_forward and L512 and causal" l512_causal
    ;;
  call5)
    for v in full causal; do
      timeout 100 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -k regex:attn_fwd_ws \
        --launch-skip 1 --launch-count 1 python3 /tmp/s25/one_fp8.py $v > "${LOG}_ncu_fp8_${v}.txt" 2>&1
      echo "ncu fp8 $v rc=$?"
      grep -E "Duration|stalled_(no_inst|long|barrier|wait|math|mio|lg|short|dispatch|branch|sleep|membar|selected)|Warp Cycles Per Issued|No Eligible|Registers Per" "${LOG}_ncu_fp8_${v}.txt" | grep -v "_not_issued" | head -24
    done
    ;;
  call6)
    [ "$GPU_TAG" = h200 ] || { echo "not an H200: nothing to do"; exit 0; }
    timeout 200 python3 /tmp/s25/ab_new.py 3 2>&1 | tee "${LOG}_ab_new.log"
    install_perfci || exit 3
    baseline_update "test_flash_forward and L512 and causal" l512_causal
    ;;
  call7)
    timeout 240 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_fwd.log"
    timeout 150 python3 -m pytest tests/kernels/test_validation.py tests/kernels/test_attention.py -k "scale or rejects" \
      -q -p no:cacheprovider -n 4 2>&1 | tail -3 | tee "${LOG}_scale_tests_cuda.log"
    ;;
  call8)
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -k "bitwise or zero_scale or configs_gpu" -q \
      -p no:cacheprovider -n 8 2>&1 | tail -3 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
