#!/usr/bin/env bash
# Session-13 device calls (issue 16): bash kernels/device_s13.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100): lazy rescaling in the Gluon forward (_attn_fwd_ws.LAZY_RESCALE: a row's reference maximum moves only
#        when a tile's maximum passes it by more than 2^8, and the output is rescaled only when some row of the
#        consumer moved): graph-timed A/B of the committed kernel (_s13old: `git show f263049:kernels/_attn_fwd_ws.py`)
#        against four module copies of the working kernel, written before the call: lazyA (the P.V wait before the
#        softmax, as ptxas places it in the committed kernel), lazyB (after it), specA / specB (the exponentials
#        taken against the old maximum before the tile's maximum is known, again if a row moved), at the suite's
#        fp8 and bf16 shapes, our bf16 on row-major copies / SDPA cuDNN beside.
# call2 (H100, the call-1 card): the perf suite on the committed code (README's kernel tables: forward, fp8, backward,
#        decode, GEMM in one run).
# call3 (H100): fp8 P carried to the P.V wgmma packed, four e4m3 per register, packed after the P.V wait
#        (_attn_fwd_ws.PACK_P; packing before it made ptxas serialise every wgmma, C7513): graph-timed A/B of the
#        committed kernel (_s13old) against the working kernel's copy (_s13pack) at the suite's fp8 shapes; then
#        `tune_ws check --fp8` and the fp8 attention GPU tests.
# call4 (H100, the call-3 card): call 3's A/B again, with causal L16384 and d64, and our Triton fp8 kernel beside.
# call5 (H100, the call-3 card): fp8 head dim 64 below 4096 keys: the packed Gluon kernel against the Triton one.
# call6 (H100, the call-3 card): the shipped code (PACK_P on; fp8 "auto" takes Gluon at head dim 64 where call 5 had it
#        faster): the suite's fp8 rows beside our bf16 L4096 rows, the H100 baseline's fp8 entries re-made from two
#        runs, the attention GPU tests.
# call7 (H100): lazy rescaling again, without the cross-warp flag: each warp votes (vote.any) and skips its 64 FMULs
#        inside one asm block (_s13vote, a module copy of the working kernel with LAZY_RESCALE 8) against the
#        shipped kernel (_s13pack): correctness on keys whose scores grow along the sequence (every row's maximum
#        moves by more than 2^8 over the tiles) against the fp32 reference, then the graph-timed A/B at the suite's
#        fp8 and bf16 shapes.
# call8 (H100): the shipped code: the new GPU test of growing maxima and the fp8 routing tests.
# call9 (H100): head dim 64 with three consumer warpgroups (192 query rows a program; FlashAttention-3's d64 tile),
#        bf16 and fp8, against the shipped two: graph-timed config A/B through attention_ws.forward, SDPA cuDNN / the
#        Triton fp8 kernel beside, outputs compared with the default config's.
# call10 (H100): call 9's winner without a mask (three consumers, ping-pong turns) again, by length, beside two
#        consumers with ping-pong turns and other ring depths; bf16 and fp8 head dim 64.
# call11 (H100): the shipped code (head dim 64 without a mask on three consumers, bf16 and fp8 from 2048 queries): the
#        attention GPU tests, the suite's d64 forward rows, the H100 baseline's d64 forward entry re-made from two runs.
# call12 (H200): the shipped code on an H200: head dim 64 without a mask, three consumers against the previous two
#        (bf16 and fp8); the suite's fp8 and L4096 forward rows; the H200 baseline's fp8 and d64 forward entries
#        re-made from two runs.
# call13 (H100): after the review: fp8 keeps two consumers where K cannot be read permuted; the attention GPU tests.
# call14 (H100): after the review of git diff 4eefc17.. (_packs_p, _measured_faster, TWO_CONSUMER_CONFIGS): the same.
# Calls 2-8 ran from a copy of this script whose GPU_TAG line had, by a bad edit, swallowed a second copy of the
# heredocs and call blocks inside its $(...); its `*) echo h100` branch matched first, so none of those call blocks
# ran there (its heredocs only rewrote the same /tmp files).
# Calls 1, 3-5 and 7 need their module copies (kernels/_attn_fwd_ws_s13*.py, written before the call, not kept), so
# they no longer run as written; the variants' diffs are in docs/measurements/kernels_s13_fwd_lazy_rescale*.patch.
set -o pipefail
source kernels/device_lib.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(case "$CALL" in call12) echo h200;; *) echo h100;; esac)
LOG=$OUT/kernels_${GPU_TAG}_s13_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"

