"""The PTX rewrite that takes the warpgroup barriers before the attention forward's consumer mbarrier operations out
(kernels/_ptx_barriers.py), on the PTX Triton 3.6 emits for the kernel: tests/data/ptx/attn_fwd_ws_*.ptx.gz, made by
`python3.11 kernels/compile_check_ws.py --ptx-fixtures` (the GPU machine's Triton, offline, for sm_90; debug line
records dropped): a two-consumer bf16 causal build (ticket grid, LPT's single row blocks) and an fp8 build with
ping-pong turns.  The rewritten kernel runs only on the GPU (tests/kernels/test_attention.py); here what it removes
and keeps is checked, and that no removed barrier stood between shared-memory data accesses."""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

import pytest

from kernels import _ptx_barriers as pb
from kernels import _ptx_stage as ps
from tests.kernels.ptx_standins import StandInJit, compile_ptx

DATA = Path(__file__).parents[1] / "data" / "ptx"
BAR = re.compile(r"^\s*bar\.sync\s+(\d+), 128;$")
SMEM_WRITE = re.compile(r"^\s*(@%p\d+ )?(st\.shared|stmatrix|atom\.shared|red\.shared)")
FIXTURES = ("attn_fwd_ws_d128_causal_triton36_sm90.ptx.gz", "attn_fwd_ws_fp8_pingpong_triton36_sm90.ptx.gz")
BACKWARD = "attn_bwd_ws_d64_triton36_sm90.ptx.gz"  # `python3.11 kernels/compile_check_bwd_ws.py --ptx-fixture`


def _load(name: str) -> str:
    return gzip.decompress((DATA / name).read_bytes()).decode()


@pytest.fixture(scope="module", params=(*FIXTURES, BACKWARD))
def fixture(request) -> str:
    return _load(request.param)


@pytest.fixture(scope="module")
def causal() -> str:
    return _load(FIXTURES[0])


@pytest.fixture(scope="module")
def backward() -> str:
    return _load(BACKWARD)


def _body(out: str) -> list[str]:
    first, _, rest = out.partition("\n")
    assert first.startswith(pb.MARK)
    return rest.splitlines()


def _removed(ptx: str, kinds=pb.SHIPPED) -> list[int]:
    """Indices (in ``ptx``'s lines) of the lines the rewrite removed: it only removes lines (and adds its mark)."""
    lines, kept = ptx.splitlines(), _body(pb.rewrite_ptx(ptx, kinds))
    gone, j = [], 0
    for i, line in enumerate(lines):
        if j < len(kept) and kept[j] == line:
            j += 1
        else:
            gone.append(i)
    assert j == len(kept), "the rewrite changed a line instead of removing it"
    return gone


def test_only_consumer_barriers_go(fixture):
    lines = fixture.splitlines()
    gone = _removed(fixture)
    assert gone and all(BAR.match(lines[i]) and BAR.match(lines[i]).group(1) not in ("0", "1") for i in gone)
    assert pb.removed(pb.rewrite_ptx(fixture)) == len(gone)
    # each consumer warpgroup (named barriers 2 and 3) loses as many
    ids = Counter(BAR.match(lines[i]).group(1) for i in gone)
    assert set(ids) == {"2", "3"} and ids["2"] == ids["3"]


def test_no_removed_barrier_separated_shared_memory_writes(fixture):
    """Between the kept barriers of its warpgroup around each removed one (in program text), no shared-memory write:
    the removed barrier guarded no data (only reads, of the posted work item, may sit there)."""
    lines = fixture.splitlines()
    gone = set(_removed(fixture, pb.KINDS))
    kept = {i for i, line in enumerate(lines) if BAR.match(line) and i not in gone}
    syncs = {i for i, line in enumerate(lines) if "barrier.sync" in line}
    for i in sorted(gone):
        bar_id = BAR.match(lines[i]).group(1)
        fences = [k for k in kept | syncs if k in syncs or BAR.match(lines[k]).group(1) == bar_id]
        lo = max([k for k in fences if k < i], default=0)
        hi = min([k for k in fences if k > i], default=len(lines))
        assert not [line for line in lines[lo:hi] if SMEM_WRITE.match(line)], (i, lo, hi)
    assert len(gone) >= 8


