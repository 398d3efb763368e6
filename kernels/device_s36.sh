#!/usr/bin/env bash
# Session-36 device calls (issue 16): bash kernels/device_s36.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1: cuDNN's fp8 forward (through JAX's cuDNN fused attention, jax._src.cudnn.fused_attention_stablehlo with
#        use_fp8: e4m3 in and out, BNTH, unit scales) timed beside ours (fp8 codes, our bf16, cuDNN bf16) at d128
#        L4096 / 8192 / 16384 full and causal: both sides by back-to-back launches timed on the host clock (JAX's
#        calls cannot be graph-captured by torch), ours also graph-timed in turns; then session 35's call 9 (head
#        dim 64 causal on three consumers against two at L2048-8192); then the names and durations of the kernels
#        of one JAX fp8 call (ncu, one metric), for call 2.
# call2: the fp8 codes path with lazy row maxima (LAZY_MAX: an unmasked d128 tile's codes taken against the running
#        maxima, the maxima taken only by a warp where a code overflowed: the step's 64 FMNMX a thread gone from the
#        fast path, 431 -> 367 instructions offline) against a module copy with LAZY_MAX 0 (the build as shipped,
#        SASS byte-for-byte) and one with the row maximum's code at 112 (headroom 14 codes instead of 6), beside our
#        bf16: d128 L4096 / 8192 / 16384 full and causal, in turns (4 rounds), outputs compared; then the fp8 GPU
#        tests and `kernels.tune_ws check --fp8`.  Ran on the tree with docs/measurements/kernels_s36_fp8_lazy_max.patch
#        applied (right, slower: not kept).
# call3: call 2's script on a second form (ran with docs/measurements/kernels_s36_fp8_eager_codes.patch applied): the
#        codes taken against the running maxima while the thread's own scores' maxima (an FMNMX tree, no shuffles)
#        decide a warp's flag, neither waiting on the other, before the P·V wait; after it the codes packed and a
#        flagged warp's maxima taken across threads and its codes again (412 fast-path instructions offline against 431,
#        the codes' FMAs no longer behind the maxima's shuffles); then the fp8 GPU tests.
# call4: the backward's dQ part staged as 128-byte rows of 32 columns, a row's parts side by side (the fp32 scratch
#        viewed as (B*Hq, Lq, D / 32, 32), [1, 64, DQ_W / 32, 32] boxes, one 4-D reduce-add), so a half-warp's 4 rows
#        of an STS.64 land on distinct banks under the 128-byte swizzle (as [64, DQ_W] the parts are stored apart and
#        rows r and r ^ 1 shared banks: 33.6M excess wavefronts in session 35's call 7), against module copies of the
#        kernel and host before it (`git show bd09936:kernels/_attn_bwd_ws.py > kernels_s36_old_attn_bwd_ws.py`,
#        likewise attention_bwd_ws.py > kernels_s36_old_attention_bwd_ws.py, in the repository root): dk / dv
#        compared bitwise, dq against each other, in turns (4 rounds) at d128 / d64 L4096 full and causal and d128
#        L16384; then the backward GPU tests.
# call5: call 4's A/B again on another card, with d64 L16384 full / causal, d64 and d128 L2048 besides (5 rounds).
#        (It landed on call 4's card, kept warm.)
# call6: on the change as kept (the 128-byte rows at head dim 64 only, DQ_ROWS_HEAD_DIMS; d128's build byte-for-byte
#        as before): the backward GPU tests, the whole kernel suite for README, then the H200 baseline's d64
#        backward entries re-made from two runs.
# call7: on the session's last commit: every GPU test of tests/kernels (8 workers), as far as the time left goes.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s36_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s36
source kernels/device_lib.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false

cat > /tmp/s36/jax_fp8.py <<'PY'
"""cuDNN's fp8 forward through JAX: build(b, seq, causal) -> a callable launching it once (returns the output)."""
import jax
import jax.numpy as jnp
from jax._src.cudnn import fused_attention_stablehlo as fa


