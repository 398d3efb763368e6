#!/usr/bin/env bash
# Session-41 device calls (issue 16), H200s only again: bash kernels/device_s41.sh CALL (OUT set by the tool).  Every
# step is guarded by `timeout`.  Timing: the power-capped steady state (kernels/tune_ab.steady_in_turns: a graph of 20
# calls replayed back to back for a set time, the variants in turns, medians).
# call1: the 64-row tiles (one consumer warpgroup a CTA) above 128 rows, where they fit one round and the 128-row
#        tiles leave SMs idle or fill them no better (session 39's open rows: 512x1024x4096 0.76x cuBLAS,
#        512x512x8192 0.67, 130x4096x4096 0.80): `h64` WS_HALF_CONFIG with default_split's chunks, `h64s1` the same
#        unsplit, `h64x128` WS_HALF_WIDE_CONFIG unsplit, against the shipped route and cuBLAS; outputs bitwise against
#        the shipped route's where both are unsplit Gluon builds, errors against fp32 everywhere.
# call2: the rule from call 1 (64x64 tiles wherever they fit one round, at any M; 64x128 tiles where they fit one round
#        and compute fewer output elements than the 128-row tiles) against session 40's (the 64-row tiles only at M
#        <= 128), at call 1's shapes and others the rule changes (N 128-512 at M 640-4096, 129-319 rows), two it keeps;
#        then the GEMM GPU tests.
# call3: where the 64x64 tiles' time goes (104x4096x4096: 11.6 us against cuBLAS's 9.6-10.1; the tile's wgmma work
#        alone about 4.5 us at the SMs' peak): the kernel as shipped (unsplit, 8 stages) beside copies of it with the
#        consumer's wgmma taken out (`nomma`: the ring streamed, nothing computed), the producer's copies taken out
#        (`noload`: each slot's barrier arrived on at once, the wgmma over stale shared memory), both (`none`: the
#        ring's barriers alone), and 4 / 12 stages; K 1024-8192 for the time a K step and the fixed cost.  Outputs of
#        the variants are not the product (diagnostics only).
# call4: call 3 found the consumer's compute alone (`noload`, 121 ns a K step) slower than cuBLAS's whole kernel (111
#        ns a K step) and the ring's barriers alone 62 ns a step: `w2`, the consumer keeping two wgmma groups in flight
#        (warpgroup_mma_wait(2), a slot released two steps later) so that a step's waits and arrivals overlap two
#        groups rather than one; w2 with the copies taken out (`w2noload`); 64x64 tiles at 8 and 12 stages, 128x64
#        tiles (two consumers) at 8; outputs bitwise against the shipped kernel's (the same K order).
# call5: call 4's `noload` 128x64 tiles (two consumers, 2 x 64 K steps of 64x64 each) in 12.7 us against one
#        consumer's 64 steps in 10.4: one warpgroup's wgmma chain is what holds the 64-row tiles back.  KPAIR
#        (matmul_ws_kernel; the diff is docs/measurements/kernels_s41_kpair.patch): a 64-row tile's K steps shared by
#        two consumer warpgroups (even / odd), consumer 1's fp32 sum added to consumer 0's through shared memory,
#        against the same tiles on one consumer (HALF_KPAIR off), and
#        64x128 tiles with KPAIR at 6 stages (`w6k`) or with plain stores at 8 (`w8e1k`) beside the shipped 8-stage
#        64x128 tiles (`w8`, one consumer); errors against fp32, the output the same over two calls.  (To run it again,
#        apply kernels_s41_kpair_rebased.patch: its harness uses the patch's HALF_KPAIR and kpair_fits.)
# call6: call 5's KPAIR (docs/measurements/kernels_s41_kpair.patch) cost 0.6 us at K = 1024 and held each consumer's
#        two slots: its fp32 sum now through a 128-byte-swizzled buffer (NVMMASharedLayout, for the bank conflicts of
#        the unswizzled one), at 8 and 12 stages (`kp8`, `kp12`), and with each slot released as soon as its own wgmma
#        is done (`w0`: warpgroup_mma_wait(0), the other consumer's group in flight meanwhile); against the shipped
#        one-consumer tiles.  Makes kernels/_s41kp_ws.py and _s41kp_gluon.py first (`kpair_copies`: copies of
#        _matmul_ws.py and _matmul_gluon.py with docs/measurements/kernels_s41_kpair.patch, rebased, and
#        kernels_s41_kpair_swizzled.patch applied).
# call7: 64x96 tiles (64 + 32 columns through matmul_ws_kernel's BLOCK_N2, 8 stages, 188 KB; `h96`, `h96_6` at 6
#        stages) where the 64x128 tiles leave SMs idle and the 64x64 ones take more than a round (96 x 5120-6144 x 4096:
#        0.78-0.87x cuBLAS), and beside the 64x64 / 128-row tiles elsewhere, with call 1's harness; bitwise against the
#        shipped route where both are unsplit.  Needs docs/measurements/kernels_s41_tiles96.patch (the host's checks
#        and WS_SPLIT_BLOCK_N {96: (64, 32)}; the kernel unchanged).
# call8: the GEMM GPU tests on the session's routing as committed (call 2 ran them with its first form, which also took
#        64x128 tiles at 319x2048).
# call9: ncu --set full of 104x4096x4096 on the shipped 64x64 tiles, on KPAIR (call 6's kp8w0: two consumers, each
#        slot released as its wgmma is done) and on the 128x64 tiles (two consumers a 128-row tile), with their warps'
#        stall reasons (pc sampling): why two consumers on one 64-row tile did not take the compute off the pace.  Makes
#        the kpair copies first (`kpair_copies`, as call 6).
# call10: call 9's ncu of the 64x64 tiles: a fifth of their warps' stall samples on `barrier`, the warpgroup barriers
#        Triton puts before each mbarrier operation (session 31's kernels/_ptx_barriers.py removes the consumers'
#        ones before slot releases and ready waits: offline 3 of the 64x64 build's 16).  The Gluon GEMM built through
#        that rewrite (`light`: then a copy of _matmul_ws.py with a LIGHT_PTX constexpr, launched with the rewrite's
#        version; since the review the shipped kernel with every tile in LIGHT_TILES) against the plain build; session
#        31 found it level on the 128x256 tiles, whose K step is 4x longer.  Outputs bitwise; the rewrite's mark
#        checked in the compiled PTX.
# call11: the shipped form of call 10 (matmul_ws_kernel's LIGHT_PTX for _matmul_gluon.LIGHT_TILES, 64x64 tiles; the
#        compile step chained after the cluster rewrite's): the Gluon GEMM's GPU tests (the light build bitwise the plain one
#        at five shapes, split and unsplit, B by TMA and cp.async), then the route against LIGHT_TILES () at three
#        shapes (since the review through call 10's harness, its lines in that form).
# call12: after the review (variants.py, tune_ab's faster_in / timings_line without errors, kpair_copies on the
#        rebased patch, call 10's harness on the shipped kernel): the harnesses run once each at one shape (1 round
#        of 0.05 s: a run, not a timing).  Not run: the session's device time was spent; checked here only by lint, the
#        substitutions' match counts and kpair_copies on a copy of the tree.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
source kernels/device_lib.sh
CALL=${1:-call1}
[ "$CALL" = harnesses ] || device_env s41 "$CALL"  # harnesses: the files under /tmp/s41 only
mkdir -p /tmp/s41

