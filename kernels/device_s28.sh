#!/usr/bin/env bash
# Session-28 device calls (issue 16): bash kernels/device_s28.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.  Calls 1-5 ran kernels that are not in the tree: `git apply
# docs/measurements/kernels_s28_decode_experiments.patch` first (kernels/_decode_streams.py, _decode_mma.py,
# _decode_timed.py; kernels/NOTES.md, session 28).
# call1: decode through one TMA ring a warp (kernels/_decode_streams.py, an experiment: NS one-warp partitions, each
#        streaming its share of a head's key tiles through a ring of its own, merged at the end) against the shipped
#        Gluon kernel (one ring its four warps read together, a CTA barrier a tile), the Triton kernel and the TMA
#        floor of (K, V) pairs: checked against the fp32 reference at shapes with ragged and tiny key lengths (shares
#        with no tile), then graph-timed in turns (best of 3 rounds) beside a 256 MB copy at the suite's shape and
#        three other one-program-a-head shapes.
# call2: decode with its dot products on the tensor cores (kernels/_decode_mma.py, an experiment: S^T = K tile x q^T
#        and O^T += V tile^T x P^T by wgmma from the ring's slots, q and P written eight times into small shared
#        buffers), checked as call 1 (ragged key lengths, a ragged last tile zeroed in shared memory, bf16, d128), then
#        graph-timed in turns at 2, 3, 4 and 6 stages against the shipped kernel, Triton and the TMA floor.
# call3: call 2's kernel with K and V tiles interleaved in the ring (INTERLEAVE: V tile t and K tile t + CT in turns,
#        so two regions stream at once, as in the TMA floor's (K, V) pairs), chunks of 4, 8 and 16 tiles, 4 to 6
#        stages (first run: 3 and 4 stages; at 3 stages the interleaved outputs were not finite, call3dbg), checked
#        (a variant with a wrong output is dropped from the timing) and timed as call 2.
# call3dbg: call 3's first run stopped at an illegal address: each variant's checks alone, blocking launches.
# call4: where a program's time goes in the shipped decode kernel (kernels/_decode_timed.py, a diagnostic copy storing
#        each program's %globaltimer start and end and its SM): the spread of starts, durations and ends over the 128
#        programs at the suite's shape, and at 16x16 heads kv 1024 (two programs an SM).
# call5: call 4 at 3, 4 and 6 stages (more stages were slower in session 19: a later median or a longer tail?).
# call6: the kernel suite on the tree (session 27's ticket grid and shifted row blocks included), its table.
# call7: the ragged GEMM's parts on this card: 4000x5000x3000 (B's 10000-byte pitch), the shipped route (repack, then
#        the Gluon GEMM), cuBLAS, the Gluon GEMM alone on a B repacked before, and the repack alone with other tiles,
#        eviction hints and torch's strided copy, graph-timed in turns (best of 3 rounds).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s28_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s28

cat > /tmp/s28/streams.py <<'PY'
import math
import sys

import torch

from kernels import decode_tma, tune_cases
from kernels._checks import layout_strides
from kernels._decode_streams import decode_streams_kernel
from kernels.decode import decode_attention, read_floor
from kernels.reference import decode_fp32, rel_err

ROUNDS = int(sys.argv[1])


def streams(q, k, v, out, ns, stages, bn=32, regs=192, ct=32):
    b, h, lk, d = k.shape
    views = decode_tma.views(k, v, "bhld")
    kd, ks = decode_tma._descriptor(k, views[0], bn)
    vd, vs = decode_tma._descriptor(v, views[1], bn)
    sq, so = layout_strides(q, "bhld"), layout_strides(out, "bhld")
    decode_streams_kernel[(b * h,)](q, out, kd, vd, lk, h, sq[0], sq[1], sq[3], so[0], so[1], so[3], *ks, *vs,
                                    math.log2(math.e) / math.sqrt(d), NS=ns, STAGES=stages, CT=ct,
                                    EVEN=lk % bn == 0, WORKER_REGS=regs, num_warps=4)
    return out


VARIANTS = {"ns4 st4": dict(ns=4, stages=4), "ns4 st6": dict(ns=4, stages=6), "ns4 st8": dict(ns=4, stages=8),
            "ns2 st6": dict(ns=2, stages=6), "ns2 st8": dict(ns=2, stages=8),
            "ns4 bn64 st3": dict(ns=4, stages=3, bn=64, regs=232)}
torch.manual_seed(0)
for b, h, seq, d, dtype in [(8, 16, 2048, 64, torch.float16), (2, 4, 40, 64, torch.float16),
                            (3, 5, 1000, 64, torch.bfloat16), (1, 2, 1, 64, torch.float16),
                            (2, 3, 4100, 64, torch.float16), (2, 2, 300, 128, torch.bfloat16)]:
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for n in (1, seq, seq))
    ref = decode_fp32(q.float(), k.float(), v.float())
    errs = {name: rel_err(streams(q, k, v, torch.empty_like(q), **kw), ref) for name, kw in VARIANTS.items()
            if kw["ns"] * kw["stages"] * kw.get("bn", 32) * d * 2 <= 150 * 1024}  # shared memory
    shipped = rel_err(decode_attention(q, k, v, impl="gluon"), ref)
    print(f"check b{b} h{h} kv{seq} d{d} {dtype}: shipped {shipped:.2e}, "
          + ", ".join(f"{n} {e:.2e}" for n, e in errs.items()), flush=True)
    bad = {n: e for n, e in errs.items() if not e < max(4 * shipped, 1e-2)}
    if bad:
        print("   WRONG:", bad, flush=True)
        for n in bad:
            VARIANTS.pop(n, None)