def build(b, seq, causal, d=128, h=16):
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (b, h, seq, d), jnp.float32).astype(jnp.float8_e4m3fn) for kk in keys)
    one = jnp.ones((1, 1, 1, 1), jnp.float32)
    params = {name: one for name in fa.fp8_params_keys}
    mask = fa.MaskType.CAUSAL if causal else fa.MaskType.NO_MASK
    f = jax.jit(lambda q, k, v: fa.dot_product_attention(
        q, k, v, fp8_params=params, scale=d ** -0.5, mask_type=mask, qkv_layout="BNTH", use_fp8=True)[0])
    out = f(q, k, v)
    out.block_until_ready()
    return lambda: f(q, k, v)


def info():
    return f"jax {jax.__version__}, {jax.devices()}, cuDNN {fa.check_cudnn_version()}"
PY

cat > /tmp/s36/cudnn_fp8.py <<'PY'
import sys
import time
from functools import partial

sys.path.insert(0, "/tmp/s36")
import jax_fp8  # noqa: E402  (before torch takes the GPU's memory)
import torch  # noqa: E402

from kernels import attention, tune_cases  # noqa: E402
from kernels import reference as ref  # noqa: E402

ROUNDS = int(sys.argv[1])
print(jax_fp8.info(), flush=True)


def host_timed(fn, sync):
    """ms a call: calls queued back to back for ~0.3 s, timed on the host clock to the last one's end."""
    sync(fn())
    t0 = time.perf_counter()
    sync(fn())
    n = max(10, int(0.3 / (time.perf_counter() - t0)))
    t0 = time.perf_counter()
    for _ in range(n):
        r = fn()
    sync(r)
    return (time.perf_counter() - t0) / n * 1e3


def jsync(r):
    r.block_until_ready()


def tsync(_r):
    torch.cuda.synchronize()


for seq, b, causal in [(4096, 4, False), (4096, 4, True), (8192, 2, False), (8192, 2, True), (16384, 1, False),
                       (16384, 1, True)]:
    try:
        jf = jax_fp8.build(b, seq, causal)
    except Exception as exc:  # noqa: BLE001
        print(f"L{seq} {'causal' if causal else 'full'}: JAX cuDNN fp8 failed: {type(exc).__name__}: {exc}"[:2000])
        continue
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    fns = {"ours_fp8": partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal),
           "ours_bf16": partial(attention.attention_forward, q, k, v, causal),
           "cudnn_bf16": partial(ref.sdpa, q, k, v, causal, "cudnn")}
    host = {}
    for _ in range(ROUNDS):
        for name, fn in [("cudnn_fp8", jf), *fns.items()]:
            ms = host_timed(fn, jsync if name == "cudnn_fp8" else tsync)
            host[name] = min(ms, host.get(name, float("inf")))
    graph = tune_cases.in_turns(fns, ROUNDS)
    flops = 4 * b * 16 * seq * seq * 128 / (2 if causal else 1)
    print(f"b{b} h16 L{seq} d128 {'causal' if causal else 'full'}: host-timed " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({flops / ms / 1e9:.0f} TFLOPS)" for n, ms in host.items())
        + f"; ours fp8 / cuDNN fp8 {host['cudnn_fp8'] / host['ours_fp8']:.3f}x; graph-timed " + ", ".join(
        f"{n} {ms * 1e3:.1f} us" for n, ms in graph.items())
        + f"; fp8 {graph['ours_bf16'] / graph['ours_fp8']:.3f}x our bf16", flush=True)
PY

cat > /tmp/s36/jax_prof.py <<'PY'
import sys

sys.path.insert(0, "/tmp/s36")
import jax_fp8  # noqa: E402

f = jax_fp8.build(4, 4096, False)
for _ in range(3):
    f().block_until_ready()
print("done")
PY

cat > /tmp/s36/ab_c3.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref
from kernels.tune_ab import patched

