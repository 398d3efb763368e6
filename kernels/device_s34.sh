#!/usr/bin/env bash
# Session-34 device calls (issue 16): bash kernels/device_s34.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.  Calls 2-3 ran the kernel with its experiment flag CODES_X: `git apply
# docs/measurements/kernels_s34_codes_x.patch` on 6f44432 first.  Call 5 ran SKIP_X: `git apply
# docs/measurements/kernels_s34_skip_x.patch` on the session's commit, and `git show 6f44432:kernels/_attn_fwd_ws.py >
# kernels_s34_head_fwd.py` (the kernel before the session, in the repository root).
# Call 8 ran `git apply docs/measurements/kernels_s34_fp8_light.patch` on ecdab4b (not kept).
# call1: ncu (--set full, one launch, SASS source page) of the fp8 forward with fast_exp (the shipped default) at
#        d128 L16384 and L4096 without a mask: where the consumers' cycles go now that the exponentials are gone
#        (pipe utilisation, warp states, stall samples per SASS instruction).
# call2: the codes softmax's variants (kernels/_attn_fwd_ws.py CODES_X, module copies of the kernel with the flag set):
#        1 row maxima folded by halves (a tree), 2 the clamp on the FMA pipe (fma.sat, then the FMA onto 1.5 * 2^23),
#        4 the output's rescale skipped by warps none of whose rows' maxima moved (vote.any, a branch), and 3 / 7;
#        checked against flag 0 (the shipped build) and the fp64 reference of the dequantised inputs, then
#        graph-timed in turns (best of 4 rounds) with our bf16 forward at the suite's fp8 shapes, L16384 and d64.
# call3: call 2's combinations: 7 again, 15 (7 with the rescale's branch a 32 outputs' asm, two a thread at d128),
#        6 (the clamp and the rescale), 5 (the tree and the rescale), 3 (the tree and the clamp).
# call4: on the tree with the codes softmax of call 3's flags 15 (d128) / 3 (d64) built in (no flags): the fp8 GPU
#        tests, `kernels.tune_ws check --fp8`, the suite's fp8 and bf16 d128 L4096 rows (tests/perf/test_flash.py) and
#        the H200 baseline's two fp8 entries re-made from two runs.
# call5: (a) the fp8 forward on the tree against the kernel before this session (kernels_s34_head_fwd.py, a copy of
#        HEAD's kernels/_attn_fwd_ws.py swapped in) at d128 L16384 full / causal beside our bf16; (b) the rescale's skip
#        for the exponentials' two-consumer builds (SKIP_X 1 in a module copy) against the tree in bf16 at d64 / d128
#        L4096 full / causal and d128 L16384, beside cuDNN, outputs compared bitwise; graph-timed in turns (4 rounds).
# call6: ncu as call 1 on the commit: the fp8 forward with the codes path at d128 L16384 without a mask, and the bf16
#        forward at d64 L4096 causal (level with cuDNN: 0.97-1.00x), for the next steps.
# call7: the fp8 codes path built without its consumers' warpgroup barriers before their mbarrier operations
#        (LIGHT_PTX through kernels/_ptx_barriers.py, SHIPPED kinds; attention_ws.light_barriers patched to take fp8
#        at head dim 128 on two consumers, turns included) against the tree, d128 L16384 / L4096 full and L4096
#        causal, outputs compared bitwise; graph-timed in turns (4 rounds).
# call8: on the tree with the fp8 codes path built light (attention_ws.light_barriers' codes): the fp8 and light
#        GPU tests, then call 7's A/B again with the light build the default (ab_light.py off: light_barriers False).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
LOG=$OUT/kernels_${GPU_TAG}_s34_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"
mkdir -p /tmp/s34
source kernels/device_lib.sh

cat > /tmp/s34/ab_codes.py <<'PY'
import importlib.util
import re
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels.reference import attention_fp32, rel_err

ROUNDS = int(sys.argv[1])
FLAGS = [int(f) for f in sys.argv[2].split(",")]
SRC = open("kernels/_attn_fwd_ws.py").read()


