"""A/B helpers for the session device scripts (``kernels/device_s*.sh``): a kernel module's variant as a copy of its
source with a few lines replaced, and a callable run with one module attribute patched.

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
import sys
import tempfile
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any
from unittest import mock


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
