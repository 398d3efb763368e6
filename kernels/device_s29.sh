#!/usr/bin/env bash
# Session-29 device calls (issue 16): bash kernels/device_s29.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: the ragged GEMM (4000x5000x3000, B's 10000-byte pitch) through B^T: B copied transposed into a 128-byte
#        pitched buffer (kernels/matmul_kt.py), then the Gluon B^T kernel (kernels/_matmul_ws_kt.py) on tiles of
#        192x200 (three consumers, columns 128 + 64 + 8: four rounds over 132 SMs) and other tilings; checked against
#        cuBLAS in fp32 at ragged shapes, then graph-timed in turns (best of 3 rounds) with cuBLAS, the shipped route
#        (repack, then the 128x256 Gluon kernel), each part alone and the transposed copy's tile configs.
#        (This call ran kernels no longer in the tree: `git apply docs/measurements/kernels_s29_gemm_bt_pieces.patch`.)
# call2: the ragged GEMM's route (repack, then the 128x256 Gluon GEMM) with the GEMM as a programmatic dependent
#        launch of the repack (the repack's programs signal at their start, the GEMM's producer waits before its first
#        load), with four repack tile configs (with and without evict-last stores): outputs bitwise the plain route's
#        at five shapes, eager and replayed in a CUDA graph; then graph-timed in turns (best of 5 rounds) with cuBLAS.
#        (Not in the tree: `git apply docs/measurements/kernels_s29_gemm_repack_pdl.patch`.)
# call3: decode through the balanced split (kernels/_decode_tma.py decode_split_kernel: one program a SM, each an
#        equal share of all heads' key tiles, its last head's leading tiles first, written out as a partial, and its
#        first head's trailing tiles last, merged with the partials of the programs before it): checked against the
#        fp32 reference at shapes with heads spanning 1-132 programs, ragged and one-key lengths, bf16, d128, blhd,
#        fewer programs than SMs, three calls in a row and graph replays (the counts reset); then graph-timed in turns
#        (best of 3 rounds) against the shipped one-program-a-head kernel, Triton and a 256 MB copy.
#        Calls 3, 3b, 3dbg and 3dbg2 ran a kernel not in the tree: `git apply
#        docs/measurements/kernels_s29_decode_split.patch` gives its last form (call 3b's); call 3's five runs (logs
#        kernels_h200_s29_call3_run{1..5}_*) ran earlier forms, one fix apart each (kernels/NOTES.md, session 29).
# call3b: call 3 quick (three checks, two shapes) with the split kernel at one program a head and at 8 warps.
# call3dbg: call 3's first split launch failed ("unspecified launch failure"): each check shape alone in its own
#        process with blocking launches, then compute-sanitizer on one of them (call3dbg2: shapes where a program
#        takes two or more heads, the first to fail there under compute-sanitizer).
# call4: the shipped decode kernel's configs on this card (warps, stages, chunk) at the suite's shape and two others,
#        graph-timed in turns (best of 5 rounds) beside a 256 MB copy.
# call5: the forward's GPU tests on the tree (after session 28's review moved the causal grids' row-block count into
#        attention_ws.row_blocks, which no GPU run had covered).
# call6: after the review of git diff 622505b.. (the tests' warm-up-then-capture now one helper, _captured), the two
#        GPU tests that use it: the forward's ticket grid and the backward's in-kernel preparation in a CUDA graph.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s29_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s29

cat > /tmp/s29/kt.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, matmul as mm, matmul_kt as kt, tune_cases

ROUNDS = int(sys.argv[1])
T = {"192x(128+64+8) s3 epi0": kt.Tiles(3, (128, 64, 8), 3, 0),
     "192x(128+64+8) s4 epi1": kt.Tiles(3, (128, 64, 8), 4, 1),
     "192x(128+64+8) s3 epi1": kt.Tiles(3, (128, 64, 8), 3, 1),
     "128x(256) s3 epi0": kt.Tiles(2, (256,), 3, 0),
     "128x(128+16+8) s4 epi0": kt.Tiles(2, (128, 16, 8), 4, 0)}
print("chosen for 4000x5000:", kt.choose_tiles(4000, 5000, 132), flush=True)


def err(x, ref):
    return ((x.float() - ref).abs().max() / ref.abs().max()).item()