src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16),
                         (4, 32, 8192, torch.bfloat16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton"),
           "gluon (shipped)": lambda: decode_attention(q, k, v, out=out, impl="gluon"),
           "tma floor pairs st3": lambda: read_floor(k, v, b * h, 128, num_stages=3, tma=True)}
    for name, kw in VARIANTS.items():
        fns[name] = lambda kw=kw: streams(q, k, v, out, **kw)
    t = tune_cases.in_turns(fns, ROUNDS)
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY

cat > /tmp/s28/mma.py <<'PY'
import math
import sys

import torch

from kernels import decode_tma, tune_cases
from kernels._checks import layout_strides
from kernels._decode_mma import decode_mma_kernel
from kernels.decode import decode_attention, read_floor
from kernels.reference import decode_fp32, rel_err

ROUNDS = int(sys.argv[1])


def mma(q, k, v, out, stages, bn=128, ct=32, il=False):
    b, h, lk, d = k.shape
    views = decode_tma.views(k, v, "bhld")
    kd, ks = decode_tma._descriptor(k, views[0], bn)
    vd, vs = decode_tma._descriptor(v, views[1], bn)
    sq, so = layout_strides(q, "bhld"), layout_strides(out, "bhld")
    decode_mma_kernel[(b * h,)](q, out, kd, vd, lk, h, sq[0], sq[1], sq[3], so[0], so[1], so[3], *ks, *vs,
                                math.log2(math.e) / math.sqrt(d), STAGES=stages, CT=ct, EVEN=lk % bn == 0,
                                INTERLEAVE=il, num_warps=4)
    return out


if sys.argv[2:] == ["interleave"]:
    VARIANTS = {"mma st3": dict(stages=3), "mma st4": dict(stages=4),
                **{f"mma il ct{ct} st{st}": dict(stages=st, ct=ct, il=True) for ct in (4, 8, 16) for st in (4, 5, 6)}}
else:
    VARIANTS = {f"mma st{st}": dict(stages=st) for st in (2, 3, 4, 6)}
torch.manual_seed(0)
for b, h, seq, d, dtype in [(8, 16, 2048, 64, torch.float16), (2, 4, 40, 64, torch.float16),
                            (3, 5, 1000, 64, torch.bfloat16), (1, 2, 1, 64, torch.float16),
                            (2, 3, 4100, 64, torch.float16), (2, 2, 300, 128, torch.bfloat16),
                            (2, 3, 5000, 128, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for n in (1, seq, seq))
    k2, v2 = (torch.full((b, h, seq + 200, d), float("nan"), device="cuda", dtype=dtype) for _ in range(2))
    k2[:, :, :seq], v2[:, :, :seq] = k, v  # NaN in the rows past each head's keys
    ks, vs = k2[:, :, :seq], v2[:, :, :seq]
    ref = decode_fp32(q.float(), k.float(), v.float())
    errs = {name: rel_err(mma(q, ks, vs, torch.empty_like(q), **kw), ref) for name, kw in VARIANTS.items()
            if kw["stages"] * 128 * d * 2 <= 130 * 1024}  # shared memory
    shipped = rel_err(decode_attention(q, k, v, impl="gluon"), ref)
    print(f"check b{b} h{h} kv{seq} d{d} {dtype}: shipped {shipped:.2e}, "
          + ", ".join(f"{n} {e:.2e}" for n, e in errs.items()), flush=True)
    bad = {n: e for n, e in errs.items() if not e < max(4 * shipped, 1e-2)}
    if bad:
        print("   WRONG:", bad, flush=True)
        for n in bad:
            VARIANTS.pop(n, None)

src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16),
                         (4, 32, 8192, torch.bfloat16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton"),
           "gluon (shipped)": lambda: decode_attention(q, k, v, out=out, impl="gluon"),
           "tma floor pairs st3": lambda: read_floor(k, v, b * h, 128, num_stages=3, tma=True)}
    for name, kw in VARIANTS.items():
        fns[name] = lambda kw=kw: mma(q, k, v, out, **kw)
    t = tune_cases.in_turns(fns, ROUNDS)
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY

cat > /tmp/s28/timed.py <<'PY'
import math
import sys

import torch

from kernels import decode_tma
from kernels._checks import layout_strides
from kernels._decode_timed import decode_kv_timed


