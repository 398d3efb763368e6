"""Peak device memory of attention: materialised (scores in memory) vs ours (FlashAttention).

    python -m kernels.memory_table [--heads 16] [--dim 128] [--batch 1]

Measured with ``torch.cuda.max_memory_allocated`` around one forward call, counting only what the
call allocates above its inputs.  Without CUDA the analytic byte counts are printed instead.
"""

from __future__ import annotations

import argparse
import math

import torch

LENGTHS = (1024, 2048, 4096, 8192, 16384)


def materialised_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v with the (L, L) score matrix in memory (what a naive model does)."""
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def peak_bytes(fn, *args) -> int:
    """Bytes allocated by ``fn(*args)`` at its peak, above what was allocated before the call."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def analytic(batch: int, heads: int, seq: int, dim: int, elem: int = 2) -> tuple[int, int]:
    """(materialised, flash) bytes beyond the inputs: scores + probabilities + output vs output + lse."""
    out = batch * heads * seq * dim * elem
    scores = batch * heads * seq * seq * elem
    return 2 * scores + out, out + batch * heads * seq * 4


def fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="peak memory: materialised attention vs FlashAttention")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args(argv)
    b, h, d = args.batch, args.heads, args.dim
    if not torch.cuda.is_available():
        print(f"no CUDA GPU: analytic bytes beyond the inputs, bf16, B={b} H={h} D={d}")
        print("| L | materialised | ours | ratio |\n|---|---|---|---|")
        for seq in LENGTHS:
            m, f = analytic(b, h, seq, d)
            print(f"| {seq} | {fmt(m)} | {fmt(f)} | {m / f:.0f}x |")
        return 0
    from kernels.attention import attention_forward

    print(f"peak bytes beyond the inputs, bf16, B={b} H={h} D={d} ({torch.cuda.get_device_name()})")
    print("| L | materialised | ours | ratio |\n|---|---|---|---|")
    for seq in LENGTHS:
        q, k, v = (torch.randn(b, h, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        attention_forward(q, k, v)  # compile / autotune outside the measurement
        ours = peak_bytes(attention_forward, q, k, v)
        try:
            mat = peak_bytes(materialised_attention, q, k, v)
            mat_s = fmt(mat)
            ratio = f"{mat / ours:.0f}x"
        except torch.cuda.OutOfMemoryError:
            mat_s, ratio = "out of memory", "-"
        print(f"| {seq} | {mat_s} | {fmt(ours)} | {ratio} |")
        del q, k, v
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
