#!/usr/bin/env bash
# Session-33 device calls (issue 16): bash kernels/device_s33.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.  Calls 1-3 ran kernels that are not in the tree: `git apply
# docs/measurements/kernels_s33_decode_l2_prefetch.patch` before call 1, `kernels_s33_gemm_stream_k.patch` before
# calls 2-3 (kernels/NOTES.md, session 33).
# call1: decode with L2 prefetches ahead of the TMA ring (kernels/_decode_tma.py PF: the rows of item i + STAGES + PF
#        asked into L2 by `prefetch.global.L2`, a 128-byte line a thread, when item i + STAGES is copied; PF items
#        after the ring's first fill at the start): checked against the fp32 reference at shapes with ragged and tiny
#        key lengths, blhd, bf16 and head dim 128, then graph-timed in turns (best of 5 rounds) beside a 256 MB copy at
#        the suite's shape and two others, PF 0 (the shipped kernel) to 16, 2-4 stages.
# call2: the Gluon GEMM with stream-K for its last partial wave (kernels/_matmul_ws.py SK: the last T mod P tiles' K
#        steps shared equally by the P persistent programs, partial sums through an fp32 workspace and per-tile
#        arrival counters, added by the tile's first-step owner in program order): checked against the kernel
#        without it and an fp32 reference at shapes where tiles span two and three programs (small grids too), the
#        sum bitwise the same over repeated calls, then graph-timed in turns (best of 5 rounds) against cuBLAS and
#        the kernel without it at 4096^3, 8192^3, 4096x14336x4096 and 4096x5120x3072.
# call3: where call 2's stream-K time goes: SK_DIAG 1 (the shares' K steps only, no partial written, waited for or
#        added: wrong sums, timing only) and 2 (partials written and counted, the owner waits but adds none) against
#        the full exchange, the kernel without stream-K and cuBLAS, graph-timed in turns (best of 5 rounds).
# call4: the fp8 forward's configs on an H200 (they were chosen on H100s): stages, ping-pong turns and the grid
#        around FP8_CONFIGS at head dim 128, L4096 and L16384 without a mask and L4096 causal (the suite's shapes),
#        beside our bf16 forward on random bf16 data, graph-timed in turns (best of 4 rounds).
# call5: the fp8 forward's P as e4m3 codes without exponentials (EXP_BITS, kernels/_attn_fwd_ws.py ROWSUM_MMA == 2:
#        one FMA onto 1.5 * 2^23 gives the code 8 x + 120 of 2^(x + 8) in the float's low byte, a clamp, three byte
#        permutes a word; row sums by wgmma a tile at a time): errors against the fp64 reference of the dequantised
#        inputs (output and lse) beside the shipped kernel's at ragged shapes, then graph-timed in turns (best of 4
#        rounds) against the shipped kernel and our bf16 forward at the suite's fp8 shapes and d64, L16384, L512.
# call6: the fp8 GPU tests on the tree with fast_exp (the default of attention_forward_fp8 since this session; the
#        exact path's rows pass fast_exp=False) and the maxima-growing rows.
# call7: the flash rows of the kernel suite (tests/perf/test_flash.py: fp8 now with fast_exp), their table, and the
#        H200 baseline's two fp8 entries re-made from two runs.
# call8: call 4's config sweep with fast_exp (P's codes), as the shipped default now runs it.
# call9: on the commit: `kernels.tune_ws check --fp8` (each case with exponentials and with fast_exp) and call 6's GPU
#        tests again.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s33_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s33

cat > /tmp/s33/dec_pf.py <<'PY'
import math
import sys

import torch

from kernels import decode_tma, tune_cases
from kernels.decode import decode_attention
from kernels.reference import decode_fp32, rel_err

ROUNDS = int(sys.argv[1])


def gluon(q, k, v, out, cfg=None, pf=0, layout="bhld"):
    if layout == "bhld":
        b, h, lk, d = k.shape
    else:
        b, lk, h, d = k.shape
    assert decode_tma.decode(q, k, v, out, layout, decode_tma.views(k, v, layout), b, h, lk,
                             math.log2(math.e) / math.sqrt(d), config=cfg, prefetch=pf)
    return out


