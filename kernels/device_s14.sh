#!/usr/bin/env bash
# Session-14 device calls (issue 16): bash kernels/device_s14.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# Call 1's PDL code was not kept (kernels/NOTES.md); its diff is docs/measurements/kernels_s14_pdl.patch, so call 1 no
# longer runs as written.
# call2 (H200) and call3 (H100): decode-sized GEMMs through the TMA kernel (matmul_splitk._splitk_tma) with the A side
#        changed: A's descriptor box only as many rows as M needs (TMA_BLOCK_M 0: 16 / 32 / 64 rows, mma.sync below
#        64) instead of 64 rows zero-filled beyond M, with 4 or 6 stages, or A read by masked pointer loads
#        (TMA_A_PTR); graph-timed A/B beside the default route and cuBLAS; outputs checked against fp32 first.
# call4 (H200): A's box fitted to M (TMA_BLOCK_M 0) with 32-, 64- and 128-column tiles (4 stages; 128 also with 3)
#        beside the 64-row box (64 and 128 columns), the default route and cuBLAS, at N >= 11008 (also two waves of
#        128-column tiles, 16x28672) and at N = 4096-8192, where matmul's routing still sent M <= 16 to split-K.
# call5 (H200) / call3 (H100): call 4's variants through matmul_splitk_tma itself, past the routing, at N = 4096-8192
#        and 16x4096x14336 (small-n), then (H100 only) at the N >= 11008 shapes.
# calls 2-5 ran with module flags that were not kept (TMA_BLOCK_M, TMA_A_PTR: docs/measurements/
#        kernels_s14_gemm_a_side.patch), so /tmp/skm.py no longer runs as written.
# Session 15 removed matmul_splitk.default_tma_config's wide_only argument: /tmp/low.py (calls 13-15) no longer runs as
#        written either.
# call6 (H100) / call7 (H200): the shipped change (A's box fitted to M always; WIDE_TMA_CONFIGS widest first, taken at
#        any number of waves they fill to WIDE_MIN_FILL, ahead of split-K): the GEMM GPU tests, the suite's GEMM rows
#        and the copy, the baseline's 16x14336x4096 entries re-made from two runs.
# call8 (H100) / call9 (H200): 16 < M <= 64 at N = 4096 (B resident in L2 between replays; 32x4096x4096 at 0.65x cuBLAS
#        after call 6) and M = 8: the pointer split-K kernel (splits 2-8 and its own, two tile shapes), the TMA kernel split 1-4
#        with 16- to 64-column tiles (A's box fitted to M), beside the default route and cuBLAS.
#        (call 9 was not run.)
# call10 (H100): after the review (explicit knobs keep their path, more GPU rows): the GEMM GPU tests.
# call11 (H100): the final main: every GPU test of the project (tests -m gpu, 8 xdist workers).
# call12 (H100, the call-11 card): call 11's five failures again, one test at a time.
# call13 (H100) / call14 (H200): the wide tiles (A's box fitted) below WIDE_MIN_FILL, where the default route is the
#        persistent kernel (M <= 16 with N >= 8448, or M > 16 past one wave of narrow tiles) or split-K: LLM shapes
#        such as 16x10240x8192 (80 128-column tiles, 0.61 of a wave), beside the default and cuBLAS.
# call15 (H100): the shipped LAST_RESORT_MIN_FILL rule: call 13's script again, then the GEMM GPU tests.
# call16 (H100): after that rule's review (narrow tiles out of the last resort): the GEMM GPU tests.
# call17 (H100): after the whole-diff review (one routing function, matmul.default_tma_route): the GEMM GPU tests.
# call1 (H100): programmatic dependent launch (PDL: kernels._checks.pdl_enter, decode.PDL, matmul_splitk.PDL) for
#        the decode kernels and the decode-sized GEMMs: graph-timed A/B, PDL on against off, at the suite's decode
#        shapes and M <= 64 GEMMs beside SDPA flash / cuBLAS; each also after a one-element add launched without
#        PDL (what a call gains when the kernel before it is not ours); outputs compared; the decode and GEMM GPU
#        tests with PDL on; the suite's decode and GEMM rows and the 256 MB copy through the perfci fixture.
set -o pipefail
source kernels/device_lib.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=$(case "$CALL" in call2|call4|call5|call7|call9|call14) echo h200;; *) echo h100;; esac)
LOG=$OUT/kernels_${GPU_TAG}_s14_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"