cat > /tmp/ab_var.py <<'PY'
import importlib
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases as cases
from kernels import reference as ref
from kernels.tune_ws import bf16_copies, fp8_inputs

NEW = attention_ws.attn_fwd_ws
VARIANTS = {name: importlib.import_module(f"kernels._attn_fwd_ws_s13{name}").attn_fwd_ws
            for name in sys.argv[3].split(",")}  # the first is the reference ("old")
OLD = next(iter(VARIANTS))


def kernel(kern, fn):
    def run():
        attention_ws.attn_fwd_ws = kern
        try:
            return fn()
        finally:
            attention_ws.attn_fwd_ws = NEW
    return run


which = sys.argv[1]
for spec in sys.argv[2].split(","):
    d, seq, b, mask = spec.split(":")
    d, seq, b, causal = int(d), int(seq), int(b), mask == "causal"
    tag = f"{which} b{b} h16 L{seq} d{d} {mask}"
    flops = cases.flops_bytes(cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    if which == "bf16":
        q, k, v = (cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
        run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
        refs = {"cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn")}
        against = "cudnn"
    else:
        q8, k8, v8, sq, sk, sv = fp8_inputs(b, 16, 16, seq, seq, d, "bhld")
        q, k, v = bf16_copies(q8, k8, v8)
        run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
        bf = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
        refs = {f"bf16-{name}": kernel(kern, bf) for name, kern in VARIANTS.items()}
        if "--triton" in sys.argv:
            refs["fp8-triton"] = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal,
                                         impl="triton")
        against = f"bf16-{OLD}"
    impls = {name: kernel(kern, run) for name, kern in VARIANTS.items()}
    outs = {name: fn()[0].float() for name, fn in impls.items()}
    exact = (ref.sdpa(q.float(), k.float(), v.float(), causal, "math") if seq <= 4096 and which == "bf16"
             else None)
    for name, o in outs.items():
        line = f"# {tag} {name}: max |out - {OLD}'s| {(o - outs[OLD]).abs().max().item():.3e}"
        if exact is not None:
            line += f", rel err against SDPA math {ref.rel_err(o, exact):.3e}"
        print(line, flush=True)
    impls.update(refs)
    times = {}
    for rnd in range(4):
        for name, fn in (impls.items() if rnd % 2 == 0 else reversed(impls.items())):
            times[name] = min(cases.bench(fn, graph=True), times.get(name, float("inf")))
    for name, ms in times.items():
        print(f"AB {tag:28s} {name:10s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOPS "
              f"{against}/this x{times[against] / ms:.3f} {OLD}/this x{times[OLD] / ms:.3f}", flush=True)
    del q, k, v, impls, outs, refs, exact
    torch.cuda.empty_cache()
PY

cat > /tmp/grow.py <<'PY'
import importlib
import sys

import torch

from kernels import attention, attention_ws
from kernels import reference as ref