cat > /tmp/s41/variants.py <<'PY'
"""The session's kernel variants as module_copy substitutions (the harnesses import them from here).  NOMMA (on
kernels/_matmul_ws.py): the consumer's wgmma taken out; NOLOAD: the producer's copies taken out, each slot's barrier
arrived on at once; W2: two wgmma groups in flight, each slot released two steps later; W0 (on KPAIR's copy,
kernels/_s41kp_ws.py): each slot released as soon as its own wgmma is done."""
import re

NOMMA = [(re.escape("acc = warpgroup_mma(a, b_s.index(s), acc, is_async=True)"), "pass"),
         (re.escape("acc = warpgroup_mma_wait(1, deps=(acc,))"), "pass"),
         (re.escape("acc = warpgroup_mma_wait(0, deps=(acc,))"), "pass")]
NOLOAD = [(re.escape("mbarrier.expect(a_ready.index(s), A_BYTES + B_TMA_BYTES)"),
           "mbarrier.arrive(a_ready.index(s), count=1)"),
          (re.escape("tma.async_copy_global_to_shared(a_desc, [off_m, kt * BLOCK_K], a_ready.index(s), a_s.index(s))"),
           "pass"),
          (re.escape("tma.async_copy_global_to_shared(b_desc, [kt * BLOCK_K, off_n], a_ready.index(s), b_s.index(s))"),
           "pass")]
