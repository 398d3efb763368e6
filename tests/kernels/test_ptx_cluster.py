"""The PTX rewrite that runs the Gluon GEMM in clusters of two CTAs (kernels/_ptx_cluster.py), on the PTX Triton 3.6
emits for it: tests/data/ptx/matmul_ws_cluster2_triton36_sm90.ptx.gz, made by `python3.11 kernels/compile_check_mm.py
--ptx-fixture` (the GPU machine's Triton, offline, for sm_90; debug line records dropped).  The clustered kernel runs
only on the GPU (tests/kernels/test_matmul_ws.py); here the rewrite's every change and refusal is checked."""

from __future__ import annotations

import gzip
import re
import threading
from pathlib import Path

import pytest

from kernels import _ptx_cluster as pc
from kernels._matmul_ws import B_DESC_PARAM
from tests.kernels.ptx_standins import Compiled, StandInJit, compile_ptx

FIXTURE = Path(__file__).parents[1] / "data" / "ptx" / "matmul_ws_cluster2_triton36_sm90.ptx.gz"
B_PARAM = B_DESC_PARAM  # the fixture's B descriptor parameter, as kernels/_matmul_gluon.py passes it


@pytest.fixture(scope="module")
def ptx() -> str:
    return gzip.decompress(FIXTURE.read_bytes()).decode()


def _copies(text: str, reg: str) -> list[str]:
    return [line for line in text.splitlines() if "cp.async.bulk.tensor.2d.shared::cluster.global" in line
            and f"[{reg}, {{" in line]


def test_only_b_copies_are_multicast_to_both_ctas(ptx):
    out = pc.rewrite_ptx(ptx, B_PARAM)
    b_reg = pc._desc_register(ptx, "matmul_ws_kernel", B_PARAM)
    a_reg = pc._desc_register(ptx, "matmul_ws_kernel", 0)
    assert len(_copies(ptx, b_reg)) == 2  # the two halves (one a CTA)
    assert all(".multicast::cluster" in line and "%mcmask; }" in line and "mov.b16 %mcmask, 3;" in line
               for line in _copies(out, b_reg))
    assert _copies(out, a_reg) == _copies(ptx, a_reg) and _copies(ptx, a_reg)  # A: unchanged, not multicast
    assert out.count(".multicast::cluster") == 2


def test_every_consumer_release_also_reaches_the_other_cta(ptx):
    out = pc.rewrite_ptx(ptx, B_PARAM)
    plain = re.findall(r"(@%p\d+ )?mbarrier\.arrive\.shared::cta\.b64 _, \[(%r\d+)\];\n", ptx)
    assert len(plain) == 4  # per consumer: one in the K loop, one after it
    for pred, reg in plain:
        twin = (f"mapa.shared::cluster.u32 %mcaddr, {reg}, %mcpeer; {pred}mbarrier.arrive.shared::cta.b64 _, "
                f"[{reg}]; {pred}mbarrier.arrive.shared::cluster.b64 _, [%mcaddr]; }}")
        assert twin in out, reg
    assert "xor.b32 %mcpeer, %mcpeer, 1" in out and "release.cluster.shared::cluster" not in out
    # the producer's expect-tx arrivals are not releases: untouched
    assert out.count("mbarrier.arrive.expect_tx") == ptx.count("mbarrier.arrive.expect_tx") > 0


