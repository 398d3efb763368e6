"""Build the fused attention backward kernel for sm_90 offline (no GPU), against the GPU machine's Triton 3.6.0.

    python3.11 -m pip install --no-deps --target /tmp/t36/site311 /opt/pypi/files/triton-3.6.0-cp311-*.whl
    python3.11 kernels/compile_check_bwd.py "" "causal=True" "tma=False,dq_tma=False" "kernel='dkdv'"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: the fused kernel, d128,
BLOCK_M 64, BLOCK_N 128, 8 warps, 2 stages, TMA loads and TMA dQ reduce-adds, bf16, "bhld" contiguous strides:
the stride-1 arguments are passed as the constant 1 and the others as multiples of 16, as Triton's launcher
specialises them).  ``kernel='dkdv'`` builds the 2-kernel scheme's dK/dV kernel for comparison.  Prints
shared memory, wgmma / atomic / TMA-reduce counts and ptxas's register and spill line.  Triton is imported
from ``TRITON_SITE`` (default /tmp/t36/site311); no torch is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if "torch" not in sys.modules:  # kernels._checks imports torch for its host helpers; the kernels need none
    import types

    _stub = types.ModuleType("torch")
    _stub.__getattr__ = lambda name: object  # type: ignore[method-assign]
    sys.modules["torch"] = _stub

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels._attn_bwd import _attn_bwd_dkdv
from kernels._attn_bwd_fused import _attn_bwd_fused
from kernels._checks import padded_dim

TARGET = GPUTarget("cuda", 90, 128)
_PTRS = ("Q", "K", "V", "DO", "DK", "DV")


def check(kernel: str = "fused", d: int = 128, bm: int = 64, bn: int = 128, warps: int = 8, stages: int = 2,
          tma: bool = True, dq_tma: bool = True, causal: bool = False, stagger: bool = True, group1: bool = True,
          dt: str = "bf16") -> bool:
    """Build one configuration and print its resource report; True if it built."""
    fn = _attn_bwd_fused if kernel == "fused" else _attn_bwd_dkdv
    const = dict(HEAD_DIM=d, BLOCK_D=padded_dim(d), BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, USE_TMA=tma, DOT_F32=False)
    if kernel == "fused":
        const.update(DQ_TMA=dq_tma, STAGGER=stagger, DQ_SKIP=False)
    ones = [n for n in fn.arg_names if n.endswith("d") and n.startswith("s") and len(n) <= 5] + ["TMA_OK"]
    if group1:
        ones.append("GROUP")
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in const or name in ones:
            sig[name] = "constexpr"
            const.setdefault(name, 1 if name != "TMA_OK" else int(tma))
        elif name in _PTRS:
            sig[name] = f"*{dt}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("LSE", "DELTA", "DQACC"):
            sig[name] = "*fp32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("qk_scale", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name.startswith("s"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    tag = (f"{kernel} d{d} bm{bm} bn{bn} w{warps} s{stages} tma={tma} dq_tma={dq_tma} causal={causal} "
           f"stagger={stagger} {dt}")
    try:
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), target=TARGET,
                           options={"num_warps": warps, "num_stages": stages})
    except Exception as exc:  # report and go on with the next configuration
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print(f"FAIL {tag}: {type(exc).__name__}: {lines[-1] if lines else ''}", flush=True)
        return False
    ptx = k.asm["ptx"]
    path = f"/tmp/attn_bwd_{kernel}_{d}_{bm}_{bn}_{warps}_{stages}_{int(tma)}{int(dq_tma)}{int(causal)}.ptx"
    with open(path, "w") as f:
        f.write(ptx)
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    run = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", os.devnull], capture_output=True, text=True)
    spills = " ".join(line.strip() for line in run.stderr.splitlines() if "spill" in line or "rror" in line
                      or "registers" in line)
    counts = {w: ptx.count(w) for w in ("wgmma.mma_async", "red.", "atom.", "cp.reduce.async.bulk")}
    print(f"OK {tag}: shared={k.metadata.shared} B, {counts} | {spills}", flush=True)
    return True


def main(argv: list[str]) -> int:
    if triton.__version__ != "3.6.0":
        print(f"warning: Triton {triton.__version__} imported, not the GPU machine's 3.6.0", file=sys.stderr)
    # each argument is the developer's own "key=value, ..." text: evaluated as dict(...) keyword arguments
    ok = [check(**eval(f"dict({spec})")) for spec in (argv or [""])]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