W2 = [(re.escape("""            else:
                acc = warpgroup_mma_wait(1, deps=(acc,))
            if kt > kt0:
                mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)"""),
       """            else:
                acc = warpgroup_mma_wait(2, deps=(acc,))
            if kt > kt0 + 1:
                mbarrier.arrive(empty.index((j - 2) % STAGES), count=1)"""),
      (re.escape("""        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
        if SPLIT > 1:"""),
       """        if kt1 - kt0 > 1:
            mbarrier.arrive(empty.index((j - 2) % STAGES), count=1)
        mbarrier.arrive(empty.index((j - 1) % STAGES), count=1)
        if SPLIT > 1:""")]
W0 = [(re.escape("""                acc = warpgroup_mma_wait(1, deps=(acc,))
                if kt > kt0 + which:  # each slot released by the consumer that read it (``empty`` counts one)
                    mbarrier.arrive(empty.index((jj - 2) % STAGES), count=1)"""),
       """                acc = warpgroup_mma_wait(0, deps=(acc,))
                mbarrier.arrive(empty.index(s), count=1)"""),
      (re.escape("""            if kt1 > kt0 + which:
                mbarrier.arrive(empty.index((j + kt1 - 1 - (kt1 - 1 - kt0 - which) % 2 - kt0) % STAGES), count=1)"""),
       "")]
PY

cat > /tmp/s41/gemm_tiles.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import gemm_operands, must_run, outputs_and_errors, ratios, steady_in_turns, timings_line

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
VARIANTS = {  # name: (config, split: None for default_split's)
    "h64": (mg.WS_HALF_CONFIG, None), "h64s1": (mg.WS_HALF_CONFIG, 1), "h64x128": (mg.WS_HALF_WIDE_CONFIG, 1),
    "h64_12": ((64, 64, 64, 8, 12, 0), None), "slim": (mg.WS_SLIM_CONFIG, None), "h96": ((64, 96, 64, 8, 8, 0), 1),
    "h96_6": ((64, 96, 64, 8, 6, 0), 1)}
WANT = sys.argv[4].split(",") if len(sys.argv) > 4 else ["h64", "h64s1", "h64x128"]
sms = torch.cuda.get_device_properties(0).multi_processor_count


def items(m, n, k, cfg, split):
    split = mg.default_split(m, n, k, cfg, sms) if split is None else split
    return f"{cfg[0]}x{cfg[1]}/{split}: {-(-m // cfg[0]) * -(-n // cfg[1]) * split}"


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "shipped": lambda: matmul(a, b, out=c)}
    for nm in WANT:
        cfg, sp = VARIANTS[nm]
        fns[nm] = lambda cfg=cfg, sp=sp: must_run(mg.matmul_ws(a, b, c, cfg, split=sp), f"{cfg} split={sp}",
                                                  mg.status)
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    gluon = mm.gluon_default(m, n, aligned=True)
    cfg = mg.default_config(m, n, sms)
    ship_split = mg.default_split(m, n, k, cfg, sms) if gluon else 0
    route = f"gluon {items(m, n, k, cfg, None)}" if gluon else "triton"
    same = {nm: torch.equal(outs[nm], outs["shipped"]) for nm in WANT
            if ship_split == 1 and (VARIANTS[nm][1] or mg.default_split(m, n, k, VARIANTS[nm][0], sms)) == 1}
    print(f"{m}x{n}x{k} (shipped: {route}; items " + ", ".join(f"{nm} {items(m, n, k, *VARIANTS[nm])}" for nm in WANT)
          + f"), {ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          f"{timings_line(times, errs)}; x cublas: {ratios(times, 'cublas')}; x shipped: "
          f"{ratios(times, 'shipped', ['cublas'])}; bitwise shipped's: "
          + (", ".join(f"{nm} {s}" for nm, s in same.items()) or "-"), flush=True)
