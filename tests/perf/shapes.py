"""Shared sizing for the perf suite: real shapes on a GPU, small ones in CPU mode."""

from __future__ import annotations

import torch

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


def pick(gpu_value, cpu_value):
    """The GPU shape on a GPU, the small CPU shape elsewhere."""
    return gpu_value if GPU else cpu_value
