#!/usr/bin/env bash
# Session-10 device calls (issue 16, the Gluon attention backward): bash kernels/device_s10.sh CALL (OUT set by the
# tool).  Every step is guarded by `timeout`; a smoke run comes first, so a hang (an mbarrier deadlock) or a build
# failure stops the call early.
# (Session 15 removed matmul_splitk.default_tma_config's wide_only argument: the gemm2 script's route label no longer
# runs as written.)
# call1: DQ_LOADER (the loader warpgroup issues the dQ reduce-adds from two staging buffers per consumer): smoke
#        against the 2-kernel scheme (both head dims and masks, GQA, ragged lengths), A/B graph-timed against the
#        consumers issuing them, SDPA cuDNN beside; the pre-pass (delta, scratch zeroed) and the dQ post-pass
#        timed alone over block sizes and warps, against the main kernel alone and a copy of as many bytes.
#        (DQ_LOADER was not kept: kernels/NOTES.md, session 10; the call ran on that uncommitted variant.)
# call2 (nvidia-h200, then call3 on an H100): decode-sized GEMMs (1x4096x4096, 16x14336x4096, 64x4096x4096) over
#        the persistent kernel's small-M configs, the TMA split-K kernel's and pointer split-K, beside cuBLAS; decode
#        over splits, tiles, warps and stages at the suite's shapes, beside the read floor and a copy.  (call2's
#        GB/s columns were printed 1000x too small; the times are right.)
# call3 (H100): a stream-K GEMM (kernels/matmul_streamk.py, not kept: kernels/NOTES.md session 10) at decode-sized
#        shapes beside the default path, the other small-M kernels and cuBLAS (checked against fp32 first); its GPU
#        tests.
# call4 (H100) / call5 (H200): the default route's wide TMA tiles (matmul_splitk.WIDE_TMA_CONFIGS) against the
#        persistent kernel, each TMA tile width forced and cuBLAS, at LLM decode shapes; the GEMM GPU tests.  call5
#        and call6 (H100, without the sweep): the suite's GEMM rows, the baseline's 16x14336x4096 entries re-made.
# call7 (H200) / call8 (H100): the TMA kernel with 64-deep K tiles (96 KB or less of shared memory: 2-3 programs
#        resident per SM) and K split 2-4 ways at decode-sized shapes, beside the default and cuBLAS.  (call8 was not
#        run: call 7 found the H200 slower that way.)
# call9 (H100): the fp8 Gluon forward's configurations at d128 (ring depth 2-4, ping-pong on / off; full
#        persistent, causal one program per item) beside the default, Triton fp8 and our bf16 on the same data.
# call10 (H100) / call11 (H200): fp8 d128 without a mask on ping-pong turns (attention_ws.FP8_CONFIGS): tune_ws
#        check --fp8, the attention GPU tests, L512 with and without the turns, the suite's fp8 rows beside the bf16
#        L4096 d128 ones, the baseline's fp8 entries re-made from two runs.
# call12 (H100): causal fp8 d128 on a persistent grid and on ping-pong turns (2 and 3 stages) beside the default.
# call13 (H100): after the review's mends, the Gluon backward's and the attention GPU tests.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(case "$CALL" in call2|call5|call7|call11) echo h200;; *) echo h100;; esac)
LOG=$OUT/kernels_${GPU_TAG}_s10_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"

cat > /tmp/ab_bwd.py <<'EOF'
import sys, time, torch, triton
from kernels import attention, attention_bwd_ws, tune_cases
from kernels._attn_bwd_fused import _bwd_pre_fused, _dq_post
from kernels.reference import rel_err
from kernels.tune_bwd import _time, _sdpa_grad
import kernels.reference as ref


def run(name, *args):
    """new: this tree's default; ldr: DQ_LOADER on; cons: DQ_LOADER off; triton / auto: attention_backward's."""
    if name in ("triton", "auto"):
        return attention.attention_backward(*args, impl=name)
    keep = attention_bwd_ws.DQ_LOADER
    attention_bwd_ws.DQ_LOADER = {"ldr": True, "cons": False}.get(name, keep)
    try:
        return attention.attention_backward(*args, impl="gluon")
    finally:
        attention_bwd_ws.DQ_LOADER = keep


