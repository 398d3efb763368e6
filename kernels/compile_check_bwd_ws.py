"""Compile the Gluon attention backward for sm_90 offline (no GPU) against the GPU machine's Triton 3.6.0.

    python3.11 -m pip install --no-deps --target /tmp/t36/site311 /opt/pypi/files/triton-3.6.0-cp311-*.whl
    python3.11 kernels/compile_check_bwd_ws.py "" "causal=True" "d=64,stages=3" "ones=('GROUP',)"

Each argument is one configuration, keyword arguments of :func:`check` (defaults: d128, 2 stages, bf16, the
configuration table of ``kernels/attention_bwd_ws.py`` otherwise).  ``ones`` lists integer arguments passed as
the constant 1, as Triton's launcher does when an argument equals 1 (the kernel must build then too).  Prints
shared memory, the wgmma / TMA-reduce counts and ptxas's register and spill line (and any wgmma serialisation
warning), and checks the SASS for wgmma A registers rewritten inside a loop (``operand_clobbers``; a hit
fails).  Triton is imported from ``TRITON_SITE`` (default /tmp/t36/site311); no torch is needed.
``--ptx-fixture`` writes tests/data/ptx's backward fixture of the barrier rewrite (``light``).
"""

import os
import re
import sys
from contextlib import nullcontext