PY

cat > /tmp/s41/gemm_route.py <<'PY'
import statistics
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import matmul as mm
from kernels.matmul import matmul
from kernels.tune_ab import (faster_in, gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns,
                             timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count
default_config = mg.default_config


def s40_config(m, n, sms, b_tma=True):  # session 40's rule: the 64-row tiles only at M <= HALF_MAX_M
    return default_config(m, n, sms, b_tma) if b_tma and m <= mg.HALF_MAX_M else _rated(m, n, sms, b_tma)


def _rated(m, n, sms, b_tma):
    def score(config, rate):
        cols = -(-n // config[1])
        tiles = -(-m // config[0]) * cols
        return tiles / (-(-tiles // sms) * sms) * n / (cols * config[1]) * rate

    rated = [(mg.WS_CONFIG, 1.0)] + ([(mg.WS_MID_CONFIG, mg.MID_EFFICIENCY)] if b_tma else [])
    rated += [(mg.WS_NARROW_CONFIG, mg.NARROW_EFFICIENCY), (mg.WS_SLIM_CONFIG, mg.SLIM_EFFICIENCY)]
    return max(rated, key=lambda cr: score(*cr))[0]


for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new,
           "before": patched(new, mg, "default_config", s40_config)}
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg, old = default_config(m, n, sms), s40_config(m, n, sms)
    sp, old_sp = mg.default_split(m, n, k, cfg, sms), mg.default_split(m, n, k, old, sms)
    route = f"new: {cfg[0]}x{cfg[1]} split {sp}, before: {old[0]}x{old[1]} split {old_sp}"
    print(f"{m}x{n}x{k} ({route if mm.gluon_default(m, n, aligned=True) else 'triton'}), {ROUNDS} rounds of {SECONDS} "
          f"s, us a call median (min-max) [max err / max |ref|]: {timings_line(times, errs)}; x cublas: "
          f"{ratios(times, 'cublas')}; new x before "
          f"{statistics.median(times['before']) / statistics.median(times['new']):.3f} "
          f"(faster in {faster_in(times, 'new', 'before')})"
          + (f"; bitwise before's: {torch.equal(outs['new'], outs['before'])}" if sp == old_sp == 1 else ""),
          flush=True)
PY

cat > /tmp/s41/gemm_diag.py <<'PY'
import sys

import torch
from variants import NOLOAD, NOMMA

from kernels import _matmul_gluon as mg
from kernels.tune_ab import (gemm_operands, module_copy, must_run, outputs_and_errors, patched, ratios,
                             steady_in_turns, timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
KERNELS = {"nomma": module_copy("_mm_nomma", "kernels/_matmul_ws.py", NOMMA).matmul_ws_kernel,
           "noload": module_copy("_mm_noload", "kernels/_matmul_ws.py", NOLOAD).matmul_ws_kernel,
           "none": module_copy("_mm_none", "kernels/_matmul_ws.py", NOMMA + NOLOAD).matmul_ws_kernel}

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)

    def run(cfg, kernel=None):
        go = lambda: must_run(mg.matmul_ws(a, b, c, cfg, split=1), str(cfg), mg.status)  # noqa: E731
        return patched(go, mg, "matmul_ws_kernel", kernel) if kernel is not None else go

    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": run(mg.WS_HALF_CONFIG),
           "st4": run((64, 64, 64, 8, 4, 0)), "st12": run((64, 64, 64, 8, 12, 0))}
    fns |= {nm: run(mg.WS_HALF_CONFIG, kern) for nm, kern in KERNELS.items()}
    err = outputs_and_errors({"ship": fns["ship"]}, c, ref)[1]["ship"]
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    tiles = -(-m // 64) * -(-n // 64)
    print(f"{m}x{n}x{k} ({tiles} 64x64 tiles, {-(-k // 64)} K steps; ship's error {err:.1e}), {ROUNDS} rounds of "
          f"{SECONDS} s, us a call median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}",
          flush=True)
PY

cat > /tmp/s41/gemm_w2.py <<'PY'
import sys

import torch
from variants import NOLOAD, W2

from kernels import _matmul_gluon as mg
from kernels.tune_ab import (gemm_operands, module_copy, must_run, outputs_and_errors, patched, ratios,
                             steady_in_turns, timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CFG = {"h": mg.WS_HALF_CONFIG, "h12": (64, 64, 64, 8, 12, 0), "slim": mg.WS_SLIM_CONFIG}[sys.argv[4]]
KERNELS = {"w2": module_copy("_mm_w2", "kernels/_matmul_ws.py", W2).matmul_ws_kernel,
           "noload": module_copy("_mm_noload", "kernels/_matmul_ws.py", NOLOAD).matmul_ws_kernel,
           "w2noload": module_copy("_mm_w2noload", "kernels/_matmul_ws.py", W2 + NOLOAD).matmul_ws_kernel}

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)

    def run(kernel=None):
        go = lambda: must_run(mg.matmul_ws(a, b, c, CFG, split=1), str(CFG), mg.status)  # noqa: E731
        return patched(go, mg, "matmul_ws_kernel", kernel) if kernel is not None else go

    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": run()}
    fns |= {nm: run(kern) for nm, kern in KERNELS.items()}
    outs, errs = outputs_and_errors({nm: fns[nm] for nm in ("ship", "w2")}, c, ref)
    err = errs["w2"]
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    print(f"{m}x{n}x{k} ({CFG[0]}x{CFG[1]}, {CFG[4]} stages, unsplit; {-(-k // 64)} K steps; w2's error {err:.1e}, "
          f"bitwise ship's: {torch.equal(outs['w2'], outs['ship'])}), {ROUNDS} rounds of {SECONDS} s, us a call "
          f"median (min-max): {timings_line(times)}; x ship: {ratios(times, 'ship')}", flush=True)
PY

cat > /tmp/s41/gemm_kpair.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.tune_ab import (faster_in, gemm_operands, must_run, outputs_and_errors, patched, ratios,
                             steady_in_turns, timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
CFGS = {"w8": (64, 128, 64, 8, 8, 0), "w6k": (64, 128, 64, 8, 6, 0), "w8e1k": (64, 128, 64, 8, 8, 1),
        "h12k": (64, 64, 64, 8, 12, 0)}
WANT = [x for x in sys.argv[4].split(",") if x] if len(sys.argv) > 4 else []
sms = torch.cuda.get_device_properties(0).multi_processor_count

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    new = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "new": new, "before": patched(new, mg, "HALF_KPAIR", False)}
    for nm in WANT:
        fns[nm] = lambda nm=nm: must_run(mg.matmul_ws(a, b, c, CFGS[nm], split=1), nm, mg.status)
    outs, errs = outputs_and_errors(fns, c, ref)
    outs2, _ = outputs_and_errors({"new": new}, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms)
    print(f"{m}x{n}x{k} ({cfg[0]}x{cfg[1]} split {mg.default_split(m, n, k, cfg, sms)}, kpair {mg.kpair_fits(cfg)}), "
          f"{ROUNDS} rounds of {SECONDS} s, us a call median (min-max) [max err / max |ref|]: "
          f"{timings_line(times, errs)}; x cublas: {ratios(times, 'cublas')}; x before: "
          f"{ratios(times, 'before', ['cublas'])} (new faster in {faster_in(times, 'new', 'before')}); new the same "
          "over two calls: "
          f"{torch.equal(outs['new'], outs2['new'])}, bitwise before's: {torch.equal(outs['new'], outs['before'])}",
          flush=True)
PY

cat > /tmp/s41/gemm_kp2.py <<'PY'
import sys

import torch
from variants import W0

from kernels import _matmul_gluon as mg
from kernels import _s41kp_gluon as kg
from kernels.tune_ab import (gemm_operands, module_copy, must_run, outputs_and_errors, patched, ratios,
                             steady_in_turns, timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
W0K = module_copy("_s41kp_w0", "kernels/_s41kp_ws.py", W0).matmul_ws_kernel
H8, H12 = (64, 64, 64, 8, 8, 0), (64, 64, 64, 8, 12, 0)

for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)

    def run(mod, cfg, kernel=None):
        go = lambda: must_run(mod.matmul_ws(a, b, c, cfg), str(cfg), mod.status)  # noqa: E731
        return patched(go, mod, "matmul_ws_kernel", kernel) if kernel is not None else go

    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ship": run(mg, H8), "kp8": run(kg, H8),
           "kp8w0": run(kg, H8, W0K), "kp12": run(kg, H12), "kp12w0": run(kg, H12, W0K)}
    outs, errs = outputs_and_errors(fns, c, ref)
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    same = all(torch.equal(outs[x], outs["kp8"]) for x in ("kp8w0", "kp12", "kp12w0"))
    print(f"{m}x{n}x{k} (split {mg.default_split(m, n, k, H8, 132)}), {ROUNDS} rounds of {SECONDS} s, us a call median "
          f"(min-max) [max err / max |ref|]: {timings_line(times, errs)}; x ship: {ratios(times, 'ship')}; the kpair "
          f"outputs bitwise alike: {same}", flush=True)
PY

cat > /tmp/s41/gemm_var_once.py <<'PY'
import sys

import torch
from variants import W0

from kernels import _matmul_gluon as mg
from kernels.tune_ab import gemm_operands, module_copy, patched

VAR, SHAPE = sys.argv[1], sys.argv[2]
m, n, k = (int(x) for x in SHAPE.split("x"))
a, b, c, _ = gemm_operands(m, n, k)
if VAR == "ship":
    fn = lambda: mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG)  # noqa: E731
elif VAR == "slim":
    fn = lambda: mg.matmul_ws(a, b, c, mg.WS_SLIM_CONFIG)  # noqa: E731
else:  # kp8w0
    from kernels import _s41kp_gluon as kg
    kern = module_copy("_s41kp_w0", "kernels/_s41kp_ws.py", W0).matmul_ws_kernel
    fn = patched(lambda: kg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG), kg, "matmul_ws_kernel", kern)
for _ in range(20):
    fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
fn()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
PY

cat > /tmp/s41/gemm_light.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg
from kernels import _ptx_barriers as pb
from kernels.matmul import matmul
from kernels.tune_ab import (faster_in, gemm_operands, outputs_and_errors, patched, ratios, steady_in_turns,
                             timings_line)

ROUNDS, SECONDS = int(sys.argv[1]), float(sys.argv[2])
SHAPES = [tuple(int(x) for x in s.split("x")) for s in sys.argv[3].split(",")]
# the tiles built light: every tile the route takes (call 10), or LIGHT_TILES as shipped ("shipped", call 11)
ALL = tuple(c[:2] for c in (mg.WS_CONFIG, mg.WS_MID_CONFIG, mg.WS_NARROW_CONFIG, mg.WS_SLIM_CONFIG, mg.WS_HALF_CONFIG,
                            mg.WS_HALF_WIDE_CONFIG))
TILES = mg.LIGHT_TILES if sys.argv[4:] == ["shipped"] else ALL
KERNEL = mg.matmul_ws_kernel
marks = []


class Launch:  # the Gluon kernel, each compiled build's mark (barriers removed) kept
    def __getitem__(self, grid):
        def go(*args, **kwargs):
            kernel = KERNEL[grid](*args, **kwargs)
            marks.append(pb.removed(kernel.asm["ptx"]))
            return kernel
        return go


sms = torch.cuda.get_device_properties(0).multi_processor_count
for m, n, k in SHAPES:
    a, b, c, ref = gemm_operands(m, n, k)
    route = lambda: matmul(a, b, out=c)  # noqa: E731
    fns = {"cublas": lambda: torch.matmul(a, b, out=c), "plain": patched(route, mg, "LIGHT_TILES", ()),
           "light": patched(patched(route, mg, "LIGHT_TILES", TILES), mg, "matmul_ws_kernel", Launch())}
    outs, errs = outputs_and_errors(fns, c, ref)
    removed = marks[-1] if marks else None
    times = steady_in_turns(fns, ROUNDS, SECONDS)
    cfg = mg.default_config(m, n, sms)
    print(f"{m}x{n}x{k} ({cfg[0]}x{cfg[1]} split {mg.default_split(m, n, k, cfg, sms)}; barriers removed {removed}), "
          f"{ROUNDS} rounds of {SECONDS} s, us a call median (min-max): {timings_line(times)}; x plain: "
          f"{ratios(times, 'plain')} (light faster in {faster_in(times, 'light', 'plain')}); bitwise: "
          f"{torch.equal(outs['light'], outs['plain'])}; light builds failed: {mg._broken_light}", flush=True)
PY

kpair_copies() {  # kernels/_s41kp_ws.py and _s41kp_gluon.py: copies of _matmul_ws.py and _matmul_gluon.py with the
  # kpair patches applied (the copy of _matmul_gluon.py importing kernels._s41kp_ws), for calls 6 and 9 (which ran
  # with kernels_s41_kpair.patch against e4ad8f2; kernels_s41_kpair_rebased.patch is the same change against the tree
  # since the light build, 7b6c78c)
  local root; root=$(pwd)
  rm -rf /tmp/kp && mkdir -p /tmp/kp/kernels \
    && cp kernels/_matmul_ws.py kernels/_matmul_gluon.py kernels/compile_check_mm.py /tmp/kp/kernels/ \
    && (cd /tmp/kp && patch -s -p1 < "$root/docs/measurements/kernels_s41_kpair_rebased.patch" \
      && patch -s -p1 < "$root/docs/measurements/kernels_s41_kpair_swizzled.patch") \
    && cp /tmp/kp/kernels/_matmul_ws.py kernels/_s41kp_ws.py \
    && sed 's/from kernels._matmul_ws import/from kernels._s41kp_ws import/' /tmp/kp/kernels/_matmul_gluon.py \
      > kernels/_s41kp_gluon.py
}

case "$CALL" in
  call1)
    timeout 420 python3 /tmp/s41/gemm_tiles.py 5 0.2 \
      512x1024x4096,512x512x8192,256x1024x8192,256x512x4096,384x1024x4096,256x2048x4096,200x2048x1024,1024x512x1024,130x4096x4096,150x4096x4096,192x4096x1024,130x4096x1024,256x4096x4096,512x2048x4096,1024x1024x1024,1024x1024x4096 \
      2>&1 | tee "${LOG}_gemm_tiles.log"
    ;;
  call2)
    timeout 300 python3 /tmp/s41/gemm_route.py 5 0.2 \
      512x1024x4096,512x512x8192,256x1024x8192,256x512x4096,384x1024x4096,256x2048x4096,200x2048x1024,1024x512x1024,1024x512x4096,640x512x4096,300x1024x4096,4096x128x4096,2048x256x4096,4096x128x1024,130x4096x4096,129x4096x4096,150x4096x4096,160x4096x2048,192x4096x1024,319x2048x2048,256x4096x4096,1024x1024x1024 \
      2>&1 | tee "${LOG}_gemm_route.log"
    timeout 280 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call3)
    timeout 300 python3 /tmp/s41/gemm_diag.py 5 0.2 \
      104x4096x1024,104x4096x2048,104x4096x4096,104x4096x8192,512x1024x4096,80x4096x4096 2>&1 | tee "${LOG}_gemm_diag.log"
    ;;
  call4)
    timeout 200 python3 /tmp/s41/gemm_w2.py 5 0.2 \
      104x4096x1024,104x4096x4096,104x4096x8192,512x1024x4096,80x4096x4096,65x1024x4096,4096x128x4096 h \
      2>&1 | tee "${LOG}_gemm_w2.log"
    timeout 100 python3 /tmp/s41/gemm_w2.py 5 0.2 104x4096x4096,104x4096x8192 h12 2>&1 | tee -a "${LOG}_gemm_w2.log"
    timeout 100 python3 /tmp/s41/gemm_w2.py 5 0.2 256x4096x4096,1024x1024x4096,128x14336x4096 slim 2>&1 \
      | tee -a "${LOG}_gemm_w2.log"
    ;;
  call5)
    timeout 300 python3 /tmp/s41/gemm_kpair.py 5 0.2 \
      104x4096x4096,65x4096x4096,80x4096x4096,127x4096x4096,104x4096x1024,104x4096x8192,512x1024x4096,4096x128x4096,96x512x4096,512x512x8192,200x2048x1024,65x1024x4096 \
      h12k 2>&1 | tee "${LOG}_gemm_kpair.log"
    timeout 200 python3 /tmp/s41/gemm_kpair.py 5 0.2 96x8192x4096,96x5120x4096,130x4096x4096,128x8192x8192,65x8192x4096 \
      w8,w6k,w8e1k 2>&1 | tee -a "${LOG}_gemm_kpair.log"
    ;;
  call6)
    kpair_copies || exit 3
    timeout 300 python3 /tmp/s41/gemm_kp2.py 5 0.2 \
      104x4096x4096,127x4096x4096,104x4096x1024,104x4096x8192,512x1024x4096,4096x128x4096,96x512x4096,512x512x8192,65x1024x4096 \
      2>&1 | tee "${LOG}_gemm_kp2.log"
    ;;
  call7)
    timeout 300 python3 /tmp/s41/gemm_tiles.py 5 0.2 \
      96x5120x4096,96x6144x4096,65x5120x4096,128x6144x4096,96x4352x4096,96x6144x8192,192x4096x4096,160x4096x2048,130x4096x4096,96x4096x4096,256x3072x4096,320x2048x4096,1024x768x4096 \
      h96,h96_6,h64x128 2>&1 | tee "${LOG}_gemm_tiles.log"
    ;;
  call8)
    timeout 300 python3 -m pytest tests/kernels/test_matmul.py tests/kernels/test_matmul_ws.py -m gpu -q \
      -p no:cacheprovider -n 8 2>&1 | tail -15 | tee "${LOG}_gpu_tests_matmul.log"
    ;;
  call9)
    kpair_copies || exit 3
    for v in ship kp8w0 slim; do
      ncu_prof ${v}_104x4096x4096 python3 /tmp/s41/gemm_var_once.py $v 104x4096x4096
      python3 - /tmp/ncu/${v}_104x4096x4096_raw.csv <<'PY'
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
head, vals = rows[0], rows[2]
stalls = [(h, v) for h, v in zip(head, vals) if "pcsamp_warps_issue_stalled" in h and not h.endswith("not_issued")]
stalls = stalls or [(h, v) for h, v in zip(head, vals) if "average_warps_issue_stalled" in h and "per_issue_active" in h]
tot = sum(float(v.replace(",", "") or 0) for _, v in stalls) or 1.0
for h, v in sorted(stalls, key=lambda hv: -float(hv[1].replace(",", "") or 0))[:10]:
    print(f"  {h.split('stalled_')[-1]:<28} {100 * float(v.replace(',', '') or 0) / tot:5.1f} %")