class _Nothing:
    def __getitem__(self, grid):
        return lambda *a, **kw: None


mode = sys.argv[1]
if mode == "smoke":
    names = sys.argv[2].split(",")
    cases = [(1, 4, 4, 1000, 1000, 128, False), (1, 4, 4, 1000, 1000, 128, True), (1, 4, 4, 1000, 1000, 64, False),
             (1, 4, 4, 1000, 1000, 64, True), (2, 8, 2, 777, 1029, 64, True), (1, 8, 4, 1031, 515, 128, True),
             (2, 4, 4, 300, 1030, 128, False), (1, 2, 2, 64, 64, 64, False), (1, 2, 2, 100, 4100, 128, True)]
    for b, hq, hk, lq, lk, d, causal in cases:
        q, do = (torch.randn(b, hq, lq, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(b, hk, lk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
        r = attention.attention_backward(do, q, k, v, out, lse, causal, impl="triton")
        for name in names:
            t0 = time.time()
            g = run(name, do, q, k, v, out, lse, causal)
            torch.cuda.synchronize()
            errs = " ".join(f"{n} {rel_err(a, b_):.2e}" for n, a, b_ in zip(("dq", "dk", "dv"), g, r))
            print(f"smoke {name} b{b} h{hq}/{hk} lq{lq} lk{lk} d{d} causal={causal}: vs triton {errs} "
                  f"({time.time() - t0:.1f} s)", flush=True)
    print("smoke status:", attention_bwd_ws.status())
elif mode == "bench":
    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
    names = sys.argv[3].split(",")
    for b, h, seq, d in shapes:
        for causal in (False, True):
            q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
            out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
            fns = {name: (lambda name=name: run(name, do, q, k, v, out, lse, causal)) for name in names}
            qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
            o = ref.sdpa(*qkv, causal, "cudnn")
            fns["cudnn"] = lambda: _sdpa_grad(o, qkv, do)
            times = {}
            for _ in range(3):  # interleaved rounds, best of each
                for name, fn in fns.items():
                    ms, _ = _time(fn)
                    times[name] = min(ms, times.get(name, float("inf")))
            tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'}"
            print(tag, " ".join(f"{n} {ms:.4f} ms (x{times['cudnn'] / ms:.3f} cuDNN)" for n, ms in times.items()),
                  flush=True)
elif mode == "prepost":  # the passes around the main kernel, alone
    x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    copy_ms, _ = _time(lambda: y.copy_(x))
    gbs = 2 * x.numel() / copy_ms / 1e6
    print(f"copy 256 MiB: {copy_ms:.4f} ms, {gbs:.0f} GB/s", flush=True)
    for b, h, seq, d in [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")]:
        q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
        for causal in (False, True):
            out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
            full, _ = _time(lambda: run("new", do, q, k, v, out, lse, causal))
            import kernels.attention_bwd_ws as m
            keep = (m._bwd_pre_fused, m._dq_post)
            m._bwd_pre_fused = m._dq_post = _Nothing()
            try:
                main, _ = _time(lambda: run("new", do, q, k, v, out, lse, causal))
            finally:
                m._bwd_pre_fused, m._dq_post = keep
            print(f"L{seq} d{d} {'causal' if causal else 'full'}: whole {full:.4f} ms, main kernel alone {main:.4f}, "
                  f"the rest {full - main:.4f}", flush=True)
        delta = torch.empty_like(lse)
        acc = torch.empty((b * h, seq, d), dtype=torch.float32, device="cuda")
        dq = torch.empty_like(q)
        st = (out.stride(0), out.stride(1), out.stride(2), out.stride(3))
        pre_bytes = 2 * out.numel() * 2 + acc.numel() * 4
        post_bytes = acc.numel() * 4 + dq.numel() * 2
        for bm, w in ((64, 4), (32, 4), (64, 8), (128, 4), (128, 8), (256, 8), (16, 4)):
            pre = lambda: _bwd_pre_fused[(triton.cdiv(seq, bm), b * h)](out, do, delta, acc, *st, *st, h, seq,
                                                                      HEAD_DIM=d, BLOCK_D=d, BLOCK_M=bm, num_warps=w)
            post = lambda: _dq_post[(triton.cdiv(seq, bm), b * h)](acc, dq, *st, h, seq, 0.1, HEAD_DIM=d,
                                                                  BLOCK_D=d, BLOCK_M=bm, num_warps=w)
            pre_ms, _ = _time(pre)
            post_ms, _ = _time(post)
            print(f"  L{seq} d{d} BLOCK_M {bm} warps {w}: pre {pre_ms:.4f} ms ({pre_bytes / pre_ms / 1e6:.0f} GB/s, "
                  f"{pre_bytes / pre_ms / 1e6 / gbs:.2f} of copy), post {post_ms:.4f} ms "
                  f"({post_bytes / post_ms / 1e6:.0f} GB/s, {post_bytes / post_ms / 1e6 / gbs:.2f})", flush=True)
        zero_ms, _ = _time(lambda: acc.zero_())
        print(f"  torch zero_ of the scratch {zero_ms:.4f} ms ({acc.numel() * 4 / zero_ms / 1e6:.0f} GB/s)", flush=True)
EOF

cat > /tmp/small.py <<'EOF'
import sys, torch
from kernels import decode, matmul, tune_cases
from kernels.tune_bwd import _time


def row(tag, fns):
    times = {}
    for _ in range(2):  # alternating rounds, best of each
        for name, fn in fns.items():
            if times.get(name) == float("inf"):
                continue
            try:
                ms, _ = _time(fn)
            except Exception as exc:  # a config that does not fit: say so, go on
                print(f"  {tag} {name}: failed {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                torch.cuda.synchronize()
                ms = float("inf")
            times[name] = min(ms, times.get(name, float("inf")))
    return times


part = sys.argv[1]
x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
copy_ms, _ = _time(lambda: y.copy_(x))
gbs = 2 * x.numel() / copy_ms / 1e6
print(f"copy 256 MiB: {copy_ms * 1e3:.1f} us, {gbs:.0f} GB/s", flush=True)
if part == "gemm":
    small = [(64, 128, 64, 1, 4, 6, 2, False), (64, 128, 128, 1, 4, 4, 2, False)]
    sktma = [(1, 32, 128, 4, 6, True), (1, 128, 128, 4, 4, True), (2, 64, 128, 4, 6, True)]
    streamk = [(128, 128, 4, 4), (128, 64, 4, 6), (256, 64, 4, 4), (64, 128, 4, 6), (128, 128, 4, 3),
               (128, 256, 4, 2), (64, 256, 4, 3)]
    shapes = [(16, 14336, 4096), (32, 14336, 4096), (64, 14336, 4096), (1, 14336, 4096), (16, 4096, 14336),
              (1, 4096, 4096), (64, 4096, 4096), (16, 4096, 4096)]
    for m, n, k in shapes:
        a = tune_cases.randn((m, k), torch.bfloat16, 0)
        b = tune_cases.randn((k, n), torch.bfloat16, 1)
        ref = a.float() @ b.float()
        for c in streamk:  # correctness first (three calls: the arrival counters reset themselves)
            for _ in range(3):
                out = matmul.matmul(a, b, streamk=c)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            print(f"  check {m}x{n}x{k} streamk{c}: rel err {err:.2e}", flush=True)
        fns = {"default": lambda: matmul.matmul(a, b), "cublas": lambda: a @ b}
        fns.update({f"streamk{c}": (lambda c=c: matmul.matmul(a, b, streamk=c)) for c in streamk})
        fns.update({f"small{c}": (lambda c=c: matmul.matmul(a, b, config=c)) for c in small})
        fns.update({f"sktma{c[:5]}": (lambda c=c: matmul.matmul(a, b, splitk_tma=c)) for c in sktma})
        fns.update({f"splitk{s}": (lambda s=s: matmul.matmul(a, b, split_k=s)) for s in (3,)})
        t = row(f"{m}x{n}x{k}", fns)
        mb = (m * k + k * n + m * n) * 2 / 1e6
        for name, ms in sorted(t.items(), key=lambda kv: kv[1]):
            print(f"gemm {m}x{n}x{k} {name}: {ms * 1e3:.2f} us ({mb / ms:.0f} GB/s, {mb / ms / gbs:.3f} of copy; "
                  f"x{t['cublas'] / ms:.3f} cuBLAS)", flush=True)
elif part == "gemm2":  # the wide-tile routing (matmul_splitk.WIDE_TMA_CONFIGS) against the alternatives
    cfgs = {"narrow": (1, 32, 128, 4, 6, True), "wide64": (1, 64, 128, 4, 6, True), "wide128": (1, 128, 128, 4, 4, True)}
    for m, n, k in [(16, 14336, 4096), (1, 14336, 4096), (32, 14336, 4096), (64, 14336, 4096), (64, 8192, 4096),
                    (16, 12288, 4096), (16, 11008, 4096), (64, 6144, 4096), (16, 28672, 4096), (64, 4096, 4096),
                    (1, 4096, 4096), (16, 4096, 14336)]:
        a = tune_cases.randn((m, k), torch.bfloat16, 0)
        b = tune_cases.randn((k, n), torch.bfloat16, 1)
        fns = {"default": lambda: matmul.matmul(a, b), "cublas": lambda: a @ b,
               "persistent": lambda: matmul.matmul(a, b, config=(64, 128, 64, 1, 4, 6, 2, False))}
        fns.update({name: (lambda c=c: matmul.matmul(a, b, splitk_tma=c)) for name, c in cfgs.items()})
        t = row(f"{m}x{n}x{k}", fns)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        from kernels import matmul_splitk as sk
        route = sk.default_tma_config(m, n, k, sms, wide_only=m <= matmul.SPLITK_MAX_M)
        mb = (m * k + k * n + m * n) * 2 / 1e6
        for name, ms in sorted(t.items(), key=lambda kv: kv[1]):
            print(f"gemm2 {m}x{n}x{k} {name}: {ms * 1e3:.2f} us ({mb / ms / gbs:.3f} of copy; x{t['cublas'] / ms:.3f} "
                  f"cuBLAS){' <- default TMA route ' + str(route) if name == 'default' else ''}", flush=True)
elif part == "gemm3":  # split TMA tiles small enough for 2-3 programs per SM (all resident at once)
    cfgs = [(1, 128, 128, 4, 4, True), (1, 128, 64, 4, 4, True), (2, 128, 64, 4, 4, True), (2, 128, 64, 4, 3, True),
            (3, 128, 64, 4, 3, True), (2, 64, 64, 4, 4, True), (2, 128, 128, 4, 2, True), (4, 128, 64, 4, 3, True)]
    for m, n, k in [(16, 14336, 4096), (16, 11008, 4096), (1, 14336, 4096), (64, 14336, 4096), (16, 12288, 4096)]:
        a = tune_cases.randn((m, k), torch.bfloat16, 0)
        b = tune_cases.randn((k, n), torch.bfloat16, 1)
        fns = {"default": lambda: matmul.matmul(a, b), "cublas": lambda: a @ b}
        fns.update({f"sktma{c[:5]}": (lambda c=c: matmul.matmul(a, b, splitk_tma=c)) for c in cfgs})
        t = row(f"{m}x{n}x{k}", fns)
        for name, ms in sorted(t.items(), key=lambda kv: kv[1]):
            print(f"gemm3 {m}x{n}x{k} {name}: {ms * 1e3:.2f} us (x{t['cublas'] / ms:.3f} cuBLAS)", flush=True)
else:  # decode
    cfgs = [(1, 128, 4, 3, False), (1, 128, 4, 4, False), (1, 64, 4, 4, False), (1, 128, 8, 3, False),
            (1, 64, 4, 6, False), (2, 128, 4, 3, True), (2, 128, 4, 3, False), (2, 64, 4, 4, True),
            (4, 64, 4, 3, True), (3, 128, 4, 3, True), (None, None, None, None, None)]
    for b, hq, hk, kv, d, dt in tune_cases.DEC_SHAPES:
        q = tune_cases.randn((b, hq, 1, d), dt, 0)
        k = tune_cases.randn((b, hk, kv, d), dt, 1)
        v = tune_cases.randn((b, hk, kv, d), dt, 2)
        fns = {}
        for s, bn, w, st, fused in cfgs:
            if s is None:
                fns["default"] = lambda: decode.decode_attention(q, k, v)
            elif bn * d * 4 * (st - 1) <= 220_000:
                fns[f"split{s} bn{bn} w{w} s{st}{' fused' if fused else ''}"] = (
                    lambda s=s, bn=bn, w=w, st=st, fused=fused: decode.decode_attention(
                        q, k, v, num_splits=s, block_n=bn, num_warps=w, num_stages=st, fused_combine=fused))
        for progs in (264, 528):
            fns[f"read floor {progs} x 64 rows"] = lambda progs=progs: decode.read_floor(k, v, progs, 64)
        fns["sdpa-flash"] = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hk)
        t = row(f"b{b} h{hq}/{hk} kv{kv} d{d}", fns)
        mb = 2 * k.numel() * k.element_size() / 1e6
        for name, ms in sorted(t.items(), key=lambda kv_: kv_[1]):
            print(f"decode b{b} h{hq}/{hk} kv{kv} d{d} {name}: {ms * 1e3:.2f} us ({mb / ms:.0f} GB/s, "
                  f"{mb / ms / gbs:.3f} of copy)", flush=True)
EOF

case "$CALL" in
  call2)
    timeout 300 python3 /tmp/small.py gemm 2>&1 | tee "${LOG}_small_gemm.log"
    echo "gemm rc=$?"
    timeout 200 python3 /tmp/small.py decode 2>&1 | tee "${LOG}_decode.log"
    echo "decode rc=$?"
    ;;
  call4|call5|call6)  # the wide-tile TMA routing (matmul_splitk.WIDE_TMA_CONFIGS), then the GEMM GPU tests
    [ "$CALL" = call6 ] || { timeout 300 python3 /tmp/small.py gemm2 2>&1 | tee "${LOG}_gemm2.log"; echo "gemm2 rc=$?"; }
    timeout 200 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    if [ "$CALL" != call4 ]; then  # the suite's GEMM rows and the baseline's 16x14336x4096 entries re-made
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
        && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
      timeout 120 python3 -m pytest tests/perf/test_matmul.py -q -p no:cacheprovider --benchmark-json="$OUT/perf_mm.json" \
        > "${LOG}_perf_suite_mm.log" 2>&1
      echo "perf suite rc=$?"
      [ -f "$OUT/perf_mm.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_mm.json" | tee "${LOG}_perf_suite_mm_table.txt"
      timeout 150 perfci baseline update tests/perf/test_matmul.py -k 16x14336 --runs 2 --force --results-dir /tmp/bl \
        > "${LOG}_baseline_update_mm.log" 2>&1
      echo "baseline update rc=$?"
      tail -6 "${LOG}_baseline_update_mm.log"
      tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    fi
    ;;
  call7|call8)  # TMA tiles small enough to keep 2-3 programs per SM resident, split K (H200, then H100)
    timeout 300 python3 /tmp/small.py gemm3 2>&1 | tee "${LOG}_gemm3.log"
    echo "gemm3 rc=$?"
    ;;
  call9)  # fp8 Gluon forward configs at d128 after session 8's P packing: ring depth 2-4, ping-pong turns on / off
    timeout 400 python3 -c "
import sys
import kernels.tune_ws as t
t.SWEEP_FP8[128] = [(128, 2, 2, False), (128, 3, 2, False), (128, 4, 2, False), (128, 2, 2, True), (128, 3, 2, True),
                    (128, 4, 2, True)]
sys.argv = ['tune_ws', 'bench', '--fp8', '--sweep', '--seq', '4096', '16384', '--dim', '128']
sys.exit(t.main())" 2>&1 | tee "${LOG}_fp8_sweep.log"
    echo "fp8 sweep rc=$?"
    ;;
  call10|call11)  # fp8 d128 without a mask on ping-pong turns (FP8_CONFIGS): checks, the attention GPU tests, L512
                  # timed with and without the turns, the suite's fp8 rows and the baseline's fp8 entries re-made
    timeout 120 python3 -m kernels.tune_ws check --fp8 2>&1 | tail -12 | tee "${LOG}_check_fp8.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -4 | tee "${LOG}_gpu_tests.log"
    timeout 150 python3 -c "