g = torch.Generator(device="cuda").manual_seed(0)
for (m, n, k) in [(4000, 5000, 3000), (4000, 5000, 3072), (1000, 4104, 776), (129, 5000, 72), (70, 264, 40),
                  (4000, 5000, 8)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    bw = torch.randn(k, n + 8, device="cuda", dtype=torch.bfloat16, generator=g)
    b = bw[:, :n] if (n * 2) % 128 == 0 else torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = a.float() @ b.float()
    bt = kt.transposed(b)
    assert torch.equal(bt, b.t()), "transpose"
    for name, t in T.items():
        c = torch.full((m, n + 16), float("nan"), device="cuda", dtype=torch.bfloat16)
        ok = kt.matmul_bt(a, bt, c[:, :n], t)
        torch.cuda.synchronize()
        guard = c[:, n:].isnan().all().item()
        print(f"  {m}x{n}x{k} {name:24s} built={ok} err={err(c[:, :n], ref):.2e} guard untouched={guard}",
              flush=True)
    print(f"  {m}x{n}x{k} cublas err={err(a @ b, ref):.2e}", flush=True)

M, N, K = 4000, 5000, 3000
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
bp = mm.repack_rows(b)
bt = kt.transposed(b)
view = mm._pitched_empty(b)
fns = {"cublas": lambda: torch.matmul(a, b), "shipped route (repack + 128x256)": lambda: mm.matmul(a, b),
       "128x256 gluon on repacked B": lambda: mg.matmul_ws(a, bp, c),
       "repack alone (shipped)": lambda: mm._repack_into(b, view, None)}
for name, t in T.items():
    fns[f"route kt {name}"] = lambda t=t: kt.matmul_bt(a, kt.transposed(b), c, t)
    fns[f"gemm kt {name}"] = lambda t=t: kt.matmul_bt(a, bt, c, t)
for cfg in [(64, 64, 4), (32, 128, 4), (128, 64, 8), (64, 128, 8), (128, 128, 8), (32, 64, 4), (64, 64, 8),
            (128, 32, 4)]:
    fns[f"transpose {cfg}"] = lambda cfg=cfg: kt.transposed(b, cfg)
t = tune_cases.in_turns(fns, ROUNDS, on_error=lambda name, exc: print(f"   {name}: failed {exc}", flush=True))
cub = t["cublas"]
for name, ms in t.items():
    extra = f"  {2 * K * N * 2 / ms / 1e6:6.0f} GB/s moved" if "repack" in name and "route" not in name \
        or "transpose" in name else f"  {2 * M * N * K / ms / 1e9:6.1f} TFLOPS  {cub / ms:.3f}x cuBLAS"
    print(f"   {name:40s} {ms * 1e3:8.2f} us{extra}", flush=True)
PY

cat > /tmp/s29/pdl.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, matmul as mm, tune_cases

ROUNDS = int(sys.argv[1])
CFGS = [None, (8, 1024, 8, 0), (32, 256, 4, 1), (16, 512, 4, 0)]


def route(a, b, c, cfg, pdl):
    bp = mm.repack_rows(b, cfg, pdl=pdl)
    assert mg.matmul_ws(a, bp, c, pdl=pdl)
    return c


g = torch.Generator(device="cuda").manual_seed(0)
for (m, n, k) in [(4000, 5000, 3000), (1000, 4104, 776), (129, 5000, 72), (8000, 5000, 3000), (4000, 5000, 8)]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
    want = route(a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16), None, False)
    ref = a.float() @ b.float()
    for cfg in CFGS:
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        eager = torch.equal(route(a, b, c, cfg, True), want)
        c.zero_()
        gr = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.cuda.graph(gr, stream=s):
            route(a, b, c, cfg, True)
        torch.cuda.current_stream().wait_stream(s)
        ok = []
        for _ in range(3):
            c.zero_()
            b.add_(0)  # a kernel before the replay, as in a program
            gr.replay()
            ok.append(torch.equal(c, want))
        torch.cuda.synchronize()
        err = ((want.float() - ref).abs().max() / ref.abs().max()).item()
        print(f"  {m}x{n}x{k} repack {cfg} pdl: eager bitwise={eager} graph bitwise={ok} (err {err:.2e})", flush=True)

M, N, K = 4000, 5000, 3000
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
bp = mm.repack_rows(b)
fns = {"cublas": lambda: torch.matmul(a, b), "shipped route": lambda: mm.matmul(a, b),
       "gemm alone": lambda: mg.matmul_ws(a, bp, c)}
for cfg in CFGS:
    for pdl in (False, True):
        fns[f"route repack {cfg} pdl={pdl}"] = lambda cfg=cfg, pdl=pdl: route(a, b, c, cfg, pdl)
t = tune_cases.in_turns(fns, ROUNDS)
cub = t["cublas"]
for name, ms in t.items():
    print(f"   {name:44s} {ms * 1e3:8.2f} us  {2 * M * N * K / ms / 1e9:6.1f} TFLOPS  {cub / ms:.3f}x cuBLAS", flush=True)
