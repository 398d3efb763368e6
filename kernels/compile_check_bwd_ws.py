"""Compile the Gluon attention backward for sm_90 offline (no GPU) against the GPU machine's Triton 3.6.0.

    python3.11 -m pip install --no-deps --target /tmp/t36/site311 /opt/pypi/files/triton-3.6.0-cp311-*.whl
    python3.11 kernels/compile_check_bwd_ws.py "" "causal=True" "d=64,stages=3" "ones=('GROUP',)"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: d128, 2 stages, bf16, the
configuration table of ``kernels/attention_bwd_ws.py`` otherwise).  ``ones`` lists integer arguments passed as
the constant 1, as Triton's launcher does when an argument equals 1 (the kernel must build then too).  Prints
shared memory, the wgmma / TMA-reduce counts and ptxas's register and spill line (and any wgmma serialisation
warning).  Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch is needed.
"""

import os
import sys

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels._attn_bwd_ws import attn_bwd_ws
from kernels._offline_build import build, descriptor_type, main


def check(d: int = 128, stages: int = 2, causal: bool = False, dt: str = "bf16", split: bool | None = None,
          regs: int = 240, maxnreg: int = 168, ones: tuple[str, ...] = (), keep: bool = False,
          skip_dq: bool = False) -> bool:
    """Build one configuration; print its resource report.  True if it built (``keep``: also write the cubin's
    SASS to /tmp)."""
    split = d == 128 if split is None else split
    dq_w = d // 2 if split else d
    const = dict(HEAD_DIM=d, STAGES=stages, CAUSAL=causal, DQ_SPLIT=split, DQ_SKIP=skip_dq, CONSUMER_REGS=regs,
                 **{o: 1 for o in ones})
    boxes = {"q_desc": (dt, (1, 1, 64, d)), "do_desc": (dt, (1, 1, 64, d)), "k_desc": (dt, (1, 1, 128, d)),
             "v_desc": (dt, (1, 1, 128, d)), "dq_desc": ("fp32", (1, 64, dq_w))}
    sig, attrs = {}, {}
    for i, name in enumerate(attn_bwd_ws.arg_names):
        if name in const:
            sig[name] = "constexpr"
        elif name in boxes:
            sig[name] = descriptor_type(*boxes[name])
        elif name in ("LSE", "DELTA"):
            sig[name] = "*fp32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("DK", "DV"):
            sig[name] = f"*{dt}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("qk_scale", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name.startswith("sd"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    tag = (f"d{d} stages{stages} causal={causal} {dt} split={split} skip_dq={skip_dq} "
           f"regs={regs}/{maxnreg} ones={ones}")
    return build(attn_bwd_ws, sig, const, attrs, maxnreg=maxnreg, tag=tag,
                 path=f"/tmp/attn_bwd_ws_{d}_{stages}_{int(causal)}_{dt}_{int(split)}", keep_sass=keep,
                 counts=("wgmma.mma_async", "cp.reduce.async.bulk", "bar.sync", "bar.arrive"),
                 report=("spill", "rror", "registers", "arning"))


if __name__ == "__main__":
    sys.exit(main(check, sys.argv[1:]))
