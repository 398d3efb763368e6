#!/usr/bin/env bash
# Session-19 device calls (issue 16): bash kernels/device_s19.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100 or H200): (a) which cuBLAS kernels (names, grids, blocks, registers, shared memory from torch.profiler's
#        trace) run the decode-sized GEMMs still below 0.95x cuBLAS hot and the ragged 4000x5000x3000; (b) decode at
#        the suite's kv 2048 d64 (8x16 heads, fp16; 87 % of the copy rate): the Gluon TMA-ring kernel
#        (kernels/_decode_tma.py, one program a head, each tile row its own online-softmax slot) against the Triton
#        kernel, checked against the fp32 reference (odd key lengths too), graph-timed with the variants taking turns,
#        beside the read floors of the same bytes (Triton pointer loads, the TMA ring with nothing computed) and a
#        torch copy; the same at kv 8192 d128.
# call2 (H100): call 1's decode comparison with the Gluon kernel at 4, 8 and 16 warps (python3 decode_tma.py warps).
# call3 (H100): the same with fewer stages (2-4) and 256-key tiles (python3 decode_tma.py stages).
# call4 (H100): the one-pass kernel without V's row mask where the key length is a multiple of the tile (EVEN) against
#        a two-pass one (decode_kv_kernel: a chunk's K tiles, scores kept in shared memory, then its V tiles against
#        the chunk's max), beside the read floor at 2-4 stages (python3 decode_tma.py kv).  Calls 1-4 ran kernels since
#        removed (the one-pass decode_tma_kernel; decode_kv_kernel before it took strided caches): they no longer
#        run as written (commit 06d8f0e has them).
# call5 (H100) / call6 (meant for an H200; ran again on call 5's H100): the shipped route (kernels/decode_tma.py;
#        "auto" takes it at head dim 64, no GQA, one chunk a head): the decode GPU tests, a graph-timed A/B (auto,
#        impl="triton", impl="gluon", the TMA floor, the 256 MB copy) at the suite's shapes and two more, the decode perf suite with the copy row, and the
#        baseline entry of the kv 2048 "ours" row re-made from two runs.
# call7 (H100): the shipped kernel's configurations (BLOCK_N, STAGES, warps, CT) at head dim 64, four shapes.
# call8 (H100 or H200): call 5 again after a review ("auto" only where (batch, head) pairs >= 0.9 SMs and each head's
#        rows lie together; Gluon build errors of every Triton kind fall back; GPU rows for head slices, padded rows,
#        expanded caches, strided outputs, two whole chunks).
# call9 (ran on an H200): diagnostics (kernels/_decode_diag.py, not kept: `git apply
#        docs/measurements/kernels_s19_decode_diag.patch` first for calls 9 and 10): the shipped kernel's ring of single tiles with its
#        per-tile synchronisation and nothing computed, with the tiles only read into registers, and the kernel with a
#        loader warp of its own (warp specialisation), beside the shipped kernel, Triton and the pairs' TMA floor.
# call10 (ran on an H200): TMA boxes of 256 rows computed as two 128-row tiles (_decode_diag.decode_split_kernel)
#        against the shipped kernel at 3 and 4 stages, five shapes at head dim 64.
# call11 (H100): decode-sized GEMMs (M 20-48, N 3072-4096) with cuBLAS's shape of ring (call 1: 64-deep K
#        tiles, 15-16 stages, K split 2 at N = 4096): the transposed TMA tiles with 64-deep K tiles and 8-12 stages,
#        and K split 2 with 4-10 stages, beside the shipped route and cuBLAS, hot and cold as session 18's call 1.
# call12 (ran on an H200; not kept: `git apply docs/measurements/kernels_s19_decode_streams.patch` first): each pass
#        of the decode kernel reading its tiles as 2 or 4 interleaved runs (STREAMS: more
#        DRAM streams at once, as the (K, V) pairs of the TMA floor) against one, at 3 and 4 stages.
# call13 (H100): the decode perf suite with the copy row, two runs, on another card than calls 5-6.
# call14 (H100 or H200): after a review of the session's diff (decode_tma.eligible returns both caches' views, which
#        decode() takes instead of computing them again): the decode GPU tests.  The heredoc scripts of calls 7, 9,
#        10 and 12 were updated to that API (decode_tma.decode(..., views, ...), _descriptor(cache, view, block_n));
#        they ran with the earlier one, which computed the views inside.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s19_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s19
cat > /tmp/s19/cublas_names.py <<'PY'
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

