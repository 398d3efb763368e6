#!/usr/bin/env bash
# Session-32 device calls (issue 16): bash kernels/device_s32.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the forward's consumer barriers before mbarrier operations replaced by `bar.warp.sync -1` (a warp's own
#        convergence point: no meeting of the four warps, SASS without a barrier, but ptxas keeps its instructions on
#        their side of it; offline in session 31 this kept the schedule the barriers gave) against removing them
#        (rm, session 31's rewrite) and the plain build.  Module copies of kernels/_attn_fwd_ws.py compiled through a
#        stage hook (TRITON_ALWAYS_COMPILE), swapped into attention_ws; outputs against the tree's (bitwise), then
#        graph-timed in turns (best of 3 rounds) beside SDPA cuDNN: bf16 d64 / d128 and fp8 d128 at L4096, full and
#        causal.  Kinds: rw (releases after a wgmma wait, mbarrier waits), rtw (also the ping-pong turn passes).
# call2: the same at d128 L16384 causal, d64 L8192 causal (three consumers) and d128 L1024, and the Gluon backward
#        (only release barriers are consumers' there): d128 L4096 full, d64 L4096 full and causal.  (Not run: call 1
#        had bar.warp.sync level with the plain build everywhere.)
# call3: which of the removed barriers gives the d128 gain (call 1: none of it is the warps no longer meeting, all of
#        it the schedule ptxas makes without them): g_<groups> removes the barriers of those groups and puts
#        bar.warp.sync in place of the other release / wait ones: A, a release after wgmma.wait_group 1 (the K slot's,
#        the P.V product still running), B, after wait_group 0 (the V slot's; a first tile's K), W, a wait.  d128
#        L4096 full / causal, fp8 d128 and bf16 d64 L4096 without a mask; in turns (best of 3) beside SDPA cuDNN.
# call4: the same groups in the Gluon backward (a consumer step: one wait W, then two releases B after
#        wgmma.wait_group 0, the Q / dO slot's and dS's buffer): d128 L4096 full / causal, d64 full.
# call5: the backward's switch (attention_bwd_ws.light_barriers, LIGHT_PTX; the shipped rewrite's kinds: the two
#        releases a step): the backward GPU tests (new: the light build's dk / dv bitwise the plain one's at four
#        shapes, eagerly and from a graph), then light against off (LIGHT_BARRIERS empty) at d64 without a mask L1024 -
#        16384, fp16, GQA 4, and causal forced, in turns (best of 3) beside SDPA cuDNN (no GQA there).
# call6: the backward's two release barriers a step apart (p_1: only the one before the Q / dO slot's release, right
#        after the wgmma wait; p_2: only the one before dS^T's buffer's), d128 L4096 full / causal, d64 causal.
# call7: the kernel suite (now with test_flash_backward_d64: head dim 64 L4096, full and causal, ours beside SDPA's
#        flash and cuDNN backends) on the tree of call 5, and this card model's (H200) baseline entries of those rows
#        made from two runs (baselines/ comes back as $OUT/baseline_h200.tgz).
# call8: on the commit (the rewrite's module text changed, so a new version: new builds): the backward GPU tests and
#        the forward's light ones.
# call9: after the review of the session's diff: the backward GPU tests (their runs now through one helper) and the
#        forward's light ones, and ab_warp.py (now through kernels/_ptx_stage.rewriting in place of a stage hook of its
#        own: the same PTX for every variant on four builds offline; calls 1-6 ran the earlier form) at one shape,
#        one round.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s32_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s32

cat > /tmp/s32/ab_warp.py <<'PY'
import importlib.util
import sys
from functools import partial
from unittest import mock