def test_every_thread_meets_the_other_cta_after_the_inits_and_before_exit(ptx):
    out = pc.rewrite_ptx(ptx, B_PARAM)
    lines = [line.strip() for line in out.splitlines()]
    arrives = [i for i, line in enumerate(lines) if line == "barrier.cluster.arrive.release;"]
    assert len(arrives) == 4 and all(lines[i + 1] == "barrier.cluster.wait.acquire;" for i in arrives)
    producer, part1, part2, exit_ = arrives
    # the producer: after the last barrier init (fenced for the cluster), before giving registers back
    last_init = max(i for i, line in enumerate(lines) if "mbarrier.init" in line)
    assert last_init < producer and lines[producer - 1] == "fence.mbarrier_init.release.cluster;"
    assert next(line for line in lines[producer:] if line.startswith("setmaxnreg")).startswith("setmaxnreg.dec")
    # each consumer partition: first thing in its block, before its setmaxnreg.inc (which waits for the producer's
    # decrease: after it, the cluster barrier would deadlock)
    for i in (part1, part2):
        assert re.match(r"\$L__BB\d+_\d+:", lines[i - 1]), lines[i - 1]
        assert next(line for line in lines[i + 2:] if line.startswith("setmaxnreg")).startswith("setmaxnreg.inc")
    assert lines[exit_ + 2] == "ret;" and out.count("ret;") == 1


def test_the_rest_is_unchanged(ptx):
    out = pc.rewrite_ptx(ptx, B_PARAM)
    kept = [line for line in out.splitlines() if "barrier.cluster" not in line and "%mcmask" not in line
            and "%mcpeer" not in line and "fence.mbarrier_init" not in line]
    b_reg = pc._desc_register(ptx, "matmul_ws_kernel", B_PARAM)
    changed = set(_copies(ptx, b_reg)) | {line for line in ptx.splitlines()
                                         if re.search(r"mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];$", line)}
    assert kept == [line for line in ptx.splitlines() if line not in changed]


@pytest.mark.parametrize(("edit", "param", "match"), [
    (lambda p: p.replace(".visible .entry matmul_ws_kernel(", ".entry matmul_ws_kernel("), B_PARAM, "no kernel entry"),
    (lambda p: p.replace("matmul_ws_kernel_param_5;", "matmul_ws_kernel_param_9;"), B_PARAM, "parameter 5"),
    (lambda p: p, 0, r"parameter 0 \(not 2\)"),  # A's descriptor: one copy, refused rather than multicast
    (lambda p: p.replace("mbarrier.arrive.shared::cta.b64", "mbarrier.arrive.b64"), B_PARAM, "0 plain arrivals"),
    (lambda p: p.replace("barrier.sync \t1;", "barrier.sync \t2;"), B_PARAM, "start-up barrier"),
    (lambda p: re.sub(r"ld\.shared\.b8(\s+%rs\d+), \[(%r\d+)\+(\d+)\];", r"ld.shared.u8\1, [\2+\3];", p),
     B_PARAM, "task switch"),
    (lambda p: p.replace("\tret;", "\tret;\n\tret;"), B_PARAM, "2 ret"),
    (lambda p: p.replace("setmaxnreg.inc.sync.aligned.u32 \t208;", "nop;"), B_PARAM, "worker partitions"),
])
def test_unknown_ptx_is_refused(ptx, edit, param, match):
    """Whatever the rewrite does not find raises PtxRewriteError (a RuntimeError: the host's build-failure path)."""
    changed = edit(ptx)
    assert changed != ptx or param != B_PARAM
    with pytest.raises(pc.PtxRewriteError, match=match):
        pc.rewrite_ptx(changed, param)
    assert issubclass(pc.PtxRewriteError, RuntimeError)


def test_rewriting_applies_in_its_context_and_chains_other_hooks(ptx, hook_slot):
    seen = []
    hook_slot.add_stages_inspection_hook = lambda *args: seen.append(len(args))
    rewritten = pc.rewrite_ptx(ptx, B_PARAM)
    with pc.rewriting(B_PARAM):
        assert compile_ptx(hook_slot, ptx) == rewritten
        # a kernel another thread compiles meanwhile passes through unchanged
        other = []
        worker = threading.Thread(target=lambda: other.append(compile_ptx(hook_slot, ptx)))
        worker.start()
        worker.join()
        assert other == [ptx]
    assert compile_ptx(hook_slot, ptx) == ptx  # outside the context: unchanged, the user's hook still called
    assert seen == [5, 5, 5]
    # a hook set later over ours that chains to it: still one rewrite
    ours = hook_slot.add_stages_inspection_hook
    hook_slot.add_stages_inspection_hook = lambda *args: ours(*args)
    with pc.rewriting(B_PARAM):
        assert compile_ptx(hook_slot, ptx) == rewritten


