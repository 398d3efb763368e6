#!/usr/bin/env bash
# Session-26 device calls (issue 16): bash kernels/device_s26.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the causal forward's tail.  Causal items are pairs of row blocks of equal work; the suite's causal shapes
#        have 1024 of them (7.76 waves on 132 SMs), so the last wave leaves about a quarter of the SMs idle.  The
#        module copy kernels/_attn_fwd_ws_s26lpt.py (present only for this session's calls) runs the last
#        LPT_HEADS batch·heads' row blocks singly, heaviest first across those heads, after the pairs of the others
#        (one program an item: the hardware hands items to SMs in order, a longest-first list schedule).  Outputs
#        compared, graph-timed A/B beside SDPA cuDNN (best of 3 rounds) at the causal L2048-16384 shapes, bf16 and
#        fp8; and the tree at 33 heads (2112 pairs: 16 whole waves) against 16, the tail's cost measured directly.
# call2: head dim 64 causal on three consumers (192-row blocks: 704 pairs at L4096, 5.33 waves, where session 13's
#        15 % loss may have been the tail), 128- and 64-key tiles (64-key: no spills offline), ping-pong turns, row
#        sums by wgmma or not, with the copy's LPT_HEADS tails; against the tree and SDPA cuDNN at L2048-16384.
# call3: the tree with LPT (attention_ws.lpt_heads: about 2 single row blocks an SM at the end of every 16-bit causal
#        grid of one program an item) and head dim 64 causal on three consumers from LONG_CAUSAL_MIN_LEN queries,
#        against the kernel before (kernels/_attn_fwd_ws_s26old.py, HEAD's kernel taking the new arguments and
#        ignoring them, present only for this session's calls) with the rules before: outputs compared, graph-timed
#        A/B beside SDPA cuDNN at causal L2048-16384, d64 also on either config; then the attention GPU tests.
# call4: the kernel suite on the tree (its table for README), and this card model's baseline entries of the causal
#        L4096 / L16384 forward rows ("ours": LPT moved them) re-made from two runs.
# call5: (an H200) call 3's A/B at d64 L4096-16384 and d128 L4096 / L16384, and this card model's baseline entries
#        of call 4's rows re-made from two runs.  (It ran on an H100 and did nothing: no H200 was lent.)
# call6: LPT alone (the tree with lpt_heads 0 against the tree), 5 rounds: bf16 causal d128 L4096 / 8192 / 16384 and
#        d64 L4096, beside the kernel before; fp8 causal d128 L4096 / L16384 with LPT (LPT_FP8) and without.
# call7: with LPT for fp8 too (LPT_FP8 True after call 6): the attention GPU tests, and this card model's baseline
#        entry of the fp8 causal forward re-made from two runs.
# (the module copies were removed after call 7: kernels/_attn_fwd_ws_s26lpt.py is fea73c3's kernel
#  with docs/measurements/kernels_s26_fwd_lpt_copy.patch applied, _attn_fwd_ws_s26old.py with kernels_s26_fwd_old_copy.patch)
# (calls 1-2 ran against fea73c3's host code, whose attention_ws.work_items returned one count; calls 3-7 against
#  the tree's; call 8: after the review, the forward GPU tests of the tail and the configs)
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s26_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s26

cat > /tmp/s26/ab_lpt.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch
import triton

from kernels import _attn_fwd_ws_s26lpt as lpt_mod, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, heads, length, head dim, fp8, LPT_HEADS values)
SHAPES = [(4, 16, 4096, 64, False, (0, 8, 16, 32, 64)), (4, 16, 4096, 128, False, (0, 8, 16, 32, 64)),
          (1, 16, 16384, 128, False, (0, 2, 4, 8, 16)), (8, 16, 2048, 64, False, (0, 16, 32, 128)),
          (4, 16, 4096, 128, True, (16, 32)), (4, 33, 4096, 64, False, ()), (4, 33, 4096, 128, False, ())]
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]


class Launch:
    """attention_ws.attn_fwd_ws stand-in: the module copy's kernel with its two scheduling arguments."""

    def __init__(self, n_pair_items, lpt_heads):
        self.extra = (n_pair_items, lpt_heads)

    def __getitem__(self, grid):
        def launch(*args, **kw):
            return lpt_mod.attn_fwd_ws[grid](*args[:10], *self.extra, *args[10:], **kw)
        return launch


def variant(run, bh, n_m, lpt):
    lpt = min(lpt, bh)
    n_pairs = triton.cdiv(n_m, 2)
    n_pair_items = (bh - lpt) * n_pairs
    n_items = n_pair_items + lpt * n_m

    def go():
        with mock.patch.object(attention_ws, "attn_fwd_ws", Launch(n_pair_items, lpt)), \
                mock.patch.object(attention_ws, "work_items", lambda *a: n_items):
            return run()
    return go


for b, h, seq, d, fp8, lpts in SHAPES:
    q, k, v = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, True, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    n_m = triton.cdiv(seq, 128)
    fns = {"tree": run}
    fns.update({f"lpt{n}": variant(run, b * h, n_m, n) for n in lpts})
    o1, l1 = run()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs tree out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0] * h / 16
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"{'fp8' if fp8 else 'bf16'} b{b} h{h} L{seq} d{d} causal ({b * h * triton.cdiv(n_m, 2)} pairs)"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree "
                                 f"x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s26/ab_c3.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch
import triton

from kernels import _attn_fwd_ws_s26lpt as lpt_mod, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, length, LPT_HEADS values for 192-row blocks); head dim 64, causal, 16 heads
SHAPES = [(4, 4096, (0, 12, 24)), (8, 2048, (0, 24, 48)), (1, 16384, (0, 4, 8))]
CONFIGS = {"c3pp": (128, 2, 3, False, True), "c3n64pp": (64, 4, 3, False, True)}
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]