import torch
from kernels import _ptx_barriers as pb
from kernels import _ptx_stage, attention, attention_bwd_ws, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
KINDS = {"rw": ("release", "wait"), "rtw": ("release", "turn", "wait"), "r": ("release",)}
WARP_SYNC = "\tbar.warp.sync \t-1;"
# (pass, batch, length, head dim, causal, fp8, variants); 16 heads.  A variant: plain (no rewrite), rm_<kinds>
# (removed), ws_<kinds> (replaced by bar.warp.sync -1)
SHAPES = [("fwd", 4, 4096, 64, False, False, "rm_rw,ws_rw,ws_rtw"), ("fwd", 4, 4096, 64, True, False, "rm_rw,ws_rw,ws_rtw"),
          ("fwd", 4, 4096, 128, False, False, "plain,ws_rw"), ("fwd", 4, 4096, 128, True, False, "plain,ws_rw"),
          ("fwd", 4, 4096, 128, False, True, "rm_rw,ws_rw,ws_rtw"), ("fwd", 4, 4096, 128, True, True, "rm_rw,ws_rw,ws_rtw"),
          # call 2
          ("fwd", 1, 16384, 128, True, False, "plain,ws_rw"), ("fwd", 2, 8192, 64, True, False, "rm_rw,ws_rw,ws_rtw"),
          ("fwd", 16, 1024, 128, False, False, "plain,ws_rw"),
          ("bwd", 4, 4096, 128, False, False, "rm_r,ws_r"), ("bwd", 4, 4096, 64, False, False, "rm_r,ws_r"),
          ("bwd", 4, 4096, 64, True, False, "rm_r,ws_r"),
          # call 3
          ("fwd", 4, 4096, 128, False, False, "plain,g_A,g_B,g_W,g_AB,g_AW,g_BW"),
          ("fwd", 4, 4096, 128, True, False, "plain,g_A,g_B,g_W,g_AB,g_AW,g_BW"),
          ("fwd", 4, 4096, 128, False, True, "g_A,g_B,g_AB"), ("fwd", 4, 4096, 64, False, False, "g_A,g_B,g_AB"),
          # call 4
          ("bwd", 4, 4096, 128, False, False, "g_B,g_W,g_BW"), ("bwd", 4, 4096, 128, True, False, "g_B,g_W,g_BW"),
          ("bwd", 4, 4096, 64, False, False, "g_B,g_W,g_BW"),
          # call 6
          ("bwd", 4, 4096, 128, False, False, "p_1,p_2"), ("bwd", 4, 4096, 128, True, False, "p_1,p_2"),
          ("bwd", 4, 4096, 64, True, False, "p_1,p_2")]
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]
def group(lines, i, kind):
    """W (a wait), A (a release after wgmma.wait_group 1: the K slot's, the P.V still running), B (after
    wait_group 0: the V slot's, or a first tile's)."""
    if kind == "wait":
        return "W"
    for k in range(i - 1, max(0, i - 80), -1):
        if "wgmma.wait_group" in lines[k]:
            return "A" if lines[k].strip().endswith("1;") else "B"
    return "?"


def verdict(name, lines, i, kind):
    """What variant ``name`` does with the consumer barrier on line ``i`` (of _ptx_barriers' ``kind``, or ""):
    "keep", "remove" or "ws" (replace it by bar.warp.sync -1)."""
    how, arg = name.split("_")
    if how == "p":  # p_<n>: only the barrier before the n-th release after a wgmma wait removed
        if kind != "release":
            return "keep"
        prev = next(x for x in reversed(lines[:i]) if x.strip() and not pb._QUIET.match(x) and "inline asm" not in x)
        return "remove" if ("wgmma.wait_group" in prev) == (arg == "1") else "keep"
    if how == "g":  # g_<groups>: those groups' barriers removed, the other release / wait ones bar.warp.sync
        if kind not in ("release", "wait"):
            return "keep"
        return "remove" if group(lines, i, kind) in arg else "ws"
    return ("remove" if how == "rm" else "ws") if kind in KINDS[arg] else "keep"


def rewrite(name, ptx):
    """The attention kernels' PTX as variant ``name`` builds it (other kernels' unchanged)."""
    if name == "plain" or (".entry attn_fwd_ws" not in ptx and ".entry attn_bwd_ws" not in ptx):
        return ptx
    assert pb.removed(ptx) is None, "a copy's PTX came rewritten"
    lines = ptx.splitlines()
    out, n = [], 0
    for i, line in enumerate(lines):
        m = pb._BAR.match(line)
        v = verdict(name, lines, i, pb._kind(lines, i)) if m and m.group(1) not in ("0", "1") else "keep"
        if v == "keep":
            out.append(line)
            continue
        n += 1
        if v == "ws":
            out.append(WARP_SYNC)
    print(f"    [{name}: {n} barriers]", flush=True)
    return "\n".join(out) + "\n"