PY

cat > /tmp/s29/split.py <<'PY'
import math
import os
import sys

import torch

from kernels import decode_tma, tune_cases
from kernels.decode import decode_attention
from kernels.reference import decode_fp32, rel_err

ROUNDS = int(sys.argv[1])


def run(q, k, v, out, layout="bhld", split=True, programs=None, config=None):
    if layout == "bhld":
        b, h, lk, d = k.shape
    else:
        b, lk, h, d = k.shape
    views = decode_tma.views(k, v, layout)
    fn = decode_tma.decode_split if split else decode_tma.decode
    kw = {"programs": programs} if split else {}
    assert fn(q, k, v, out, layout, views, b, h, lk, math.log2(math.e) / math.sqrt(d), config=config, **kw)
    return out


torch.manual_seed(0)
bad = 0
QUICK = bool(os.environ.get("SPLIT_QUICK"))
for b, h, seq, d, dtype, layout, programs in ([
        (8, 16, 2048, 64, torch.float16, "bhld", None), (3, 5, 1000, 64, torch.bfloat16, "bhld", None),
        (8, 16, 2048, 64, torch.float16, "bhld", 7)] if QUICK else [
        (8, 16, 2048, 64, torch.float16, "bhld", None), (2, 4, 40, 64, torch.float16, "bhld", None),
        (3, 5, 1000, 64, torch.bfloat16, "bhld", None), (1, 2, 1, 64, torch.float16, "bhld", None),
        (2, 3, 4100, 64, torch.float16, "bhld", None), (2, 2, 300, 128, torch.bfloat16, "bhld", None),
        (8, 16, 2047, 64, torch.float16, "bhld", None), (1, 1, 100000, 64, torch.float16, "bhld", None),
        (4, 16, 2048, 64, torch.float16, "blhd", None), (8, 16, 2048, 64, torch.float16, "bhld", 7),
        (8, 16, 2000, 64, torch.bfloat16, "bhld", 264), (4, 8, 8192, 128, torch.bfloat16, "bhld", None)]):
    shape = (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)
    qs = (b, h, 1, d) if layout == "bhld" else (b, 1, h, d)
    q = torch.randn(qs, device="cuda", dtype=dtype)
    k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(2))
    if layout == "bhld":
        ref = decode_fp32(q.float(), k.float(), v.float())
    else:
        ref = decode_fp32(q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float()).transpose(1, 2)
    cfg = decode_tma.CONFIGS[d]
    shipped = rel_err(run(q, k, v, torch.empty_like(q), layout, split=False), ref)
    errs = []
    for _ in range(3):
        errs.append(rel_err(run(q, k, v, torch.full_like(q, float("nan")), layout, programs=programs), ref))
    out = torch.full_like(q, float("nan"))
    g = torch.cuda.CUDAGraph()
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st), torch.cuda.graph(g, stream=st):
        run(q, k, v, out, layout, programs=programs)
    torch.cuda.current_stream().wait_stream(st)
    for _ in range(3):
        out.fill_(float("nan"))
        g.replay()
        errs.append(rel_err(out, ref))
    torch.cuda.synchronize()
    ok = all(e < max(4 * shipped, 1e-2) for e in errs)
    bad += not ok
    print(f"check b{b} h{h} kv{seq} d{d} {dtype} {layout} programs={programs}: shipped {shipped:.2e}, split "
          + " ".join(f"{e:.2e}" for e in errs) + ("" if ok else "  WRONG"), flush=True)
print("checks wrong:", bad, flush=True)

src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, d, dtype in ([(8, 16, 2048, 64, torch.float16), (8, 32, 4096, 64, torch.float16)] if QUICK else [
        (8, 16, 2048, 64, torch.float16), (16, 16, 1024, 64, torch.bfloat16), (8, 32, 4096, 64, torch.float16),
        (4, 32, 8192, 64, torch.bfloat16), (4, 8, 8192, 64, torch.float16), (2, 8, 32768, 64, torch.float16)]):
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton"),
           "gluon one a head": lambda: run(q, k, v, out, split=False),
           "split": lambda: run(q, k, v, out), "split 2 a SM": lambda: run(q, k, v, out, programs=264),
           "split st4": lambda: run(q, k, v, out, config=(128, 4, 4, 32))}
    if QUICK:  # one program a head through the split kernel (no partials); 8 warps
        fns.update({"split programs=heads": lambda: run(q, k, v, out, programs=b * h),
                    "split 8 warps": lambda: run(q, k, v, out, config=(128, 3, 8, 32))})
    t = tune_cases.in_turns(fns, ROUNDS)
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d{d} {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY

cat > /tmp/s29/split_one.py <<'PY'
import math
import sys

import torch

from kernels import decode_tma
from kernels.reference import decode_fp32, rel_err

b, h, seq, d, programs = (int(x) for x in sys.argv[1:6])
programs = programs or None
q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for n in (1, seq, seq))
views = decode_tma.views(k, v, "bhld")
out = torch.full_like(q, float("nan"))
assert decode_tma.decode_split(q, k, v, out, "bhld", views, b, h, seq, math.log2(math.e) / math.sqrt(d),
                               programs=programs)
