"""Compile the Gluon GEMM (``kernels/_matmul_ws.py``) for sm_90 offline, against the GPU machine's Triton 3.6.0.

    python3.11 kernels/compile_check_mm.py "" "stages=4,epi=1" "b_tma=True"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: 128x256x64 tiles, 3 stages,
TMA-store epilogue, B through cp.async).  Prints shared memory, the wgmma / cp.async / TMA counts of the PTX
and ptxas's spill line.  Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch needed.
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

from kernels._matmul_ws import matmul_ws_kernel

TARGET = GPUTarget("cuda", 90, 128)


def _desc(box: tuple[int, int]) -> str:
    layout = gl.NVMMASharedLayout.get_default_for(list(box), gl.bfloat16)
    return f"tensordesc<bf16[{box[0]}, {box[1]}],{layout!r}>"


def check(bm: int = 128, bn: int = 256, bk: int = 64, stages: int = 3, epi: int = 0, b_tma: bool = False,
          group: int = 8, regs: int = 208, maxnreg: int = 168) -> bool:
    """Build one configuration; True if it built."""
    const = {"BLOCK_N": bn, "GROUP_M": group, "STAGES": stages, "B_TMA": b_tma, "EPI": epi,
             "CONSUMER_REGS": regs}
    descs = {"a_desc": (bm, bk), "b_desc": (bk, bn), "c_desc": (bm // 2, bn)}
    sig = {}
    for name in matmul_ws_kernel.arg_names:
        if name in const:
            sig[name] = "constexpr"
        elif name in descs:
            sig[name] = _desc(descs[name])
        else:
            sig[name] = {"B": "*bf16", "C": "*bf16"}.get(name, "i32")
    names = matmul_ws_kernel.arg_names
    attrs = {(names.index("B"),): [["tt.divisibility", 16]], (names.index("C"),): [["tt.divisibility", 16]]}
    tag = f"{bm}x{bn}x{bk} stages={stages} epi={epi} b_tma={b_tma} group={group} regs={regs}/{maxnreg}"
    try:
        kernel = triton.compile(GluonASTSource(fn=matmul_ws_kernel, signature=sig, constexprs=const, attrs=attrs),
                                target=TARGET, options={"num_warps": 4, "num_stages": 1, "maxnreg": maxnreg})
    except Exception as exc:  # report and go on with the next configuration
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print(f"FAIL {tag}: {type(exc).__name__}: {' | '.join(lines[-6:]) if lines else ''}", flush=True)
        return False
    ptx = kernel.asm["ptx"]
    path = f"/tmp/matmul_ws_{bm}_{bn}_{bk}_{stages}_{epi}_{int(b_tma)}.ptx"
    with open(path, "w") as f:
        f.write(ptx)
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    run = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", os.devnull], capture_output=True, text=True)
    spills = " ".join(line.strip() for line in run.stderr.splitlines() if "spill" in line or "rror" in line)
    counts = {k: ptx.count(k) for k in ("wgmma.mma_async", "cp.async.cg", "cp.async.ca", "cp.async.mbarrier",
                                        "cp.async.bulk.tensor", "fence.proxy.async", "setmaxnreg")}
    print(f"OK {tag}: shared={kernel.metadata.shared} B, {counts} | {spills}", flush=True)
    return True


def main(argv: list[str]) -> int:
    if triton.__version__ != "3.6.0":
        print(f"warning: Triton {triton.__version__} imported, not the GPU machine's 3.6.0", file=sys.stderr)
    # each argument is the developer's own "key=value, ..." text: evaluated as dict(...) keyword arguments
    ok = [check(**eval(f"dict({spec})")) for spec in (argv or [""])]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