def copy(flag):
    path = f"/tmp/s34/_fwd_x{flag}.py"
    src, n = re.subn(r"^CODES_X: gl.constexpr = gl.constexpr\(\d+\)", f"CODES_X: gl.constexpr = gl.constexpr({flag})",
                     SRC, flags=re.M)
    assert n == 1
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(f"_fwd_x{flag}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


COPIES = {f: copy(f) for f in FLAGS}


def variant(run, flag):
    def go():
        with mock.patch.object(attention_ws, "attn_fwd_ws", COPIES[flag].attn_fwd_ws):
            return run()
    return go


torch.manual_seed(0)
for b, h, lq, lk, d, causal in [(1, 2, 37, 48, 128, False), (2, 4, 1000, 1008, 128, True), (1, 4, 4096, 4096, 128, False),
                                (1, 2, 16384, 16384, 128, False), (2, 4, 1000, 1536, 64, True)]:
    q, k, v = (torch.randn(b, h, n, d, device="cuda") for n in (lq, lk, lk))
    (q8, sq), (k8, sk), (v8, sv) = (attention.quantize_fp8(t) for t in (q, k, v))
    v8 = v8.transpose(2, 3).contiguous().transpose(2, 3)
    deq = [t.to(torch.float64) * s for t, s in ((q8, sq), (k8, sk), (v8, sv))]
    ref, ref_lse = attention_fp32(*deq, causal, None, "bhld", dtype=torch.float64)
    fin = torch.isfinite(ref_lse)
    line = f"check b{b} h{h} lq{lq} lk{lk} d{d} causal={causal}:"
    base = None
    for flag in FLAGS:
        lse = torch.full((b, h, lq), float("nan"), device="cuda")
        out, _ = variant(partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon",
                                 lse=lse), flag)()
        lerr = (lse[fin].double() - ref_lse[fin]).abs().max().item()
        if base is None:
            base = (out, lse)
        same = torch.equal(out, base[0]) and torch.equal(lse, base[1])
        line += f" x{flag}: err {rel_err(out, ref):.2e} lse {lerr:.2e} {'bitwise' if same else 'DIFFERS'};"
    print(line, flush=True)

for seq, b, d, causal in [(16384, 1, 128, False), (4096, 4, 128, False), (4096, 4, 128, True), (512, 32, 128, False),
                          (4096, 4, 64, False)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, d, vt=True)
    run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    fns = {"bf16-ours": partial(attention.attention_forward, q, k, v, causal)}
    fns.update({f"x{f}": variant(run, f) for f in FLAGS})
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"b{b} h16 L{seq} d{d} {'causal' if causal else 'full'}: " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({t['bf16-ours'] / ms:.3f}x bf16, {t['x0'] / ms:.3f}x x0)" for n, ms in t.items()),
        flush=True)
PY

cat > /tmp/s34/ab_skip.py <<'PY'
import importlib.util
import re
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels import reference as ref

ROUNDS = int(sys.argv[1])


def load(name, path, sub=None):
    if sub:
        src, n = re.subn(sub[0], sub[1], open(path).read(), flags=re.M)
        assert n == 1
        path = f"/tmp/s34/{name}.py"
        open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


HEAD = load("_fwd_head", "kernels_s34_head_fwd.py")
SKIP = load("_fwd_skip", "kernels/_attn_fwd_ws.py",
            (r"^SKIP_X: gl.constexpr = gl.constexpr\(0\)", "SKIP_X: gl.constexpr = gl.constexpr(1)"))


def variant(run, mod):
    def go():
        with mock.patch.object(attention_ws, "attn_fwd_ws", mod.attn_fwd_ws):
            return run()
    return go


for seq, b, causal in [(16384, 1, False), (16384, 1, True)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    fns = {"bf16-ours": partial(attention.attention_forward, q, k, v, causal), "fp8 before": variant(run, HEAD),
           "fp8 tree": run}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"fp8 b{b} h16 L{seq} d128 {'causal' if causal else 'full'}: " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({t['bf16-ours'] / ms:.3f}x bf16)" for n, ms in t.items()), flush=True)

for seq, b, d, causal in [(4096, 4, 64, True), (4096, 4, 64, False), (4096, 4, 128, False), (4096, 4, 128, True),
                          (16384, 1, 128, False)]:
    q, k, v = (tune_cases.randn((b, 16, seq, d), torch.bfloat16, i) for i in range(3))
    run = partial(attention.attention_forward, q, k, v, causal, impl="gluon")
    o1, l1 = run()
    o2, l2 = variant(run, SKIP)()
    same = torch.equal(o1, o2) and torch.equal(l1, l2)
    fns = {"cudnn": partial(ref.sdpa, q, k, v, causal, "cudnn"), "tree": run, "skip": variant(run, SKIP)}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"bf16 b{b} h16 L{seq} d{d} {'causal' if causal else 'full'} ({'bitwise' if same else 'DIFFERS'}): "
          + ", ".join(f"{n} {ms * 1e3:.1f} us ({t['cudnn'] / ms:.3f}x cuDNN)" for n, ms in t.items()), flush=True)
PY

cat > /tmp/s34/ab_light.py <<'PY'
import sys
from functools import partial
from unittest import mock

import torch

from kernels import attention, attention_ws, tune_cases
from kernels._checks import padded_dim

ROUNDS = int(sys.argv[1])


OFF = len(sys.argv) > 2 and sys.argv[2] == "off"


