"""Compile the Gluon GEMM (``kernels/_matmul_ws.py``) for sm_90 offline, against the GPU machine's Triton 3.6.0.

    python3.11 kernels/compile_check_mm.py "" "stages=4,epi=1" "b_tma=True" "cluster=2"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: 128x256x64 tiles, 3 stages,
TMA-store epilogue, B through cp.async; ``cluster=2``: clusters of two CTAs, B by TMA multicast, through
``kernels/_ptx_cluster.py``'s PTX rewrite; ``bn=192``: 128 + 64 columns through two descriptors, B by TMA;
``light=True``: through ``kernels/_ptx_barriers.py``'s rewrite).
Prints shared memory, the wgmma / cp.async / TMA counts of the PTX and ptxas's spill line; ``--ptx-fixture`` writes
the PTX fixture of tests/kernels/test_ptx_cluster.py instead.
Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch needed.
"""

import os
import sys
from contextlib import nullcontext

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import _ptx_barriers, _ptx_cluster, _ptx_stage
from kernels._matmul_ws import B_DESC_PARAM, consumer_rows, matmul_ws_kernel
from kernels._offline_build import build, descriptor_type, main, write_ptx_fixture


def _signature(bm: int, bn: int, bk: int, stages: int, epi: int, b_tma: bool, group: int, regs: int,
               cluster: int, fit_m: int = 0, fit_n: bool = False, split: int = 1,
               light: bool = False, fused: bool = True) -> tuple[dict, dict]:
    """(signature, constexprs) of one bf16 configuration, as the JIT would give them."""
    two = bn & (bn - 1) != 0  # not a power of two (192): BLOCK_N as its largest power of two + BLOCK_N2
    bn1 = 1 << (bn.bit_length() - 1) if two else bn
    bn2 = bn - bn1 if two else 0
    const = {"BLOCK_N": bn1, "GROUP_M": group, "STAGES": stages, "B_TMA": b_tma or cluster == 2 or two, "EPI": epi,
             "CONSUMER_REGS": regs, "CLUSTER": cluster, "CLUSTER_PTX": _ptx_cluster.VERSION if cluster == 2 else 0,
             "BLOCK_N2": bn2, "FIT_M": fit_m, "FIT_N": fit_n, "SPLIT": split,
             "LIGHT_PTX": _ptx_barriers.VERSION if light else 0, "FUSED": fused}
    rows = consumer_rows(bm)
    descs = {"a_desc": (bm // 2 if fit_m == 2 else bm, bk), "b_desc": (bk, bn1 // cluster), "c_desc": (rows, bn1),
             "b2_desc": (bk, bn2 or bn1 // cluster), "c2_desc": (rows, bn2 or bn1)}
    pointers = {"B": "*bf16", "C": "*bf16", "W": "*fp32", "LOCKS": "*i32"}
    sig = {name: "constexpr" if name in const else descriptor_type("bf16", descs[name]) if name in descs
           else pointers.get(name, "i32") for name in matmul_ws_kernel.arg_names}
    return sig, const


def check(bm: int = 128, bn: int = 256, bk: int = 64, stages: int = 3, epi: int = 0, b_tma: bool = False,
          group: int = 8, regs: int = 208, maxnreg: int = 168, cluster: int = 1, fit_m: int = 0,
          fit_n: bool = False, split: int = 1, light: bool = False, fused: bool = True) -> bool:
    """Build one configuration; True if it built."""
    sig, const = _signature(bm, bn, bk, stages, epi, b_tma, group, regs, cluster, fit_m, fit_n, split, light, fused)
    b_tma = const["B_TMA"]
    names = matmul_ws_kernel.arg_names
    attrs = {(names.index("B"),): [["tt.divisibility", 16]], (names.index("C"),): [["tt.divisibility", 16]]}
    tag = (f"{bm}x{bn}x{bk} stages={stages} epi={epi} b_tma={b_tma} group={group} regs={regs}/{maxnreg} "
           f"cluster={cluster} fit_m={fit_m} fit_n={fit_n} split={split} light={light} fused={fused}")
    counts = ("wgmma.mma_async", "cp.async.cg", "cp.async.ca", "cp.async.mbarrier", "cp.async.bulk.tensor",
              "fence.proxy.async", "setmaxnreg", "multicast::cluster", "mapa", "barrier.cluster")
    path = (f"/tmp/matmul_ws_{bm}_{bn}_{bk}_{stages}_{epi}_{int(b_tma)}" + ("_c2" if cluster == 2 else "")
            + (f"_fit{fit_m}{int(fit_n)}" if fit_m or fit_n else "") + (f"_s{split}" if split > 1 else "")
            + ("" if fused else "_nf") + ("_light" if light else ""))
    with _ptx_cluster.rewriting(B_DESC_PARAM) if cluster == 2 else \
            _ptx_stage.rewriting(_ptx_barriers.rewrite_ptx) if light else nullcontext():
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