import sys
import kernels.tune_ws as t
t.SWEEP_FP8[128] = [(128, 3, 2, False), (128, 3, 2, True)]
sys.argv = ['tune_ws', 'bench', '--fp8', '--sweep', '--seq', '512', '--dim', '128', '--mask', 'full']
sys.exit(t.main())" 2>&1 | grep BENCH | tee "${LOG}_fp8_l512.log"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
      && export PYTHONPATH=/tmp/site:. && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    timeout 150 python3 -m pytest tests/perf/test_flash.py -k "fp8 or (test_flash_forward and L4096-d128 and ours and not triton)" -q -p no:cacheprovider \
      --benchmark-json="$OUT/perf_fp8.json" > "${LOG}_perf_suite_fp8.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_fp8.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_fp8.json" | tee "${LOG}_perf_suite_fp8_table.txt"
    timeout 120 perfci baseline update tests/perf/test_flash.py -k fp8 --runs 2 --force --results-dir /tmp/bl \
      > "${LOG}_baseline_update_fp8.log" 2>&1
    echo "baseline update rc=$?"
    tail -4 "${LOG}_baseline_update_fp8.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call12)  # causal fp8 d128: persistent grid and ping-pong turns (the sweep above ran causal one program per item)
    timeout 300 python3 -c "