def light_fp8(dims, causal, fp8, config, codes=False):
    return not OFF and fp8 and padded_dim(dims.head_dim) == 128 and config[2] == 2


def light(run):
    def go():
        with mock.patch.object(attention_ws, "light_barriers", light_fp8):
            return run()
    return go


for seq, b, causal in [(16384, 1, False), (4096, 4, False), (4096, 4, True)]:
    (q, k, v), (q8, k8, v8, sq, sk, sv) = tune_cases.fp8_inputs(b, 16, seq, 128, vt=True)
    run = partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, causal, impl="gluon")
    o1, l1 = run()
    o2, l2 = light(run)()
    same = torch.equal(o1, o2) and torch.equal(l1, l2)
    names = ("fp8 light (tree)", "fp8 with barriers") if OFF else ("fp8 tree", "fp8 light")
    fns = {"bf16-ours": partial(attention.attention_forward, q, k, v, causal), names[0]: run, names[1]: light(run)}
    t = tune_cases.in_turns(fns, ROUNDS)
    print(f"fp8 b{b} h16 L{seq} d128 {'causal' if causal else 'full'} ({'bitwise' if same else 'DIFFERS'}): " + ", ".join(
        f"{n} {ms * 1e3:.1f} us ({t['bf16-ours'] / ms:.3f}x bf16)" for n, ms in t.items()), flush=True)
PY

case $CALL in
  call1)
    profile fp8_fast_L16384 attn_fwd_ws --fp8 --seq 16384 --dim 128 --mask full --impl gluon --reps 2
    profile fp8_fast_L4096 attn_fwd_ws --fp8 --seq 4096 --dim 128 --mask full --impl gluon --reps 2
    for n in fp8_fast_L16384 fp8_fast_L4096; do
      grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|No Eligible|stalled_|Pipe|pipe" /tmp/ncu/${n}_details.txt | head -60
    done
    tar -C /tmp/ncu -czf "$OUT/kernels_${GPU_TAG}_s34_${CALL}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call2)
    timeout 540 python3 /tmp/s34/ab_codes.py 4 0,1,2,4,7 2>&1 | tee "${LOG}_ab_codes.log"
    ;;
  call3)
    timeout 570 python3 /tmp/s34/ab_codes.py 4 0,7,15,6,5,3 2>&1 | tee "${LOG}_ab_codes.log"
    ;;
  call4)
    timeout 200 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "fp8 or maxima or fast_exp" 2>&1 | tail -4 | tee "${LOG}_gpu_tests_fp8.log"
    timeout 120 python3 -m kernels.tune_ws check --fp8 2>&1 | tail -12 | tee "${LOG}_tune_ws_check_fp8.log"
    install_perfci
    timeout 150 python3 -m pytest tests/perf/test_flash.py -q -p no:cacheprovider --benchmark-json="$OUT/perf.json" \
      -k "fp8 or (test_flash_forward and L4096-d128 and ours and not triton)" > "${LOG}_perf_flash.log" 2>&1
    echo "perf flash rc=$?"; tail -3 "${LOG}_perf_flash.log"
    [ -f "$OUT/perf.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf.json" | tee "${LOG}_perf_flash_table.txt"
    baseline_update "test_flash_forward_fp8" fp8
    ;;
  call5)
    timeout 560 python3 /tmp/s34/ab_skip.py 4 2>&1 | tee "${LOG}_ab_skip.log"
    ;;
  call6)
    profile fp8_tree_L16384 attn_fwd_ws --fp8 --seq 16384 --dim 128 --mask full --impl gluon --reps 2
    profile bf16_d64_causal_L4096 attn_fwd_ws --seq 4096 --dim 64 --mask causal --impl gluon --reps 2
    for n in fp8_tree_L16384 bf16_d64_causal_L4096; do
      grep -E "Duration|Compute \(SM\) Throughput|Warp Cycles Per Issued|Stall (Long|Barrier|Wait|Not Sel|Math|Short|No Inst)|Pipe (Tensor|Alu|Fma|Xu)" /tmp/ncu/${n}_details.txt | head -20
    done
    tar -C /tmp/ncu -czf "$OUT/kernels_${GPU_TAG}_s34_${CALL}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call7)
    timeout 300 python3 /tmp/s34/ab_light.py 4 2>&1 | tee "${LOG}_ab_light.log"
    ;;
  call8)
    timeout 250 python3 -m pytest tests/kernels/test_attention.py -m gpu -q -p no:cacheprovider -n 8 \
      -k "fp8 or maxima or fast_exp or light" 2>&1 | tail -4 | tee "${LOG}_gpu_tests_fp8_light.log"
    timeout 200 python3 /tmp/s34/ab_light.py 4 off 2>&1 | tee "${LOG}_ab_light.log"
    ;;
  *) echo "unknown call $CALL"; exit 2 ;;
esac
