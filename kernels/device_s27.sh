#!/usr/bin/env bash
# Session-27 device calls (issue 16): bash kernels/device_s27.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the module copy kernels/_attn_fwd_ws_s27.py (present only for this session's calls: the tree's kernel with
#        docs/measurements/kernels_s26_fwd_dynamic_tickets.patch, its loops kept as `for` loops without DYNAMIC, and
#        SHIFT: causal row blocks start n_m * rows - LQ rows before row 0, so the partial row block is the first,
#        lightest one).  DYNAMIC: a persistent grid taking its items from a grid-wide atomic ticket, with 0-16
#        single row blocks an SM at the end; SHIFT for head dim 64 causal on three consumers (L4096 = 21 * 192 + 64
#        rows: the last row block's idle consumers) and L4000.  Outputs compared with the tree's, graph-timed A/B
#        beside SDPA cuDNN (best of 3 rounds).  (SHIFT's first build, with Q loads and O stores at negative rows,
#        stopped this call at its first shifted launch: "an illegal instruction"; DYNAMIC ran.)
# (the module copy was removed after call 2: kernels/_attn_fwd_ws_s27.py is the tree's kernel at 622505b with
#  docs/measurements/kernels_s27_fwd_dynamic_shift_copy.patch applied, which also holds the offline check's options)
# call2: SHIFT rebuilt: the first row a multiple of 64 (the copy's ROW0 run-time argument), a consumer whose rows all
#        lie before row 0 loads no Q (a plain arrive on its Q barrier) and stores no O.  Checked against SDPA's math
#        path (GQA, Lk > Lq, tiny lengths, guard rows around the output), then A/B at d64 causal L4000-16384 on two
#        and three consumers and d128 L4000.
# call3: the tree with SHIFT for the causal configs whose row blocks are not whole key tiles (attention_ws.first_row:
#        three consumers, LONG_CAUSAL_CONFIGS): the attention GPU tests; A/B against the tree without it at d64 causal
#        L8192 / L16384; this card model's (H200) baseline entries of the causal L4096 / L16384 forward rows and the
#        fp8 causal one re-made from two runs (session 26's LPT moved them; the H200's were not re-made then).
# call4: call 1's DYNAMIC grid where call 1 stopped before it: fp8 d128 causal L4096 / L16384 and bf16 d64 causal
#        L4096, 2-8 single row blocks an SM, against the tree (the module copy re-made for calls 4-5 from the patch,
#        then removed again; its launch drops the tree's row0 argument).
# call5: call 4 again (the same card, as it came), 5 rounds, 2 singles an SM only, and bf16 d128 causal L4096 /
#        L16384, d64 L2048.
# call6: the tree with DYNAMIC where lpt_heads gives a two-consumer causal grid a tail (attention_ws.dynamic_grid):
#        the attention GPU tests, A/B against the tree without it (DYNAMIC_GRID off; 5 rounds), and this card model's
#        baseline entries of call 3 re-made again from two runs.
# call7: DYNAMIC where the rule does not take it: the short causal configs (persistent, 64-key tiles, items in a
#        fixed order; with and without LPT's single row blocks at the end) and three consumers (LONG_CAUSAL_CONFIGS),
#        5 rounds against the tree.
# call8: after the review (one accumulator-layout helper, the posted item read by consumer and phase; offline SASS
#        identical for ten configs), the changed GPU tests of the shift and the ticket grid.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s27_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s27

cat > /tmp/s27/ab_dyn.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch
import triton

from kernels import _attn_fwd_ws_s27 as s27, attention, attention_ws, tune_cases
from kernels import reference as ref
from kernels._checks import sm_count

ROUNDS = int(sys.argv[1])
C3 = (128, 2, 3, False, True)
# (batch, length, head dim, fp8, variants); causal, 16 heads.  A variant: name -> dict(config=, dyn=, spm=, shift=)
# spm: single row blocks an SM at the grid's end (the tree's rule: 2); 0: pairs only
D = lambda spm: dict(dyn=True, spm=spm)
SHAPES = [
    (4, 4096, 128, False, {"dyn0": D(0), "dyn2": D(2), "dyn4": D(4), "dyn8": D(8), "dyn16": D(16)}),
    (1, 16384, 128, False, {"dyn0": D(0), "dyn2": D(2), "dyn4": D(4), "dyn8": D(8)}),
    (4, 4096, 64, False, {"c3": dict(config=C3), "c3sh": dict(config=C3, shift=True),
                          "c3shdyn4": dict(config=C3, shift=True, dyn=True, spm=4), "dyn4": D(4)}),
    (2, 8192, 64, False, {"sh": dict(shift=True), "shdyn4": dict(shift=True, dyn=True, spm=4), "dyn4": D(4)}),
    (1, 16384, 64, False, {"sh": dict(shift=True), "shdyn4": dict(shift=True, dyn=True, spm=4)}),
    (4, 4096, 128, True, {"dyn2": D(2), "dyn4": D(4), "dyn8": D(8)}),
    (1, 16384, 128, True, {"dyn4": D(4), "dyn8": D(8)}),
    (4, 4000, 128, False, {"sh": dict(shift=True), "shdyn4": dict(shift=True, dyn=True, spm=4)}),
]
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]
TICKET = torch.zeros(2, dtype=torch.int32, device="cuda")
SMS = sm_count(torch.device("cuda"), 1)