NEW = attention_ws.attn_fwd_ws
for name in sys.argv[1].split(","):
    attention_ws.attn_fwd_ws = importlib.import_module(f"kernels._attn_fwd_ws_s13{name}").attn_fwd_ws
    for d, causal, seq in ((128, False, 2048), (128, True, 2048), (64, False, 2048), (64, True, 1536), (96, False, 1000)):
        g = torch.Generator(device="cuda").manual_seed(d + seq)
        q = torch.randn(2, 4, seq, d, device="cuda", generator=g)
        k = torch.randn(2, 4, seq, d, device="cuda", generator=g)
        v = torch.randn(2, 4, seq, d, device="cuda", generator=g)
        q = q.abs() + 0.5  # positive queries: scores grow with the keys' scale below
        k = k.abs() * torch.linspace(0.05, 3.0, seq, device="cuda")[None, None, :, None]
        qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
        exact, lse_ref = ref.attention_fp32(qb.float(), kb.float(), vb.float(), causal)
        out, lse = attention.attention_forward(qb, kb, vb, causal, impl="gluon")
        err, lerr = ref.rel_err(out, exact), (lse - lse_ref).abs().max().item()
        line = f"GROW {name:5s} bf16 d{d} L{seq} {'causal' if causal else 'full':6s} rel err {err:.2e} lse {lerr:.1e}"
        if d in (64, 128):
            (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
            vt = v8.transpose(2, 3).contiguous().transpose(2, 3)
            deq = [t.float() * s for t, s in ((q8, sq), (k8, sk), (v8, sv))]
            exact8 = ref.attention_fp32(*deq, causal)[0]
            out8 = attention.attention_forward_fp8(q8, k8, vt, sq, sk, sv, causal, impl="gluon")[0]
            line += f"; fp8 rel err {ref.rel_err(out8, exact8):.2e}"
        print(line, flush=True)
attention_ws.attn_fwd_ws = NEW
PY

cat > /tmp/ab_cfg.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases as cases
from kernels import reference as ref
from kernels._checks import LOG2E
from kernels.tune_ws import fp8_inputs

which = sys.argv[1]
for spec in sys.argv[2].split(","):
    d, seq, b, mask = spec.split(":")
    d, seq, b, causal = int(d), int(seq), int(b), mask == "causal"
    tag = f"{which} b{b} h16 L{seq} d{d} {mask}"
    flops = cases.flops_bytes(cases.Variant("fwd", (b, 16, seq, d, causal)))[0]
    if which == "bf16":
        q, k, v = (cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
        dims = attention.check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
        scale, osc = d ** -0.5 * LOG2E, 1.0
        refs = {"cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn")}
    else:
        q, k, v, sq, sk, sv = fp8_inputs(b, 16, 16, seq, seq, d, "bhld")
        dims = attention.check_attention(q, k, v, "bhld", attention.HEAD_DIMS, dtypes=attention.FP8_DTYPES)
        scale, osc = d ** -0.5 * LOG2E * sq * sk, sv
        refs = {"triton": partial(attention.attention_forward_fp8, q, k, v, sq, sk, sv, causal, impl="triton")}
    base = attention_ws.default_config(dims, causal, which == "fp8")
    cfgs = [base] + [tuple(int(x) if i < 3 else x == "1" for i, x in enumerate(c.split("/"))) for c in sys.argv[3].split(",")]
    cfgs = [c for i, c in enumerate(cfgs) if c not in cfgs[:i]]
    impls, outs = {}, {}
    for cfg in cfgs:
        out = torch.empty_like(q, dtype=torch.bfloat16)
        lse = torch.empty((b, 16, seq), device=q.device)
        fn = partial(attention_ws.forward, q, k, v, out, lse, dims, "bhld", causal, scale, cfg, o_scale=osc)
        name = "-".join(str(int(x)) for x in cfg)
        fn()
        outs[name] = out.float().clone()
        impls[name] = fn
    first = next(iter(outs))
    for name, o in outs.items():
        print(f"# {tag} {name}: max |out - {first}'s| {(o - outs[first]).abs().max().item():.3e}", flush=True)
    impls.update(refs)
    against = next(iter(refs))
    times = {}
    for rnd in range(4):
        for name, fn in (impls.items() if rnd % 2 == 0 else reversed(impls.items())):
            times[name] = min(cases.bench(fn, graph=True), times.get(name, float("inf")))
    for name, ms in times.items():
        print(f"AB {tag:28s} {name:12s} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOPS "
              f"{against}/this x{times[against] / ms:.3f} {first}/this x{times[first] / ms:.3f}", flush=True)
    del q, k, v, impls, outs, refs
    torch.cuda.empty_cache()
PY

case "$CALL" in
  call1)
    timeout 280 python3 /tmp/ab_var.py fp8 "128:4096:4:full,128:4096:4:causal,128:16384:1:full,64:4096:4:full,128:512:32:full" \
      old,lazyA,lazyB,specA,specB 2>&1 | tee "${LOG}_ab_fp8.log"
    timeout 280 python3 /tmp/ab_var.py bf16 \
      "128:4096:4:full,128:4096:4:causal,64:4096:4:full,64:4096:4:causal,128:512:32:full,128:16384:1:full" \
      old,lazyA,lazyB,specA,specB 2>&1 | tee "${LOG}_ab_bf16.log"
    ;;
  call3)
    timeout 200 python3 /tmp/ab_var.py fp8 "128:4096:4:full,128:4096:4:causal,128:16384:1:full,64:4096:4:full,128:512:32:full" \
      old,pack 2>&1 | tee "${LOG}_ab_fp8.log"
    timeout 120 python3 -m kernels.tune_ws check --fp8 2>&1 | tail -12 | tee "${LOG}_check_fp8.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests.log"
    ;;
  call4)
    timeout 300 python3 /tmp/ab_var.py fp8 \
      "128:4096:4:full,128:4096:4:causal,128:16384:1:full,128:16384:1:causal,64:4096:4:full,64:4096:4:causal,128:512:32:full" \
      old,pack --triton 2>&1 | tee "${LOG}_ab_fp8.log"
    ;;
  call5)
    timeout 200 python3 /tmp/ab_var.py fp8 \
      "64:512:32:full,64:512:32:causal,64:1024:16:full,64:1024:16:causal,64:2048:8:full,64:2048:8:causal" \
      pack --triton 2>&1 | tee "${LOG}_ab_fp8_d64.log"
    ;;
  call6)
    install_perfci || exit 3
    timeout 150 python3 -m pytest tests/perf/test_flash.py -k "fp8 or (forward and L4096-d128) or (forward and L4096-d64)" \
      -q -p no:cacheprovider --benchmark-json="$OUT/perf_fp8.json" > "${LOG}_perf_suite_fp8.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_fp8.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_fp8.json" \
      | tee "${LOG}_perf_suite_fp8_table.txt"
    timeout 150 perfci baseline update tests/perf/test_flash.py -k fp8 --runs 2 --force --results-dir /tmp/bl1 \
      > "${LOG}_baseline_update_fp8.log" 2>&1
    echo "baseline update fp8 rc=$?"
    tail -6 "${LOG}_baseline_update_fp8.log"
    tar -czf "$OUT/baseline_h100.tgz" baselines/NVIDIA_H100_80GB_HBM3
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests.log"
    ;;
  call7)
    timeout 150 python3 /tmp/grow.py pack,vote 2>&1 | tee "${LOG}_grow.log"
    timeout 250 python3 /tmp/ab_var.py fp8 "128:4096:4:full,128:4096:4:causal,128:16384:1:full,64:4096:4:full,128:512:32:full" \
      pack,vote 2>&1 | tee "${LOG}_ab_fp8.log"
    timeout 250 python3 /tmp/ab_var.py bf16 \
      "128:4096:4:full,128:4096:4:causal,64:4096:4:full,64:4096:4:causal,128:512:32:full,128:16384:1:full" \
      pack,vote 2>&1 | tee "${LOG}_ab_bf16.log"
    ;;
  call8)
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "maxima_growing or fp8" 2>&1 | tail -4 | tee "${LOG}_gpu_tests.log"
    ;;
  call9)
    timeout 250 python3 /tmp/ab_cfg.py bf16 "64:4096:4:full,64:4096:4:causal,64:16384:1:full,64:1024:16:full" \
      "128/3/3/1/0,128/4/3/1/0,128/2/3/1/0,128/3/3/1/1,64/3/3/1/0,128/3/3/0/0" 2>&1 | tee "${LOG}_ab_d64_bf16.log"
    timeout 200 python3 /tmp/ab_cfg.py fp8 "64:4096:4:full,64:4096:4:causal" \
      "128/3/3/1/0,128/3/3/1/1,128/3/3/0/0" 2>&1 | tee "${LOG}_ab_d64_fp8.log"
    ;;
  call10)
    timeout 300 python3 /tmp/ab_cfg.py bf16 "64:1024:16:full,64:2048:8:full,64:4096:4:full,64:8192:2:full,64:16384:1:full" \
      "128/3/3/1/1,128/3/2/1/1,128/2/3/1/1,128/4/3/1/1" 2>&1 | tee "${LOG}_ab_d64_bf16.log"
    timeout 200 python3 /tmp/ab_cfg.py fp8 "64:1024:16:full,64:2048:8:full,64:4096:4:full,64:16384:1:full" \
      "128/3/3/1/1,128/3/2/1/1,128/2/3/1/1" 2>&1 | tee "${LOG}_ab_d64_fp8.log"
    ;;
  call11)
    timeout 240 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests.log"
    install_perfci || exit 3
    timeout 120 python3 -m pytest tests/perf/test_flash.py -k "forward and L4096-d64" \
      -q -p no:cacheprovider --benchmark-json="$OUT/perf_d64.json" > "${LOG}_perf_suite_d64.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_d64.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_d64.json" \
      | tee "${LOG}_perf_suite_d64_table.txt"
    timeout 120 perfci baseline update tests/perf/test_flash.py -k "L4096-d64-full-ours and not triton" --runs 2 \
      --force --results-dir /tmp/bl2 > "${LOG}_baseline_update_d64.log" 2>&1
    echo "baseline update d64 rc=$?"
    tail -4 "${LOG}_baseline_update_d64.log"
    tar -czf "$OUT/baseline_h100.tgz" baselines/NVIDIA_H100_80GB_HBM3
    ;;
  call12)
    timeout 150 python3 /tmp/ab_cfg.py bf16 "64:1024:16:full,64:4096:4:full,64:16384:1:full" "128/3/2/1/0" 2>&1 \
      | tee "${LOG}_ab_d64_bf16.log"
    timeout 100 python3 /tmp/ab_cfg.py fp8 "64:1024:16:full,64:4096:4:full" "128/3/2/1/0" 2>&1 | tee "${LOG}_ab_d64_fp8.log"
    install_perfci || exit 3
    timeout 150 python3 -m pytest tests/perf/test_flash.py -k "fp8 or (forward and L4096-d128) or (forward and L4096-d64)" \
      -q -p no:cacheprovider --benchmark-json="$OUT/perf_h200.json" > "${LOG}_perf_suite.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_h200.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_h200.json" | tee "${LOG}_perf_suite_table.txt"
    timeout 150 perfci baseline update tests/perf/test_flash.py -k "fp8 or (L4096-d64-full-ours and not triton)" \
      --runs 2 --force --results-dir /tmp/bl3 > "${LOG}_baseline_update.log" 2>&1
    echo "baseline update rc=$?"
    tail -4 "${LOG}_baseline_update.log"
    tar -czf "$OUT/baseline_h200.tgz" baselines/NVIDIA_H200
    ;;
  call13|call14)
    timeout 240 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests.log"
    ;;
  call2)
    install_perfci || exit 3
    timeout 400 python3 -m pytest tests/perf/test_flash.py tests/perf/test_decode.py tests/perf/test_matmul.py \
      "tests/perf/test_torch_ops.py::test_copy_256mb" -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
      > "${LOG}_perf_suite.log" 2>&1
    echo "perf suite rc=$?"
    tail -3 "${LOG}_perf_suite.log"
    [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_suite_table.txt"
    ;;
esac
