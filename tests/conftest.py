"""Loaded before any plugin configures: without a CUDA GPU, Triton must run in its interpreter, and
``TRITON_INTERPRET`` has to be set before the first ``import triton`` (its own ``@triton.jit``
helpers such as ``tl.cdiv`` are built at import time)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