COPIES = {}


def copy(path, name):
    if name not in COPIES:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        COPIES[name] = mod
    return COPIES[name]


def variant(run, pas, name):
    if pas == "fwd":
        target, attr = attention_ws, "attn_fwd_ws"
        fn = copy("kernels/_attn_fwd_ws.py", f"_fwd_{name}").attn_fwd_ws
    else:
        target, attr = attention_bwd_ws, "attn_bwd_ws"
        fn = copy("kernels/_attn_bwd_ws.py", f"_bwd_{name}").attn_bwd_ws

    def go():
        with _ptx_stage.rewriting(partial(rewrite, name)), mock.patch.object(target, attr, fn):
            return run()
    return go


for pas, b, seq, d, causal, fp8, names in SHAPES:
    q, k, v, do = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    elif pas == "fwd":
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    else:
        out, lse = attention.attention_forward(q, k, v, causal)
        run = partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon")
    fns = {"tree": run}
    fns.update({name: variant(run, pas, name) for name in names.split(",")})
    r1 = run()
    for name in list(fns)[1:]:
        for rep in range(3):
            r2 = fns[name]()
            torch.cuda.synchronize()
            same = [torch.equal(a, b_) for a, b_ in zip(r1, r2)]
            diff = max((a.float() - b_.float()).abs().max().item() for a, b_ in zip(r1, r2))
            print(f"  {name} call {rep} vs tree: bitwise {same} (max diff {diff:.2e})", flush=True)
        del r2
    del r1
    if pas == "fwd":
        fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    else:
        qkv = tuple(t.clone().requires_grad_() for t in (q, k, v))
        o_ref = ref.sdpa(*qkv, causal, "cudnn")
        fns["cudnn"] = partial(torch.autograd.grad, o_ref, qkv, do, retain_graph=True)
    flops = tune_cases.flops_bytes(tune_cases.Variant(pas, (b, 16, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS, on_error=lambda n, e: print(f"  {n} not timed: {e!r}"[:300], flush=True))
    ref_ms = t.get("cudnn", float("nan"))
    print(f"{pas} {'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree x{ref_ms / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s32/ab_bwd_switch.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_bwd_ws, tune_bwd, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, q heads, kv heads, length, head dim, causal, dtype)
SHAPES = [(16, 16, 16, 1024, 64, False, torch.bfloat16), (8, 16, 16, 2048, 64, False, torch.bfloat16),
          (4, 16, 16, 4096, 64, False, torch.bfloat16), (2, 16, 16, 8192, 64, False, torch.bfloat16),
          (1, 16, 16, 16384, 64, False, torch.bfloat16), (4, 16, 16, 4096, 64, False, torch.float16),
          (4, 16, 4, 4096, 64, False, torch.bfloat16), (4, 16, 16, 4096, 64, True, torch.bfloat16)]


def switched(run, on):
    def go():
        with mock.patch.object(attention_bwd_ws, "LIGHT_BARRIERS", ((64, False), (64, True)) if on else ()), \
                mock.patch.object(attention_bwd_ws, "LIGHT_MIN_LEN", 0):
            return run()
    return go


for b, hq, hk, seq, d, causal, dtype in SHAPES:
    q = tune_cases.randn((b, hq, seq, d), dtype, 0)
    k, v = (tune_cases.randn((b, hk, seq, d), dtype, i) for i in (1, 2))
    do = tune_cases.randn((b, hq, seq, d), dtype, 3)
    out, lse = attention.attention_forward(q, k, v, causal)
    run = partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon")
    fns = {"off": switched(run, False), "light": switched(run, True)}
    r1, r2 = fns["off"](), fns["light"]()
    torch.cuda.synchronize()
    print(f"  dk, dv bitwise {torch.equal(r1[1], r2[1]) and torch.equal(r1[2], r2[2])}, dq rel err "
          f"{ref.rel_err(r2[0], r1[0]):.1e}", flush=True)
    if hq == hk:
        qkv = tuple(t.clone().requires_grad_() for t in (q, k, v))
        o_ref = ref.sdpa(*qkv, causal, "cudnn")
        fns["cudnn"] = partial(torch.autograd.grad, o_ref, qkv, do, retain_graph=True)
    flops = tune_cases.flops_bytes(tune_cases.Variant("bwd", (b, hq, seq, d, causal)))[0]
    # graph-timed; SDPA's autograd backward through perfci's side-stream capture (tune_bwd._time)
    t = tune_cases.in_turns(fns, ROUNDS, timer=lambda fn: tune_bwd._time(fn)[0],
                            on_error=lambda n, e: print(f"  {n} not timed: {e!r}"[:200], flush=True))
    ref_ms = t.get("cudnn", float("nan"))
    print(f"bwd {str(dtype)[6:]} b{b} hq{hq} hk{hk} L{seq} d{d} {'causal' if causal else 'full'}: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['off'] / ms:.4f} off x{ref_ms / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    del r1, r2
    torch.cuda.empty_cache()
PY

case $CALL in
call1)
  export TRITON_ALWAYS_COMPILE=1 TRITON_CACHE_DIR=/tmp/s32/cache
  timeout 570 python3 /tmp/s32/ab_warp.py 3 0,1,2,3,4,5 2>&1 | tee "${LOG}_ab_warp.log"
  ;;
call2)
  export TRITON_ALWAYS_COMPILE=1 TRITON_CACHE_DIR=/tmp/s32/cache
  timeout 570 python3 /tmp/s32/ab_warp.py 3 6,7,8,9,10,11 2>&1 | tee "${LOG}_ab_warp.log"
  ;;
call3)
  export TRITON_ALWAYS_COMPILE=1 TRITON_CACHE_DIR=/tmp/s32/cache
  timeout 570 python3 /tmp/s32/ab_warp.py 3 12,13,14,15 2>&1 | tee "${LOG}_ab_groups.log"
  ;;
call4)
  export TRITON_ALWAYS_COMPILE=1 TRITON_CACHE_DIR=/tmp/s32/cache
  timeout 570 python3 /tmp/s32/ab_warp.py 3 16,17,18 2>&1 | tee "${LOG}_ab_bwd_groups.log"
  ;;
