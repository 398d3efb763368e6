"""PTX rewrites at compile time, for what Triton 3.6's Gluon cannot express: the stage hook and the JIT compile step.

A rewrite is a function from the PTX Triton emits for a kernel to the PTX to assemble.  :func:`compile_through` makes a
JIT function compile the specialisations whose constexpr ``arg`` satisfies ``when`` through it: Triton's compile calls
the stage-inspection hook (``knobs.runtime.add_stages_inspection_hook``) on its stages, and this module's hook, while
the compiling thread is inside :func:`rewriting`, wraps the PTX stage.  The hook is installed once, chained after any
hook already set (a hook set later over it is chained in turn), and changes nothing for kernels compiled outside these
contexts or by other threads meanwhile.  Triton 3.6's caches do not key on a stage hook: each kernel takes its
rewrite's version as a constexpr (:func:`version`: a hash of the rewrite's file and this one), so a build never comes
back from a cache made without it, or by another version.  Only Triton 3.6 is supported (its compile step, its hook
protocol and the PTX the rewrites know): elsewhere :func:`compile_through` refuses, and its callers build without.

Users: ``kernels/_ptx_cluster.py`` (the GEMM in clusters of two CTAs) and ``kernels/_ptx_barriers.py`` (the attention
kernels' consumers without the warpgroup barriers Triton puts before their mbarrier operations).
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SUPPORTED_TRITON = "3.6."
# a plain mbarrier arrival as Triton 3.6 emits it (one thread's, predicated): indent, predicate, barrier register
PLAIN_ARRIVE = re.compile(r"^(\s*)(@%p\d+ )?mbarrier\.arrive\.shared::cta\.b64 _, \[(%r\d+)\];$")
Rewrite = Callable[[str], str]


class PtxRewriteError(RuntimeError):
    """Triton's PTX or compile step is not what a rewrite knows (the host treats it as a build failure)."""


def version(path: str) -> int:
    """A rewrite's version for its kernel's constexpr: a hash of the rewrite's file (``__file__``) and this one."""
    digest = hashlib.sha256(Path(path).read_bytes() + Path(__file__).read_bytes())
    return int(digest.hexdigest()[:8], 16)


try:  # Triton's asynchronous compile mode (3.4+): its context variable, looked up once
    from triton.runtime._async_compile import active_mode as _async_mode
except ImportError:
    _async_mode = None


def async_compiling() -> bool:
    """Whether Triton's asynchronous compile mode is on here (its builds run on other threads, outside the hook)."""
    return _async_mode is not None and _async_mode.get() is not None


_this_thread = threading.local()  # the rewrite while this thread compiles a kernel through one
_install = threading.Lock()
_hook = None  # this module's stage hook, once installed


def _rewriting_hook(before: Callable[..., Any] | None) -> Callable[..., Any]:
    """A stage hook: ``before``'s (a hook that was set), then, while this thread is inside :func:`rewriting`, the PTX
    stage through its rewrite (once, however many of these hooks are chained)."""

    def hook(*args: Any) -> Any:
        if not args:  # a later Triton asking its hooks for a cache key: this one adds none
            return before() if before is not None else ("", "")
        if before is not None:
            before(*args)
        stages = args[1]
        rewrite = getattr(_this_thread, "rewrite", None)
        make_ptx = stages["ptx"]
        if rewrite is not None and not getattr(make_ptx, "ptx_rewrite", False):
            def ptx_stage(src, metadata):
                return rewrite(make_ptx(src, metadata))

            ptx_stage.ptx_rewrite = True
            stages["ptx"] = ptx_stage

    return hook


@contextmanager
def rewriting(rewrite: Rewrite) -> Iterator[None]:
    """Within it, the kernels this thread compiles get their PTX through ``rewrite``."""
    global _hook
    from triton import knobs

    with _install:
        if _hook is None or knobs.runtime.add_stages_inspection_hook is not _hook:
            _hook = _rewriting_hook(knobs.runtime.add_stages_inspection_hook)
            knobs.runtime.add_stages_inspection_hook = _hook
    previous = getattr(_this_thread, "rewrite", None)
    _this_thread.rewrite = rewrite
    try:
        yield
    finally:
        _this_thread.rewrite = previous


def compile_through(jit_fn: Any, arg: str, when: Callable[[object], bool], rewrite: Rewrite,
                    finish: Callable[[Any], Any] | None = None) -> None:
    """Make ``jit_fn`` compile the specialisations whose constexpr ``arg`` satisfies ``when`` through ``rewrite``, then
    hand the compiled kernel to ``finish`` (which may check or adjust it, or raise).  Raises PtxRewriteError on a
    Triton other than 3.6 or where its JIT compile step is not the one it knows (nothing changed then), and at compile
    time under Triton's asynchronous compile mode (another thread would compile, outside the rewrite).  Called again
    on the same ``jit_fn`` (another ``arg``) it chains: the other specialisations go through the earlier rewrite's
    step.  A specialisation both claim would get the earlier one's rewrite only (the innermost context): the hosts
    ask for one at a time."""
    import triton

    if not triton.__version__.startswith(SUPPORTED_TRITON):
        raise PtxRewriteError(f"Triton {triton.__version__}: the PTX rewrites know Triton {SUPPORTED_TRITON}x only")
    plain = getattr(type(jit_fn), "_do_compile", None)
    signature = inspect.signature(plain) if callable(plain) else None
    if signature is None or "constexprs" not in signature.parameters or not hasattr(jit_fn, "arg_names"):
        raise PtxRewriteError(f"unknown JIT compile step {type(jit_fn).__name__}._do_compile"
                              f"{tuple(signature.parameters) if signature else ''}")
    index = jit_fn.arg_names.index(arg)
    earlier = jit_fn.__dict__.get("_do_compile")  # an earlier compile_through's step on this function, bound

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        return earlier(*args, **kwargs) if earlier is not None else plain(self, *args, **kwargs)

    def _do_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        constexprs = signature.bind(self, *args, **kwargs).arguments["constexprs"]
        if not when(constexprs.get((index,))):
            return step(self, *args, **kwargs)
        if async_compiling():
            raise PtxRewriteError(f"{arg} builds do not compile in Triton's asynchronous compile mode")
        with rewriting(rewrite):
            kernel = step(self, *args, **kwargs)
        if kernel is None or finish is None:  # None: a jit_cache_hook declined the compile
            return kernel
        return finish(kernel)

    jit_fn._do_compile = _do_compile.__get__(jit_fn)