SHAPES = [(m, n, 4096) for m in (17, 20, 24, 32, 33, 40, 47, 48) for n in (3072, 4096)] + [(20, 5120, 4096),
          (48, 5120, 4096), (4000, 5000, 3000), (4096, 4096, 4096)]
for m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        a @ b
        torch.cuda.synchronize()
    path = f"/tmp/s19/trace_{m}x{n}x{k}.json"
    prof.export_chrome_trace(path)
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
    for e in events:
        args = e.get("args", {})
        print(f"{m}x{n}x{k}: {e['name']} grid={args.get('grid')} block={args.get('block')} "
              f"regs={args.get('registers per thread')} smem={args.get('shared memory')} dur={e.get('dur')} us",
              flush=True)
PY
cat > /tmp/s19/decode_tma.py <<'PY'
import math
import os
import sys

import torch
import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from kernels import decode
from kernels._decode_tma import decode_kv_kernel, decode_tma_kernel, read_floor_kernel
from kernels.tune_bwd import _time

CALL = os.environ.get("CALL", "call1")
GL = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


def descs(k, v, bn):
    d = k.shape[-1]
    layout = gl.NVMMASharedLayout.get_default_for([bn, d], GL[k.dtype])
    k2, v2 = k.reshape(-1, d), v.reshape(-1, d)
    return (TensorDescriptor(k2, list(k2.shape), [d, 1], [bn, d], layout),
            TensorDescriptor(v2, list(v2.shape), [d, 1], [bn, d], layout))


def dec_tma(q, k, v, out, bn, stages, nw=None):
    b, h, lk, d = k.shape
    kd, vd = descs(k, v, bn)
    nw = nw or (4 if d <= 64 else 8)
    even = {} if CALL in ("call1", "call2", "call3") else {"EVEN": lk % bn == 0}
    decode_tma_kernel[(b * h,)](q, out, kd, vd, lk, h, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
                                math.log2(math.e) / math.sqrt(d), STAGES=stages, NUM_WARPS=nw, num_warps=nw, **even)
    return out


def dec_kv(q, k, v, out, bn, stages, nw, ct):
    b, h, lk, d = k.shape
    kd, vd = descs(k, v, bn)
    decode_kv_kernel[(b * h,)](q, out, kd, vd, lk, h, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
                               math.log2(math.e) / math.sqrt(d), STAGES=stages, NUM_WARPS=nw, CT=ct,
                               EVEN=lk % bn == 0, num_warps=nw)
    return out


def floor_tma(k, v, programs, bn, stages):
    d = k.shape[-1]
    kd, vd = descs(k, v, bn)
    rows = k.numel() // d
    per = triton.cdiv(triton.cdiv(rows, programs), bn) * bn
    read_floor_kernel[(triton.cdiv(rows, per),)](kd, vd, rows, per, STAGES=stages, num_warps=4)


def reference(q, k, v):
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, -1), v.float())


def rounds(fns, n):
    times = {}
    for r in range(n):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