cat > /tmp/pdl.py <<'PY'
import sys

import torch

from kernels import decode, matmul, matmul_splitk, tune_cases
from kernels.tune_bwd import _time

ROUNDS = 3


def with_pdl(mod, on, fn):
    def run():
        mod.PDL = on
        try:
            return fn()
        finally:
            mod.PDL = True
    return run


def rounds(fns):
    times = {}
    for r in range(ROUNDS):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            if times.get(name) == float("inf"):
                continue
            try:
                ms, _ = _time(fn)
            except Exception as exc:
                print(f"  {name}: failed {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                torch.cuda.synchronize()
                ms = float("inf")
            times[name] = min(ms, times.get(name, float("inf")))
    return times


part = sys.argv[1]
x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
copy_ms = min(_time(lambda: y.copy_(x))[0] for _ in range(3))
gbs = 2 * x.numel() / copy_ms / 1e6
print(f"copy 256 MiB: {copy_ms * 1e3:.1f} us, {gbs:.0f} GB/s", flush=True)
del x, y
tiny = torch.zeros(1, device="cuda")
add_us = min(_time(lambda: tiny.add_(1))[0] for _ in range(3)) * 1e3
print(f"one-element add alone: {add_us:.2f} us", flush=True)


def report(tag, t, mb, ref):
    for name, ms in sorted(t.items(), key=lambda kv: kv[1]):
        us = ms * 1e3
        net = f", net of the add {mb / (us - add_us) * 1e3:.0f} GB/s {mb / (us - add_us) * 1e3 / gbs:.3f} of copy" \
            if "after add" in name else ""
        print(f"{part} {tag} {name:28s}: {us:7.2f} us ({mb / ms / 1e3:.0f} GB/s, {mb / ms / 1e3 / gbs:.3f} of copy; "
              f"{ref}/this x{t[ref] / ms:.3f}{net})", flush=True)


if part == "decode":
    for b, hq, hk, kv, d, dt in tune_cases.DEC_SHAPES:
        q = tune_cases.randn((b, hq, 1, d), dt, 0)
        k = tune_cases.randn((b, hk, kv, d), dt, 1)
        v = tune_cases.randn((b, hk, kv, d), dt, 2)
        outs = {on: with_pdl(decode, on, lambda: decode.decode_attention(q, k, v))() for on in (True, False)}
        g = torch.cuda.CUDAGraph()
        o_graph = torch.empty_like(q)
        with torch.cuda.graph(g):
            for _ in range(4):
                decode.decode_attention(q, k, v, out=o_graph)
        g.replay()
        torch.cuda.synchronize()
        print(f"check b{b} h{hq}/{hk} kv{kv} d{d}: pdl vs off max diff {(outs[True] - outs[False]).abs().max().item():.2e}, "
              f"graph of 4 pdl calls vs eager {(o_graph - outs[False]).abs().max().item():.2e}", flush=True)
        fns = {"pdl": with_pdl(decode, True, lambda: decode.decode_attention(q, k, v)),
               "off": with_pdl(decode, False, lambda: decode.decode_attention(q, k, v)),
               "pdl after add": with_pdl(decode, True, lambda: (tiny.add_(1), decode.decode_attention(q, k, v))),
               "off after add": with_pdl(decode, False, lambda: (tiny.add_(1), decode.decode_attention(q, k, v))),
               "sdpa-flash": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hk)}
        t = rounds(fns)
        report(f"b{b} h{hq}/{hk} kv{kv} d{d}", t, 2 * k.numel() * k.element_size() / 1e6, "off")
        del q, k, v