QUIET = ("//", ".loc", "add.", "mad.", "mov.", "{", ".reg", "waitLoop:")


def _guarded(lines: list[str], what: str) -> int:
    """Consumer barriers whose next instruction (past address sums, comments and a wait loop's opening) holds
    ``what``."""
    n = 0
    for i, line in enumerate(lines):
        if (m := BAR.match(line)) and m.group(1) not in ("0", "1"):
            nxt = next((x for x in lines[i + 1:] if x.strip() and not x.strip().startswith(QUIET)), "")
            n += what in nxt
    return n


def test_no_barrier_left_before_a_release_or_wait_but_the_turns():
    causal, pingpong = (_load(name) for name in FIXTURES)
    for ptx in (causal, pingpong):
        shipped, every = _body(pb.rewrite_ptx(ptx)), _body(pb.rewrite_ptx(ptx, pb.KINDS))
        assert _guarded(ptx.splitlines(), "mbarrier.try_wait") > 0
        assert _guarded(shipped, "mbarrier.try_wait") == _guarded(every, "mbarrier.arrive") == 0
    # the causal build has no ping-pong turns: no barrier left before an arrival; the fp8 build keeps its turn passes'
    assert _guarded(_body(pb.rewrite_ptx(causal)), "mbarrier.arrive") == 0
    turns = _guarded(_body(pb.rewrite_ptx(pingpong)), "mbarrier.arrive")
    assert 0 < turns < _guarded(pingpong.splitlines(), "mbarrier.arrive")
    assert len(_removed(pingpong, pb.KINDS)) - len(_removed(pingpong)) == turns


def test_the_causal_builds_count(causal):
    assert len(_removed(causal)) == 28  # per consumer: 9 releases (K, V, Q slots on the item's paths) and 5 waits
    assert len(_removed(causal, ("release",))) == 18


def test_the_backward_loses_the_barriers_of_its_releases_only(backward):
    """The Gluon backward (head dim 64, no mask): per consumer and loop, the barrier before its two releases after
    the step's wgmma wait (the Q / dO slot's, dS^T's buffer); the one before dS^T's ready arrival, which follows
    its shared-memory store, stays."""
    lines = backward.splitlines()
    gone = _removed(backward)
    assert len(gone) == 8 and gone == _removed(backward, ("release",)) == _removed(backward, pb.KINDS)
    for i in gone:  # an arrival next; before it, past arrivals and their barriers, the step's wgmma wait
        after = next(x for x in lines[i + 1:] if x.strip() and not x.strip().startswith(QUIET))
        before = next(x for x in reversed(lines[:i]) if x.strip() and not x.strip().startswith(QUIET)
                      and not BAR.match(x) and "mbarrier.arrive" not in x and "inline asm" not in x)
        assert "mbarrier.arrive" in after and "wgmma.wait_group" in before, i
    body = _body(pb.rewrite_ptx(backward))
    assert _guarded(lines, "mbarrier.arrive") - _guarded(body, "mbarrier.arrive") == 8
    assert _guarded(body, "mbarrier.arrive") > 0  # dS^T's ready arrival keeps its barrier


SYNTHETIC = """\twgmma.wait_group.sync.aligned 1;
\tadd.s32 \t%r1, %r2, 8;
\tbar.sync \t2, 128;
\t@%p3 mbarrier.arrive.shared::cta.b64 _, [%r1];
"""