def check():
    bad = 0
    for b, h, lk, d, bn, st in [(8, 16, 2048, 64, 128, 6), (2, 16, 2000, 64, 128, 6), (1, 4, 100, 64, 128, 4),
                                (2, 8, 8192, 128, 64, 6), (1, 3, 777, 128, 128, 3), (3, 5, 1, 64, 64, 2)]:
        for dtype in (torch.float16, torch.bfloat16):
            g = torch.Generator(device="cuda").manual_seed(b * 1000 + lk)
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g) for n in (1, lk, lk))
            out = dec_tma(q, k, v, torch.empty_like(q), bn, st)
            ref = reference(q, k, v)
            err = (out.float() - ref).abs().max().item()
            if CALL not in ("call1", "call2", "call3"):
                for nw, ct in ((4, 4), (8, 32)):
                    out2 = dec_kv(q, k, v, torch.empty_like(q), bn, max(st, 2), nw if d <= 64 or bn <= 64 else 8, ct)
                    err = max(err, (out2.float() - ref).abs().max().item())
            tri = (decode.decode_attention(q, k, v).float() - ref).abs().max().item()
            ok = err <= 2 * tri + 2e-3
            bad += not ok
            print(f"check b{b} h{h} kv{lk} d{d} {dtype} bn{bn} st{st}: max err {err:.2e} (triton {tri:.2e}) "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
    return bad


VARIANTS4 = {2048: [("tma", 128, 2, 4), ("tma", 128, 3, 4), ("tma", 64, 4, 4), ("kv", 128, 3, 4, 32),
                    ("kv", 128, 4, 4, 32), ("kv", 128, 6, 4, 32), ("kv", 128, 4, 8, 32), ("kv", 64, 6, 4, 32),
                    ("kv", 64, 8, 4, 32)],
             8192: [("tma", 64, 4, 4), ("tma", 128, 2, 8), ("kv", 64, 4, 8, 64), ("kv", 64, 6, 8, 64),
                    ("kv", 128, 3, 8, 32), ("kv", 128, 4, 8, 32)]}
VARIANTS3 = {2048: [(128, 2, 4), (128, 3, 4), (128, 4, 4), (256, 2, 16), (256, 3, 16), (256, 2, 8), (256, 3, 8),
                    (64, 3, 4), (64, 4, 4)],
             8192: [(64, 3, 4), (64, 4, 4), (64, 3, 8), (64, 4, 8), (128, 2, 8)]}
VARIANTS = {2048: [(128, 4, 4), (128, 6, 4), (64, 6, 4), (128, 4, 8), (128, 6, 8), (64, 6, 8), (64, 8, 8),
                   (128, 4, 16), (128, 6, 16), (64, 8, 16)],
            8192: [(64, 4, 8), (64, 6, 8), (128, 3, 8), (64, 6, 16), (128, 3, 16)]}


def main():
    bad = check()
    copy_src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
    copy_dst = torch.empty_like(copy_src)
    big = rounds({"copy256": lambda: copy_dst.copy_(copy_src)}, 2)["copy256"]
    rate = 2 * copy_src.numel() * 2 / big / 1e6
    print(f"copy 256 MB: {big * 1e3:.1f} us, {rate:.0f} GB/s", flush=True)
    for b, h, lk, d in [(8, 16, 2048, 64), (8, 16, 8192, 128)]:
        variants = ({"stages": VARIANTS3, "kv": VARIANTS4}.get(sys.argv[1], VARIANTS))[lk] if len(sys.argv) > 1 else [(bn, st, None) for bn, st in
                                                          ([(128, 4), (128, 5), (128, 6), (64, 6), (64, 8), (64, 10)]
                                                           if lk == 2048 else [(64, 4), (64, 6), (128, 3)])]
        g = torch.Generator(device="cuda").manual_seed(7)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for n in (1, lk, lk))
        nbytes = (k.numel() + v.numel() + 2 * q.numel()) * 2
        out = torch.empty_like(q)
        fns = {"triton": lambda: decode.decode_attention(q, k, v, out=out)}
        for var in variants:
            if isinstance(var[0], str) and var[0] == "kv":
                _, bn, st, nw, ct = var
                fns[f"kv bn{bn} st{st} w{nw} ct{ct}"] = lambda bn=bn, st=st, nw=nw, ct=ct: dec_kv(q, k, v, out, bn, st,
                                                                                              nw, ct)
            else:
                bn, st, nw = var[-3:]
                fns[f"tma bn{bn} st{st} w{nw}"] = lambda bn=bn, st=st, nw=nw: dec_tma(q, k, v, out, bn, st, nw)
        src, dst = torch.cat([k.flatten(), v.flatten()])[: k.numel()], torch.empty(k.numel(), device="cuda",
                                                                                      dtype=k.dtype)
        fns["torch copy (same bytes moved)"] = lambda: dst.copy_(src)
        fns["floor triton 528x64"] = lambda: decode.read_floor(k, v, 528, 64)
        for p, st in ([(128, 2), (128, 3), (128, 4)] if CALL == "call4" else [(128, 4), (128, 6), (132, 6), (264, 3)]):
            fns[f"floor tma {p} progs st{st}"] = lambda p=p, st=st: floor_tma(k, v, p, 128 if d <= 64 else 64, st)
        t = rounds(fns, 3)
        for name, ms in t.items():
            gbs = nbytes / ms / 1e6
            print(f"b{b} h{h} kv{lk} d{d} {name}: {ms * 1e3:.2f} us, {gbs:.0f} GB/s, {100 * gbs / rate:.1f} % of copy",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
PY
case "$CALL" in
call1)
  timeout 120 python3 /tmp/s19/cublas_names.py 2>&1 | tee "${LOG}_cublas_names.log"
  timeout 300 python3 /tmp/s19/decode_tma.py 2>&1 | tee "${LOG}_decode_tma.log"
  ;;
