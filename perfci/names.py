"""Benchmark names that survive a change of pytest's rootdir.

A benchmark's name is its node id, relative to the rootdir of the session that measured it. The
rootdir moves when pytest is given a path outside the project (``pytest --perfci-baselines ../bl``
in the space form: pytest picks its rootdir before plugins' options are known, so ``../bl`` counts
as a test path) or when a configuration file is added or removed; the same test is then
``userproj/benchmarks/test_x.py::t`` in one run and ``benchmarks/test_x.py::t`` in the other.

Two names match when they are equal, or else when one is the other with leading directories
added, and that pairing is unique on both sides. The directory prefix found that way is applied
to the baseline's other names, so MISSING and the run's scope work in this run's terms.
"""

from __future__ import annotations

from collections.abc import Iterable


def _split(name: str) -> tuple[tuple[str, ...], str]:
    """``a/b/test_x.py::t[1]`` -> (("a", "b", "test_x.py"), "::t[1]")."""
    path, sep, rest = name.partition("::")
    return tuple(p for p in path.split("/") if p), sep + rest


def prefix_between(new: str, base: str) -> tuple[str, str] | None:
    """(added to new, added to base): the leading directories by which two names of one test differ.

    ``("userproj/", "")`` when ``new`` has an extra leading ``userproj/``; None when the two are not
    the same test under two rootdirs (different file, test or parameters).
    """
    (np_, nrest), (bp, brest) = _split(new), _split(base)
    if nrest != brest or not np_ or not bp:
        return None
    shorter, longer = (np_, bp) if len(np_) <= len(bp) else (bp, np_)
    if longer[len(longer) - len(shorter):] != shorter:
        return None
    extra = "/".join(longer[: len(longer) - len(shorter)])
    extra = f"{extra}/" if extra else ""
    return (extra, "") if longer is np_ else ("", extra)


class NameMatcher:
    """Finds a benchmark's entry in a baseline whose names may stem from another rootdir."""

    def __init__(self, base_names: Iterable[str]) -> None:
        self._base = tuple(dict.fromkeys(base_names))
        self._exact = set(self._base)
        by_tail: dict[tuple[str, str], list[str]] = {}
        for name in self._base:
            path, rest = _split(name)
            by_tail.setdefault((path[-1] if path else "", rest), []).append(name)
        self._by_tail = by_tail
        self.shift: tuple[str, str] | None = None  # the (new, base) prefixes of the first rootdir-shifted match

    def lookup(self, name: str) -> str | None:
        """The baseline name of benchmark ``name`` (this run's node id), or None when it has none."""
        if name in self._exact:
            return name
        path, rest = _split(name)
        hits = [(b, p) for b in self._by_tail.get((path[-1] if path else "", rest), ())
                if (p := prefix_between(name, b)) is not None]
        if self.shift is not None:  # once a shift is known, only names that follow it
            hits = [(b, p) for b, p in hits if p == self.shift]
        if len(hits) != 1:
            return None
        base, shift = hits[0]
        if self.shift is None:
            self.shift = shift
        return base

    def to_new(self, base_name: str) -> str:
        """A baseline name in this run's terms (the shift found by :meth:`lookup` applied)."""
        if self.shift is None:
            return base_name
        add_new, add_base = self.shift
        if add_base and base_name.startswith(add_base):
            return add_new + base_name[len(add_base):]
        return add_new + base_name if not add_base else base_name
