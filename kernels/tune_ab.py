"""A/B helpers for the session device scripts (``kernels/device_s*.sh``): a kernel module's variant as a copy of its
source with a few lines replaced, a callable run with one module attribute patched, and timings in the power-capped
steady state (:func:`steady_in_turns`).

Device machines get the working tree without git history, so a variant (an experiment flag flipped, or an older
version carried as an untracked file) is loaded as a module copy beside the shipped module and swapped in for the
duration of one call::

    old = module_copy("_fwd_x0", "kernels/_attn_fwd_ws.py", [(r"^PACK16_X = 1", "PACK16_X = 0")])
    fns = {"x0": patched(run, attention_ws, "attn_fwd_ws", old.attn_fwd_ws), "new": run}
    tune_cases.in_turns(fns, 4)
"""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from functools import partial
from types import ModuleType
from typing import Any
from unittest import mock

from kernels.tune_cases import rounds_in_turns


def module_copy(name: str, path: str, subs: Iterable[tuple[str, str]] = (), workdir: str | None = None) -> ModuleType:
    """Import the source at ``path`` as module ``name`` after each (pattern, replacement) of ``subs`` replaced exactly
    one match (multiline regex); the copy is written under ``workdir`` (default: a per-process temporary folder)
    so that Triton / Gluon can read the kernels' source back.  Raises ``ValueError`` when a pattern does not match
    exactly once (a flag renamed since the script was written) and when ``name`` is an already imported module."""
    if name in sys.modules:
        raise ValueError(f"module {name!r} is already imported; give the copy a new name")
    with open(path, encoding="utf-8") as fh:
        src = fh.read()
    for pattern, repl in subs:
        src, n = re.subn(pattern, repl, src, flags=re.M)
        if n != 1:
            raise ValueError(f"{path}: pattern {pattern!r} matched {n} times, expected once")
    workdir = workdir or os.path.join(tempfile.gettempdir(), f"perfci_ab_{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    copy = os.path.join(workdir, f"{name}.py")
    with open(copy, "w", encoding="utf-8") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(name, copy)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def patched(run: Callable[[], Any], target: Any, attr: str, value: Any) -> Callable[[], Any]:
    """``run`` called with ``target.attr`` set to ``value`` (restored after each call, also on error)."""
    if not hasattr(target, attr):
        raise AttributeError(f"{target!r} has no attribute {attr!r} to patch")

    def go() -> Any:
        with mock.patch.object(target, attr, value):
            return run()

    return go


def graph_of(fn: Callable[[], Any], reps: int = 20) -> Any:
    """A CUDA graph of ``reps`` calls of ``fn`` (one call first on a side stream, as capture wants), captured from
    the current stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    return graph


def steady_us(graph: Any, seconds: float, reps: int = 20) -> float:
    """Microseconds a call: ``graph`` (of ``reps`` calls) replayed back to back for ``seconds``, the GPU loaded
    throughout: the power-capped steady state, where a short timing catches whatever clock the card had."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n, t0 = 0, time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(5):
            graph.replay()
        n += 5
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (n * reps)


def steady_in_turns(fns: dict[str, Callable[[], Any]], rounds: int, seconds: float,
                    reps: int = 20) -> dict[str, list[float]]:
    """Each of ``fns`` captured once as a graph of ``reps`` calls, then :func:`steady_us` of each a round, in turns
    (``tune_cases.rounds_in_turns``); each name's microseconds a call in round order."""
    graphs = {name: graph_of(fn, reps) for name, fn in fns.items()}
    return rounds_in_turns(graphs, rounds, timer=partial(steady_us, seconds=seconds, reps=reps))


def gemm_operands(m: int, n: int, k: int, device: str = "cuda", seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """A GEMM case of the session scripts: bf16 A (m, k) and B (k, n) drawn from a generator seeded with ``seed``, an
    empty bf16 C (m, n) and A @ B in fp32."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device=device, dtype=torch.bfloat16, generator=g)
    return a, b, torch.empty(m, n, device=device, dtype=torch.bfloat16), a.float() @ b.float()


def outputs_and_errors(fns: dict[str, Callable[[], Any]], out: Any, ref: Any) -> tuple[dict, dict]:
    """Each of ``fns`` run once into ``out`` (NaN-filled before): its output (a copy) and its largest error against
    ``ref`` over ``ref``'s largest magnitude."""
    import torch

    outs, errs = {}, {}
    for name, fn in fns.items():
        out.fill_(float("nan"))
        fn()
        if out.is_cuda:
            torch.cuda.synchronize()
        outs[name] = out.clone()
        errs[name] = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    return outs, errs


def gemm_shapes(arg: str) -> list[tuple[int, int, int]]:
    """The session scripts' shapes argument, ``MxNxK,MxNxK,...``, as (m, n, k) tuples; ValueError naming a bad one."""
    shapes = []
    for item in arg.split(","):
        dims = item.strip().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ValueError(f"a shape is MxNxK of positive integers, got {item!r} in {arg!r}")
        shapes.append((int(dims[0]), int(dims[1]), int(dims[2])))
    return shapes


def checked_variants(fns: dict[str, Callable[[], Any]], out: Any, ref: Any,
                     tol: float = 2e-2) -> tuple[dict, dict, dict[str, Callable[[], Any]]]:
    """:func:`outputs_and_errors` of ``fns``, and those of them whose error is below ``tol`` (a NaN is not): the
    variants a session script then times (:func:`steady_in_turns`) and names the others as wrong."""
    outs, errs = outputs_and_errors(fns, out, ref)
    return outs, errs, {name: fn for name, fn in fns.items() if errs[name] < tol}


def must_run(ok: bool, what: str, why: Callable[[], str] = lambda: "") -> None:
    """Raise RuntimeError where an entry point that returns False when it cannot run here (``matmul_ws``) did not
    run, naming ``what`` and ``why()`` (asked only then)."""
    if not ok:
        raise RuntimeError(f"{what} did not run: {why()}")


def timings_line(times: dict[str, list[float]], errs: dict[str, float] | None = None) -> str:
    """``name median (min-max) [error]`` for each of :func:`steady_in_turns`' timings, its error beside (none
    without ``errs``)."""
    return ", ".join(f"{name} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
                     + (f" [{errs[name]:.1e}]" if errs is not None else "") for name, v in times.items())


def faster_in(times: dict[str, list[float]], a: str, b: str) -> str:
    """``k/n``: in how many of the n rounds :func:`steady_in_turns` timed ``a`` faster than ``b``."""
    return f"{sum(x < y for x, y in zip(times[a], times[b], strict=True))}/{len(times[a])}"


def ratios(times: dict[str, list[float]], base: str, skip: Iterable[str] = ()) -> str:
    """``name base-median / its-median`` for each timing but ``base`` and ``skip`` (above 1: faster than base)."""
    med = {name: statistics.median(v) for name, v in times.items()}
    return ", ".join(f"{name} {med[base] / m:.3f}" for name, m in med.items() if name != base and name not in skip)


def gemm_once(who: str, shape: str) -> None:
    """One bf16 GEMM of ``shape`` (MxNxK), ours through ``kernels.matmul.matmul`` (``who`` "ours") or cuBLAS
    ("cublas"), warmed up by 20 calls, then once inside the NVTX range "prof" (for ``ncu --nvtx-include prof/``)."""
    import torch

    from kernels.matmul import matmul

    m, n, k = (int(x) for x in shape.split("x"))
    a, b, c, _ = gemm_operands(m, n, k)
    fn = {"cublas": lambda: torch.matmul(a, b, out=c), "ours": lambda: matmul(a, b, out=c)}[who]
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    fn()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":  # python3 -m kernels.tune_ab gemm-once ours|cublas MxNxK
    if len(sys.argv) != 4 or sys.argv[1] != "gemm-once" or sys.argv[2] not in ("ours", "cublas"):
        sys.exit("usage: python3 -m kernels.tune_ab gemm-once ours|cublas MxNxK")
    gemm_once(sys.argv[2], sys.argv[3])