call2)
  timeout 400 python3 /tmp/s19/decode_tma.py warps 2>&1 | tee "${LOG}_decode_tma.log"
  ;;
call3)
  timeout 400 python3 /tmp/s19/decode_tma.py stages 2>&1 | tee "${LOG}_decode_tma.log"
  ;;
call4)
  CALL=call4 timeout 400 python3 /tmp/s19/decode_tma.py kv 2>&1 | tee "${LOG}_decode_tma.log"
  ;;
call5|call6|call8)  # the shipped route (decode_tma, "auto" at head dim 64): tests, suite rows, A/B, baselines
  source kernels/device_lib.sh  # install_perfci
  timeout 300 python3 -m pytest tests/kernels/test_decode.py tests/kernels/test_decode_tma.py -m gpu -q \
    -p no:cacheprovider 2>&1 | tail -4 | tee "${LOG}_gpu_tests.log"
  cat > /tmp/s19/ab.py <<'PY'
import torch

from kernels.decode import decode_attention, read_floor
from kernels.tune_bwd import _time

src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, hq, hk, seq, d, dtype in [(8, 16, 16, 2048, 64, torch.float16), (8, 16, 16, 8192, 128, torch.float16),
                                 (2, 32, 8, 32768, 128, torch.bfloat16), (1, 8, 8, 131072, 128, torch.float16),
                                 (16, 16, 16, 1024, 64, torch.bfloat16), (8, 32, 32, 4096, 64, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for h, n in ((hq, 1), (hk, seq), (hk, seq)))
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "auto": lambda: decode_attention(q, k, v),
           "triton": lambda: decode_attention(q, k, v, impl="triton")}
    if hq == hk and d in (64, 128):
        fns["gluon"] = lambda: decode_attention(q, k, v, impl="gluon")
        fns["tma floor"] = lambda: read_floor(k, v, 128, 128 if d == 64 else 64, num_stages=3, tma=True)
    t = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} hq{hq} hkv{hk} kv{seq} d{d} {dtype}: copy 256 MB {rate:.0f} GB/s; " + "; ".join(
        f"{name} {ms * 1e3:.2f} us ({100 * nbytes / ms / 1e6 / rate:.1f} %)" for name, ms in t.items()
        if name != "copy256"), flush=True)
PY
  timeout 200 python3 /tmp/s19/ab.py 2>&1 | tee "${LOG}_ab.log"
  install_perfci || exit 3
  timeout 200 python3 -m pytest tests/perf/test_decode.py "tests/perf/test_torch_ops.py::test_copy_256mb" -q \
    -p no:cacheprovider --benchmark-json="$OUT/perf_dec.json" > "${LOG}_perf_suite_dec.log" 2>&1
  echo "perf suite rc=$?"
  [ -f "$OUT/perf_dec.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_dec.json" \
    | tee "${LOG}_perf_suite_dec_table.txt"
  timeout 200 perfci baseline update tests/perf/test_decode.py -k "kv2048 and ours" --runs 2 --force \
    --results-dir /tmp/bl > "${LOG}_baseline_update_dec.log" 2>&1
  echo "baseline update rc=$?"
  tail -6 "${LOG}_baseline_update_dec.log"
  tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
  ;;
call7)  # configurations of the shipped kernel at head dim 64
  cat > /tmp/s19/cfg.py <<'PY'
import math

import torch

from kernels import decode_tma
from kernels.decode import decode_attention
from kernels.tune_bwd import _time