class Launch:
    """attention_ws.attn_fwd_ws stand-in: the session's copy with its ticket and row shift."""

    def __init__(self, dyn, shift):
        self.dyn, self.shift = dyn, shift

    def __getitem__(self, grid):
        grid = (min(grid[0], SMS),) if self.dyn else grid

        def launch(*args, **kw):
            return s27.attn_fwd_ws[grid](*args, TICKET=TICKET, DYNAMIC=self.dyn, SHIFT=self.shift, **kw)
        return launch


def variant(run, config=None, dyn=False, spm=None, shift=False):
    attrs = {"attn_fwd_ws": Launch(dyn, shift)}
    if config:
        attrs["default_config"] = lambda *a, **kw: config
    if spm is not None:
        def lpt(dims, causal, fp8, cfg, sms):
            if spm == 0:
                return 0
            rb = triton.cdiv(dims.len_q, 64 * cfg[2])
            return min(dims.batch * dims.heads_q, triton.cdiv(spm * sms, rb))
        attrs["lpt_heads"] = lpt

    def go():
        with mock.patch.multiple(attention_ws, **attrs):
            return run()
    return go


for b, seq, d, fp8, variants in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, True, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run}
    fns.update({name: variant(run, **kw) for name, kw in variants.items()})
    sums = [t.float().sum().item() for t in (q, k, v)]
    o1, l1 = run()
    for name in list(fns)[1:]:
        for rep in range(2):  # twice: the ticket must have reset itself
            o2, l2 = fns[name]()
        print(f"  {name} vs tree out bitwise {torch.equal(o1, o2)} (max diff "
              f"{(o1.float() - o2.float()).abs().max().item():.2e}), lse max diff {(l1 - l2).abs().max().item():.2e}"
              f", ticket {TICKET.tolist()}", flush=True)
        del o2, l2
    assert [t.float().sum().item() for t in (q, k, v)] == sums, "inputs changed"
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s27/ab_shift.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import _attn_fwd_ws_s27 as s27, attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
C3 = (128, 2, 3, False, True)
C2 = (128, 3, 2, False, False)
# (batch, heads, kv heads, length q, length k, head dim, variants): name -> (config or None, shift)
SHAPES = [
    (4, 16, 16, 4096, 4096, 64, {"c3": (C3, False), "c3sh": (C3, True), "c2sh": (C2, True)}),
    (2, 16, 16, 8192, 8192, 64, {"sh": (None, True), "c2": (C2, False)}),
    (1, 16, 16, 16384, 16384, 64, {"sh": (None, True)}),
    (4, 16, 16, 4000, 4000, 128, {"sh": (None, True)}),
    (4, 16, 16, 4000, 4000, 64, {"c3": (C3, False), "c3sh": (C3, True), "sh": (None, True)}),
]
CHECKS = [(1, 4, 2, 1000, 1300, 64, C3), (2, 3, 3, 700, 700, 128, None), (1, 2, 1, 333, 2000, 64, None),
          (1, 2, 2, 130, 130, 64, C3), (1, 2, 2, 1, 1, 64, C3), (2, 4, 4, 4000, 4000, 64, C3)]  # against fp32
if len(sys.argv) > 2:
    SHAPES = [SHAPES[int(i)] for i in sys.argv[2].split(",")]