def test_two_threads_rewriting_at_once_each_rewrite_once(ptx, hook_slot):
    rewritten = pc.rewrite_ptx(ptx, B_PARAM)
    both_in, results = threading.Barrier(2), []

    def compile_clustered():
        with pc.rewriting(B_PARAM):
            both_in.wait()
            results.append(compile_ptx(hook_slot, ptx))
            both_in.wait()

    workers = [threading.Thread(target=compile_clustered) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert results == [rewritten, rewritten]


def test_clustered_rewrites_and_launches_only_cluster_builds(ptx, hook_slot, as_triton36):
    jit = StandInJit(ptx, ("a_desc", "CLUSTER"))
    pc.clustered(jit, "CLUSTER", desc_param=B_PARAM)
    plain = jit._do_compile("k", {}, 0, {(1,): 1}, None, {}, False)
    assert plain.asm["ptx"] == ptx and plain.packed_metadata == (4, 1, 213168)
    clustered = jit._do_compile("k", {}, 0, constexprs={(1,): 2}, options=None, attrs={}, warmup=True)
    assert clustered.asm["ptx"] == pc.rewrite_ptx(ptx, B_PARAM) and clustered.packed_metadata == (4, 2, 213168)
    assert len(jit.calls) == 2


def test_clustered_and_light_builds_of_one_kernel(ptx, hook_slot, as_triton36):
    """The Gluon GEMM compiles through both rewrites (kernels/_matmul_gluon.py): a cluster build through the cluster
    rewrite, a LIGHT_PTX build through the barriers' (kernels/_ptx_barriers.py), a plain one through neither."""
    from kernels import _ptx_barriers as pb

    jit = StandInJit(ptx, ("a_desc", "CLUSTER", "LIGHT_PTX"))
    pc.clustered(jit, "CLUSTER", desc_param=B_PARAM)
    pb.light(jit, "LIGHT_PTX")
    plain = jit._do_compile("k", {}, 0, {(1,): 1, (2,): 0}, None, {}, False)
    assert plain.asm["ptx"] == ptx and plain.packed_metadata == (4, 1, 213168)
    clustered = jit._do_compile("k", {}, 0, {(1,): 2, (2,): 0}, None, {}, False)
    assert clustered.asm["ptx"] == pc.rewrite_ptx(ptx, B_PARAM) and clustered.packed_metadata == (4, 2, 213168)
    light = jit._do_compile("k", {}, 0, constexprs={(1,): 1, (2,): pb.VERSION}, options=None, attrs={}, warmup=True)
    assert light.asm["ptx"] == pb.rewrite_ptx(ptx) and pb.removed(light.asm["ptx"]) > 0
    assert light.packed_metadata == (4, 1, 213168) and len(jit.calls) == 3


def test_clustered_refuses_a_build_without_the_rewrite(ptx, hook_slot, as_triton36):
    """A cluster build that comes back unrewritten (a cubin cached without the hook) would hang if launched in
    clusters: refused.  So is a JIT whose compile step is not Triton 3.6's."""
    class Cached(StandInJit):  # the stages bypassed, as on a cache hit
        def _do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
            return Compiled(self.ptx)

    pc.clustered(cached := Cached(ptx, ("a_desc", "CLUSTER")), "CLUSTER", desc_param=B_PARAM)
    with pytest.raises(pc.PtxRewriteError, match="without the rewrite"):
        cached._do_compile("k", {}, 0, {(1,): 2}, None, {}, False)

    class Other:
        arg_names = ("CLUSTER",)

        def _do_compile(self, key, signature, device, options):
            pass

    with pytest.raises(pc.PtxRewriteError, match="unknown JIT compile step"):
        pc.clustered(Other(), "CLUSTER", desc_param=B_PARAM)
