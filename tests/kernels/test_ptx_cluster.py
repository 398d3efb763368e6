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

FIXTURE = Path(__file__).parents[1] / "data" / "ptx" / "matmul_ws_cluster2_triton36_sm90.ptx.gz"
B_PARAM = 5  # as kernels/_matmul_gluon.py passes it


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
    kept = [line for line in out.splitlines() if "barrier.cluster" not in line and "mcmask" not in line
            and "mcpeer" not in line and "fence.mbarrier_init" not in line]
    changed = [line for line in ptx.splitlines() if ".multicast" in line or re.search(
        r"mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\];$", line) or (
        "cp.async.bulk.tensor" in line and "%mcmask" in line)]
    b_reg = pc._desc_register(ptx, "matmul_ws_kernel", B_PARAM)
    original = [line for line in ptx.splitlines() if line not in changed and line not in _copies(ptx, b_reg)]
    assert kept == original


@pytest.mark.parametrize(("edit", "match"), [
    (lambda p: p.replace("matmul_ws_kernel_param_5;", "matmul_ws_kernel_param_9;"), "parameter 5"),
    (lambda p: p.replace(".multicast::cluster", "").replace("mbarrier.arrive.shared::cta.b64", "mbarrier.arrive.b64"),
     "plain arrivals"),
    (lambda p: re.sub(r"ld\.shared\.b8(\s+%rs\d+), \[(%r\d+)\+(\d+)\];", r"ld.shared.u8\1, [\2+\3];", p),
     "task switch"),
    (lambda p: p.replace("\tret;", "\tret;\n\tret;"), "2 ret"),
    (lambda p: p.replace("setmaxnreg.inc.sync.aligned.u32 \t208;", "nop;"), "worker partitions"),
])
def test_unknown_ptx_is_refused(ptx, edit, match):
    """Whatever the rewrite does not find raises PtxRewriteError (a RuntimeError: the host's build-failure path)."""
    changed = edit(ptx)
    assert changed != ptx
    with pytest.raises(pc.PtxRewriteError, match=match):
        pc.rewrite_ptx(changed, B_PARAM)
    assert issubclass(pc.PtxRewriteError, RuntimeError)


def test_rewriting_chains_a_users_hook_and_restores_it(ptx):
    from triton import knobs

    seen = []

    def users(backend, stages, options, language, capability):
        seen.append(sorted(stages))

    before = knobs.runtime.add_stages_inspection_hook
    knobs.runtime.add_stages_inspection_hook = users
    try:
        with pc.rewriting(B_PARAM):
            stages = {"ptx": lambda src, metadata: ptx, "cubin": None}
            knobs.runtime.add_stages_inspection_hook(None, stages, None, None, 90)
            assert seen == [["cubin", "ptx"]]
            assert stages["ptx"](None, {}) == pc.rewrite_ptx(ptx, B_PARAM)
            # a kernel another thread compiles meanwhile passes through unchanged (the user's hook still runs)
            other = {"ptx": lambda src, metadata: ptx}
            worker = threading.Thread(target=knobs.runtime.add_stages_inspection_hook,
                                      args=(None, other, None, None, 90))
            worker.start()
            worker.join()
            assert other["ptx"](None, {}) == ptx and len(seen) == 2
        assert knobs.runtime.add_stages_inspection_hook is users
    finally:
        knobs.runtime.add_stages_inspection_hook = before
