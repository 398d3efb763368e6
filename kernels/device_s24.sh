#!/usr/bin/env bash
# Session-24 device calls (issue 16): bash kernels/device_s24.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the kernel suite (tests/perf: flash, decode, matmul, the 256 MB copy) on the tree (the short causal forward
#        changed in session 23 after the suite's last run), its table (kernels.tune --perf-json), and this card
#        model's baseline entries of the L512 causal forward rows re-made from two runs.
# call2: the Gluon forward's key bounds shared by Problem.tile and _own_tiles (Problem.key_bounds; the tree,
#        docs/measurements/kernels_s24_fwd_key_bounds.patch: the short causal configs' SASS rescheduled, 8 instructions
#        fewer, other configs identical offline) and besides the skipped tiles released after the output's store is
#        issued (kernels_s24_fwd_release_after_store.patch), against the kernel before (module copies
#        kernels/_attn_fwd_ws_s24{old,kbr}.py, present only for this call): outputs bitwise, a graph-timed A/B beside
#        SDPA cuDNN at the short causal shapes, best of 4 rounds; the attention GPU tests (with the configs test's
#        d64 short causal row); then which kernels SDPA cuDNN runs at L512 (torch.profiler: name, grid, block,
#        registers, shared memory, time) beside ours, forward d64 / d128 causal and backward d128 causal.
# call3: the Gluon forward's consumer code once (`_consumer` a noinline function taking its index at run time, both
#        consumer partitions calling it: half the SASS; docs/measurements/kernels_s24_fwd_noinline_consumer.patch, the
#        module copy kernels/_attn_fwd_ws_s24ni.py present only for calls 3-5) against the tree (two inlined copies),
#        prompted by call 2's profile (cuDNN's short causal forward runs 128-key tiles; our two-copy 128-key tiles
#        lost 30 % to 64-key ones at d64 L512 while one merged copy did not, session 23 call 2): outputs bitwise,
#        graph-timed A/B beside SDPA cuDNN at short and long shapes, bf16 and fp8, the short causal shapes also on
#        128-key persistent configs; best of 3 rounds.
#        (Call 3 hung before its first timing: Triton lowers the shared function's warpgroup barriers as `bar.sync 0`,
#        CTA-wide, as the function sits outside the partitions, and the loader never reaches them.)
# call4: call 3 with those barriers rewritten in the PTX (a stages hook, /tmp/s24/ni_hook.py below: `bar.sync
#        2 + which, 128`, each consumer's own named barrier, as the inlined copies have); a smoke test under a short
#        timeout first, then the A/B on fewer shapes (the function compiles under the launch's 168 registers: the
#        d128 configs spill 8-16 bytes, offline).
#        (Call 4's A/B stopped at d128 L512: the 128-key 3-stage config (c128x3p, 262,536 B) does not fit d128's shared
#        memory, and a build failure disables the Gluon forward for the process; the shapes before it ran.  The script
#        now gives that shape no 128-key configs.)
# call5: why two inlined consumer copies lose on 128-key tiles at d64 L512 causal (call 4: 0.121 ms, one shared copy
#        0.086, 64-key tiles 0.083): ncu's warp state and scheduler sections of one launch each, the tree on 64- and
#        128-key tiles and the shared copy on 128-key tiles (stall reasons: no instruction = instruction cache).
# call6: (meant for an H200; the first try kept the warm H100 of call 5, whose re-made entries were not kept) this card
#        model's baseline entries of the L512 causal forward rows re-made from two runs, and
#        call 2's kernel listing (which kernels SDPA cuDNN and ours run at L512; ours measured 0.84x cuDNN's backward there
#        on an H200 in session 23, level on an H100).
# call7: (an H200) call 6's listing has the Gluon backward at L512 d128 causal ahead of the Triton 2-kernel scheme that
#        "auto" runs there (profiler sums 437 against 481 us; on H100s level, session 9 and session 23 call 5):
#        timed by tune_bwd._time (its timer now printed; calls 7-8 did not print it) gluon / triton / SDPA cuDNN at
#        L512 and L768, d128 causal, and L512 without a mask, best of 3 rounds ("auto" added to the script for call 8).
# call8: (meant for an H100; ran on the warm H200 of call 7, no other machine being left to start) call 7's rows
#        with "auto" now taking the Gluon backward from 512 keys with a causal mask at d128 (attention_bwd_ws.PREFERRED),
#        and the backward GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s24_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s24

