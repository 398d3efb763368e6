"""Compile the Gluon attention forward for sm_90 offline (no GPU) against the Triton the GPU machine has.

The lent GPU runs Triton 3.6.0; this machine's virtual environment has another Triton whose Gluon API
differs, and device time is scarce, so every kernel change is built here first, for the GPU's target,
with ptxas's register and spill report:

    python3.11 -m pip install --no-deps --target /tmp/t36/site311 /opt/pypi/files/triton-3.6.0-cp311-*.whl
    python3.11 kernels/compile_check_ws.py "" "causal=True" "d=64,nc=3,regs=160,maxnreg=128" "ones=('GROUP',)" \
        "dt='fp8e4nv',out='bf16',v_t=True,stages=3"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: d128, BLOCK_N 128,
2 stages, 2 consumers, bf16 in and out, V read row-major).  ``ones`` lists integer arguments passed as the
constant 1, as Triton's launcher does when an argument equals 1 (the kernel must build then too).
Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch is needed.
"""

import os
import sys
from contextlib import nullcontext

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import _ptx_barriers, _ptx_stage
from kernels._attn_fwd_ws import attn_fwd_ws
from kernels._offline_build import build, build_ptx_fixture, descriptor_type, main


def _descriptor_type(dtype: str, box: tuple[int, ...]) -> str:
    """A rank-4 [1, 1, rows, cols] descriptor for a 2-D box, else the box as given (the rank-5 PERM_K one)."""
    return descriptor_type(dtype, (1, 1, *box) if len(box) == 2 else box)


def check(d: int = 128, bn: int = 128, stages: int = 2, nc: int = 2, causal: bool = False, regs: int = 240,
          maxnreg: int = 168, dt: str = "bf16", out: str = "", v_t: bool = False, pp: bool = False,
          perm_k: bool = False, ones: tuple[str, ...] = (), keep: bool = False, rowsum: bool = False,
          qb: int = 1, ol: bool = False, lpt: bool = False, shift: bool = False, dyn: bool = False,
          light: bool = False, path: str = "") -> bool:
    """Build one configuration; print shared memory, wgmma count and ptxas's spill line.  True if it built.

    ``dt``: the inputs' type (bf16, fp16, fp8e4nv); ``out``: the output's (default: dt); ``v_t``: V read
    position-contiguous ([BLOCK_D, BLOCK_N] boxes); ``pp``: ping-pong turns between the consumers; ``perm_k``:
    K through the rank-5 descriptor of PERM_K; ``keep``: also write the SASS (``path``.sass); ``rowsum``: the row
    sums by wgmma (ROWSUM_MMA); ``qb``: Q buffers a consumer (Q_BUFS); ``ol``: every key tile through one masked
    loop (ONE_LOOP: short causal configs only); ``lpt``: the causal grid's tail of single row blocks (LPT);
    ``shift``: causal row blocks from a first row before 0 (SHIFT); ``dyn``: items from a grid-wide ticket
    (DYNAMIC); ``light``: built through kernels/_ptx_barriers.py (LIGHT_PTX); ``path``: where the build's files
    go (no suffix; default: /tmp, named after the configuration)."""
    block_d = max(16, 1 << (d - 1).bit_length())
    const = dict(BLOCK_N=bn, STAGES=stages, NC=nc, CAUSAL=causal, CONSUMER_REGS=regs, V_T=v_t,
                 PINGPONG=pp, PERM_K=perm_k, ROWSUM_MMA=rowsum, Q_BUFS=qb, ONE_LOOP=ol, LPT=lpt, SHIFT=shift,
                 DYNAMIC=dyn, LIGHT_PTX=_ptx_barriers.VERSION if light else 0, **{o: 1 for o in ones})
    boxes = {"q_desc": (dt, (64, block_d)), "o_desc": (out or dt, (64, block_d)),
             "k_desc": (dt, (bn // 16, 2, 4, 2, block_d) if perm_k else (bn, block_d)),
             "v_desc": (dt, (block_d, bn) if v_t else (bn, block_d))}
    sig = {}
    for name in attn_fwd_ws.arg_names:
        if name in const:
            sig[name] = "constexpr"
        elif name in boxes:
            sig[name] = _descriptor_type(*boxes[name])
        else:
            sig[name] = {"LSE": "*fp32", "qk_scale": "fp32", "o_scale": "fp32", "TICKET": "*i32"}.get(name, "i32")
    attrs = {(attn_fwd_ws.arg_names.index("LSE"),): [["tt.divisibility", 16]]}
    tag = (f"d{d} bn{bn} stages{stages} consumers{nc} causal={causal} regs={regs}/{maxnreg} {dt}->{out or dt} "
           f"v_t={v_t} pp={pp} perm_k={perm_k} ones={ones} rowsum={rowsum} qb={qb} ol={ol} lpt={lpt} "
           f"shift={shift} dyn={dyn} light={light}")
    path = path or (f"/tmp/attn_fwd_ws_{d}_{bn}_{stages}_{nc}_{int(causal)}_{dt}_{int(v_t)}"
                    f"{'_pk' if perm_k else ''}{'_rs' if rowsum else ''}{f'_qb{qb}' if qb > 1 else ''}"
                    f"{'_ol' if ol else ''}{'_lpt' if lpt else ''}{'_sh' if shift else ''}{'_dyn' if dyn else ''}"
                    f"{'_light' if light else ''}")
    with _ptx_stage.rewriting(_ptx_barriers.rewrite_ptx) if light else nullcontext():
        return build(attn_fwd_ws, sig, const, attrs, maxnreg=maxnreg, tag=tag, path=path, keep_sass=keep,
                     counts=("wgmma.mma_async", "bar.sync"))


# tests/kernels/test_ptx_barriers.py's fixtures: name -> check() arguments
FIXTURE_CONFIGS = {"attn_fwd_ws_d128_causal_triton36_sm90.ptx.gz": dict(causal=True, dyn=True, lpt=True),
                   "attn_fwd_ws_fp8_pingpong_triton36_sm90.ptx.gz": dict(dt="fp8e4nv", out="bf16", v_t=True,
                                                                        stages=3, pp=True, perm_k=True)}


def ptx_fixtures() -> None:
    """Write tests/data/ptx's fixtures of the rewrite: the PTX (before it) of a two-consumer 16-bit causal build and
    of the fp8 build with ping-pong turns."""
    for name, kwargs in FIXTURE_CONFIGS.items():
        build_ptx_fixture(check, name, **kwargs)


if __name__ == "__main__":
    if sys.argv[1:] == ["--ptx-fixtures"]:
        sys.exit(ptx_fixtures())
    sys.exit(main(check, sys.argv[1:]))