PY
    done 2>&1 | tee "${LOG}_ncu.log"
    tar -C /tmp/ncu -czf "${LOG}_ncu.tgz" --exclude='*.ncu-rep' .
    ;;
  call10)
    timeout 300 python3 /tmp/s41/gemm_light.py 5 0.2 \
      104x4096x4096,127x4096x4096,104x4096x1024,104x4096x8192,512x1024x4096,4096x128x4096,96x512x4096,96x8192x4096,256x4096x4096,1024x1024x4096,4096x4096x4096 \
      2>&1 | tee "${LOG}_gemm_light.log"
    ;;
  call11)
    timeout 150 python3 -m pytest tests/kernels/test_matmul_ws.py -m gpu -q -p no:cacheprovider -n 8 2>&1 | tail -15 \
      | tee "${LOG}_gpu_tests_matmul_ws.log"
    timeout 40 python3 /tmp/s41/gemm_light.py 3 0.2 104x4096x4096,512x1024x4096,4096x128x4096 shipped 2>&1 \
      | tee "${LOG}_gemm_light_route.log"
    ;;
  call12)
    timeout 30 python3 /tmp/s41/gemm_light.py 1 0.05 104x4096x1024 shipped 2>&1 | tee "${LOG}_harnesses.log"
    kpair_copies || exit 3
    timeout 30 python3 /tmp/s41/gemm_kp2.py 1 0.05 104x4096x1024 2>&1 | tee -a "${LOG}_harnesses.log"
    timeout 40 python3 /tmp/s41/gemm_diag.py 1 0.05 104x4096x1024 2>&1 | tee -a "${LOG}_harnesses.log"
    ;;
  harnesses) ;;  # the harnesses under /tmp/s41 only (session 42's scripts import variants.py)
  *) echo "unknown call $CALL"; exit 2 ;;
esac