call7)
  source kernels/device_lib.sh
  install_perfci
  suite
  baseline_update "backward_d64" bwd_d64
  ;;
call9)
  timeout 250 python3 -m pytest tests/kernels/test_attention_bwd_ws.py tests/kernels/test_attention.py -m gpu -q \
    -p no:cacheprovider -n 8 -k "backward or light" 2>&1 | tail -3 | tee "${LOG}_gpu_tests_review.log"
  export TRITON_ALWAYS_COMPILE=1 TRITON_CACHE_DIR=/tmp/s32/cache
  timeout 150 python3 /tmp/s32/ab_warp.py 1 14 2>&1 | tee "${LOG}_ab_warp_review.log"
  ;;
call8)
  timeout 250 python3 -m pytest tests/kernels/test_attention_bwd_ws.py tests/kernels/test_attention.py -m gpu -q \
    -p no:cacheprovider -n 8 -k "backward or light" 2>&1 | tail -3 | tee "${LOG}_gpu_tests_commit.log"
  ;;
call6)
  export TRITON_ALWAYS_COMPILE=1 TRITON_CACHE_DIR=/tmp/s32/cache
  timeout 400 python3 /tmp/s32/ab_warp.py 3 19,20,21 2>&1 | tee "${LOG}_ab_bwd_pairs.log"
  ;;
call5)
  timeout 200 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
    | tail -4 | tee "${LOG}_gpu_tests_bwd.log"
  timeout 360 python3 /tmp/s32/ab_bwd_switch.py 3 2>&1 | tee "${LOG}_ab_bwd_switch.log"
  ;;
*) echo "unknown call $CALL"; exit 2 ;;
esac