else:  # gemm
    for m, n, k in [(1, 4096, 4096), (16, 14336, 4096), (1, 14336, 4096), (64, 14336, 4096), (16, 4096, 14336),
                    (64, 4096, 4096), (16, 11008, 4096)]:
        a = tune_cases.randn((m, k), torch.bfloat16, 0)
        b = tune_cases.randn((k, n), torch.bfloat16, 1)
        ref = a.float() @ b.float()
        for on in (True, False):
            for _ in range(3):  # the arrival counters reset themselves
                out = with_pdl(matmul_splitk, on, lambda: matmul.matmul(a, b))()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            print(f"check {m}x{n}x{k} pdl={on}: rel err {err:.2e}", flush=True)
        fns = {"pdl": with_pdl(matmul_splitk, True, lambda: matmul.matmul(a, b)),
               "off": with_pdl(matmul_splitk, False, lambda: matmul.matmul(a, b)),
               "pdl after add": with_pdl(matmul_splitk, True, lambda: (tiny.add_(1), matmul.matmul(a, b))),
               "off after add": with_pdl(matmul_splitk, False, lambda: (tiny.add_(1), matmul.matmul(a, b))),
               "cublas": lambda: a @ b, "cublas after add": lambda: (tiny.add_(1), a @ b)}
        t = rounds(fns)
        report(f"{m}x{n}x{k}", t, (m * k + k * n + m * n) * 2 / 1e6, "cublas")
        del a, b
PY

cat > /tmp/skm.py <<'PY'
import sys

import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
copy_ms = min(_time(lambda: y.copy_(x))[0] for _ in range(3))
gbs = 2 * x.numel() / copy_ms / 1e6
print(f"copy 256 MiB: {copy_ms * 1e3:.1f} us, {gbs:.0f} GB/s", flush=True)
del x, y


def variant(block_m, a_ptr, cfg, a, b):
    def run():
        sk.TMA_BLOCK_M, sk.TMA_A_PTR = block_m, a_ptr
        try:
            if cfg is None:
                return matmul.matmul(a, b)
            if DIRECT:  # the TMA kernel itself, past matmul's routing (M <= 16 with N < 8448 goes to split-K there)
                return sk.matmul_splitk_tma(a, b, torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype,
                                                              device=a.device), cfg)
            return matmul.matmul(a, b, splitk_tma=cfg)
        finally:
            sk.TMA_BLOCK_M, sk.TMA_A_PTR = 64, False
    return run


SHAPES = [(16, 14336, 4096), (1, 14336, 4096), (32, 14336, 4096), (64, 14336, 4096), (16, 11008, 4096),
          (16, 12288, 4096), (16, 4096, 14336), (16, 28672, 4096)]
VARIANTS = None  # call 2: w = the 128-column tiles (32 where N < 11008) in every A-side form
DIRECT = len(sys.argv) > 2  # call 5 on: every variant through matmul_splitk_tma itself
if len(sys.argv) > 1:  # call 3 on: A's box fitted to M with three tile widths, beside the 64-row box
    SHAPES = [(16, 14336, 4096), (1, 14336, 4096), (32, 14336, 4096), (64, 14336, 4096), (16, 11008, 4096),
              (16, 28672, 4096), (1, 4096, 4096), (16, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096),
              (16, 8192, 4096), (1, 8192, 4096), (16, 6144, 4096)]
    if sys.argv[1] == "small-n":
        SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (16, 8192, 4096), (1, 8192, 4096), (16, 6144, 4096),
                  (16, 4096, 14336), (8, 4096, 4096), (32, 4096, 4096)]
    else:  # the small-N shapes ran in small-n
        SHAPES = [s for s in SHAPES if s[1] >= 11008]
    VARIANTS = {"fit w32": (0, (1, 32, 128, 4, 6, True)), "fit w64": (0, (1, 64, 128, 4, 6, True)),
                "fit w128": (0, (1, 128, 128, 4, 4, True)), "fit w128 s3": (0, (1, 128, 128, 4, 3, True)),
                "64 w64": (64, (1, 64, 128, 4, 6, True)), "64 w128": (64, (1, 128, 128, 4, 4, True))}