torch.manual_seed(0)
for b, h, seq, d, dtype, layout in [(8, 16, 2048, 64, torch.float16, "bhld"), (2, 4, 40, 64, torch.float16, "bhld"),
                                    (3, 5, 1000, 64, torch.bfloat16, "bhld"), (1, 2, 1, 64, torch.float16, "bhld"),
                                    (2, 3, 4100, 64, torch.float16, "bhld"), (2, 6, 777, 64, torch.float16, "blhd"),
                                    (2, 2, 300, 128, torch.bfloat16, "bhld"), (1, 3, 5000, 128, torch.float16, "bhld")]:
    shape = (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)
    qs = (b, h, 1, d) if layout == "bhld" else (b, 1, h, d)
    q = torch.randn(qs, device="cuda", dtype=dtype)
    k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(2))
    tr = (lambda t: t) if layout == "bhld" else (lambda t: t.transpose(1, 2))
    ref = tr(decode_fp32(tr(q).float(), tr(k).float(), tr(v).float()))
    cfg = decode_tma.CONFIGS[d]
    errs = {pf: rel_err(gluon(q, k, v, torch.empty_like(q), None, pf, layout), ref) for pf in (0, 1, 4, 8, 16)}
    same = all(torch.equal(gluon(q, k, v, torch.empty_like(q), None, pf, layout),
                           gluon(q, k, v, torch.empty_like(q), None, 0, layout)) for pf in (4, 16))
    print(f"check b{b} h{h} kv{seq} d{d} {dtype} {layout}: errors by PF {errs}, PF 4/16 bitwise PF 0's: {same}",
          flush=True)

CFGS = [((128, 3, 4, 32), 0), ((128, 3, 4, 32), 2), ((128, 3, 4, 32), 4), ((128, 3, 4, 32), 8),
        ((128, 3, 4, 32), 16), ((128, 2, 4, 32), 4), ((128, 2, 4, 32), 8), ((128, 4, 4, 32), 8)]
src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton")}
    for cfg, pf in CFGS:
        fns[f"gluon {cfg} pf {pf}"] = lambda cfg=cfg, pf=pf: gluon(q, k, v, out, cfg, pf)
    t = tune_cases.in_turns(fns, ROUNDS)
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:32s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY

cat > /tmp/s33/gemm_sk.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, tune_cases

ROUNDS = int(sys.argv[1])
torch.manual_seed(0)


def ws(a, b, sk, programs=None, b_tma=None):
    c = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=a.dtype)
    assert mg.matmul_ws(a, b, c, stream_k=sk, programs=programs, b_tma=b_tma)
    return c


