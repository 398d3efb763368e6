"""Compile the Gluon GEMM (``kernels/_matmul_ws.py``) for sm_90 offline, against the GPU machine's Triton 3.6.0.

    python3.11 kernels/compile_check_mm.py "" "stages=4,epi=1" "b_tma=True" "cluster=2"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: 128x256x64 tiles, 3 stages,
TMA-store epilogue, B through cp.async; ``cluster=2``: clusters of two CTAs, B by TMA multicast, through
``kernels/_ptx_cluster.py``'s PTX rewrite; ``bn=192``: 128 + 64 columns through two descriptors, B by TMA).
Prints shared memory, the wgmma / cp.async / TMA counts of the PTX and ptxas's spill line; ``--ptx-fixture`` writes
the PTX fixture of tests/kernels/test_ptx_cluster.py instead.
Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch needed.
"""

import os
import sys
from contextlib import nullcontext

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import _ptx_cluster
from kernels._matmul_ws import B_DESC_PARAM, matmul_ws_kernel
from kernels._offline_build import build, descriptor_type, main, write_ptx_fixture


def _signature(bm: int, bn: int, bk: int, stages: int, epi: int, b_tma: bool, group: int, regs: int,
               cluster: int) -> tuple[dict, dict]:
    """(signature, constexprs) of one bf16 configuration, as the JIT would give them."""
    split = bn & (bn - 1) != 0  # not a power of two (192): BLOCK_N as its largest power of two + BLOCK_N2
    bn1 = 1 << (bn.bit_length() - 1) if split else bn
    bn2 = bn - bn1 if split else 0
    const = {"BLOCK_N": bn1, "GROUP_M": group, "STAGES": stages, "B_TMA": b_tma or cluster == 2 or split, "EPI": epi,
             "CONSUMER_REGS": regs, "CLUSTER": cluster, "CLUSTER_PTX": _ptx_cluster.VERSION if cluster == 2 else 0,
             "BLOCK_N2": bn2}
    descs = {"a_desc": (bm, bk), "b_desc": (bk, bn1 // cluster), "c_desc": (bm // 2, bn1),
             "b2_desc": (bk, bn2 or bn1 // cluster), "c2_desc": (bm // 2, bn2 or bn1)}
    sig = {name: "constexpr" if name in const else descriptor_type("bf16", descs[name]) if name in descs
           else {"B": "*bf16", "C": "*bf16"}.get(name, "i32") for name in matmul_ws_kernel.arg_names}
    return sig, const


def check(bm: int = 128, bn: int = 256, bk: int = 64, stages: int = 3, epi: int = 0, b_tma: bool = False,
          group: int = 8, regs: int = 208, maxnreg: int = 168, cluster: int = 1) -> bool:
    """Build one configuration; True if it built."""
    sig, const = _signature(bm, bn, bk, stages, epi, b_tma, group, regs, cluster)
    b_tma = const["B_TMA"]
    names = matmul_ws_kernel.arg_names
    attrs = {(names.index("B"),): [["tt.divisibility", 16]], (names.index("C"),): [["tt.divisibility", 16]]}
    tag = (f"{bm}x{bn}x{bk} stages={stages} epi={epi} b_tma={b_tma} group={group} regs={regs}/{maxnreg} "
           f"cluster={cluster}")
    counts = ("wgmma.mma_async", "cp.async.cg", "cp.async.ca", "cp.async.mbarrier", "cp.async.bulk.tensor",
              "fence.proxy.async", "setmaxnreg", "multicast::cluster", "mapa", "barrier.cluster")
    path = f"/tmp/matmul_ws_{bm}_{bn}_{bk}_{stages}_{epi}_{int(b_tma)}" + ("_c2" if cluster == 2 else "")
    with _ptx_cluster.rewriting(B_DESC_PARAM) if cluster == 2 else nullcontext():
        return build(matmul_ws_kernel, sig, const, attrs, maxnreg=maxnreg, tag=tag, path=path, counts=counts)


FIXTURE = "matmul_ws_cluster2_triton36_sm90.ptx.gz"  # tests/kernels/test_ptx_cluster.py's


def ptx_fixture() -> None:
    """Write tests/data/ptx's fixture: the default tiles' ``CLUSTER`` = 2 PTX before the rewrite."""
    import triton
    from triton.experimental.gluon._runtime import GluonASTSource

    from kernels._offline_build import TARGET

    sig, const = _signature(128, 256, 64, 3, 0, True, 8, 208, cluster=2)
    kernel = triton.compile(GluonASTSource(fn=matmul_ws_kernel, signature=sig, constexprs=const, attrs={}),
                            target=TARGET, options={"num_warps": 4, "num_stages": 1, "maxnreg": 168})
    write_ptx_fixture(kernel.asm["ptx"], FIXTURE)


if __name__ == "__main__":
    if sys.argv[1:] == ["--ptx-fixture"]:
        sys.exit(ptx_fixture())
    sys.exit(main(check, sys.argv[1:]))