for m, n, k in SHAPES:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    w = (1, 128, 128, 4, 4, True) if n >= 11008 else (1, 32, 128, 4, 6, True)
    w6 = w[:4] + (6,) + w[5:]
    if VARIANTS is None:
        fns = {"default": variant(64, False, None, a, b), "tma64": variant(64, False, w, a, b),
               "fit": variant(0, False, w, a, b), "fit s6": variant(0, False, w6, a, b),
               "fit ptrA": variant(0, True, w, a, b), "fit ptrA s6": variant(0, True, w6, a, b),
               "64 ptrA": variant(64, True, w, a, b), "cublas": lambda: a @ b}
    else:
        fns = {"default": variant(64, False, None, a, b), "cublas": lambda: a @ b}
        fns.update({name: variant(bm, False, cfg, a, b) for name, (bm, cfg) in VARIANTS.items()})
    bad = []
    for name, fn in fns.items():
        try:
            out = fn()
            err = ((out.float() - ref).norm() / ref.norm()).item()
        except Exception as exc:
            print(f"  {m}x{n}x{k} {name}: failed {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            bad.append(name)
            continue
        if err > 1e-2:
            bad.append(name)
        print(f"  check {m}x{n}x{k} {name}: rel err {err:.2e}", flush=True)
    for name in bad:
        del fns[name]
    times = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    mb = (m * k + k * n + m * n) * 2 / 1e6
    for name, ms in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"skm {m}x{n}x{k} {name:12s}: {ms * 1e3:7.2f} us ({mb / ms / gbs:.3f} of copy; x{times['cublas'] / ms:.3f} "
              f"cuBLAS){' tiles ' + str(w) if name == 'tma64' else ''}", flush=True)
PY