ROUNDS = int(sys.argv[1])
for seq, b in [(2048, 8), (4096, 4), (8192, 2)]:
    q, k, v = (tune_cases.randn((b, 16, seq, 64), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, True, impl="gluon")
    two = patched(run, attention_ws, "LONG_CAUSAL_MIN_LEN", 1 << 30)
    three = patched(run, attention_ws, "LONG_CAUSAL_MIN_LEN", 1)
    o2, o3 = two()[0].float(), three()[0].float()
    err = ((o2 - o3).abs().max() / o2.abs().max()).item()
    t = tune_cases.in_turns({"cudnn": partial(ref.sdpa, q, k, v, True, "cudnn"), "two": two, "three": three}, ROUNDS)
    print(f"b{b} h16 L{seq} d64 causal (three vs two {err:.1e}): " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({t['cudnn'] / ms:.3f}x cuDNN)" for n, ms in t.items())
        + f"; three / two {t['two'] / t['three']:.4f}", flush=True)
PY

cat > /tmp/s36/ab_lazy.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_ws, tune_cases
from kernels.tune_ab import module_copy, patched

ROUNDS = int(sys.argv[1])
EXACT = module_copy("_fwd_exact", "kernels/_attn_fwd_ws.py",
                    [(r"^LAZY_MAX: gl.constexpr = gl.constexpr\(1\)", "LAZY_MAX: gl.constexpr = gl.constexpr(0)")])
C112 = module_copy("_fwd_c112", "kernels/_attn_fwd_ws.py",
                   [(r"^EXP_CODE_ONE = gl.constexpr\(120.0\)", "EXP_CODE_ONE = gl.constexpr(112.0)"),
                    (r"^EXP_LSE_BIAS = gl.constexpr\(8.0 \+ 0.05755\)", "EXP_LSE_BIAS = gl.constexpr(7.0 + 0.05755)")])
for seq, b, causal in [(4096, 4, False), (8192, 2, False), (16384, 1, False), (4096, 4, True), (16384, 1, True),
                       (1024, 16, False)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    lazy = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal)
    fns = {"bf16": partial(attention.attention_forward, q, k, v, causal),
           "exact": patched(lazy, attention_ws, "attn_fwd_ws", EXACT.attn_fwd_ws), "lazy": lazy,
           "lazy112": patched(lazy, attention_ws, "attn_fwd_ws", C112.attn_fwd_ws)}
    outs = {n: fns[n]() for n in ("exact", "lazy", "lazy112")}
    o0, l0 = outs["exact"]
    errs = ", ".join(f"{n} out {((o.float() - o0.float()).abs().max() / o0.float().abs().max()).item():.1e} lse "
                     f"{(l - l0).abs().max().item():.1e}" for n, (o, l) in outs.items() if n != "exact")
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"b{b} h16 L{seq} d128 {'causal' if causal else 'full'} (against exact: {errs}): " + ", ".join(
        f"{n} {ms * 1e3:.1f} us" for n, ms in t.items()) + "; x our bf16 " + ", ".join(
        f"{n} {t['bf16'] / t[n]:.3f}" for n in ("exact", "lazy", "lazy112"))
        + f"; lazy / exact {t['exact'] / t['lazy']:.4f}, lazy112 / exact {t['exact'] / t['lazy112']:.4f}", flush=True)
PY

cat > /tmp/s36/ab_dq.py <<'PY'
import sys
from functools import partial

import torch

from kernels import attention, attention_bwd_ws, tune_cases
from kernels.tune_ab import module_copy, patched

ROUNDS = int(sys.argv[1])
OLD_KERNEL = module_copy("_attn_bwd_ws_old", "kernels_s36_old_attn_bwd_ws.py")
OLD = module_copy("attention_bwd_ws_old", "kernels_s36_old_attention_bwd_ws.py",
                  [(r"^(\s*)from kernels._attn_bwd_ws import", r"\1from _attn_bwd_ws_old import")])
CASES = [(4096, 4, 128, False), (4096, 4, 128, True), (16384, 1, 128, False), (4096, 4, 64, False),
         (4096, 4, 64, True)]
if len(sys.argv) > 2:  # call5: more rows
    CASES += [(16384, 1, 64, False), (16384, 1, 64, True), (2048, 8, 64, False), (2048, 8, 128, False)]
