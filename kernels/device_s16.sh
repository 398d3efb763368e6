#!/usr/bin/env bash
# Session-16 device calls (issue 16): bash kernels/device_s16.sh CALL (OUT set by the tool).  Every step is guarded
# by `timeout`.
# call1 (H100): the ragged GEMM (B's row pitch not a multiple of 128 bytes) through the Gluon kernel copying B into
#        the padded buffer as it computes (misaligned_b="ws-copy", B_COPY: the producer copies a piece of a claimed
#        unit of rows each K step; a tile waits for its column band; tiles in band-major order; the first wave's
#        bands copied by the repack kernel before the launch).  Outputs bitwise against "ws-repack" (the same
#        kernel on the same padded data) over odd shapes, unit / piece sizes and pre-copied bands, three calls in a
#        row; then graph-timed beside cuBLAS, ws-repack (the default), and the kernel on a pre-padded B in grouped
#        and band-major order (what a free copy would give).
# call2 (H100): whether the copy stalls the producer (each piece's stores wait for its loads, issued one K step
#        earlier): a piece every 2nd / 4th K step, other unit / piece sizes, with and without the pre-copied bands.
set -o pipefail
source kernels/device_lib.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=.
CALL=${1:-call1}
GPU_TAG=h100
case "$CALL" in call99) GPU_TAG=h200;; esac
LOG=$OUT/kernels_${GPU_TAG}_s16_${CALL}
{
  date -u
  nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "${LOG}_env.txt"

rm -f /tmp/copy.py  # an earlier try's /tmp/copy.py shadowed the stdlib module
mkdir -p /tmp/s16
cat > /tmp/s16/wscopy.py <<'PY'
import sys

import torch

from kernels import _matmul_gluon as mg, matmul as mm
from kernels.tune_bwd import _time

torch.manual_seed(0)


def rounds(fns, n=3):
    times = {}
    for r in range(n):  # the variants take turns, every other round reversed; best of the rounds
        for name, fn in (list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))):
            times[name] = min(_time(fn)[0], times.get(name, float("inf")))
    return times


def run_copy(a, b, unit, piece, pre, every=1):
    mg.COPY_CONFIG, mg.COPY_PRE_BANDS = (unit, piece, every), pre
    try:
        return mm.matmul(a, b, misaligned_b="ws-copy")
    finally:
        mg.COPY_CONFIG, mg.COPY_PRE_BANDS = (64, 16, 1), None


if "check" in sys.argv:
    bad = 0
    for m, n, k in [(4000, 5000, 3000), (1000, 1000, 520), (3000, 2504, 1000), (4096, 11000, 4096), (8000, 600, 2000),
                    (300, 5000, 3000), (129, 7000, 77 * 8)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        assert mm._b_pitch_misaligned(b)
        ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        assert mg.matmul_ws(a, mm.repack_rows(b), ref)  # the same kernel on the same padded data
        f32 = a.float() @ b.float()
        err = ((ref.float() - f32).norm() / f32.norm()).item()
        for unit, piece, pre in [(64, 16, None), (64, 16, 0), (16, 16, 0), (32, 8, 1), (128, 32, 0), (64, 16, 2)]:
            for rep in range(3):
                out = run_copy(a, b, unit, piece, pre)
                same = torch.equal(out, ref)
                bad += not same
                if not same or rep == 0:
                    print(f"{m}x{n}x{k} unit={unit} piece={piece} pre={pre} rep={rep}: bitwise {same}; "
                          f"ws-repack rel err {err:.2e}", flush=True)
    print("CHECK", "FAILED" if bad else "ok", bad)

if "time2" in sys.argv:  # call 2: is the producer stalled by the copy?  a piece every 2nd / 4th K step
    for m, n, k in [(4000, 5000, 3000), (4096, 11000, 4096)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        assert mg.matmul_ws(a, mm.repack_rows(b), ref)
        fns = {"cublas": lambda: torch.matmul(a, b, out=c), "ws-repack (default)": lambda: mm.matmul(a, b, out=c)}
        for unit, piece, every in [(64, 16, 1), (64, 16, 2), (64, 16, 4), (16, 16, 1), (32, 8, 1), (64, 8, 1),
                                   (64, 8, 2)]:
            for pre in (None, 0):
                out = run_copy(a, b, unit, piece, pre, every)
                print(f"{m}x{n}x{k} unit={unit} piece={piece} every={every} pre={pre}: bitwise "
                      f"{torch.equal(out, ref)}", flush=True)
                fns[f"ws-copy {unit}/{piece}/{every} pre {pre}"] = (
                    lambda unit=unit, piece=piece, pre=pre, every=every: run_copy(a, b, unit, piece, pre, every))
        t = rounds(fns)
        print(f"{m}x{n}x{k}:", flush=True)
        for name, ms in t.items():
            print(f"  {name:28s} {ms * 1e3:8.1f} us  x cuBLAS {t['cublas'] / ms:.3f}", flush=True)

if "time" in sys.argv:
    SHAPES = [(4000, 5000, 3000), (4000, 5000, 3072), (4096, 11000, 4096), (8000, 5000, 3000), (2000, 5000, 3000)]
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        bp = mm.repack_rows(b)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        band = (128, 256, 64, 1 << 20, 3, 0)
        fns = {
            "cublas": lambda: torch.matmul(a, b, out=c),
            "ws-repack (default)": lambda: mm.matmul(a, b, out=c),
            "ws-copy auto": lambda: run_copy(a, b, 64, 16, None),
            "ws-copy pre0": lambda: run_copy(a, b, 64, 16, 0),
            "ws-copy 128/32": lambda: run_copy(a, b, 128, 32, None),
            "ws-copy 32/16": lambda: run_copy(a, b, 32, 16, None),
            "padded B, grouped": lambda: mg.matmul_ws(a, bp, c),
            "padded B, band-major": lambda: mg.matmul_ws(a, bp, c, config=band),
        }
        pre = mg.copy_pre_bands(m, n, torch.cuda.get_device_properties(0).multi_processor_count)
        t = rounds(fns)
        flops = 2 * m * n * k
        print(f"{m}x{n}x{k} (pre bands {pre} of {-(-n // 256)}):", flush=True)
        for name, ms in t.items():
            print(f"  {name:24s} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.0f} TFLOPS  x cuBLAS {t['cublas'] / ms:.3f}",
                  flush=True)
PY

case "$CALL" in
  call1)
    timeout 240 python3 /tmp/s16/wscopy.py check 2>&1 | tee "${LOG}_check.log"
    timeout 300 python3 /tmp/s16/wscopy.py time 2>&1 | tee "${LOG}_time.log"
    ;;
  call2)
    timeout 400 python3 /tmp/s16/wscopy.py time2 2>&1 | tee "${LOG}_time2.log"
    ;;
esac
