"""NVTX ranges named after the benchmark, so Nsight can capture by range.

Uses the ``nvtx`` package (strings registered once per name in the ``perfci`` domain); falls back
to ``torch.cuda.nvtx`` when the package is missing, and to nothing on a machine without CUDA.
With nsys: ``--capture-range=nvtx --nvtx-capture='<test name>@perfci'``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

DOMAIN = "perfci"


class Ranges:
    def __init__(self) -> None:
        self.backend = "none"
        self._domain = None
        self._torch_nvtx = None
        try:
            import nvtx

            self._domain = nvtx.get_domain(DOMAIN)
            self.backend = "nvtx"
        except ImportError:
            import torch

            if torch.cuda.is_available():
                self._torch_nvtx = torch.cuda.nvtx
                self.backend = "torch.cuda.nvtx"
        self._attributes: dict[str, object] = {}

    def factory(self, name: str) -> Callable[[], AbstractContextManager[None]]:
        """A zero-argument context-manager factory for one named range (cheap to enter often)."""
        if self._domain is not None:
            domain = self._domain
            if name not in self._attributes:
                # the domain registers the message string once and caches it
                self._attributes[name] = domain.get_event_attributes(message=name)
            attributes = self._attributes[name]

            @contextmanager
            def nvtx_range() -> Iterator[None]:
                domain.push_range(attributes)
                try:
                    yield
                finally:
                    domain.pop_range()

            return nvtx_range
        if self._torch_nvtx is not None:
            torch_nvtx = self._torch_nvtx

            @contextmanager
            def torch_range() -> Iterator[None]:
                torch_nvtx.range_push(name)
                try:
                    yield
                finally:
                    torch_nvtx.range_pop()

            return torch_range
        return nullcontext

    def range(self, name: str) -> AbstractContextManager[None]:
        return self.factory(name)()