from functools import partial
import torch
from kernels import attention, attention_ws, tune_cases as cases
from kernels._checks import LOG2E
import kernels.tune_ws as t
for seq, b in ((4096, 4), (16384, 1)):
    q8, k8, v8, sq, sk, sv = t.fp8_inputs(b, 16, 16, seq, seq, 128, 'bhld')
    dims = attention.check_attention(q8, k8, v8, 'bhld', attention.HEAD_DIMS, dtypes=attention.FP8_DTYPES)
    out, lse = torch.empty(q8.shape, dtype=torch.bfloat16, device='cuda'), torch.empty((b, 16, seq), device='cuda')
    impls = {'fp8': partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, True),
             'bf16-ours': partial(attention.attention_forward, *(x.to(torch.bfloat16) for x in (q8, k8, v8)), True)}
    for st in (2, 3):
        for pers in (False, True):
            for pp in (False, True):
                impls[t._name(128, st, 2, pp, pers)] = partial(attention_ws.forward, q8, k8, v8, out, lse, dims, 'bhld',
                    True, 128 ** -0.5 * LOG2E * sq * sk, (128, st, 2, pers, pp), o_scale=sv)
    flops = cases.flops_bytes(cases.Variant('fwd', (b, 16, seq, 128, True)))[0]
    t._time_all(print, impls, f'fp8 b{b} h16 L{seq} d128 causal', flops, 'bf16-ours')