sys.path.insert(0, os.environ.get("TRITON_SITE", "/tmp/t36/site311"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import _ptx_barriers, _ptx_stage
from kernels._attn_bwd_ws import attn_bwd_ws, dq_box
from kernels._offline_build import build, build_ptx_fixture, descriptor_type, main


def check(d: int = 128, stages: int = 2, causal: bool = False, dt: str = "bf16", split: bool | None = None,
          regs: int = 240, maxnreg: int = 168, ones: tuple[str, ...] = (), keep: bool = False,
          skip_dq: bool = False, ds_rs: bool = True, kv_rs: bool | None = None, prep: bool = True,
          light: bool = False, rows: bool | None = None, path: str = "") -> bool:
    """Build one configuration; print its resource report and ``operand_clobbers``' findings.  True if it built with
    none (``keep``: also write the cubin's SASS to /tmp; ``light``: built through kernels/_ptx_barriers.py, as
    ``LIGHT_PTX``)."""
    split = d == 128 if split is None else split  # as attention_bwd_ws.DQ_SPLIT_HEAD_DIMS
    kv_rs = (ds_rs and d == 64) if kv_rs is None else kv_rs  # as attention_bwd_ws.KV_REGISTERS_HEAD_DIMS
    dq_w = d // 2 if split else d
    rows = d == 64 if rows is None else rows  # as attention_bwd_ws.DQ_ROWS_HEAD_DIMS
    box = dq_box(dq_w, rows)  # as attention_bwd_ws.dq_descriptor
    const = dict(HEAD_DIM=d, STAGES=stages, CAUSAL=causal, DQ_SPLIT=split, DQ_SKIP=skip_dq, CONSUMER_REGS=regs,
                 DS_RS=ds_rs, KV_RS=kv_rs, PREP=prep, LIGHT_PTX=_ptx_barriers.VERSION if light else 0,
                 **{o: 1 for o in ones})
    boxes = {"q_desc": (dt, (1, 1, 64, d)), "do_desc": (dt, (1, 1, 64, d)), "k_desc": (dt, (1, 1, 128, d)),
             "v_desc": (dt, (1, 1, 128, d)), "dq_desc": ("fp32", box)}
    sig, attrs = {}, {}
    for i, name in enumerate(attn_bwd_ws.arg_names):
        if name in const:
            sig[name] = "constexpr"
        elif name in boxes:
            sig[name] = descriptor_type(*boxes[name])
        elif name in ("LSE", "DELTA", "DQACC"):
            sig[name] = "*fp32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name == "SYNC":
            sig[name] = "*i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("DK", "DV", "OUT", "DO"):
            sig[name] = f"*{dt}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("qk_scale", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name.startswith(("sd", "so")):
                attrs[(i,)] = [["tt.divisibility", 16]]
    tag = (f"d{d} stages{stages} causal={causal} {dt} split={split} skip_dq={skip_dq} "
           f"regs={regs}/{maxnreg} ones={ones} ds_rs={ds_rs} kv_rs={kv_rs} prep={prep} light={light} rows={rows}")
    path = path or (f"/tmp/attn_bwd_ws_{d}_{stages}_{int(causal)}_{dt}_{int(split)}_{int(ds_rs)}{int(kv_rs)}"
                    f"{int(prep)}{'_light' if light else ''}{'_rows' if rows else ''}")
    with _ptx_stage.rewriting(_ptx_barriers.rewrite_ptx) if light else nullcontext():
        return build(attn_bwd_ws, sig, const, attrs, maxnreg=maxnreg, tag=tag, path=path, keep_sass=keep,
                     sass_check=operand_clobbers,
                     counts=("wgmma.mma_async", "cp.reduce.async.bulk", "bar.sync", "bar.arrive"),
                     report=("spill", "rror", "registers", "arning"))


_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


def _regs(op: str, width: int) -> set[int]:
    """The ``width`` registers from operand ``op`` (none if it is not a register)."""
    m = re.fullmatch(r"R(\d+)", op.strip())
    return set(range(int(m.group(1)), int(m.group(1)) + width)) if m else set()


def _width(opcode: str) -> int:
    """How many registers an instruction writes from its destination: 4 for .128 and LDSM .4, 2 for .64, else 1."""
    return 4 if ".128" in opcode or (opcode.startswith("LDSM") and ".4" in opcode) else 2 if ".64" in opcode else 1


def operand_clobbers(sass: str) -> list[str]:
    """Loops (a backward branch to an earlier address) in which a register that an HGMMA reads as its A operand,
    before any write to it in that iteration (a value from before the loop: here each consumer's K / V rows), is
    written later in the loop, so the next iteration reads something else.  ptxas 12.9 (Triton 3.6) did this at head
    dim 64 with KV_RS and not DS_RS (session 20: P^T packed over K's first registers; dk and dv came out wrong).  The
    backward carries no wgmma operand from one step to the next, so any hit is a miscompile."""
    insns = [(int(a, 16), opc, ops) for a, _, opc, ops in _INSN.findall(sass)]
    # the mbarrier waits' retry stubs sit after the last EXIT and branch back into the code: not loops
    last_exit = max((a for a, o, _ in insns if o == "EXIT"), default=0)
    hits = []
    for addr, opc, ops in insns:
        target = re.search(r"0x([0-9a-f]+)", ops) if opc.startswith("BRA") else None
        if not target or int(target.group(1), 16) >= addr or addr > last_exit:
            continue
        start = int(target.group(1), 16)
        written: set[int] = set()
        invariant: set[int] = set()
        rewritten: set[int] = set()
        for a, o, operands in insns:
            if not start <= a <= addr:
                continue
            parts = [x.strip() for x in operands.split(",")]
            if o.startswith("HGMMA") and len(parts) > 1:
                invariant |= _regs(parts[1], 4) - written  # an A operand: 4 registers per k16 slice
            elif parts and not o.startswith(("ST", "HGMMA", "BRA", "BAR", "SYNCS", "RED", "UTMA")):
                regs = _regs(parts[0], _width(o))
                rewritten |= regs & invariant
                written |= regs
        if rewritten:
            hits.append(f"loop 0x{start:x}-0x{addr:x}: R{sorted(rewritten)}")
    return hits


def ptx_fixture() -> None:
    """Write tests/kernels/test_ptx_barriers.py's backward fixture: the PTX (before the rewrite) of the head dim 64
    build without a mask (``attention_bwd_ws.LIGHT_BARRIERS``)."""
    build_ptx_fixture(check, "attn_bwd_ws_d64_triton36_sm90.ptx.gz", d=64)


if __name__ == "__main__":
    if sys.argv[1:] == ["--ptx-fixture"]:
        sys.exit(ptx_fixture())
    sys.exit(main(check, sys.argv[1:]))
