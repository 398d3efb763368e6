"""perfci: performance-regression CI for GPU kernels."""

from __future__ import annotations

__version__ = "0.1.0"

from perfci.errors import (
    BadInputError,
    InfrastructureError,
    PerfCIError,
    RegressionError,
    UsageError,
)

__all__ = [
    "BadInputError",
    "InfrastructureError",
    "PerfCIError",
    "RegressionError",
    "UsageError",
    "__version__",
]