class Launch:
    """attention_ws.attn_fwd_ws stand-in: the module copy's kernel with its two scheduling arguments."""

    def __init__(self, n_pair_items, lpt_heads):
        self.extra = (n_pair_items, lpt_heads)

    def __getitem__(self, grid):
        def launch(*args, **kw):
            return lpt_mod.attn_fwd_ws[grid](*args[:10], *self.extra, *args[10:], **kw)
        return launch


def variant(run, bh, n_m, lpt, cfg, rowsum):
    lpt = min(lpt, bh)
    n_pairs = triton.cdiv(n_m, 2)
    n_pair_items = (bh - lpt) * n_pairs
    n_items = n_pair_items + lpt * n_m

    def go():
        with mock.patch.object(attention_ws, "attn_fwd_ws", Launch(n_pair_items, lpt)), \
                mock.patch.object(attention_ws, "work_items", lambda *a: n_items), \
                mock.patch.object(attention_ws, "default_config", lambda *a, **kw: cfg), \
                mock.patch.object(attention_ws, "rowsum_mma", lambda *a: rowsum):
            return run()
    return go


for b, seq, lpts in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, 64), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run}
    for name, cfg in CONFIGS.items():
        n_m = triton.cdiv(seq, 64 * cfg[2])
        for rs in (True, False):
            fns.update({f"{name}{'rs' if rs else ''}-lpt{n}": variant(run, b * 16, n_m, n, cfg, rs) for n in lpts})
    o1, l1 = run()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs tree out max diff {(o1.float() - o2.float()).abs().max().item():.2e}, lse max diff "
              f"{(l1 - l2).abs().max().item():.2e}", flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, 64, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d64 causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s26/ab_new.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s26old as old, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, length, head dim); causal, 16 heads
SHAPES = [(4, 4096, 64), (2, 8192, 64), (1, 16384, 64), (8, 2048, 64), (4, 4096, 128), (2, 8192, 128),
          (1, 16384, 128), (8, 2048, 128), (4, 4096, 80)]
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]


def patched(run, **attrs):
    def go():
        with mock.patch.multiple(attention_ws, **attrs):
            return run()
    return go


for b, seq, d in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"old": patched(run, attn_fwd_ws=old.attn_fwd_ws, lpt_heads=lambda *a: 0, LONG_CAUSAL_MIN_LEN=1 << 30),
           "new": run}
    if d == 64:
        fns["new-c2"] = patched(run, LONG_CAUSAL_MIN_LEN=1 << 30)
        fns["new-c3"] = patched(run, LONG_CAUSAL_MIN_LEN=0)
    o1, l1 = fns["old"]()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs old out bitwise {torch.equal(o1, o2)} (max diff "
              f"{(o1.float() - o2.float()).abs().max().item():.2e}), lse max diff {(l1 - l2).abs().max().item():.2e}",
              flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['old'] / ms:.4f} old x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s26/ab_lpt2.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s26old as old, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, length, head dim, fp8); causal, 16 heads
SHAPES = [(4, 4096, 128, False), (1, 16384, 128, False), (4, 4096, 64, False), (2, 8192, 128, False),
          (4, 4096, 128, True), (1, 16384, 128, True)]


def patched(run, **attrs):
    def go():
        with mock.patch.multiple(attention_ws, **attrs):
            return run()
    return go


for b, seq, d, fp8 in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, True, impl="gluon")
        fns = {"old": patched(run, attn_fwd_ws=old.attn_fwd_ws), "new": run, "new-lpt": patched(run, LPT_FP8=True)}
    else:
        run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
        fns = {"old": patched(run, attn_fwd_ws=old.attn_fwd_ws, lpt_heads=lambda *a: 0), "new": run,
               "new-nolpt": patched(run, lpt_heads=lambda *a: 0)}
    o1, l1 = fns["old"]()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs old out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['old'] / ms:.4f} old x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

source kernels/device_lib.sh  # suite, baseline_update, install_perfci

case $CALL in
  call1)
    timeout 500 python3 /tmp/s26/ab_lpt.py 3 2>&1 | tee "${LOG}_ab_lpt.log"
    ;;
  call2)
    timeout 560 python3 /tmp/s26/ab_c3.py 3 2>&1 | tee "${LOG}_ab_c3.log"
    ;;
  call3)
    timeout 330 python3 /tmp/s26/ab_new.py 3 2>&1 | tee "${LOG}_ab_new.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call4)
    install_perfci || exit 3
    suite
    baseline_update "test_flash_forward and causal and (L4096 or L16384) and not triton and not sdpa and not fp8" \
      causal_long
    ;;
  call5)
    [ "$GPU_TAG" = h200 ] || { echo "not an H200: nothing to do"; exit 0; }
    timeout 200 python3 /tmp/s26/ab_new.py 3 0,1,2,4,6 2>&1 | tee "${LOG}_ab_new.log"
    install_perfci || exit 3
    baseline_update "test_flash_forward and causal and (L4096 or L16384) and not triton and not sdpa and not fp8" \
      causal_long
    ;;
  call6)
    timeout 400 python3 /tmp/s26/ab_lpt2.py 5 2>&1 | tee "${LOG}_ab_lpt2.log"
    ;;
  call7)
    timeout 230 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -3 | tee "${LOG}_gpu_tests_fwd.log"
    install_perfci || exit 3
    baseline_update "test_flash_forward_fp8 and causal" fp8_causal
    ;;
  call8)
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -k "lpt or configs_gpu or one_loop" -q \
      -p no:cacheprovider -n 8 2>&1 | tail -3 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