torch.cuda.synchronize()
print(f"b{b} h{h} kv{seq} d{d} programs={programs}: err {rel_err(out, decode_fp32(q.float(), k.float(), v.float())):.2e}")
PY

cat > /tmp/s29/dec_cfg.py <<'PY'
import sys

import math

import torch

from kernels import decode_tma, tune_cases
from kernels.decode import decode_attention

ROUNDS = int(sys.argv[1])


def gluon(q, k, v, out, cfg):
    b, h, lk, d = k.shape
    assert decode_tma.decode(q, k, v, out, "bhld", decode_tma.views(k, v, "bhld"), b, h, lk,
                             math.log2(math.e) / math.sqrt(d), config=cfg)
    return out


CFGS = [None, (128, 3, 8, 32), (128, 4, 8, 32), (128, 2, 8, 32), (128, 3, 4, 16), (128, 4, 4, 32), (64, 4, 4, 32),
        (64, 6, 4, 32)]
torch.manual_seed(0)
src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    ref = decode_attention(q, k, v, impl="gluon")
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src)}
    for cfg in CFGS:
        got = gluon(q, k, v, torch.empty_like(q), cfg)
        assert (got - ref).abs().max().item() < 1e-2, cfg
        fns[f"gluon {cfg}"] = lambda cfg=cfg: gluon(q, k, v, out, cfg)
    t = tune_cases.in_turns(fns, ROUNDS)
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:28s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY

case $CALL in
  call1)
    timeout 400 python3 /tmp/s29/kt.py 3 2>&1 | tee "${LOG}_kt.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s29/pdl.py 5 2>&1 | tee "${LOG}_pdl.log"
    ;;
  call3)
    timeout 420 python3 /tmp/s29/split.py 3 2>&1 | tee "${LOG}_split.log"
    ;;
  call3dbg)
    for args in "1 1 128 64 1" "1 1 256 64 1" "1 2 128 64 0" "1 2 256 64 0" "1 1 256 64 2" "2 4 40 64 0" \
                "1 1 1024 64 0" "8 16 2048 64 0"; do
      CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 /tmp/s29/split_one.py $args 2>&1 | tail -2 | tee -a "${LOG}_split_one.log"
    done
    which compute-sanitizer && timeout 120 compute-sanitizer --tool memcheck python3 /tmp/s29/split_one.py 1 2 256 64 0 \
      2>&1 | head -40 | tee "${LOG}_sanitizer.log"
    ;;
  call3dbg2)
    for args in "1 2 256 64 1" "1 2 256 64 3" "1 3 256 64 2" "1 3 1024 64 4" "2 16 2048 64 0"; do
      CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 /tmp/s29/split_one.py $args > /tmp/s29/one.log 2>&1
      rc=$?
      grep -v "^\s*$" /tmp/s29/one.log | grep -v "^  " | tail -4 | tee -a "${LOG}_split_one.log"
      if [ $rc != 0 ]; then
        timeout 120 compute-sanitizer --tool memcheck python3 /tmp/s29/split_one.py $args 2>&1 | head -60 \
          | tee "${LOG}_sanitizer.log"
        break
      fi
    done
    ;;
  call3b)
    SPLIT_QUICK=1 timeout 420 python3 /tmp/s29/split.py 3 2>&1 | tee "${LOG}_split.log"
    ;;
  call4)
    timeout 300 python3 /tmp/s29/dec_cfg.py 5 2>&1 | tee "${LOG}_dec_cfg.log"
    ;;
  call5)
    timeout 380 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -4 \
      | tee "${LOG}_gpu_tests_fwd.log"
    ;;
  call6)
    timeout 300 python3 -m pytest tests/kernels/test_attention.py tests/kernels/test_attention_bwd_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 -k "dynamic_grid_bitwise or prepares_later_heads" 2>&1 | tail -3 | tee "${LOG}_gpu_tests_graph.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