CFGS = [(128, 3, 4, 32), (128, 2, 4, 32), (128, 4, 4, 32), (128, 5, 4, 32), (128, 3, 4, 8), (128, 3, 8, 32),
        (64, 4, 4, 64), (64, 6, 4, 64)]
src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16),
                         (4, 32, 8192, torch.bfloat16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, impl="triton")}
    for cfg in CFGS:
        fns[str(cfg)] = lambda cfg=cfg: decode_tma.decode(q, k, v, out, "bhld", decode_tma.views(k, v, "bhld"), b, h,
                                                          seq, math.log2(math.e) / 8, cfg)
    t = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY
  timeout 300 python3 /tmp/s19/cfg.py 2>&1 | tee "${LOG}_cfg.log"
  ;;
call9)  # where the kernel's last 5 % go: its ring with nothing computed, with the loads only, warp-specialised
  cat > /tmp/s19/diag.py <<'PY'
import math

import torch

from kernels import decode_tma
from kernels._decode_diag import decode_ws_kernel, ring_kernel
from kernels.decode import decode_attention, read_floor
from kernels.reference import decode_fp32, rel_err
from kernels.tune_bwd import _time


def ws(q, k, v, out, stages, regs=40):
    b, h, lk, d = k.shape
    kd, ks = decode_tma._descriptor(k, decode_tma._view(k, "bhld"), 128)
    vd, vs = decode_tma._descriptor(v, decode_tma._view(v, "bhld"), 128)
    decode_ws_kernel[(b * h,)](q, out, kd, vd, lk, h, q.stride(0), q.stride(1), 1, out.stride(0), out.stride(1), 1,
                               *ks, *vs, math.log2(math.e) / math.sqrt(d), STAGES=stages, NUM_WARPS=4, CT=32,
                               EVEN=lk % 128 == 0, LOADER_REGS=regs, num_warps=4)
    return out


def ring(k, v, out, stages, load):
    b, h, lk, d = k.shape
    kd, ks = decode_tma._descriptor(k, decode_tma._view(k, "bhld"), 128)
    vd, _ = decode_tma._descriptor(v, decode_tma._view(v, "bhld"), 128)
    ring_kernel[(b * h,)](out, kd, vd, lk, h, *ks, STAGES=stages, NUM_WARPS=4, CT=32, LOAD=load, num_warps=4)


src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (4, 16, 2000, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    ref = decode_fp32(q.float(), k.float(), v.float())
    print(f"check b{b} h{h} kv{seq}: ws rel err {rel_err(ws(q, k, v, torch.empty_like(q), 3), ref):.2e}, shipped "
          f"{rel_err(decode_attention(q, k, v, impl='gluon'), ref):.2e}", flush=True)
    o2 = torch.empty(b * h, 64, device="cuda", dtype=dtype)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton"),
           "gluon (shipped)": lambda: decode_attention(q, k, v, out=out, impl="gluon"),
           "ws st3": lambda: ws(q, k, v, out, 3), "ws st4": lambda: ws(q, k, v, out, 4),
           "ws st6": lambda: ws(q, k, v, out, 6),
           "ring sync only st3": lambda: ring(k, v, o2, 3, False), "ring loads st3": lambda: ring(k, v, o2, 3, True),
           "ring loads st4": lambda: ring(k, v, o2, 4, True),
           "tma floor pairs st3": lambda: read_floor(k, v, 128, 128, num_stages=3, tma=True)}
    t = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY
  timeout 300 python3 /tmp/s19/diag.py 2>&1 | tee "${LOG}_diag.log"
  ;;
call10)  # TMA boxes of two compute tiles (decode_split_kernel) against the shipped kernel
  cat > /tmp/s19/split.py <<'PY'
import math

import torch

from kernels import decode_tma
from kernels._decode_diag import decode_split_kernel
from kernels.decode import decode_attention, read_floor
from kernels.reference import decode_fp32, rel_err
from kernels.tune_bwd import _time