for m, n, k, programs, b_tma in [(4096, 4096, 4096, None, None), (2048, 4096, 512, None, None),
                                  (4096, 5120, 3072, None, None), (1000, 3000, 1024, 20, None),
                                  (1024, 1024, 512, 20, None), (1536, 2560, 4096, 50, None),
                                  (2048, 4096, 1024, None, False), (8192, 8192, 8192, None, None)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ref = (a.float() @ b.float())
    tiles = -(-m // 128) * -(-n // 256)
    p = min(tiles, programs or torch.cuda.get_device_properties(0).multi_processor_count)
    sk = mg.sk_tiles(tiles, p, -(-k // 64))
    off = ws(a, b, False, programs, b_tma)
    on = ws(a, b, True, programs, b_tma)
    again = [ws(a, b, True, programs, b_tma) for _ in range(20)]
    same = all(torch.equal(x, on) for x in again)
    err = lambda c: ((c.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"check {m}x{n}x{k} programs={p} tiles={tiles} sk_tiles={sk} b_tma={b_tma}: err off {err(off):.2e} on "
          f"{err(on):.2e}, on vs off max {(on.float() - off.float()).abs().max().item():.3e}, 20 repeats bitwise: "
          f"{same}", flush=True)

for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 5120, 3072)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ws": lambda: mg.matmul_ws(a, b, c, stream_k=False),
           "ws sk": lambda: mg.matmul_ws(a, b, c, stream_k=True)}
    t = tune_cases.in_turns(fns, ROUNDS)
    tf = lambda ms: 2 * m * n * k / ms / 1e9
    print(f"{m}x{n}x{k}: " + ", ".join(f"{name} {ms * 1e3:.1f} us ({tf(ms):.0f} TFLOPS, x cuBLAS "
                                       f"{t['cublas'] / ms:.3f})" for name, ms in t.items()), flush=True)
PY

cat > /tmp/s33/gemm_sk_diag.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, tune_cases

ROUNDS = int(sys.argv[1])
torch.manual_seed(0)
for m, n, k in [(4096, 4096, 4096), (4096, 5120, 3072), (8192, 8192, 8192)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ws": lambda: mg.matmul_ws(a, b, c, stream_k=False)}
    for d in (0, 1, 2):
        fns[f"ws sk diag {d}"] = lambda d=d: mg.matmul_ws(a, b, c, stream_k=True, sk_diag=d)
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"{m}x{n}x{k}: " + ", ".join(f"{name} {ms * 1e3:.1f} us (x cuBLAS {t['cublas'] / ms:.3f})"
                                       for name, ms in t.items()), flush=True)
PY

cat > /tmp/s33/fp8_cfg.py <<'PY'
import math
import sys

import torch

from kernels import attention, attention_ws, tune_cases
from kernels._checks import LOG2E

ROUNDS = int(sys.argv[1])
FAST = len(sys.argv) > 2 and sys.argv[2] == "fast"
for seq, b, causal in [(4096, 4, False), (4096, 4, True), (16384, 1, False)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    dims = attention.check_attention(q8, k8, v8, "bhld", attention.HEAD_DIMS, dtypes=attention.FP8_DTYPES)
    out, lse = torch.empty_like(q), torch.empty((b, 16, seq), device=q.device)
    shipped = attention_ws.default_config(dims, causal, True)
    cfgs = [shipped] + [c for c in ([(128, st, 2, pers, pp) for st in (2, 3, 4) for pers in (False, True)
                                     for pp in (False, True)]) if c != tuple(shipped)]
    fns = {"bf16-ours": lambda: attention.attention_forward(q, k, v, causal)}
    ref = None
    for cfg in cfgs:
        def fn(cfg=cfg):
            assert attention_ws.forward(q8, k8, v8, out, lse, dims, "bhld", causal, 128 ** -0.5 * LOG2E * sq * sk,
                                        tuple(cfg), o_scale=sv, fast_exp=FAST)
            return out
        try:
            got = fn().clone()
        except Exception as exc:
            print(f"   {cfg}: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
            continue
        ref = got if ref is None else ref
        err = (got.float() - ref.float()).abs().max().item()
        fns[f"{tuple(cfg)}{' shipped' if cfg == shipped else ''} (max diff {err:.1e})"] = fn
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"fp8 b{b} h16 L{seq} d128 {'causal' if causal else 'full'}: bf16-ours {t['bf16-ours'] * 1e3:.1f} us",
          flush=True)
    for name, ms in sorted(t.items(), key=lambda kv: kv[1]):
        if name != "bf16-ours":
            print(f"   {name:48s} {ms * 1e3:8.1f} us  {t['bf16-ours'] / ms:.3f}x our bf16", flush=True)
PY

cat > /tmp/s33/fp8_bits.py <<'PY'
import sys

import torch

from kernels import attention, attention_ws, tune_cases
from kernels.attention import attention_forward_fp8, quantize_fp8
from kernels.reference import attention_fp32, rel_err

ROUNDS = int(sys.argv[1])


def run(flag, q8, k8, v8, sq, sk, sv, causal, lse=None):
    was = attention_ws.EXP_BITS
    attention_ws.EXP_BITS = flag
    try:
        return attention_forward_fp8(q8, k8, v8, sq, sk, sv, causal, impl="gluon", lse=lse)
    finally:
        attention_ws.EXP_BITS = was


torch.manual_seed(0)
for b, h, lq, lk, d, causal in [(1, 2, 37, 48, 128, False), (2, 4, 1000, 1008, 128, True), (1, 4, 4096, 4096, 128, False),
                                (1, 2, 16384, 16384, 128, False), (2, 4, 1000, 1536, 64, True), (1, 4, 4096, 4096, 64, False),
                                (1, 2, 300, 4000, 128, False)]:
    q, k, v = (torch.randn(b, h, n, d, device="cuda") for n in (lq, lk, lk))
    (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
    v8 = v8.transpose(2, 3).contiguous().transpose(2, 3)
    deq = [t.to(torch.float64) * s for t, s in ((q8, sq), (k8, sk), (v8, sv))]
    ref, ref_lse = attention_fp32(*deq, causal, None, "bhld", dtype=torch.float64)
    line = f"check b{b} h{h} lq{lq} lk{lk} d{d} causal={causal}:"
    for flag in (False, True):
        lse = torch.full((b, h, lq), float("nan"), device="cuda")
        out, _ = run(flag, q8, k8, v8, sq, sk, sv, causal, lse)
        fin = torch.isfinite(ref_lse)
        lerr = (lse[fin].double() - ref_lse[fin]).abs().max().item()
        line += f" {'bits' if flag else 'exp2'}: out err {rel_err(out, ref):.2e} lse err {lerr:.2e};"
    print(line, flush=True)

for seq, b, d, causal in [(4096, 4, 128, False), (4096, 4, 128, True), (16384, 1, 128, False), (512, 32, 128, False),
                          (4096, 4, 64, False)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, d, vt=True)
    fns = {"bf16-ours": lambda: attention.attention_forward(q, k, v, causal),
           "fp8 exp2": lambda: run(False, q8, k8, v8, sq, sk, sv, causal),
           "fp8 bits": lambda: run(True, q8, k8, v8, sq, sk, sv, causal)}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}: " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({t['bf16-ours'] / ms:.3f}x our bf16)" for n, ms in t.items()), flush=True)
PY

case $CALL in
  call1)
    timeout 400 python3 /tmp/s33/dec_pf.py 5 2>&1 | tee "${LOG}_dec_pf.log"
    ;;
  call2)
    timeout 480 python3 /tmp/s33/gemm_sk.py 5 2>&1 | tee "${LOG}_gemm_sk.log"
    ;;
  call3)
    timeout 400 python3 /tmp/s33/gemm_sk_diag.py 5 2>&1 | tee "${LOG}_gemm_sk_diag.log"
    ;;
  call4)
    timeout 500 python3 /tmp/s33/fp8_cfg.py 4 2>&1 | tee "${LOG}_fp8_cfg.log"
    ;;
  call5)
    timeout 500 python3 /tmp/s33/fp8_bits.py 4 2>&1 | tee "${LOG}_fp8_bits.log"
    ;;
  call6)
    timeout 420 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "fp8 or maxima or fast_exp" 2>&1 | tail -6 | tee "${LOG}_gpu_tests_fp8.log"
    ;;
  call7)
    source kernels/device_lib.sh
    install_perfci
    timeout 300 python3 -m pytest tests/perf/test_flash.py -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
      > "${LOG}_perf_flash.log" 2>&1
    echo "perf flash rc=$?"; tail -3 "${LOG}_perf_flash.log"
    [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_flash_table.txt"
    baseline_update "test_flash_forward_fp8" fp8
    ;;
  call8)
    timeout 500 python3 /tmp/s33/fp8_cfg.py 4 fast 2>&1 | tee "${LOG}_fp8_cfg_fast.log"
    ;;
  call9)
    timeout 200 python3 -m kernels.tune_ws check --fp8 2>&1 | tail -12 | tee "${LOG}_tune_ws_check_fp8.log"
    timeout 300 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "fp8 or maxima or fast_exp" 2>&1 | tail -4 | tee "${LOG}_gpu_tests_fp8.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