cat > /tmp/s24/ab_bounds.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s24kbr as kbr, _attn_fwd_ws_s24old as old, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
SHAPES = [(32, 512, 128), (16, 1024, 128), (32, 512, 64), (16, 1024, 64)]


def with_kernel(kernel, fn):
    def run():
        with mock.patch.object(attention_ws, "attn_fwd_ws", kernel):
            return fn()
    return run


for b, seq, d in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True)
    fns = {"old": with_kernel(old.attn_fwd_ws, run), "kb": run, "kbr": with_kernel(kbr.attn_fwd_ws, run)}
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
cat > /tmp/s24/kernels_seen.py <<'PY'
"""Which kernels each implementation launches (torch.profiler's CUDA kernel events: grid, block, registers per
thread, shared memory, duration), SDPA cuDNN beside ours, at the short shapes where we trail."""
import json
import sys
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from kernels import attention, tune_cases
from kernels import reference as ref
from kernels.tune_bwd import _sdpa_grad


def kernels(fn, path, reps=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
    seen = {}
    for e in events:
        a = e.get("args", {})
        key = (e["name"], str(a.get("grid")), str(a.get("block")))
        row = seen.setdefault(key, [0, 0.0, a.get("registers per thread"), a.get("shared memory")])
        row[0] += 1
        row[1] += e["dur"]
    for (name, grid, block), (n, dur, regs, smem) in seen.items():
        print(f"    {dur / reps:8.1f} us/call  x{n // reps}  grid {grid} block {block} regs {regs} smem {smem}  "
              f"{name[:150]}", flush=True)


OUT = sys.argv[1]
for b, seq, d in [(32, 512, 64), (32, 512, 128)]:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    for name, fn in {"ours": partial(attention.attention_forward, q, k, v, True),
                     "cudnn": partial(ref.sdpa, q, k, v, True, "cudnn")}.items():
        print(f"fwd b{b} h16 L{seq} d{d} causal {name}:", flush=True)
        kernels(fn, f"{OUT}/trace_fwd_d{d}_{name}.json")
for b, seq, d in [(32, 512, 128)]:
    q, k, v, do = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, True)
    qkv = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        ref_out = torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=True)
    fns = {"ours": partial(attention.attention_backward, do, q, k, v, out, lse, True),
           "triton": partial(attention.attention_backward, do, q, k, v, out, lse, True, impl="triton"),
           "gluon": partial(attention.attention_backward, do, q, k, v, out, lse, True, impl="gluon"),
           "cudnn": partial(_sdpa_grad, ref_out, qkv, do)}
    for name, fn in fns.items():
        print(f"bwd b{b} h16 L{seq} d{d} causal {name}:", flush=True)
        kernels(fn, f"{OUT}/trace_bwd_d{d}_{name}.json")
PY

cat > /tmp/s24/ab_ni.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

if "--hook" in sys.argv:
    sys.argv.remove("--hook")
    sys.path.insert(0, "/tmp/s24")
    import ni_hook  # noqa: F401
from kernels import _attn_fwd_ws_s24ni as ni, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, length, head dim, causal, fp8, extra configs)
P128 = {"c128x3p": (128, 3, 2, True, False), "c128x2p": (128, 2, 2, True, False)}
SHAPES = [(32, 512, 64, True, False, P128), (16, 1024, 64, True, False, P128), (32, 512, 128, True, False, {}),
          (16, 1024, 128, True, False, {}), (32, 512, 128, False, False, {}), (4, 4096, 128, False, False, {}),
          (4, 4096, 128, True, False, {}), (4, 4096, 64, True, False, {}), (4, 4096, 64, False, False, {}),
          (4, 4096, 128, False, True, {}), (4, 4096, 128, True, True, {}), (1, 16384, 128, False, False, {})]
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