cat > /tmp/mid.py <<'PY'
import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in [(32, 4096, 4096), (24, 4096, 4096), (48, 4096, 4096), (64, 4096, 4096), (8, 4096, 4096),
                (32, 4096, 14336), (32, 6144, 4096)]:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()

    def out():
        return torch.empty((m, n), dtype=a.dtype, device=a.device)

    fns = {"default": lambda: matmul.matmul(a, b), "cublas": lambda: a @ b}
    for s_ in (0, 2, 4, 8):  # pointer split-K (0: its own split count), BLOCK_M = next power of two >= M
        for cfg in ((64, 128, 4, 4), (32, 128, 4, 4)):
            fns[f"ptr split{s_ or 'auto'} {cfg}"] = (
                lambda s_=s_, cfg=cfg: sk.matmul_splitk(a, b, out(), sms, split=s_ or None, config=cfg, fused=True))
    for cfg in ((1, 32, 128, 4, 6, True), (2, 32, 128, 4, 6, True), (2, 64, 128, 4, 6, True), (4, 64, 128, 4, 4, True),
                (4, 32, 128, 4, 4, True), (1, 16, 128, 4, 8, True), (2, 16, 128, 4, 8, True), (1, 32, 64, 4, 8, True)):
        fns[f"tma {cfg[:5]}"] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, out(), cfg)
    bad = []
    for name, fn in fns.items():
        try:
            for _ in range(3):  # arrival counters reset themselves
                res = fn()
            err = ((res.float() - ref).norm() / ref.norm()).item()
        except Exception as exc:
            print(f"  {m}x{n}x{k} {name}: failed {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            bad.append(name)
            continue
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
            bad.append(name)
    for name in bad:
        del fns[name]
    times = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    for name, ms in sorted(times.items(), key=lambda kv: kv[1])[:12]:
        print(f"mid {m}x{n}x{k} {name:36s}: {ms * 1e3:7.2f} us (x{times['cublas'] / ms:.3f} cuBLAS)", flush=True)
    print(f"mid {m}x{n}x{k} default {times['default'] * 1e3:.2f} us, cublas {times['cublas'] * 1e3:.2f}", flush=True)
PY

cat > /tmp/low.py <<'PY'
import torch

from kernels import matmul, matmul_splitk as sk, tune_cases
from kernels.tune_bwd import _time

sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in [(16, 10240, 8192), (1, 10240, 8192), (16, 9216, 4096), (32, 5120, 4096), (64, 10240, 8192),
                (8, 10240, 4096), (16, 5120, 4096)]:
    a = tune_cases.randn((m, k), torch.bfloat16, 0)
    b = tune_cases.randn((k, n), torch.bfloat16, 1)
    ref = a.float() @ b.float()
    route = sk.default_tma_config(m, n, k, sms, wide_only=m <= matmul.SPLITK_MAX_M)
    split = route is None and matmul.use_splitk(m, n, k, sms)
    fns = {"default": lambda: matmul.matmul(a, b), "cublas": lambda: a @ b}
    for name, cfg in (("w128", (1, 128, 128, 4, 4, True)), ("w64", (1, 64, 128, 4, 6, True)),
                      ("w32", (1, 32, 128, 4, 6, True))):
        fns[name] = lambda cfg=cfg: sk.matmul_splitk_tma(a, b, torch.empty((m, n), dtype=a.dtype, device=a.device), cfg)
    for name, fn in list(fns.items()):
        err = ((fn().float() - ref).norm() / ref.norm()).item()
        if err > 1e-2:
            print(f"  {m}x{n}x{k} {name}: WRONG rel err {err:.2e}", flush=True)
            del fns[name]
    times = {}
    for r in range(3):
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    for name, ms in sorted(times.items(), key=lambda kv: kv[1]):
        note = f"  <- route {route}{' split-K' if split else ''}" if name == "default" else ""
        print(f"low {m}x{n}x{k} {name:8s}: {ms * 1e3:7.2f} us (x{times['cublas'] / ms:.3f} cuBLAS){note}", flush=True)
PY

case "$CALL" in
  call13|call14)  # wide tiles below WIDE_MIN_FILL where the default is the persistent kernel (or split-K)
    timeout 400 python3 /tmp/low.py 2>&1 | tee "${LOG}_low.log"
    ;;
  call17)  # after the whole-diff review (matmul.default_tma_route shared with tune_finals): the GEMM GPU tests
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call16)  # after the review of the last-resort rule (narrow tiles out of it, SPLITK_MAX_M moved): the GEMM GPU tests
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call15)  # the shipped last-resort rule: call 13's shapes again (the default now the chosen tiles), the GEMM GPU tests
    timeout 300 python3 /tmp/low.py 2>&1 | tee "${LOG}_low.log"
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call11)  # the final main: every GPU test of the project (kernels and perfci), installed as CI would
    install_perfci || exit 3
    timeout 540 python3 -m pytest tests -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -8 | tee "${LOG}_gpu_tests_all.log"
    ;;
  call12)  # call 11's five failures (8 xdist workers sharing the GPU) again, one at a time
    install_perfci || exit 3
    timeout 540 python3 -m pytest -q -p no:cacheprovider -p no:xdist \
      "tests/test_plugin_gpu.py::test_gpu_run_records_device_time_clock_and_nvtx" \
      "tests/test_jax_gpu.py::test_jax_matmul_median_is_within_5_percent_of_the_profiled_kernel_time" \
      "tests/test_timing_gpu.py::test_graph_time_matches_cupti_kernel_time_for_a_memory_bound_copy" \
      "tests/test_plugin_gpu.py::test_cuda_out_of_memory_fails_that_test_with_the_shapes_and_the_memory_state" \
      "tests/test_plugin_gpu.py::test_perfci_run_fails_a_slowdown_only_when_a_second_fresh_process_confirms_it" \
      2>&1 | tail -8 | tee "${LOG}_gpu_tests_rerun.log"
    ;;
  call10)  # after the review: explicit knobs keep their path; new GPU rows; the GEMM GPU tests
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    ;;
  call8|call9)  # 16 < M <= 64 at N = 4096 (L2-resident B) and M = 8: pointer / TMA split-K and narrow TMA tiles
    timeout 500 python3 /tmp/mid.py 2>&1 | tee "${LOG}_mid.log"
    ;;
  call2)
    timeout 300 python3 /tmp/skm.py 2>&1 | tee "${LOG}_skm.log"
    ;;
  call4)
    timeout 400 python3 /tmp/skm.py widths 2>&1 | tee "${LOG}_skm.log"
    ;;
  call6|call7)  # the shipped routing: the GEMM GPU tests, the suite's GEMM rows, the baselines' 16x14336x4096 entries
    timeout 250 python3 -m pytest tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider -n 8 2>&1 \
      | tail -5 | tee "${LOG}_gpu_tests.log"
    install_perfci || exit 3
    timeout 200 python3 -m pytest tests/perf/test_matmul.py "tests/perf/test_torch_ops.py::test_copy_256mb" -q \
      -p no:cacheprovider --benchmark-json="$OUT/perf_mm.json" > "${LOG}_perf_suite_mm.log" 2>&1
    echo "perf suite rc=$?"
    [ -f "$OUT/perf_mm.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_mm.json" | tee "${LOG}_perf_suite_mm_table.txt"
    timeout 150 perfci baseline update tests/perf/test_matmul.py -k 16x14336 --runs 2 --force --results-dir /tmp/bl \
      > "${LOG}_baseline_update_mm.log" 2>&1
    echo "baseline update rc=$?"
    tail -6 "${LOG}_baseline_update_mm.log"
    tar -czf "$OUT/baseline_${GPU_TAG}.tgz" baselines/
    ;;
  call3|call5)
    timeout 400 python3 /tmp/skm.py small-n direct 2>&1 | tee "${LOG}_skm_small_n.log"
    if [ "$CALL" = call3 ]; then
      timeout 400 python3 /tmp/skm.py widths direct 2>&1 | tee "${LOG}_skm.log"
    fi
    ;;
  call1)
    timeout 200 python3 /tmp/pdl.py decode 2>&1 | tee "${LOG}_pdl_decode.log"
    timeout 200 python3 /tmp/pdl.py gemm 2>&1 | tee "${LOG}_pdl_gemm.log"
    timeout 200 python3 -m pytest tests/kernels/test_decode.py tests/kernels/test_matmul.py -m gpu -q -p no:cacheprovider \
      -n 8 2>&1 | tail -4 | tee "${LOG}_gpu_tests.log"
    install_perfci || exit 3
    timeout 200 python3 -m pytest tests/perf/test_decode.py tests/perf/test_matmul.py "tests/perf/test_torch_ops.py::test_copy_256mb" \
      -k "decode or copy or 1x4096x4096 or 16x14336x4096" -q -p no:cacheprovider \
      --benchmark-json="$OUT/perf_pdl.json" > "${LOG}_perf_suite.log" 2>&1
    echo "perf suite rc=$?"
    tail -3 "${LOG}_perf_suite.log"
    [ -f "$OUT/perf_pdl.json" ] && python3 -m kernels.tune --perf-json "$OUT/perf_pdl.json" | tee "${LOG}_perf_suite_table.txt"
    ;;
esac