" 2>&1 | grep -v Warning | tee "${LOG}_fp8_causal.log"
    echo "rc=$?"
    ;;
  call13)  # after the review's mends (the first lse/delta load's constant mask, one triton-options flag per entry
           # point): the Gluon backward's and the attention GPU tests
    timeout 400 python3 -m pytest tests/kernels/test_attention_bwd_ws.py tests/kernels/test_attention.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests.log"
    ;;
  call3)  # the stream-K kernel (kernels/matmul_streamk.py) beside the others; the GEMM tests
    timeout 330 python3 /tmp/small.py gemm 2>&1 | tee "${LOG}_small_gemm.log"
    echo "gemm rc=$?"
    timeout 150 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 -k "streamk or small_m" \
      2>&1 | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call1)
    timeout 240 python3 /tmp/ab_bwd.py smoke ldr,cons 2>&1 | tee "${LOG}_smoke.log"
    rc=$?
    [ $rc -eq 0 ] || { echo "smoke failed rc=$rc"; exit 1; }
    timeout 150 python3 /tmp/ab_bwd.py bench 4x16x4096x128,4x16x4096x64,2x16x8192x128 cons,ldr 2>&1 \
      | tee "${LOG}_ab_bench.log"
    echo "bench rc=$?"
    timeout 150 python3 /tmp/ab_bwd.py prepost 4x16x4096x128,4x16x4096x64 2>&1 | tee "${LOG}_prepost.log"
    echo "prepost rc=$?"
    ;;
esac