def run(q, k, v, out, times, stages=3):
    b, h, lk, d = k.shape
    views = decode_tma.views(k, v, "bhld")
    kd, ks = decode_tma._descriptor(k, views[0], 128)
    vd, vs = decode_tma._descriptor(v, views[1], 128)
    sq, so = layout_strides(q, "bhld"), layout_strides(out, "bhld")
    decode_kv_timed[(b * h,)](times, q, out, kd, vd, lk, h, sq[0], sq[1], sq[3], so[0], so[1], so[3], *ks, *vs,
                              math.log2(math.e) / math.sqrt(d), STAGES=stages, NUM_WARPS=4, CT=32,
                              EVEN=lk % 128 == 0,
                              num_warps=4)


def pct(x, qs=(0, 10, 50, 90, 100)):
    x = sorted(x)
    return " ".join(f"p{q}={x[min(len(x) - 1, int(q / 100 * len(x)))]:.2f}" for q in qs)


STAGES = [int(x) for x in sys.argv[1:]] or [3]
for (b, h, seq, dtype), stages in [(shape, st) for shape in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16)]
                                   for st in STAGES]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    times = torch.zeros(b * h * 3, dtype=torch.int64, device="cuda")
    for rep in range(6):
        run(q, k, v, out, times, stages)
        torch.cuda.synchronize()
        t = times.view(-1, 3).cpu()
        t0 = int(t[:, 0].min())
        start = [(int(x) - t0) / 1e3 for x in t[:, 0]]
        end = [(int(x) - t0) / 1e3 for x in t[:, 1]]
        dur = [e - s for s, e in zip(start, end)]
        sms = len(set(int(x) for x in t[:, 2]))
        if rep >= 3:
            print(f"b{b} h{h} kv{seq} stages {stages} run {rep}: span {max(end):.2f} us, {sms} SMs; start us {pct(start)}; "
                  f"duration us {pct(dur)}; end us {pct(end)}", flush=True)
PY

cat > /tmp/s28/ragged.py <<'PY'
import torch

from kernels import _matmul_gluon as mg, matmul as mm, tune_cases

torch.manual_seed(0)
M, N, K = 4000, 5000, 3000
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
bp = mm.repack_rows(b)
view = mm._pitched_empty(b)
ref = torch.matmul(a, b)
print("shipped route err", ((mm.matmul(a, b) - ref).float().abs().max() / ref.float().abs().max()).item(), flush=True)
fns = {"ours (repack + gluon)": lambda: mm.matmul(a, b), "cublas": lambda: torch.matmul(a, b),
       "gluon on repacked B": lambda: mg.matmul_ws(a, bp, c), "torch strided copy": lambda: view.copy_(b)}
for cfg in [(32, 256, 4, 0), (32, 256, 4, 1), (64, 256, 8, 0), (16, 512, 4, 0), (32, 512, 8, 0), (8, 1024, 8, 0),
            (64, 512, 8, 1), (128, 128, 8, 0)]:
    fns[f"repack {cfg}"] = lambda cfg=cfg: mm._repack_into(b, view, cfg)
t = tune_cases.in_turns(fns, 3)
for name, ms in t.items():
    extra = f"  {2 * K * N * 2 / ms / 1e6:6.0f} GB/s moved" if "copy" in name or "repack" in name else \
        f"  {2 * M * N * K / ms / 1e9:6.1f} TFLOPS"
    print(f"   {name:28s} {ms * 1e3:8.2f} us{extra}", flush=True)
PY

case $CALL in
  call1)
    timeout 400 python3 /tmp/s28/streams.py 3 2>&1 | tee "${LOG}_streams.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s28/mma.py 3 2>&1 | tee "${LOG}_mma.log"
    ;;
  call3)
    timeout 400 python3 /tmp/s28/mma.py 3 interleave 2>&1 | tee "${LOG}_mma_il.log"
    ;;
  call3dbg)  # each variant's checks alone (call 3 met an illegal address), blocking launches, a process each
    for v in "mma st3" "mma il ct4 st3" "mma il ct8 st4" "mma il ct16 st3"; do
      echo "== $v" | tee -a "${LOG}_dbg.log"
      V="$v" CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 -c '
import os, sys
sys.argv = ["mma.py", "1", "interleave"]
src = open("/tmp/s28/mma.py").read().split("src = torch.empty")[0]
src = src.replace("for name, kw in VARIANTS.items()", "for name, kw in VARIANTS.items() if name == os.environ[\"V\"]")
exec(compile(src, "mma", "exec"))
' 2>&1 | tail -5 | tee -a "${LOG}_dbg.log"
    done
    ;;
  call4)
    timeout 120 python3 /tmp/s28/timed.py 2>&1 | tee "${LOG}_timed.log"
    ;;
  call5)  # call 4 at 3, 4 and 6 stages
    timeout 120 python3 /tmp/s28/timed.py 3 4 6 2>&1 | tee "${LOG}_timed.log"
    ;;
  call6)
    source kernels/device_lib.sh
    install_perfci || exit 3
    suite
    ;;
  call7)
    timeout 300 python3 /tmp/s28/ragged.py 2>&1 | tee "${LOG}_ragged.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