class Launch:
    """attention_ws.attn_fwd_ws stand-in: the session's copy with SHIFT and its first row."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            lq, nc = args[7], kw["NC"]
            row0 = -(((lq + 64 * nc - 1) // (64 * nc) * 64 * nc - lq) // 64 * 64)
            return s27.attn_fwd_ws[grid](*args, SHIFT=True, ROW0=row0, **kw)
        return launch


def variant(run, config, shift):
    attrs = {"attn_fwd_ws": Launch()} if shift else {}
    if config:
        attrs["default_config"] = lambda *a, **kw: config
    if not attrs:
        return run

    def go():
        with mock.patch.multiple(attention_ws, **attrs):
            return run()
    return go


for b, h, hk, lq, lk, d, cfg in CHECKS:
    q = tune_cases.randn((b, h, lq, d), torch.bfloat16, 0)
    k, v = (tune_cases.randn((b, hk, lk, d), torch.bfloat16, i) for i in (1, 2))
    guard = torch.full((b, h, lq + 256, d), 7.0, dtype=torch.bfloat16, device="cuda")
    out = guard[:, :, 128:128 + lq]
    kf, vf = (t.float().repeat_interleave(h // hk, 1) for t in (k, v))
    sc = q.float() @ kf.transpose(-1, -2) / d ** 0.5  # causal mask aligned bottom-right, as the kernel's
    keep = torch.arange(lk, device="cuda")[None, :] <= torch.arange(lq, device="cuda")[:, None] + (lk - lq)
    want = torch.softmax(sc.masked_fill(~keep, float("-inf")), -1) @ vf
    o, lse = variant(partial(attention.attention_forward, q, k, v, True, impl="gluon", out=out), cfg, True)()
    o0, lse0 = variant(partial(attention.attention_forward, q, k, v, True, impl="gluon"), cfg, False)()
    untouched = bool((guard[:, :, :128] == 7).all() and (guard[:, :, 128 + lq:] == 7).all())
    print(f"  check b{b} h{h}/{hk} Lq{lq} Lk{lk} d{d} {cfg}: max err {(o.float() - want).abs().max().item():.2e} "
          f"(unshifted {(o0.float() - want).abs().max().item():.2e}), lse vs unshifted "
          f"{(lse - lse0).abs().max().item():.2e}, guard rows untouched {untouched}", flush=True)

for b, h, hk, lq, lk, d, variants in SHAPES:
    q = tune_cases.randn((b, h, lq, d), torch.bfloat16, 0)
    k, v = (tune_cases.randn((b, hk, lk, d), torch.bfloat16, i) for i in (1, 2))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run}
    fns.update({name: variant(run, *kw) for name, kw in variants.items()})
    o1, l1 = run()
    for name in list(fns)[1:]:
        o2, l2 = fns[name]()
        print(f"  {name} vs tree out max diff {(o1.float() - o2.float()).abs().max().item():.2e}, lse max diff "
              f"{(l1 - l2).abs().max().item():.2e}", flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, lq, d, True)))[0] * h / 16
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h{h} L{lq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s27/ab_final.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
SHAPES = [(2, 8192, 64), (1, 16384, 64)]  # (batch, length, head dim): causal, 16 heads, the default configs


def unshifted():
    with mock.patch.object(attention_ws, "first_row", lambda *a: None):
        return run()


for b, seq, d in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run, "unshifted": unshifted, "cudnn": partial(ref.sdpa, q, k, v, True, "cudnn")}
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['unshifted'] / ms:.4f} unshifted x{t['cudnn'] / ms:.3f} "
        f"cuDNN" for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s27/ab_dyn2.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch
import triton

from kernels import _attn_fwd_ws_s27 as s27, attention, attention_ws, tune_cases
from kernels import reference as ref
from kernels._checks import sm_count

ROUNDS = int(sys.argv[1])
# (batch, length, head dim, fp8, single row blocks an SM at the end of a DYNAMIC grid); causal, 16 heads
SHAPES = [(4, 4096, 128, True, (2, 4, 8)), (1, 16384, 128, True, (2, 4, 8)), (4, 4096, 64, False, (2, 4, 8))]
if len(sys.argv) > 2:  # call 5: the singles an SM given, at these shapes and three more
    spms = tuple(int(n) for n in sys.argv[2].split(","))
    SHAPES = [(b, seq, d, fp8, spms) for b, seq, d, fp8, _ in SHAPES]
    SHAPES += [(4, 4096, 128, False, spms), (1, 16384, 128, False, spms), (8, 2048, 64, False, spms)]
TICKET = torch.zeros(2, dtype=torch.int32, device="cuda")
SMS = sm_count(torch.device("cuda"), 1)


class Launch:
    """attention_ws.attn_fwd_ws stand-in: the copy's kernel on a persistent grid taking items from the ticket (the
    tree's row0 argument dropped: the copy takes none)."""

    def __getitem__(self, grid):
        def launch(*args, **kw):
            kw.pop("SHIFT")
            return s27.attn_fwd_ws[(min(grid[0], SMS),)](*args[:14], TICKET=TICKET, DYNAMIC=True, **kw)
        return launch


def variant(run, spm):
    def lpt(dims, causal, fp8, cfg, sms):
        return min(dims.batch * dims.heads_q, triton.cdiv(spm * sms, triton.cdiv(dims.len_q, 64 * cfg[2])))

    def go():
        with mock.patch.multiple(attention_ws, attn_fwd_ws=Launch(), lpt_heads=lpt):
            return run()
    return go