def split(q, k, v, out, stages, warps=4):
    b, h, lk, d = k.shape
    kd, ks = decode_tma._descriptor(k, decode_tma._view(k, "bhld"), 256)
    vd, vs = decode_tma._descriptor(v, decode_tma._view(v, "bhld"), 256)
    decode_split_kernel[(b * h,)](q, out, kd, vd, lk, h, q.stride(0), q.stride(1), 1, out.stride(0), out.stride(1),
                                  1, *ks, *vs, math.log2(math.e) / math.sqrt(d), STAGES=stages, NUM_WARPS=warps, CT=16,
                                  EVEN=lk % 256 == 0, SPLIT=2, num_warps=warps)
    return out


def shipped(q, k, v, out, stages):
    b, h, lk, d = k.shape
    return decode_tma.decode(q, k, v, out, "bhld", decode_tma.views(k, v, "bhld"), b, h, lk,
                             math.log2(math.e) / math.sqrt(d), (128, stages, 4, 32))


src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16),
                         (4, 32, 8192, torch.bfloat16), (2, 66, 5000, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    ref = decode_fp32(q.float(), k.float(), v.float())
    print(f"check b{b} h{h} kv{seq}: split rel err {rel_err(split(q, k, v, torch.empty_like(q), 3), ref):.2e}, "
          f"shipped {rel_err(decode_attention(q, k, v, impl='gluon'), ref):.2e}", flush=True)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton"),
           "shipped st3": lambda: shipped(q, k, v, out, 3), "shipped st4": lambda: shipped(q, k, v, out, 4),
           "box256 st2": lambda: split(q, k, v, out, 2), "box256 st3": lambda: split(q, k, v, out, 3),
           "box256 st4": lambda: split(q, k, v, out, 4), "box256 st3 w8": lambda: split(q, k, v, out, 3, 8),
           "tma floor pairs st3": lambda: read_floor(k, v, 128, 128, num_stages=3, tma=True)}
    t = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY
  timeout 300 python3 /tmp/s19/split.py 2>&1 | tee "${LOG}_split.log"
  ;;
call11)  # decode-sized GEMMs with B in L2: cuBLAS's shape of ring (64-deep K tiles, 8-12 stages), split 2
  cat > /tmp/s19/deep.py <<'PY'
import math

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

SHAPES = [(m, n, 4096) for m in (20, 33, 48) for n in (3072, 4096)] + [(32, 4096, 4096), (40, 4096, 4096)]
# (split, BLOCK_N, BLOCK_K, warps, stages, host descriptors, swap)
CFGS = {"k64st8": (1, 64, 64, 4, 8, True, True), "k64st12": (1, 64, 64, 4, 12, True, True),
        "s2k128st6": (2, 64, 128, 4, 6, True, True), "s2k128st4": (2, 64, 128, 4, 4, True, True),
        "s2k64st10": (2, 64, 64, 4, 10, True, True)}


def rounds(fns, n):
    times = {}
    for r in range(n):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    copies = max(1, math.ceil(120 * 2**20 / b.numel() / 2))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    variants = {"cublas": lambda bb: torch.mm(a, bb, out=c), "default": lambda bb: matmul.matmul(a, bb, out=c)}
    variants.update({nm: (lambda bb, cfg=cfg: sk.matmul_splitk_tma(a, bb, c, cfg)) for nm, cfg in CFGS.items()})
    for name, fn in list(variants.items()):
        try:
            res = fn(b)
            torch.cuda.synchronize()
        except Exception as exc:
            print(f"  {m}x{n}x{k} {name}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del variants[name]
            continue
        err = ((res.float() - ref).norm() / ref.norm()).item()
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
            del variants[name]
    hot = rounds({nm: (lambda fn=fn: fn(b)) for nm, fn in variants.items()}, 3)
    cold = {nm: ms / copies for nm, ms in
            rounds({nm: (lambda fn=fn: [fn(bb) for bb in bs]) for nm, fn in variants.items()}, 2).items()}
    row = "  ".join(f"{nm} {hot[nm] * 1e3:.2f}/{cold[nm] * 1e3:.2f} ({hot['cublas'] / hot[nm]:.2f}/"
                    f"{cold['cublas'] / cold[nm]:.2f})" for nm in variants)
    print(f"deep {m}x{n}x{k} {row}", flush=True)
PY
  timeout 500 python3 /tmp/s19/deep.py 2>&1 | tee "${LOG}_deep.log"
  ;;
call12)  # each pass of the shipped kernel reading 2 or 4 runs of its tiles in turn (STREAMS) against 1
  cat > /tmp/s19/streams.py <<'PY'
