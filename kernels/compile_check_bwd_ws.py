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
import subprocess
import sys

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

from kernels._attn_bwd_ws import attn_bwd_ws

TARGET = GPUTarget("cuda", 90, 128)
_GL_TYPES = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}


def _descriptor_type(dtype: str, box: tuple[int, ...]) -> str:
    layout = gl.NVMMASharedLayout.get_default_for(list(box), _GL_TYPES[dtype])
    return f"tensordesc<{dtype}[{', '.join(map(str, box))}],{layout!r}>"


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
            sig[name] = _descriptor_type(*boxes[name])
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
    tag = f"d{d} stages{stages} causal={causal} {dt} split={split} skip_dq={skip_dq} regs={regs}/{maxnreg} ones={ones}"
    try:
        kernel = triton.compile(GluonASTSource(fn=attn_bwd_ws, signature=sig, constexprs=const, attrs=attrs),
                                target=TARGET, options={"num_warps": 4, "num_stages": 1, "maxnreg": maxnreg})
    except Exception as exc:  # report and go on with the next configuration
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print(f"FAIL {tag}: {type(exc).__name__}: {lines[-1] if lines else ''}", flush=True)
        if os.environ.get("VERBOSE"):
            print(str(exc)[-4000:])
        return False
    ptx = kernel.asm["ptx"]
    path = f"/tmp/attn_bwd_ws_{d}_{stages}_{int(causal)}_{dt}_{int(split)}.ptx"
    with open(path, "w") as f:
        f.write(ptx)
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    run = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", path + ".cubin"], capture_output=True,
                         text=True)
    report = " ".join(line.strip() for line in run.stderr.splitlines()
                      if "spill" in line or "rror" in line or "registers" in line or "arning" in line)
    counts = {w: ptx.count(w) for w in ("wgmma.mma_async", "cp.reduce.async.bulk", "bar.sync", "bar.arrive")}
    print(f"OK {tag}: shared={kernel.metadata.shared} B, {counts} | {report}", flush=True)
    if keep:
        sass = subprocess.run([os.path.join(os.path.dirname(ptxas), "cuobjdump"), "-sass", path + ".cubin"],
                              capture_output=True, text=True).stdout
        with open(path + ".sass", "w") as f:
            f.write(sass)
    return True


def main(argv: list[str]) -> int:
    if triton.__version__ != "3.6.0":
        print(f"warning: Triton {triton.__version__} imported, not the GPU machine's 3.6.0", file=sys.stderr)
    # each argument is the developer's own "key=value, ..." text: evaluated as dict(...) keyword arguments
    ok = [check(**eval(f"dict({spec})")) for spec in (argv or [""])]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