for b, seq, d, fp8, spms in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, True, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run}
    fns.update({f"dyn{n}": variant(run, n) for n in spms})
    o1, l1 = run()
    for name in list(fns)[1:]:
        for rep in range(2):  # twice: the ticket must have reset itself
            o2, l2 = fns[name]()
        print(f"  {name} vs tree out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}, ticket "
              f"{TICKET.tolist()}", flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s27/ab_dyn_final.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, length, head dim, fp8): causal, 16 heads, the default configs
SHAPES = [(8, 2048, 64, False), (4, 4096, 64, False), (4, 4096, 128, False), (1, 16384, 128, False),
          (4, 4096, 128, True), (1, 16384, 128, True)]


def static(run):
    def go():
        with mock.patch.object(attention_ws, "DYNAMIC_GRID", False):
            return run()
    return go


for b, seq, d, fp8 in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, True, impl="gluon")
    else:
        run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run, "static": static(run), "cudnn": partial(ref.sdpa, q, k, v, True, "cudnn")}
    o1, l1 = run()
    o2, l2 = fns["static"]()
    print(f"  tree vs static out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
    del o1, l1, o2, l2
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{'fp8' if fp8 else 'bf16'} b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['static'] / ms:.4f} static x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

cat > /tmp/s27/ab_dyn_more.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch
import triton

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])
# (batch, length, head dim): causal, 16 heads, the default configs (persistent 64-key tiles below 2048 keys, three
# consumers from 8192 queries at d64)
SHAPES = [(32, 512, 64), (16, 1024, 64), (32, 512, 128), (16, 1024, 128), (2, 8192, 64), (1, 16384, 64)]


def lpt_any(dims, causal, fp8, cfg, sms):
    """lpt_heads without its persistent-grid exception."""
    rb = triton.cdiv(dims.len_q, 64 * cfg[2])
    if not causal or triton.cdiv(rb, 2) * dims.batch * dims.heads_q <= sms:
        return 0
    return min(dims.batch * dims.heads_q, triton.cdiv(2 * sms, rb))


def patched(run, **attrs):
    def go():
        with mock.patch.multiple(attention_ws, **attrs):
            return run()
    return go


for b, seq, d in SHAPES:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    fns = {"tree": run, "dyn": patched(run, dynamic_grid=lambda *a: True),
           "dynlpt": patched(run, dynamic_grid=lambda *a: True, lpt_heads=lpt_any)}
    o1, l1 = run()
    for name in ("dyn", "dynlpt"):
        o2, l2 = fns[name]()
        print(f"  {name} vs tree out bitwise {torch.equal(o1, o2)}, lse bitwise {torch.equal(l1, l2)}", flush=True)
        del o2, l2
    del o1, l1
    fns["cudnn"] = partial(ref.sdpa, q, k, v, True, "cudnn")
    flops = tune_cases.flops_bytes(tune_cases.Variant("fwd", (b, 16, seq, d, True)))[0]
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d{d} causal: " + "; ".join(
        f"{n} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOPS x{t['tree'] / ms:.4f} tree x{t['cudnn'] / ms:.3f} cuDNN"
        for n, ms in t.items()), flush=True)
    torch.cuda.empty_cache()
PY

source kernels/device_lib.sh  # suite, baseline_update, install_perfci

case $CALL in
  call1)
    timeout 560 python3 /tmp/s27/ab_dyn.py 3 2>&1 | tee "${LOG}_ab_dyn.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s27/ab_shift.py 3 2>&1 | tee "${LOG}_ab_shift.log"
    ;;
  call3)
    timeout 230 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_fwd.log"
    timeout 150 python3 /tmp/s27/ab_final.py 3 2>&1 | tee "${LOG}_ab_final.log"
    install_perfci || exit 3
    baseline_update "test_flash_forward and causal and not triton and not sdpa and not L512" causal_long
    ;;
  call4)
    timeout 300 python3 /tmp/s27/ab_dyn2.py 3 2>&1 | tee "${LOG}_ab_dyn2.log"
    ;;
  call5)
    timeout 300 python3 /tmp/s27/ab_dyn2.py 5 2 2>&1 | tee "${LOG}_ab_dyn2.log"
    ;;
  call6)
    timeout 230 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests_fwd.log"
    timeout 200 python3 /tmp/s27/ab_dyn_final.py 5 2>&1 | tee "${LOG}_ab_dyn_final.log"
    install_perfci || exit 3
    baseline_update "test_flash_forward and causal and not triton and not sdpa and not L512" causal_long
    ;;
  call7)
    timeout 300 python3 /tmp/s27/ab_dyn_more.py 5 2>&1 | tee "${LOG}_ab_dyn_more.log"
    ;;
  call8)
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -k "first_row or dynamic_grid" -q \
      -p no:cacheprovider -n 8 2>&1 | tail -3 | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
