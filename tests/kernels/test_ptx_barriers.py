"""The PTX rewrite that takes the warpgroup barriers before the attention forward's consumer mbarrier operations out
(kernels/_ptx_barriers.py), on the PTX Triton 3.6 emits for the kernel: tests/data/ptx/attn_fwd_ws_*.ptx.gz, made by
`python3.11 kernels/compile_check_ws.py --ptx-fixtures` (the GPU machine's Triton, offline, for sm_90; debug line
records dropped): a two-consumer bf16 causal build and an fp8 build with ping-pong turns.  The rewritten kernel runs
only on the GPU (tests/kernels/test_attention.py); here what it removes and keeps is checked."""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

import pytest

from kernels import _ptx_barriers as pb
from kernels import _ptx_stage as ps

DATA = Path(__file__).parents[1] / "data" / "ptx"
BAR = re.compile(r"^\s*bar\.sync\s+(\d+), 128;$")


def _load(name: str) -> str:
    return gzip.decompress((DATA / name).read_bytes()).decode()


@pytest.fixture(scope="module")
def causal() -> str:
    return _load("attn_fwd_ws_d128_causal_triton36_sm90.ptx.gz")


@pytest.fixture(scope="module")
def pingpong() -> str:
    return _load("attn_fwd_ws_fp8_pingpong_triton36_sm90.ptx.gz")


def _body(out: str) -> list[str]:
    first, _, rest = out.partition("\n")
    assert first.startswith(pb.MARK)
    return rest.splitlines()


def _instructions(lines: list[str]) -> list[str]:
    """The instructions of ``lines`` in order, without comments, debug records and blank lines."""
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith(("//", ".loc"))]


def _next_op(instrs: list[str], i: int) -> str:
    """The first instruction after index ``i`` that is not address arithmetic, a label or an asm brace."""
    for line in instrs[i + 1:]:
        if re.match(r"(add\.s32|mad\.lo\.s32|mov\.|and\.b32|shl\.b32|setp\.|@%p\d+ bra|bra\.uni|\$L__\w+:|\{|\.reg|"
                    r"waitLoop:)", line):
            continue
        return line
    return ""


def _barriers_before(instrs: list[str], what: str) -> Counter:
    """Consumer barriers (ids >= 2) whose next operation contains ``what``, by id."""
    return Counter(m.group(1) for i, line in enumerate(instrs)
                   if (m := BAR.match(line)) and m.group(1) not in ("0", "1") and what in _next_op(instrs, i))


