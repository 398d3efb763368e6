"""Device diagnostic for ``ncu`` (kernels/device_s8_mm.sh): one cuBLAS GEMM at the ragged shape
4000x5000x3000 (B pitch 10000 bytes), one at 4096x5120x3072 (aligned), then ours (Gluon, B through cp.async;
and the default path), each after a warm-up, so that ncu's kernel filter finds them."""

from __future__ import annotations

import torch

from kernels.matmul import matmul


def main() -> None:
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    for m, n, k in ((4000, 5000, 3000), (4096, 5120, 3072)):
        a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn((k, n), device="cuda", dtype=torch.bfloat16, generator=g)
        torch.matmul(a, b)
    a = torch.randn((4000, 3000), device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn((3000, 5000), device="cuda", dtype=torch.bfloat16, generator=g)
    matmul(a, b, misaligned_b="ws")
    matmul(a, b, misaligned_b="repack")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
