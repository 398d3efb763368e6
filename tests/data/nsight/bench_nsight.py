"""Two tiny perf benchmarks for ``scripts/nsight_check.py`` on a GPU (not collected by ``make test``:
the file name does not start with ``test_``): a bf16 GEMM, which should sit near the compute roof, and
a 256 MiB device copy through a copy kernel, which should sit near the bandwidth roof."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

N_GEMM = 4096
ROWS, COLS, PAD = 8192, 8192, 64  # fp32: 256 MiB moved each way


def test_matmul_bf16(perf):
    a = torch.randn(N_GEMM, N_GEMM, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N_GEMM, N_GEMM, device="cuda", dtype=torch.bfloat16)
    perf.flops = 2 * N_GEMM**3
    perf(torch.matmul, a, b)


def test_copy_256mib(perf):
    # rows padded in the source, so torch copies with its copy kernel (a contiguous copy_ would be a
    # cudaMemcpy, which Nsight Compute does not profile)
    src = torch.randn(ROWS, COLS + PAD, device="cuda")[:, :COLS]
    dst = torch.empty(ROWS, COLS, device="cuda")
    perf.bytes = 2 * dst.nbytes
    perf(dst.copy_, src)
