#!/usr/bin/env bash
# Session-11 device calls (issue 16): bash kernels/device_s11.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100): the Gluon backward's causal programs started in key block order for the last heads
#        (attention_bwd_ws.CAUSAL_TAIL_WAVES): its GPU tests; graph-timed A/B over the tail's size (0 = head order
#        throughout) at the suite's causal shapes beside SDPA cuDNN; without a mask, the time per head at head
#        counts whose programs fill whole waves of 132 SMs or not (is the last partial wave a cost?).
# call2 (H100): stream-K for the last wave without a mask (attention_bwd_ws.STREAM_K_MAX_FILL): the file's GPU tests;
#        graph-timed A/B against the committed kernel (kernels/_attn_bwd_ws_s11old.py and attention_bwd_ws_s11old.py:
#        `git show 72e9446:kernels/...` written before the call, the host module's import pointed at the old kernel; not
#        kept) and with stream-K off, both masks (the causal path's restructure must cost nothing), SDPA cuDNN beside,
#        the new gradients against the old.  The stream-K version lost and was not kept (kernels/NOTES.md, session
#        11); its patch is not in the tree, so call2 no longer runs as written.
# call3 (H100) / call4 (H200): the suite's backward rows (perfci) and the baseline's backward entries re-made from
#        two runs (the causal tail order changed their times); call3 first profiles (ncu --set full, one launch) the
#        fp8 Gluon forward and the bf16 one, d128 L4096 without a mask.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(case "$CALL" in call4) echo h200;; *) echo h100;; esac)
LOG=$OUT/kernels_${GPU_TAG}_s11_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"

cat > /tmp/ab_tail.py <<'PY'
import sys, torch
from kernels import attention, attention_bwd_ws, tune_cases
from kernels._checks import check_attention
from kernels.tune_bwd import _time, _sdpa_grad
import kernels.reference as ref


def gluon(do, q, k, v, out, lse, causal, waves):
    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
    bufs = tuple(torch.empty_like(t) for t in (q, k, v))
    attention_bwd_ws.backward(do, q, k, v, out, lse, *bufs, dims, "bhld", causal, q.shape[-1] ** -0.5,
                              tail_waves=waves)
    return bufs


mode = sys.argv[1]
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
waves = [float(w) for w in sys.argv[3].split(",")] if len(sys.argv) > 3 else [0.0]
causal = mode == "causal"
for b, h, seq, d in shapes:
    q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
    fns = {f"tail{w:g}": (lambda w=w: gluon(do, q, k, v, out, lse, causal, w)) for w in waves}
    qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
    o = ref.sdpa(*qkv, causal, "cudnn")
    fns["cudnn"] = lambda: _sdpa_grad(o, qkv, do)
    times = {}
    for _ in range(3):  # interleaved rounds, best of each
        for name, fn in fns.items():
            ms, _ = _time(fn)
            times[name] = min(ms, times.get(name, float("inf")))
    tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'} ({b * h * -(-seq // 128)} programs)"
    print(tag, " ".join(f"{n} {ms:.4f} ms ({ms / (b * h) * 1e3:.2f} us/head, x{times['cudnn'] / ms:.3f} cuDNN)"
                        for n, ms in times.items()), flush=True)
    del q, k, v, do, out, lse, qkv, o
PY

cat > /tmp/ab_sk.py <<'PY'
import sys, torch
from kernels import attention, attention_bwd_ws, attention_bwd_ws_s11old as old, tune_cases
from kernels._checks import check_attention
from kernels.tune_bwd import _time, _sdpa_grad
import kernels.reference as ref


def run(mod, do, q, k, v, out, lse, causal, **kw):
    dims = check_attention(q, k, v, "bhld", attention.HEAD_DIMS)
    bufs = tuple(torch.empty_like(t) for t in (q, k, v))
    assert mod.backward(do, q, k, v, out, lse, *bufs, dims, "bhld", causal, q.shape[-1] ** -0.5, **kw)
    return bufs


shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1].split(",")]
for causal in (False, True):
    for b, h, seq, d in shapes:
        q, k, v, do = (tune_cases.randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
        out, lse = attention.attention_forward(q, k, v, causal, impl="triton")
        fns = {"old": lambda: run(old, do, q, k, v, out, lse, causal), "new": lambda: run(attention_bwd_ws, do, q, k,
                                                                                          v, out, lse, causal)}
        if not causal:
            fns["new-nosk"] = lambda: run(attention_bwd_ws, do, q, k, v, out, lse, causal, stream_k=0.0)
        r0, r1 = fns["old"](), fns["new"]()
        errs = " ".join(f"{n} {(a.float() - c.float()).norm().item() / c.float().norm().item():.1e}"
                        for n, a, c in zip(("dq", "dk", "dv"), r1, r0))
        qkv = tuple(t.detach().clone().requires_grad_() for t in (q, k, v))
        o = ref.sdpa(*qkv, causal, "cudnn")
        fns["cudnn"] = lambda: _sdpa_grad(o, qkv, do)
        times = {}
        for _ in range(3):  # interleaved rounds, best of each
            for name, fn in fns.items():
                ms, _ = _time(fn)
                times[name] = min(ms, times.get(name, float("inf")))
        n_items = b * h * -(-seq // 128)
        split = attention_bwd_ws.stream_k_split(n_items, 132, attention_bwd_ws.STREAM_K_MAX_FILL, causal)
        tag = f"bwd b{b} h{h} L{seq} d{d} {'causal' if causal else 'full'} ({n_items} items, split {split})"
        print(tag, " ".join(f"{n} {ms:.4f} ms (x{times['cudnn'] / ms:.3f} cuDNN)" for n, ms in times.items()),
              f"| new vs old: {errs}", flush=True)
        del q, k, v, do, out, lse, qkv, o
PY

source kernels/device_lib.sh  # profile, install_perfci

case "$CALL" in
  call3|call4)  # the suite's backward rows and the baseline's backward entries re-made (the causal tail order);
                # call3 (H100) also profiles the fp8 forward (d128 L4096, no mask: ping-pong) beside bf16
    if [ "$CALL" = call3 ]; then
      profile fp8_d128_L4096_full attn_fwd_ws --seq 4096 --dim 128 --mask full --impl gluon --fp8
      profile bf16_d128_L4096_full attn_fwd_ws --seq 4096 --dim 128 --mask full --impl gluon
      tar -C /tmp/ncu -czf "$OUT/kernels_${GPU_TAG}_s11_${CALL}_ncu.tgz" --exclude='*.ncu-rep' .
    fi
    install_perfci
    timeout 120 python3 -m pytest tests/perf/test_flash.py -k backward -q -p no:cacheprovider \
      --benchmark-json="$OUT/perf_bwd.json" > "${LOG}_perf_suite_bwd.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_bwd.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_bwd.json" \
      | tee "${LOG}_perf_suite_bwd_table.txt"
    timeout 200 perfci baseline update tests/perf/test_flash.py -k backward --runs 2 --force --results-dir /tmp/bl \
      > "${LOG}_baseline_update_bwd.log" 2>&1
    echo "baseline update bwd rc=$?"
    tail -6 "${LOG}_baseline_update_bwd.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call2)
    timeout 240 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -n 8 -x 2>&1 \
      | tail -8 | tee "${LOG}_gpu_tests.log"
    echo "gpu tests rc=$?"
    timeout 300 python3 /tmp/ab_sk.py \
      4x16x4096x128,4x16x4096x64,2x16x8192x128,2x16x4096x128,8x16x1024x128,6x11x4096x128,1x16x16384x128 2>&1 \
      | tee "${LOG}_ab_sk.log"
    echo "ab rc=$?"
    ;;
  call1)
    timeout 200 python3 -m pytest tests/kernels/test_attention_bwd_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -6 | tee "${LOG}_gpu_tests.log"
    echo "gpu tests rc=$?"
    timeout 200 python3 /tmp/ab_tail.py causal 4x16x4096x128,4x16x4096x64,2x16x8192x128 0,1,2,3,5,1000 2>&1 \
      | tee "${LOG}_ab_causal.log"
    echo "ab causal rc=$?"
    timeout 120 python3 /tmp/ab_tail.py full 4x16x4096x128,6x11x4096x128,3x11x4096x128,2x16x4096x128,12x11x4096x128 \
      2>&1 | tee "${LOG}_ab_full.log"
    echo "ab full rc=$?"
    ;;
  *) echo "unknown call $CALL"; exit 2;;
esac
