"""The Gluon attention kernels' consumer warpgroups without the warpgroup barriers Triton 3.6 puts before their
mbarrier operations (``kernels/_attn_fwd_ws.py`` and ``kernels/_attn_bwd_ws.py`` with ``LIGHT_PTX``; measured in
kernels/NOTES.md, sessions 31-32: what pays is the schedule ptxas makes without them, not the warps no longer meeting).

Triton's shared-memory barrier analysis sees each mbarrier operation as an access to the barrier array, so it puts a
``bar.sync <id>, 128`` (the four warps of the partition meet) before each of a consumer's K, V and Q slot releases and
before some of its mbarrier waits (three a key tile in the two-consumer configs).  None of those needs it:

- a release is one thread's arrival after its ``wgmma.wait_group``: a wgmma is one operation of the warpgroup, which
  completes only once all four warps have issued their part, so its completion seen by one warp is its completion
  (CUTLASS's consumer release and FlashAttention-3's arrive with no barrier either);
- a wait is each thread's own.

:func:`rewrite_ptx` removes those barriers and no other: a ``bar.sync`` of a consumer partition (named barriers other
than 0, the loader's, and 1, the whole CTA's) followed, past register arithmetic, comments and labels but no
branch, by an mbarrier wait loop ("wait") or by a plain arrival whose own predecessor, past the same, conditional
branches (their fall-through) and other plain arrivals with their barriers but no block label (a join), is a
``wgmma.wait_group`` ("release").  The barriers around the partitions' own shared-memory data (the output tile
before its TMA store, a conversion's scratch) and before a ping-pong turn passed right after issuing ("turn") stay.
:func:`light` makes the kernel compile its ``LIGHT_PTX`` specialisations through it (``kernels/_ptx_stage.py``).
"""

from __future__ import annotations

import re
from typing import Any

from kernels._ptx_stage import PLAIN_ARRIVE, PtxRewriteError, async_compiling, compile_through, version

__all__ = ["KINDS", "MARK", "SHIPPED", "VERSION", "PtxRewriteError", "buildable", "light", "light_error", "removed",
           "rewrite_ptx"]

VERSION = version(__file__)  # the kernel's LIGHT_PTX constexpr: a changed rewrite compiles anew
KINDS = ("release", "turn", "wait")
SHIPPED = ("release", "wait")  # the turn passes' barriers kept: level for fp8 with ping-pong turns (session 31)
MARK = "// perfci: warpgroup barriers removed before mbarrier operations:"

_BAR = re.compile(r"^\s*bar\.sync\s+(\d+), 128;$")
# register arithmetic, comments and debug labels: no memory access, no change of path
_QUIET = re.compile(r"^\s*($|\.loc|//|\$L__tmp\d+:|"
                    r"(add|sub|mul|mad|shl|shr|and|or|xor|not|neg|min|max|selp|setp|mov|cvt)\.)")
_BLOCK = re.compile(r"^\s*\$L__BB\d+_\d+:")  # a block label: a join, seen going back
_COND_BRANCH = re.compile(r"^\s*@!?%p\d+ bra")  # its fall-through continues the path, seen going back


def _next_op(lines: list[str], i: int) -> int:
    """The index of the first line after ``i`` past quiet lines and block labels (a branch stops it)."""
    i += 1
    while i < len(lines) and (_QUIET.match(lines[i]) or _BLOCK.match(lines[i])):
        i += 1
    return i


def _previous_wgmma(lines: list[str], i: int) -> str:
    """What precedes line ``i`` on its path, past quiet lines, conditional branches (their fall-through) and plain
    arrivals with their barriers: "wait" (a wgmma.wait_group), "commit" (a wgmma.commit_group) or "other" (anything
    else, a block label among them)."""
    for k in range(i - 1, max(-1, i - 60), -1):
        line = lines[k]
        if _QUIET.match(line) or _COND_BRANCH.match(line) or PLAIN_ARRIVE.match(line) or _BAR.match(line):
            continue
        if "wgmma.wait_group" in line:
            return "wait"
        if "wgmma.commit_group" in line:
            return "commit"
        return "other"
    return "other"


def _kind(lines: list[str], i: int) -> str:
    """What the consumer barrier on line ``i`` guards: "wait", "release", "turn" or "" (anything else)."""
    j = _next_op(lines, i)
    nxt = lines[j] if j < len(lines) else ""
    if nxt.strip() == "{" and j + 3 < len(lines) and "mbarrier.try_wait" in lines[j + 3]:
        return "wait"
    if PLAIN_ARRIVE.match(nxt):
        return {"wait": "release", "commit": "turn"}.get(_previous_wgmma(lines, i), "")
    return ""


def rewrite_ptx(ptx: str, kinds: tuple[str, ...] = SHIPPED) -> str:
    """``ptx`` without the consumer partitions' barriers before the mbarrier operations of ``kinds`` (see the module
    docstring), marked on its first line with how many went."""
    lines = ptx.splitlines()
    out, removed = [], 0
    for i, line in enumerate(lines):
        m = _BAR.match(line)
        if m and m.group(1) not in ("0", "1") and _kind(lines, i) in kinds:
            removed += 1
            continue
        out.append(line)
    return f"{MARK} {removed}\n" + "\n".join(out) + "\n"


def removed(ptx: str) -> int | None:
    """How many barriers :func:`rewrite_ptx` removed from ``ptx`` (its mark), or None where it did not rewrite it."""
    first = ptx.partition("\n")[0]
    return int(first.removeprefix(MARK)) if first.startswith(MARK) else None


def light(jit_fn: Any, arg: str) -> None:
    """Make ``jit_fn`` compile the specialisations whose constexpr ``arg`` is :data:`VERSION` through
    :func:`rewrite_ptx`.  PtxRewriteError where this Triton or its compile step is not the one it knows; the hosts
    (``attention_ws.light_barriers``, ``attention_bwd_ws.light_barriers``) build without it under Triton's
    asynchronous compile mode, where the compile step would refuse."""
    compile_through(jit_fn, arg, lambda value: value == VERSION, rewrite_ptx)


def light_error(jit_fn: Any, arg: str) -> str | None:
    """:func:`light` ``(jit_fn, arg)``; None where it took, else why not (the hosts' ``LIGHT_ERROR``)."""
    try:
        light(jit_fn, arg)
    except PtxRewriteError as exc:
        return str(exc)
    return None


def buildable(error: str | None) -> bool:
    """Whether a ``LIGHT_PTX`` build can be made here: :func:`light_error` gave no ``error``, and Triton's
    asynchronous compile mode is off (its builds run on other threads, outside the rewrite)."""
    return error is None and not async_compiling()