@pytest.mark.parametrize(("ptx", "removed"), [
    (SYNTHETIC, 1),  # a release: its barrier goes
    (SYNTHETIC.replace("bar.sync \t2,", "bar.sync \t1,"), 0),  # the CTA's barrier: never
    (SYNTHETIC.replace("bar.sync \t2,", "bar.sync \t0,"), 0),  # the loader's: never
    # the path went elsewhere between barrier and arrival (a branch): kept
    (SYNTHETIC.replace("\tbar.sync \t2, 128;\n", "\tbar.sync \t2, 128;\n\t@%p1 bra \t$L__BB0_7;\n"), 0),
    # a join between the wait and the barrier: another path into it may not have waited
    (SYNTHETIC.replace("\tadd.s32", "$L__BB0_4:\n\tadd.s32"), 0),
    # shared-memory data between the wait and the barrier: the barrier guards it
    (SYNTHETIC.replace("\tadd.s32", "\tst.shared.b32 \t[%r9], %r8;\n\tadd.s32"), 0),
    (SYNTHETIC.replace("\tadd.s32", "\tld.shared.b32 \t%r8, [%r9];\n\tadd.s32"), 0),
    (SYNTHETIC.replace("\tadd.s32", "\tstmatrix.sync.aligned.m8n8.x4.shared.b16 [%r9], {%r1, %r2, %r3, %r4};\n"
                       "\tadd.s32"), 0),
    # a conditional branch's fall-through between them continues the path: removed
    (SYNTHETIC.replace("\tadd.s32", "\t@%p2 bra \t$L__BB0_9;\n\tadd.s32"), 1),
    # after a commit (a turn passed): kept by the shipped kinds
    (SYNTHETIC.replace("wgmma.wait_group.sync.aligned 1", "wgmma.commit_group.sync.aligned"), 0),
])
def test_synthetic_paths(ptx, removed):
    out = pb.rewrite_ptx(ptx)
    assert out.partition("\n")[0] == f"{pb.MARK} {removed}"
    assert len(_body(out)) == len(ptx.splitlines()) - removed


def test_the_light_compile_step_rewrites_only_its_version(causal, hook_slot, as_triton36):
    jit = StandInJit(causal, ("q_desc", "LIGHT_PTX"))
    pb.light(jit, "LIGHT_PTX")
    assert jit._do_compile("k", {}, 0, {(1,): 0}, None, {}, False).asm["ptx"] == causal
    assert jit._do_compile("k", {}, 0, {(1,): pb.VERSION + 1}, None, {}, False).asm["ptx"] == causal
    light = jit._do_compile("k", {}, 0, constexprs={(1,): pb.VERSION}, options=None, attrs={}, warmup=True)
    assert light.asm["ptx"] == pb.rewrite_ptx(causal)


def test_light_refuses_async_compiles_other_tritons_and_unknown_compile_steps(causal, hook_slot, monkeypatch):
    import triton
    from triton.runtime import _async_compile

    jit = StandInJit(causal, ("q_desc", "LIGHT_PTX"))
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    with pytest.raises(ps.PtxRewriteError, match=r"Triton 3\.9\.0"):
        pb.light(jit, "LIGHT_PTX")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    pb.light(jit, "LIGHT_PTX")
    token = _async_compile.active_mode.set(object())
    try:
        assert ps.async_compiling()
        with pytest.raises(ps.PtxRewriteError, match="asynchronous compile mode"):
            jit._do_compile("k", {}, 0, {(1,): pb.VERSION}, None, {}, False)
    finally:
        _async_compile.active_mode.reset(token)
    assert not ps.async_compiling()

    class Other:
        arg_names = ("LIGHT_PTX",)

        def _do_compile(self, key, options):
            pass

    with pytest.raises(ps.PtxRewriteError, match="unknown JIT compile step"):
        pb.light(Other(), "LIGHT_PTX")


def test_the_stage_hook_answers_a_cache_key_request(hook_slot):
    """A later Triton also calls the hook with no argument for a cache key: chained to a hook set before, or none."""
    hook_slot.add_stages_inspection_hook = lambda *args: ("user", "h") if not args else None
    with ps.rewriting(lambda ptx: ptx + "// x\n"):
        assert hook_slot.add_stages_inspection_hook() == ("user", "h")
        assert compile_ptx(hook_slot, "ptx\n") == "ptx\n// x\n"
    hook_slot.add_stages_inspection_hook, ps._hook = None, None
    with ps.rewriting(lambda ptx: ptx):
        assert hook_slot.add_stages_inspection_hook() == ("", "")


def test_rewriting_restores_an_enclosing_rewrite(hook_slot):
    with ps.rewriting(lambda ptx: ptx + "a"):
        with ps.rewriting(lambda ptx: ptx + "b"):
            assert compile_ptx(hook_slot, "") == "b"
        assert compile_ptx(hook_slot, "") == "a"
    assert compile_ptx(hook_slot, "") == ""