for seq, b, d, causal in CASES:
    q, k, v, do = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(4))
    out, lse = attention.attention_forward(q, k, v, causal)
    run = partial(attention.attention_backward, do, q, k, v, out, lse, causal, impl="gluon")
    old = patched(run, attention_bwd_ws, "backward", OLD.backward)
    g_new, g_old = run(), old()
    same = torch.equal(g_new[1], g_old[1]) and torch.equal(g_new[2], g_old[2])
    dq_err = ((g_new[0].float() - g_old[0].float()).abs().max() / g_old[0].float().abs().max()).item()
    t = tune_cases.in_turns({"old": old, "new": run}, ROUNDS)  # (cuDNN's autograd backward cannot be captured)
    print(f"b{b} h16 L{seq} d{d} {'causal' if causal else 'full'} (dk dv {'bitwise' if same else 'DIFFER'}, dq "
          f"{dq_err:.1e}): " + ", ".join(f"{n} {ms * 1e3:.1f} us" for n, ms in t.items())
          + f"; new / old {t['old'] / t['new']:.4f}", flush=True)
PY

jax_kernels() {  # the kernels of a JAX fp8 call: name and duration (ncu, one metric), longest last
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv python3 /tmp/s36/jax_prof.py \
    > /tmp/s36/jax_kernels.csv 2> /tmp/s36/jax_kernels.err
  echo "ncu list rc=$?"
  python3 - <<'PY'
import csv
rows = [r for r in csv.reader(open("/tmp/s36/jax_kernels.csv")) if len(r) > 10]
head, body = rows[0], rows[1:]
name, val = head.index("Kernel Name"), head.index("Metric Value")
dur = {}
for r in body:
    dur.setdefault(r[name], []).append(float(r[val].replace(",", "")))
for n, v in sorted(dur.items(), key=lambda kv: max(kv[1])):
    print(f"{len(v)} x max {max(v) / 1e3:.1f} us  {n[:200]}")
PY
}

case $CALL in
  call1)
    timeout 330 python3 /tmp/s36/cudnn_fp8.py 3 2>&1 | tee "${LOG}_cudnn_fp8.log"
    timeout 120 python3 /tmp/s36/ab_c3.py 4 2>&1 | tee "${LOG}_ab_c3.log"
    jax_kernels 2>&1 | tee "${LOG}_jax_kernels.log"
    ;;
  call2)
    timeout 300 python3 /tmp/s36/ab_lazy.py 4 2>&1 | tee "${LOG}_ab_lazy.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "fp8 or maxima or fast_exp" 2>&1 | tail -6 | tee "${LOG}_gpu_tests_fp8.log"
    timeout 120 python3 -m kernels.tune_ws check --fp8 2>&1 | tail -12 | tee "${LOG}_tune_ws_check_fp8.log"
    ;;
  call3)
    timeout 300 python3 /tmp/s36/ab_lazy.py 4 2>&1 | tee "${LOG}_ab_eager.log"
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "fp8 or maxima or fast_exp" 2>&1 | tail -6 | tee "${LOG}_gpu_tests_fp8.log"
    ;;
  call4)
    timeout 300 python3 /tmp/s36/ab_dq.py 4 2>&1 | tee "${LOG}_ab_dq.log"
    [ "$2" = "ab" ] || timeout 250 python3 -m pytest tests/kernels/test_attention_bwd_ws.py tests/kernels/test_attention.py \
      -m gpu -q -p no:cacheprovider -n 8 -k "bwd_ws or test_attention_gpu" 2>&1 | tail -6 | tee "${LOG}_gpu_tests_bwd.log"
    ;;
  call5)
    timeout 400 python3 /tmp/s36/ab_dq.py 5 more 2>&1 | tee "${LOG}_ab_dq.log"
    ;;
  call6)
    install_perfci
    timeout 200 python3 -m pytest tests/kernels/test_attention_bwd_ws.py tests/kernels/test_attention.py \
      -m gpu -q -p no:cacheprovider -n 8 -k "bwd_ws or test_attention_gpu" 2>&1 | tail -3 | tee "${LOG}_gpu_tests_bwd.log"
    suite
    baseline_update "backward_d64" bwd_d64
    ;;
  call7)
    timeout 330 python3 -m pytest tests/kernels -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 \
      | tee "${LOG}_gpu_tests_kernels.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
