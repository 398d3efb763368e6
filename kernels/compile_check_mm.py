"""Compile the Gluon GEMM (``kernels/_matmul_ws.py``) for sm_90 offline, against the GPU machine's Triton 3.6.0.

    python3.11 kernels/compile_check_mm.py "" "stages=4,epi=1" "b_tma=True"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: 128x256x64 tiles, 3 stages,
TMA-store epilogue, B through cp.async).  Prints shared memory, the wgmma / cp.async / TMA counts of the PTX
and ptxas's spill line.  Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch needed.
"""

import os
import sys

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels._matmul_ws import matmul_ws_kernel
from kernels._offline_build import build, descriptor_type, main


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
            sig[name] = descriptor_type("bf16", descs[name])
        else:
            sig[name] = {"B": "*bf16", "C": "*bf16"}.get(name, "i32")
    names = matmul_ws_kernel.arg_names
    attrs = {(names.index("B"),): [["tt.divisibility", 16]], (names.index("C"),): [["tt.divisibility", 16]]}
    tag = f"{bm}x{bn}x{bk} stages={stages} epi={epi} b_tma={b_tma} group={group} regs={regs}/{maxnreg}"
    return build(matmul_ws_kernel, sig, const, attrs, maxnreg=maxnreg, tag=tag,
                 path=f"/tmp/matmul_ws_{bm}_{bn}_{bk}_{stages}_{epi}_{int(b_tma)}",
                 counts=("wgmma.mma_async", "cp.async.cg", "cp.async.ca", "cp.async.mbarrier", "cp.async.bulk.tensor",
                         "fence.proxy.async", "setmaxnreg"))


if __name__ == "__main__":
    sys.exit(main(check, sys.argv[1:]))
