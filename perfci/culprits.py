"""Culprits: the user line (and the library frames below it) that made a kernel, copy or sync.

Profiled calls carry *site markers* (``record_function`` names built by :func:`site_marker` from the
Python stack); :func:`parse_site` reads them back, and :func:`culprit_from_py_event` reads the
``file.py(line): function`` events of ``with_stack`` traces. A :class:`Culprit` is the first frame of
the project's own code plus at most ``STACK_DEPTH`` library frames between it and torch.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from perfci.categories import OUTSIDE, PROJECT, SKIP, SKIP_PACKAGES, file_kind
from perfci.categories import display_path as _display_path
from perfci.errors import BadInputError

CALL_MARK = "perfci.call"
SITE_PREFIX = "perfci.site "
SITE_SEP = " || "  # between the user line and the library frames in a site marker
STACK_DEPTH = 4  # library frames kept below the user line (innermost first)
PY_EVENT_RE = re.compile(r"^(.+\.py)\((\d+)\): (.+)$")
_FRAME_RE = re.compile(r"(.+):(\d+) \((.*)\)")


@dataclass(frozen=True)
class Culprit:
    """The user line that caused a kernel, copy or sync, and the library frames below it.

    ``file:line (function)`` is the first frame of the project's own code (tests, the code under
    test): what annotations point at. ``stack`` holds the frames of libraries (transformers, a
    package outside the project) between that line and the torch call, innermost first, at most
    ``STACK_DEPTH``: ``stack[0]`` (``origin``) is the line that made the copy or the sync.
    """

    file: str
    line: int
    function: str
    stack: tuple[Culprit, ...] = ()

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.function})"

    @property
    def origin(self) -> Culprit | None:
        """The deepest frame outside torch and perfci, when it is not the user line itself."""
        return self.stack[0] if self.stack else None

    def describe(self) -> str:
        """One line: the user line, then the library frame that did it and the frames between."""
        if not self.stack:
            return str(self)
        via = f" via {' < '.join(map(str, self.stack[1:]))}" if len(self.stack) > 1 else ""
        return f"{self} <- {self.stack[0]}{via}"

    def marker(self) -> str:
        """The text of a site marker (parsed back by :func:`parse_site`)."""
        return SITE_PREFIX + SITE_SEP.join(map(str, (self, *self.stack)))

    @classmethod
    def parse(cls, text: str, stack: tuple[str, ...] = ()) -> Culprit:
        match = _FRAME_RE.fullmatch(text)
        if match is None:
            raise BadInputError(f"culprit {text!r} is not 'file:line (function)'")
        return cls(match.group(1), int(match.group(2)), match.group(3), tuple(cls.parse(f) for f in stack))


def parse_site(name: str) -> Culprit | None:
    """The culprit of a site marker's name, or None when ``name`` is not one."""
    if not name.startswith(SITE_PREFIX):
        return None
    parts = name[len(SITE_PREFIX):].split(SITE_SEP)
    try:
        return Culprit.parse(parts[0], tuple(parts[1:]))
    except BadInputError:
        return None


def _is_user_file(filename: str) -> bool:
    """Not skipped and not installed (the fallback through the profiler's own Python stack)."""
    return file_kind(filename) in (PROJECT, OUTSIDE)


_CODE_KIND: dict[Any, str] = {}  # code object -> frame kind (for the working directory in _CACHED_CWD)
_MARKERS: dict[tuple[tuple[Any, int, str], ...], str | None] = {}
_CACHED_CWD = [""]


def _code_kind(frame: Any) -> str:
    module = frame.f_globals.get("__name__", "") or ""
    return SKIP if module.split(".", 1)[0] in SKIP_PACKAGES else file_kind(frame.f_code.co_filename)


def _site_key(frame: Any) -> tuple[tuple[Any, int, str], ...]:
    """(code, line, kind) of the frames that are not skipped, innermost first, up to the first project frame.

    This runs for every torch call while the profiler records Python calls, so it makes no calls
    on a cache hit (subscripts only): each call here would be one more event in the trace.
    """
    cwd = os.getcwd()
    if cwd != _CACHED_CWD[0]:
        _CODE_KIND.clear()
        _MARKERS.clear()
        _CACHED_CWD[0] = cwd
    kinds = _CODE_KIND
    key: tuple[tuple[Any, int, str], ...] = ()
    while frame is not None:
        code = frame.f_code
        if code in kinds:
            kind = kinds[code]
        else:
            kind = kinds[code] = _code_kind(frame)
        if kind != SKIP:
            key += ((code, frame.f_lineno, kind),)
            if kind == PROJECT:
                break
        frame = frame.f_back
    return key


def _marker_of(key: tuple[tuple[Any, int, str], ...]) -> str | None:
    """The site marker text of a frame chain (see :func:`site_marker`), cached."""
    if key in _MARKERS:
        return _MARKERS[key]
    marker = None
    chosen = len(key) - 1 if key and key[-1][2] == PROJECT else next(
        (i for i, (_, _, kind) in enumerate(key) if kind == OUTSIDE), None)
    if chosen is not None:
        code, line, _ = key[chosen]
        stack = tuple(Culprit(_display_path(c.co_filename), n, getattr(c, "co_qualname", c.co_name))
                      for c, n, _ in key[:chosen][:STACK_DEPTH])
        marker = Culprit(_display_path(code.co_filename), line, code.co_name, stack).marker()
    _MARKERS[key] = marker
    return marker


def site_marker(frame: Any) -> str | None:
    """The site marker text for a torch call made from ``frame`` (None: no user frame): the deepest
    project frame from ``frame`` outwards, with the library frames below it.

    Torch, perfci, pytest and the standard library are skipped. When no project frame is on the
    stack (run from another directory) the deepest frame outside site-packages stands in for it.
    """
    return _marker_of(_site_key(frame))


def _resolve_short_path(short: str) -> str | None:
    if os.path.isabs(short):
        return short
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), short)
        if os.path.exists(candidate):
            return candidate
    return None


def culprit_from_py_event(name: str) -> Culprit | None:
    """``file.py(12): func`` (profiler Python stack, function *start* line) -> Culprit if project code."""
    match = PY_EVENT_RE.match(name)
    if match is None:
        return None
    path = _resolve_short_path(match.group(1))
    if path is None or not _is_user_file(path):
        return None
    return Culprit(_display_path(path), int(match.group(2)), match.group(3))