def test_only_consumer_barriers_before_releases_and_waits_go(causal):
    out = pb.rewrite_ptx(causal)
    before, after = _instructions(causal.splitlines()), _instructions(_body(out))
    removed = int(out.partition("\n")[0].removeprefix(pb.MARK))
    # nothing but barriers removed, and only consumer ones (2 and 3: one a consumer warpgroup)
    assert Counter(before) - Counter(after) == Counter({"bar.sync \t2, 128;": removed // 2,
                                                        "bar.sync \t3, 128;": removed // 2})
    assert not Counter(after) - Counter(before)
    assert removed == 28  # per consumer: 9 releases (K, V, Q slots on the item's paths) and 5 waits
    # none left before a wait or an arrival, in either consumer; the loader's (0) untouched
    assert _barriers_before(before, "mbarrier.try_wait") and not _barriers_before(after, "mbarrier.try_wait")
    assert not _barriers_before(after, "mbarrier.arrive.shared::cta")
    assert [line for line in after if BAR.match(line) and " 0," in line] == \
           [line for line in before if BAR.match(line) and " 0," in line]
    # the barriers around the consumers' own shared-memory data stay: before the output tile is written (after the
    # previous TMA store has read it) and before its TMA store (after the fence)
    for what in ("stmatrix", "elect.sync", "cvt.rn.bf16x2.f32"):
        assert _barriers_before(after, what) == _barriers_before(before, what)
    assert _barriers_before(after, "stmatrix") or _barriers_before(after, "cvt.rn.bf16x2.f32")
    assert _barriers_before(after, "elect.sync")


def test_every_release_follows_its_wgmma_wait_without_a_barrier(causal):
    after = _instructions(_body(pb.rewrite_ptx(causal)))
    releases = 0
    for i, line in enumerate(after):
        if not re.match(r"@%p\d+ mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];", line):
            continue
        back = [x for x in after[max(0, i - 12):i] if not re.match(r"(add\.s32|mad\.lo\.s32|mov\.|setp\.|@%p\d+ bra|"
                                                                   r"bra\.uni|\$L__\w+:)", x)]
        if any("wgmma.wait_group" in x for x in back[-3:]):
            releases += 1
            assert not any(BAR.match(x) for x in back[back.index(next(x for x in reversed(back)
                                                                        if "wgmma.wait_group" in x)):])
    assert releases >= 10


def test_ping_pong_turns_keep_their_barrier_unless_asked(pingpong):
    shipped = _instructions(_body(pb.rewrite_ptx(pingpong)))
    every = _instructions(_body(pb.rewrite_ptx(pingpong, pb.KINDS)))
    original = _instructions(pingpong.splitlines())

    def turns(instrs):  # consumer barriers right before an arrival that follows a wgmma commit
        n = 0
        for i, line in enumerate(instrs):
            if BAR.match(line) and " 0," not in line and "mbarrier.arrive.shared::cta" in _next_op(instrs, i):
                back = [x for x in instrs[max(0, i - 8):i] if "wgmma" in x]
                n += bool(back) and "commit_group" in back[-1]
        return n

    assert turns(original) == turns(shipped) > 0
    assert turns(every) == 0
    assert len(every) < len(shipped) < len(original)


def test_ptx_without_consumer_barriers_is_unchanged():
    ptx = "\t.version 8.7\n\tbar.sync \t0, 128;\n\tmbarrier.arrive.shared::cta.b64 _, [%r1];\n\tret;\n"
    out = pb.rewrite_ptx(ptx)
    assert out == f"{pb.MARK} 0\n" + ptx


class _Compiled:
    def __init__(self, ptx):
        self.asm = {"ptx": ptx}


class _Jit:
    """The JIT function's compile step as Triton 3.6 calls it: the PTX stage through the stage-inspection hook."""

    arg_names = ("q_desc", "LIGHT_PTX")

    def __init__(self, ptx):
        self.ptx = ptx

    def _do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        from triton import knobs

        stages = {"ptx": lambda src, metadata: self.ptx}
        if knobs.runtime.add_stages_inspection_hook is not None:
            knobs.runtime.add_stages_inspection_hook(None, stages, None, None, 90)
        return _Compiled(stages["ptx"](None, {}))


@pytest.fixture
def hook_slot():
    from triton import knobs

    before, ours = knobs.runtime.add_stages_inspection_hook, ps._hook
    yield knobs.runtime
    knobs.runtime.add_stages_inspection_hook, ps._hook = before, ours


def test_light_builds_only_light_specialisations_through_the_rewrite(causal, hook_slot):
    jit = _Jit(causal)
    pb.light(jit, "LIGHT_PTX")
    assert jit._do_compile("k", {}, 0, {(1,): 0}, None, {}, False).asm["ptx"] == causal
    light = jit._do_compile("k", {}, 0, constexprs={(1,): pb.VERSION}, options=None, attrs={}, warmup=True)
    assert light.asm["ptx"] == pb.rewrite_ptx(causal)


def test_light_refuses_async_compiles_and_unknown_compile_steps(causal, hook_slot):
    from triton.runtime import _async_compile

    jit = _Jit(causal)
    pb.light(jit, "LIGHT_PTX")
    token = _async_compile.active_mode.set(object())
    try:
        with pytest.raises(ps.PtxRewriteError, match="asynchronous compile mode"):
            jit._do_compile("k", {}, 0, {(1,): pb.VERSION}, None, {}, False)
    finally:
        _async_compile.active_mode.reset(token)

    class Other:
        arg_names = ("LIGHT_PTX",)

        def _do_compile(self, key, options):
            pass

    with pytest.raises(ps.PtxRewriteError, match="unknown JIT compile step"):
        pb.light(Other(), "LIGHT_PTX")