import math

import torch

from kernels import decode_tma
from kernels._decode_tma import decode_kv_kernel
from kernels.decode import decode_attention, read_floor
from kernels.reference import decode_fp32, rel_err
from kernels.tune_bwd import _time


def run(q, k, v, out, stages, streams):
    b, h, lk, d = k.shape
    kd, ks = decode_tma._descriptor(k, decode_tma._view(k, "bhld"), 128)
    vd, vs = decode_tma._descriptor(v, decode_tma._view(v, "bhld"), 128)
    decode_kv_kernel[(b * h,)](q, out, kd, vd, lk, h, q.stride(0), q.stride(1), 1, out.stride(0), out.stride(1), 1,
                               *ks, *vs, math.log2(math.e) / math.sqrt(d), STAGES=stages, NUM_WARPS=4, CT=32,
                               EVEN=lk % 128 == 0, STREAMS=streams, num_warps=4)
    return out


src = torch.empty(256 * 2**20 // 2, device="cuda", dtype=torch.float16)
dst = torch.empty_like(src)
for b, h, seq, dtype in [(8, 16, 2048, torch.float16), (16, 16, 1024, torch.bfloat16), (8, 32, 4096, torch.float16),
                         (2, 66, 2000, torch.float16)]:
    q, k, v = (torch.randn(b, h, n, 64, device="cuda", dtype=dtype) for n in (1, seq, seq))
    out = torch.empty_like(q)
    ref = decode_fp32(q.float(), k.float(), v.float())
    errs = [f"{rel_err(run(q, k, v, torch.empty_like(q), 3, s), ref):.2e}" for s in (1, 2, 4)]
    print(f"check b{b} h{h} kv{seq}: rel err streams 1/2/4 {errs}", flush=True)
    nbytes = (k.numel() + v.numel() + 2 * q.numel()) * k.element_size()
    fns = {"copy256": lambda: dst.copy_(src), "triton": lambda: decode_attention(q, k, v, out=out, impl="triton")}
    for st in (3, 4):
        for sm in (1, 2, 4):
            fns[f"st{st} streams{sm}"] = lambda st=st, sm=sm: run(q, k, v, out, st, sm)
    fns["tma floor pairs st3"] = lambda: read_floor(k, v, 128, 128, num_stages=3, tma=True)
    t = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            t[name] = min(_time(fn)[0], t.get(name, float("inf")))
    rate = 2 * src.numel() * 2 / t["copy256"] / 1e6
    print(f"b{b} h{h} kv{seq} d64 {dtype}: copy 256 MB {rate:.0f} GB/s", flush=True)
    for name, ms in t.items():
        if name != "copy256":
            print(f"   {name:22s} {ms * 1e3:8.2f} us  {100 * nbytes / ms / 1e6 / rate:5.1f} % of copy", flush=True)
PY
  timeout 300 python3 /tmp/s19/streams.py 2>&1 | tee "${LOG}_streams.log"
  ;;
call13)  # the shipped route on another card: the decode perf suite with the copy row, twice
  source kernels/device_lib.sh  # install_perfci
  install_perfci || exit 3
  for run in 1 2; do
    timeout 200 python3 -m pytest tests/perf/test_decode.py "tests/perf/test_torch_ops.py::test_copy_256mb" -q \
      -p no:cacheprovider --benchmark-json="$OUT/perf_dec_$run.json" > "${LOG}_perf_suite_dec_$run.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_dec_$run.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_dec_$run.json" \
      | tee "${LOG}_perf_suite_dec_table_$run.txt"
  done
  ;;
call14)  # after a review of the session's diff (views computed once a call): the decode GPU tests
  timeout 300 python3 -m pytest tests/kernels/test_decode.py tests/kernels/test_decode_tma.py -m gpu -q \
    -p no:cacheprovider 2>&1 | tail -4 | tee "${LOG}_gpu_tests.log"
  ;;
*) echo "unknown call $CALL"; exit 2 ;;
esac
