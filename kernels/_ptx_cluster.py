"""Clusters of two CTAs for the warp-specialised Gluon GEMM (``kernels/_matmul_ws.py`` with ``CLUSTER`` = 2): the
parts Triton 3.6's Gluon cannot express, added to the PTX as Triton emits it, and the launch.

The kernel's two CTAs of a cluster compute two output tiles of one column of tiles together, and each loads one half
of their common B tile by TMA; the copy engine is to write each half into both CTAs' ring slot and count it on both
CTAs' ``a_ready`` barriers (``.multicast::cluster``), so a slot is free only once the consumers of both CTAs are done
with it.  Gluon 3.6 has no multicast copies, no arrivals on another CTA's mbarrier and no cluster launch for a kernel
whose layouts are per CTA (``num_ctas`` > 1 wants every layout split over the CTAs), so:

- :func:`rewrite_ptx` gives B's copies the multicast form (mask: both CTAs), follows each consumer arrival on an
  ``empty`` barrier (count four in the kernel) with one on the other CTA's (``mapa`` then
  ``mbarrier.arrive.shared::cluster``, as CUTLASS's cluster barrier does: with ``.release.cluster`` ptxas puts a
  GPU-wide memory barrier before each), and makes every thread of both CTAs meet (``barrier.cluster``) once the
  barriers are initialised (before any copy or arrival may reach the other CTA) and before exiting (while the other
  CTA may still write into this one);
- :func:`clustered` makes a JIT function compile its ``CLUSTER`` = 2 specialisations through that rewrite and launch
  them as clusters of two CTAs: Triton's launcher does so for a kernel whose metadata says two CTAs (its grid then
  counts clusters), and the kernel, compiled for one CTA a program, reads its CTA index as its program id (the
  stage hook and the compile step are ``kernels/_ptx_stage.py``'s).

The rewrite knows Triton 3.6's PTX for this kernel (the patterns below); anything it does not find raises
:class:`PtxRewriteError` (a RuntimeError, so the host treats it as a build failure and falls back).  ``VERSION`` is
passed to the kernel as a constexpr (a hash of this file), so a changed rewrite never reuses a cubin cached by an
older one; a build that comes back without the rewrite is refused rather than launched.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from kernels._ptx_stage import PLAIN_ARRIVE, PtxRewriteError, compile_through, version
from kernels._ptx_stage import rewriting as _rewriting

# the kernel's CLUSTER_PTX constexpr: Triton's caches key on it, not on the stage hook, so a changed rewrite (this
# file) never reuses a cubin built by another
VERSION = version(__file__)

_COPY = re.compile(r"^(\s*)(@%p\d+ )?cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\."
                   r"mbarrier::complete_tx::bytes (\[[^\]]+\]), \[(%rd\d+), (\{[^}]+\})\], (\[[^\]]+\]);$")
_CLUSTER_SYNC = "\tbarrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;\n"

__all__ = ["VERSION", "PtxRewriteError", "clustered", "rewrite_ptx", "rewriting"]


def _desc_register(ptx: str, entry: str, param: int) -> str:
    """The register holding the generic address of the kernel parameter ``param`` (a TMA descriptor)."""
    m = re.search(rf"mov\.b64\s+(%rd\d+), {re.escape(entry)}_param_{param};", ptx)
    m2 = m and re.search(rf"cvta\.param\.u64\s+(%rd\d+), {re.escape(m.group(1))};", ptx)
    if not m2:
        raise PtxRewriteError(f"no address of {entry}'s parameter {param} (a TMA descriptor)")
    return m2.group(1)


def rewrite_ptx(ptx: str, desc_param: int) -> str:
    """The clustered form of a Triton 3.6 PTX of ``_matmul_ws.matmul_ws_kernel`` (``CLUSTER`` = 2) whose B
    descriptor is parameter ``desc_param`` (see the module docstring)."""
    entry = re.search(r"\.visible \.entry (\w+)\(", ptx)
    if entry is None:
        raise PtxRewriteError("no kernel entry")
    return _with_cluster_barriers(_multicast(ptx, _desc_register(ptx, entry.group(1), desc_param), desc_param))


def _multicast(ptx: str, b_reg: str, desc_param: int) -> str:
    """B's copies (through the descriptor in ``b_reg``) multicast to both CTAs, each plain mbarrier arrival (a
    consumer's release) followed by the same arrival on the other CTA's barrier."""
    out, copies, arrivals = [], 0, 0
    for line in ptx.splitlines():
        if (c := _COPY.match(line)) and c.group(4) == b_reg:
            ind, pred, dst, desc, coords, bar = c.groups()
            out.append(f"{ind}{{ .reg .b16 %mcmask; mov.b16 %mcmask, 3; {pred or ''}cp.async.bulk.tensor.2d."
                       f"shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster {dst}, "
                       f"[{desc}, {coords}], {bar}, %mcmask; }}")
            copies += 1
        elif a := PLAIN_ARRIVE.match(line):
            ind, pred, reg = a.groups()
            pred = pred or ""
            out.append(f"{ind}{{ .reg .b32 %mcpeer; .reg .b32 %mcaddr; mov.u32 %mcpeer, %cluster_ctarank; "
                       f"xor.b32 %mcpeer, %mcpeer, 1; mapa.shared::cluster.u32 %mcaddr, {reg}, %mcpeer; "
                       f"{pred}mbarrier.arrive.shared::cta.b64 _, [{reg}]; "
                       f"{pred}mbarrier.arrive.shared::cluster.b64 _, [%mcaddr]; }}")
            arrivals += 1
        else:
            out.append(line)
    if copies != 2 or arrivals == 0:  # B's halves: one copy in each CTA's branch
        raise PtxRewriteError(f"found {copies} copies through the descriptor of parameter {desc_param} (not 2) and "
                              f"{arrivals} plain arrivals")
    return "\n".join(out) + "\n"


def _worker_partitions(ptx: str) -> list[str]:
    """The labels of the worker partitions' blocks: the branches of the worker warps' task switch whose block
    raises its register count before its start-up barrier (the exit's does not)."""
    switch = re.search(r"ld\.shared\.b8\s+%rs\d+, \[%r\d+\+\d+\];", ptx)
    if switch is None:
        raise PtxRewriteError("no task switch of the worker warps")
    targets = []
    for line in ptx[switch.end():].splitlines()[1:]:
        if "bra.uni" in line:
            break
        if b := re.match(r"\s*@%p\d+ bra \t(\$L__BB\d+_\d+);", line):
            targets.append(b.group(1))
    parts = [t for t in targets if f"\n{t}:" in ptx
             and "setmaxnreg.inc" in ptx.split(f"\n{t}:", 1)[1].split("barrier.sync", 1)[0]]
    if len(parts) != 2:
        raise PtxRewriteError(f"worker partitions {parts} among the task switch's branches {targets}")
    return parts


def _with_cluster_barriers(ptx: str) -> str:
    """Every thread meets the other CTA's once the barriers are initialised: the default partition (the producer,
    which initialises them) between its two start-up barriers with the worker warps; each worker partition (a
    consumer) at the start of its block, before its setmaxnreg.inc, which waits for the producer's decrease.  And
    again before any CTA exits: every thread leaves through the one ``ret``."""
    first = ptx.find("mbarrier.init")
    at = ptx.find("barrier.sync \t1;", first)
    if first < 0 or at < 0:
        raise PtxRewriteError("no barrier initialisation followed by the start-up barrier")
    at = ptx.index("\n", at) + 1
    ptx = ptx[:at] + "\tfence.mbarrier_init.release.cluster;\n" + _CLUSTER_SYNC + ptx[at:]
    for t in _worker_partitions(ptx):
        at = ptx.index("\n", ptx.index(f"\n{t}:") + 1) + 1
        ptx = ptx[:at] + _CLUSTER_SYNC + ptx[at:]
    if ptx.count("\tret;") != 1:
        raise PtxRewriteError(f"{ptx.count(chr(9) + 'ret;')} ret instructions, not one")
    return ptx.replace("\tret;", _CLUSTER_SYNC + "\tret;")


def rewriting(desc_param: int) -> AbstractContextManager[None]:
    """Within it, the kernels this thread compiles get their PTX through :func:`rewrite_ptx` (B descriptor: PTX
    parameter ``desc_param``); see ``kernels/_ptx_stage.py``."""
    return _rewriting(partial(rewrite_ptx, desc_param=desc_param))


def _two_ctas(kernel: Any) -> Any:
    """A clustered build, checked and set to launch in clusters of two CTAs."""
    ptx = getattr(kernel, "asm", {}).get("ptx", "")
    if "multicast::cluster" not in ptx or "barrier.cluster" not in ptx:
        raise PtxRewriteError("the clustered build came back without the rewrite (a cubin cached without it?)")
    packed = getattr(kernel, "packed_metadata", None)
    if not (isinstance(packed, tuple) and len(packed) == 3):  # (warps, CTAs, shared memory) in Triton 3.6
        raise PtxRewriteError(f"cannot set the cluster size of {type(kernel).__name__}")
    # the launcher reads the CTA count from here (its global-scratch sizing still counts one CTA a program: this
    # kernel uses none)
    kernel.packed_metadata = (packed[0], 2, packed[2])
    return kernel


def clustered(jit_fn: Any, arg: str, desc_param: int) -> None:
    """Make ``jit_fn`` compile the specialisations whose constexpr ``arg`` is 2 through :func:`rewrite_ptx` (B
    descriptor: PTX parameter ``desc_param``) and launch them in clusters of two CTAs (grid: clusters).  Raises
    PtxRewriteError where this Triton's JIT compile step is not the one it knows (nothing changed then).

    Such a build is refused (PtxRewriteError) where the rewrite did not run: under Triton's asynchronous compile mode
    (another thread compiles), or when a cubin cached without it comes back; a clustered launch of an unrewritten
    build would hang (each CTA waiting for bytes and arrivals the other never sends)."""
    compile_through(jit_fn, arg, lambda value: value == 2, partial(rewrite_ptx, desc_param=desc_param), _two_ctas)