for b, seq, d, causal, fp8, extra in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    fns = {"tree": variant(attention_ws.attn_fwd_ws, run), "ni": variant(ni.attn_fwd_ws, run)}
    for name, cfg in extra.items():
        fns[f"tree {name}"] = variant(attention_ws.attn_fwd_ws, run, cfg)
        fns[f"ni {name}"] = variant(ni.attn_fwd_ws, run, cfg)
    o1, l1 = fns["tree"]()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs tree out bitwise {torch.equal(o1, o2)} (max diff "
              f"{(o1.float() - o2.float()).abs().max().item():.2e}), lse bitwise {torch.equal(l1, l2)}", flush=True)
    del o1, o2, l1, l2
    fns["cudnn"] = partial(ref.sdpa, q, k, v, causal, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    tag = f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}"
    print(f"{tag}: " + "; ".join(f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree "
                                 f"x{t['cudnn'] / ms:.3f} cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s24/ni_hook.py <<'PY'
"""Stages hook (experiment, session 24): in the Gluon forward's shared consumer function (the noinline
``_consumer`` of kernels/_attn_fwd_ws_s24ni.py), Triton lowers each warpgroup barrier as ``bar.sync 0`` (CTA-wide:
the function sits outside the warp-specialised partitions, so it knows no partition's barrier); rewrite them to the
consumer's own named barrier, ``bar.sync 2 + which, 128`` (the ids Triton gives the inlined consumers: 0 and 1 are
the default partition's and the CTA's), ``which`` being the function's first parameter."""
import re

from triton import knobs

MARK = "_attn_fwd_ws_s24ni_$__consumer"


def patch_ptx(ptx: str) -> str:
    heads = [m.start() for m in re.finditer(r"^\.func\s+(\S*" + re.escape(MARK) + r"\S*)", ptx, re.M)]
    if not heads:
        return ptx
    start = heads[-1]  # the definition (the first is the prototype)
    name = re.match(r"\.func\s+([^\s(]+)", ptx[start:]).group(1)
    end = ptx.find("\n.entry", start)
    end = len(ptx) if end < 0 else end
    body = ptx[start:end]
    ld = re.search(r"ld\.param\.b32\s+(%r\d+),\s*\[" + re.escape(name) + r"_param_0\];", body)
    assert ld, "which's load not found"
    body = body.replace(ld.group(0), ld.group(0) + f"\n\tadd.s32 \t%wsbar, {ld.group(1)}, 2;", 1)
    body = re.sub(r"\.reg \.b32 \t%r<(\d+)>;", lambda m: m.group(0) + "\n\t.reg .b32 \t%wsbar;", body, count=1)
    n = len(re.findall(r"bar\.sync \t0;", body))
    body = re.sub(r"bar\.sync \t0;", "bar.sync \t%wsbar, 128;", body)
    assert n and "%wsbar;" in body, (n, "reg decl")
    print(f"ni_hook: {n} barriers in {name[:40]}... now the consumer's own", flush=True)
    return ptx[:start] + body + ptx[end:]


def hook(backend, stages, options, language, capability):
    make_ptx = stages["ptx"]
    stages["ptx"] = lambda src, metadata: patch_ptx(make_ptx(src, metadata))


knobs.runtime.add_stages_inspection_hook = hook
PY
cat > /tmp/s24/ni_smoke.py <<'PY'
import sys
from unittest import mock

import torch

sys.path.insert(0, "/tmp/s24")
import ni_hook  # noqa: E402,F401  (before the first compile of the shared consumer)
from kernels import _attn_fwd_ws_s24ni as ni, attention, attention_ws, tune_cases  # noqa: E402

for b, seq, d, causal in [(2, 512, 64, True), (1, 1000, 128, True), (1, 1024, 128, False)]:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    o1, l1 = attention.attention_forward(q, k, v, causal, impl="gluon")
    with mock.patch.object(attention_ws, "attn_fwd_ws", ni.attn_fwd_ws):
        o2, l2 = attention.attention_forward(q, k, v, causal, impl="gluon")
    torch.cuda.synchronize()
    print(f"smoke b{b} L{seq} d{d} causal={causal}: out bitwise {torch.equal(o1, o2)} max diff "
          f"{(o1.float() - o2.float()).abs().max().item():.2e}, lse bitwise {torch.equal(l1, l2)}", flush=True)
PY

cat > /tmp/s24/one_fwd.py <<'PY'
"""python3 one_fwd.py BLOCK_N [ni]: three d64 L512 causal forwards (B32 H16) on a persistent 2-consumer config."""
import sys
from unittest import mock

import torch

if "ni" in sys.argv:
    sys.path.insert(0, "/tmp/s24")
    import ni_hook  # noqa: F401
    from kernels import _attn_fwd_ws_s24ni as mod
else:
    from kernels import _attn_fwd_ws as mod
from kernels import attention, attention_ws, tune_cases

cfg = (int(sys.argv[1]), 3, 2, True, False)
q, k, v = (tune_cases.randn((32, 16, 512, 64), torch.bfloat16, i) for i in range(3))
with mock.patch.object(attention_ws, "attn_fwd_ws", mod.attn_fwd_ws), \
        mock.patch.object(attention_ws, "default_config", lambda *a, **kw: cfg):
    for _ in range(3):
        attention.attention_forward(q, k, v, True, impl="gluon")
torch.cuda.synchronize()
PY

cat > /tmp/s24/bwd_short.py <<'PY'
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

source kernels/device_lib.sh  # suite, baseline_update, install_perfci

case $CALL in
  call1)
    install_perfci || exit 3
    suite
    baseline_update "test_flash_forward and L512 and causal" l512_causal
    ;;
  call2)
    timeout 240 python3 /tmp/s24/ab_bounds.py 4 2>&1 | tee "${LOG}_ab_bounds.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests_fwd.log"
    mkdir -p /tmp/s24/traces
    timeout 120 python3 /tmp/s24/kernels_seen.py /tmp/s24/traces 2>&1 | tee "${LOG}_kernels_seen.log"
    ;;
  call3)
    timeout 420 python3 /tmp/s24/ab_ni.py 3 2>&1 | tee "${LOG}_ab_ni.log"
    ;;
  call4)
    timeout 100 python3 /tmp/s24/ni_smoke.py 2>&1 | tee "${LOG}_ni_smoke.log" || exit 1
    [ "$(grep -c 'out bitwise True' "${LOG}_ni_smoke.log")" = 3 ] || exit 1  # (call 4 checked "out bitwise" only)
    timeout 330 python3 /tmp/s24/ab_ni.py 3 0,1,2,5,6,9,10 --hook 2>&1 | tee "${LOG}_ab_ni.log"
    ;;
  call5)
    for v in "64" "128" "128 ni"; do
      tag=$(echo "$v" | tr ' ' '_')
      timeout 100 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
        --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -k regex:attn_fwd_ws --launch-skip 1 --launch-count 1 python3 /tmp/s24/one_fwd.py $v \
        > "${LOG}_ncu_bn${tag}.txt" 2>&1
      echo "ncu $tag rc=$?"
      grep -E "Duration|stalled_(no_inst|long|barrier|wait|math|mio|lg|short|dispatch|branch|sleep|membar|selected)|Warp Cycles Per Issued|No Eligible|Registers Per" "${LOG}_ncu_bn${tag}.txt" | grep -v "_not_issued" | head -24
    done
    ;;
  call6)
    [ "$GPU_TAG" = h200 ] || { echo "not an H200: nothing to do"; exit 0; }
    install_perfci || exit 3
    baseline_update "test_flash_forward and L512 and causal" l512_causal
    mkdir -p /tmp/s24/traces
    timeout 120 python3 /tmp/s24/kernels_seen.py /tmp/s24/traces 2>&1 | grep -v Warn | tee "${LOG}_kernels_seen.log"
    ;;
  call7)
    timeout 150 python3 /tmp/s24/bwd_short.py 3 2>&1 | tee "${LOG}_bwd_short.log"
    ;;
  call8)
    timeout 100 python3 /tmp/s24/bwd_short.py 3 2>&1 | tee "${LOG}_bwd_short.log"
    timeout 100 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -x -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_bwd.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
