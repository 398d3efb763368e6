"""Persistent Triton GEMM against float64 (CPU) / float32 (GPU) torch.matmul."""

from __future__ import annotations

import pytest
import torch

from kernels.matmul import matmul
from kernels.reference import rel_err

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def check_matmul(m, n, k, dtype, device, gen, b_colmajor=False, ref_dtype=torch.float64, **kw):
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=dtype)
    if b_colmajor:
        b = torch.randn(n, k, generator=gen).to(device=device, dtype=dtype).t()
    else:
        b = torch.randn(k, n, generator=gen).to(device=device, dtype=dtype)
    c = torch.full((m, n), float("nan"), dtype=dtype, device=device)
    matmul(a, b, out=c, **kw)
    ref = a.to(ref_dtype) @ b.to(ref_dtype)
    tag = f"seed={gen.initial_seed()} {m}x{n}x{k} {dtype} colmajor={b_colmajor} {kw}"
    assert torch.isfinite(c).all(), f"unwritten output: {tag}"
    err = rel_err(c, ref)
    assert err < TOL[dtype], f"rel err {err:.2e}: {tag}"


def spy_tma_configs(monkeypatch) -> list:
    """The configs ``matmul`` hands the TMA split kernel from now on (the kernel still runs), in call order."""
    from kernels import matmul as mm

    real, seen = mm.matmul_splitk_tma, []

    def spy(a, b, c, cfg, **kw):
        seen.append(cfg)
        return real(a, b, c, cfg, **kw)

    monkeypatch.setattr(mm, "matmul_splitk_tma", spy)
    return seen


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "colmajor"),
    [
        (37, 45, 29, torch.float16, False),
        (64, 33, 70, torch.bfloat16, True),
        (1, 100, 17, torch.bfloat16, False),
        (96, 64, 48, torch.float16, True),
    ],
)
def test_matmul_matches_reference(m, n, k, dtype, colmajor, device, gen):
    check_matmul(m, n, k, dtype, device, gen, colmajor)


@pytest.mark.parametrize("colmajor", [False, True])
def test_matmul_tensor_descriptor_path(colmajor, device, gen):
    check_matmul(72, 40, 56, torch.bfloat16, device, gen, colmajor, use_tma=True)


@pytest.mark.parametrize(("m", "split"), [(1, 3), (5, None), (33, 2)])
def test_matmul_split_k(m, split, device, gen):
    """Decode-sized M through the split-K kernels (ragged K chunks, M below one tile)."""
    check_matmul(m, 40, 70, torch.bfloat16, device, gen, split_k=split or 4)


@pytest.mark.parametrize(("m", "n", "k", "split"), [(1, 40, 70, 3), (33, 70, 300, 4), (64, 100, 129, 2)])
def test_matmul_split_k_fused(m, n, k, split, device, gen):
    """Split-K with the reduction in the last program of each tile (arrival counters reset for the next
    call: run twice)."""
    from kernels.matmul_splitk import _LOCKS

    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, device, gen, split_k=split, splitk_fused=True)
    assert all(int(t.sum()) == 0 for t in _LOCKS.values())


@pytest.mark.parametrize("how", ["ptr", "repack", "tma"])
@pytest.mark.parametrize("flatten", [False, True])
def test_matmul_misaligned_b_pitch(how, flatten, device, gen):
    """B's row pitch (104 bf16 = 208 bytes) not a multiple of 128 bytes: B through pointer loads, repacked, or
    through its descriptor anyway."""
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, use_tma=True, misaligned_b=how,
                 config=(32, 32, 16, 2, 4, 1, 0, flatten))


@pytest.mark.parametrize(("kw", "gluon"), [({"config": (32, 32, 16, 2, 4, 1, 0, False)}, False),
                                           ({"persistent": False}, False), ({}, False), ({"gluon": True}, True)])
def test_misaligned_b_takes_gluon_only_by_the_default_rule(kw, gluon, device, gen, monkeypatch):
    """A misaligned B pitch with the default ws-repack: the Gluon GEMM runs where gluon_default says (not for a
    product this small), or when asked (gluon=True), never when a Triton knob is given; the Gluon kernel is stood
    in for here (it runs on sm_90 only) by a marker around the Triton result."""
    import kernels._matmul_gluon as mg
    import kernels.matmul as mm

    calls = []

    def stand_in(a, b, c, *args, **kwargs):
        calls.append(tuple(b.shape))
        return False  # "could not run": the Triton kernel then computes the product

    monkeypatch.setattr(mg, "runnable", lambda *a: True)
    monkeypatch.setattr(mg, "matmul_ws", stand_in)
    monkeypatch.setattr(mm, "MISALIGNED_B", "ws-repack")
    monkeypatch.setattr(mm, "_tma_ok", lambda *ts: True)  # the descriptor path, as on a GPU
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, **kw)
    assert bool(calls) is gluon, calls


def test_misaligned_b_route_must_be_known(device, gen):
    """An unknown ``misaligned_b`` is a ValueError naming the routes (it used to fall through to the descriptor path
    silently)."""
    a = torch.randn(70, 40, generator=gen).to(device=device, dtype=torch.bfloat16)
    b = torch.randn(40, 104, generator=gen).to(device=device, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"misaligned_b must be one of .*'ws-mc'.*got 'ws-cluster'"):
        matmul(a, b, misaligned_b="ws-cluster")


def test_matmul_non_persistent_grid(device, gen):
    check_matmul(70, 90, 33, torch.float16, device, gen, persistent=False)


def test_matmul_empty(device):
    a = torch.randn(0, 8, dtype=torch.float16, device=device)
    b = torch.randn(8, 5, dtype=torch.float16, device=device)
    assert matmul(a, b).shape == (0, 5)
    a2 = torch.randn(3, 0, dtype=torch.float16, device=device)
    b2 = torch.randn(0, 4, dtype=torch.float16, device=device)
    assert torch.equal(matmul(a2, b2), torch.zeros(3, 4, dtype=torch.float16, device=device))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "colmajor"),
    [
        (4096, 4096, 4096, torch.bfloat16, False),
        (4096, 4096, 4096, torch.float16, True),
        (3000, 5000, 1000, torch.bfloat16, False),
        (1001, 777, 1003, torch.float16, False),  # unaligned strides: pointer path
        (1, 4096, 4096, torch.bfloat16, False),  # decode-sized: transposed TMA tiles, A by pointer loads
        (16, 14336, 4096, torch.bfloat16, False),
        (64, 1000, 3000, torch.float16, True),
    ],
)
def test_matmul_gpu(m, n, k, dtype, colmajor, gen):
    check_matmul(m, n, k, dtype, "cuda", gen, colmajor, ref_dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("config", [(128, 256, 64, 8, 8, 3, 0, False), (128, 256, 64, 8, 8, 4, 1, True),
                                    (128, 256, 64, 8, 8, 4, 2, False)])
def test_matmul_gpu_epilogues(config, gen):
    check_matmul(3000, 5000, 1000, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, config=config)


@pytest.mark.parametrize("epi", [0, 1, 2])
def test_matmul_epilogues(epi, device, gen):
    """Tensor-descriptor path with each epilogue: whole-tile, two half-tile, and plain stores."""
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, use_tma=True, config=(32, 32, 16, 2, 4, 1, epi, True))


@pytest.mark.gpu
@pytest.mark.parametrize("route", [{"split_k": 8, "splitk_fused": True},
                                   {"splitk_tma": (4, 64, 128, 4, 4, True, True)}])
def test_matmul_gpu_split_k_on_two_streams(route, gen, monkeypatch):
    """Split GEMMs on two streams at once: each stream counts its tiles' arrivals in its own buffer (one buffer
    per device let one stream's programs take the other's arrivals for their own)."""
    from kernels import matmul_splitk

    _LOCKS: dict = {}
    monkeypatch.setattr(matmul_splitk, "_LOCKS", _LOCKS)  # no buffer from earlier tests: these calls make them
    monkeypatch.setattr(matmul_splitk, "TMA_SPLIT_FUSED", True)  # the TMA kernel's partials summed with counters

    a = [torch.randn(16, 4096, generator=gen).to("cuda", torch.bfloat16) for _ in range(2)]
    b = [torch.randn(4096, 2048, generator=gen).to("cuda", torch.bfloat16) for _ in range(2)]
    want = [(x.float() @ y.float()) for x, y in zip(a, b, strict=True)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs: list[list[torch.Tensor]] = [[], []]
    torch.cuda.synchronize()
    for _ in range(20):  # many launches queued on both streams, so that some run at the same time
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[i].append(matmul(a[i], b[i], **route))
    torch.cuda.synchronize()
    keys = {(torch.device("cuda", torch.cuda.current_device()), s.cuda_stream) for s in streams}
    assert keys <= set(_LOCKS) and len({id(_LOCKS[key]) for key in keys}) == 2, "each stream has its own counters"
    for i in range(2):
        for out in outs[i]:
            assert rel_err(out, want[i]) < 1e-2
    assert all(int(t.sum()) == 0 for t in _LOCKS.values())


@pytest.mark.gpu
@pytest.mark.parametrize("warm", [False, True], ids=["no-buffer", "buffer-made-before"])
def test_matmul_gpu_split_k_in_a_cuda_graph(warm, gen, monkeypatch):
    """A fused split-K GEMM captured in a CUDA graph on a stream of its own: counters allocated inside the capture
    are zeroed only when the graph replays, so they serve that graph alone and are not kept for eager calls; a
    buffer made before the capture (on another stream) serves the graph instead."""
    from kernels import matmul_splitk

    locks: dict = {}
    monkeypatch.setattr(matmul_splitk, "_LOCKS", locks)
    a = torch.randn(8, 4096, generator=gen).to("cuda", torch.bfloat16)
    b = torch.randn(4096, 2048, generator=gen).to("cuda", torch.bfloat16)
    want = a.float() @ b.float()
    route = {"split_k": 8, "splitk_fused": True}
    assert rel_err(matmul(a, b, **route), want) < 1e-2  # the kernels built (and a buffer made) on this stream
    if not warm:
        locks.clear()
    before = dict(locks)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(graph, stream=side):
        out = matmul(a, b, **route)
    torch.cuda.synchronize()
    assert set(locks) == set(before) and all(locks[key] is before[key] for key in before), \
        "nothing allocated in the capture is kept"
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, want) < 1e-2
    assert rel_err(matmul(a, b, **route), want) < 1e-2  # eager, after the capture
    assert all(int(t.sum()) == 0 for t in locks.values())


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "split"), [(64, 4096, 4096, 4), (1, 4096, 4096, 4), (16, 14336, 4096, None),
                                                     (37, 1000, 3000, 3), (64, 4096, 4096, 2)])
@pytest.mark.parametrize("fused", [True, False])
def test_matmul_gpu_split_k(m, n, k, split, fused, gen):
    """Split-K on the GPU, separate reduce kernel or fused (last-arriving program); three calls in a row."""
    for _ in range(3):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, split_k=split or 4,
                     splitk_fused=fused)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(4000, 5000, 3000), (3000, 5000, 1000), (1000, 4104, 777), (64, 5000, 3000)])
@pytest.mark.parametrize("how", ["ptr", "repack", "tma"])
def test_matmul_gpu_misaligned_b(m, n, k, how, gen):
    """Row-major B with a row pitch that is not a multiple of 128 bytes, each way of reading it (autotuned)."""
    check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, misaligned_b=how)


SKTMA_CFGS = [(1, 32, 128, 4, 6, True), (2, 64, 128, 4, 6, False), (4, 128, 128, 4, 4, True),
              (3, 128, 64, 4, 8, True)]
# the tile computed transposed (swap), A by pointer loads (a_ptr), each alone and together, split and not
SWAP_CFGS = [(1, 64, 128, 4, 6, True, True), (2, 64, 128, 4, 4, True, True, True),
             (1, 32, 128, 4, 6, True, False, True), (3, 128, 64, 4, 8, False, True, True)]


@pytest.mark.parametrize(("m", "n", "k"), [(40, 48, 56), (17, 72, 104), (64, 40, 136), (3, 40, 72)])
@pytest.mark.parametrize("cfg", SKTMA_CFGS + SWAP_CFGS)
@pytest.mark.parametrize("fused", [False, True], ids=["sum-after", "fused"])
def test_matmul_split_k_tma(m, n, k, cfg, fused, device, gen, monkeypatch):
    """M <= 64 through the tensor-descriptor split-K kernel (unsplit, split with the partials summed by a second
    kernel or by each tile's last program; host or device descriptors; the tile transposed, A by pointer loads);
    twice, so the arrival counters' reset is exercised."""
    from kernels import matmul_splitk as sk

    monkeypatch.setattr(sk, "TMA_SPLIT_FUSED", fused)
    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, device, gen, splitk_tma=cfg)
    assert all(int(t.sum()) == 0 for t in sk._LOCKS.values())


@pytest.mark.parametrize("max_m", [0, 40, 48])
@pytest.mark.parametrize(("m", "n", "k"), [(33, 40, 72), (40, 72, 136), (41, 48, 56), (48, 24, 40)])
def test_matmul_split_k_tma_two_a_boxes(m, n, k, max_m, device, gen, monkeypatch):
    """32 < M <= 48 transposed and unsplit, A's windows off: A through boxes of 32 and 16 rows (up to
    A_TWO_BOXES_MAX_M) or one of 64; every row written (check_matmul's NaN-filled output), split or not."""
    from kernels import matmul_splitk as sk

    monkeypatch.setattr(sk, "A_TWO_BOXES_MAX_M", max_m)
    monkeypatch.setattr(sk, "A_WINDOWS", False)
    for cfg in ((1, 64, 128, 4, 6, True, True), (1, 64, 128, 4, 6, False, True), (2, 64, 128, 4, 4, True, True)):
        check_matmul(m, n, k, torch.bfloat16, device, gen, splitk_tma=cfg)


def test_a_windows_rule(monkeypatch):
    """A through two windows where its boxes would be zero-filled for more than 8 rows past M (unsplit, 32 < M <= 40
    takes boxes of 32 + 16 rows); never at M <= A_PTR_MAX_M (pointer loads), at a power of two, or with A_WINDOWS
    off."""
    from kernels import matmul_splitk as sk

    assert [m for m in range(1, 57) if sk.a_windows(m)] == [*range(17, 24), *range(33, 40), *range(41, 56)]
    assert [m for m in range(1, 57) if sk.a_windows(m, split=2)] == [*range(17, 24), *range(33, 56)]
    monkeypatch.setattr(sk, "A_TWO_BOXES_MAX_M", 0)
    assert [m for m in range(1, 57) if sk.a_windows(m)] == [*range(17, 24), *range(33, 56)]
    monkeypatch.setattr(sk, "A_WINDOWS", False)
    assert not any(sk.a_windows(m, s) for m in range(1, 65) for s in (1, 2))


@pytest.mark.parametrize(("m", "n", "k"), [(17, 40, 72), (23, 72, 136), (33, 48, 56), (47, 24, 40), (48, 40, 264),
                                           (39, 64, 200), (49, 40, 136), (55, 24, 72)])
@pytest.mark.parametrize("cfg", [(1, 64, 128, 4, 6, True, True), (2, 64, 128, 4, 4, True, True),
                                 (3, 128, 64, 4, 8, True, True), (1, 64, 128, 4, 6, False, True)])
def test_matmul_split_k_tma_a_windows(m, n, k, cfg, device, gen, monkeypatch):
    """A's two overlapping windows (host descriptors; a device-descriptor config keeps the box): every row of the
    output written and right (check_matmul's NaN-filled output), split or not; twice, the arrival counters reset."""
    _check_a_windows(m, n, k, cfg, device, gen, monkeypatch, calls=2)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(17, 4096, 4096), (23, 1000, 3000), (33, 5000, 776), (39, 2048, 4096),
                                           (41, 14336, 520), (47, 4104, 776), (48, 64, 65536), (49, 4096, 4096),
                                           (55, 6144, 776)])
@pytest.mark.parametrize("cfg", [(1, 64, 128, 4, 6, True, True), (4, 64, 128, 4, 4, True, True),
                                 (1, 128, 128, 4, 4, True, True), (16, 64, 128, 4, 4, True, True)])
def test_matmul_gpu_split_k_tma_a_windows(m, n, k, cfg, gen, monkeypatch):
    """A's two overlapping windows on the GPU at real shapes (the TMA unit's rank-3 descriptor with an overlapping
    outer stride), split up to 16 ways or not; three calls in a row."""
    _check_a_windows(m, n, k, cfg, "cuda", gen, monkeypatch, calls=3, ref_dtype=torch.float32)


def _check_a_windows(m, n, k, cfg, device, gen, monkeypatch, calls, **kw):
    from kernels import matmul_splitk as sk

    real, seen = sk._splitk_tma, []

    class Spy:  # records the kernel's A_WIN and launches the real kernel
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.append(kwargs["A_WIN"])
                return real[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(sk, "_splitk_tma", Spy())
    for _ in range(calls):
        check_matmul(m, n, k, torch.bfloat16, device, gen, splitk_tma=cfg, **kw)
    assert seen == [bool(cfg[5])] * calls
    assert all(int(t.sum()) == 0 for t in sk._LOCKS.values())


def test_matmul_split_k_tma_rejects_colmajor(device, gen):
    b = torch.randn(40, 32, generator=gen).to(device=device, dtype=torch.bfloat16).t()
    a = torch.randn(20, 32, generator=gen).to(device=device, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="splitk_tma"):
        matmul(a, b, splitk_tma=SKTMA_CFGS[0])


@pytest.mark.parametrize("rp", [(32, 256, 4, 0), (32, 256, 4, 1), (8, 1024, 4, 0), (64, 512, 8, 1)])
def test_repack_rows_configs(rp, device, gen):
    """The repack copy with each tiling / eviction variant: exact copy into a 128-byte pitch, and the GEMM
    through it."""
    from kernels.matmul import repack_rows

    b = torch.randn(77, 1000, generator=gen).to(device=device, dtype=torch.bfloat16)[:, :904]
    r = repack_rows(b, rp)
    assert torch.equal(r, b) and (r.stride(0) * 2) % 128 == 0
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, use_tma=True, misaligned_b="repack", repack=rp,
                 config=(32, 32, 16, 2, 4, 1, 0, True))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(64, 4096, 4096), (37, 1000, 3000), (48, 4104, 776)])
@pytest.mark.parametrize("cfg", [*SKTMA_CFGS, *SWAP_CFGS, (4, 128, 128, 8, 4, True), (8, 256, 64, 8, 4, True),
                                 (2, 32, 128, 4, 3, True), (4, 64, 128, 4, 3, False), (1, 128, 128, 4, 4, True, True),
                                 (8, 64, 64, 4, 4, True, True, True), (8, 32, 128, 4, 6, True),
                                 (16, 64, 128, 4, 4, True, True)])
@pytest.mark.parametrize("fused", [False, True], ids=["sum-after", "fused"])
def test_matmul_gpu_split_k_tma(m, n, k, cfg, fused, gen, monkeypatch):
    """TMA split-K on the GPU, the partials summed by a second kernel or by each tile's last program; three calls in a
    row (counters reset by the reducing program)."""
    from kernels import matmul_splitk as sk

    monkeypatch.setattr(sk, "TMA_SPLIT_FUSED", fused)
    for _ in range(3):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, splitk_tma=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(64, 4096, 4096), (40, 2000, 1000), (17, 4096, 512), (16, 14336, 1024),
                                           (1, 14336, 512), (64, 8192, 520), (33, 14336, 4096), (8, 8192, 1000),
                                           (3, 11008, 776), (16, 28672, 300), (24, 14336, 136), (16, 8192, 4096),
                                           (8, 6144, 1024), (64, 28672, 136), (16, 10240, 1000), (32, 5120, 776),
                                           (8, 9216, 520), (1, 4096, 4096), (20, 4096, 4096), (40, 4096, 1000),
                                           (5, 2048, 4096), (7, 512, 8192), (48, 1000, 3000), (12, 4096, 512),
                                           (1, 14336, 4096), (30, 64, 2000), (4, 512, 3000), (3, 40, 1000),
                                           (40, 64, 65536), (33, 4096, 4096), (40, 8192, 1000), (47, 5120, 776),
                                           (1, 512, 8192), (1, 2048, 4096), (64, 1024, 4096), (49, 2048, 3000),
                                           (60, 1000, 14336), (64, 256, 2056)])
def test_matmul_gpu_small_m_default(m, n, k, gen):
    """M <= 64 on the default path (the TMA kernel, A's box fitted to M; M <= 55: the tiles transposed, 128 or 64
    columns, K split below a quarter of a wave of them, A by pointer loads up to M = 8, through boxes of 32 + 16
    rows at 32 < M <= 40 unsplit, through two overlapping windows where the boxes would be zero-filled for more than
    8 rows past M; larger M:
    its wide tiles where they fill the GPU, over one or more waves, else SPLITK_TMA_CONFIG's (K split where they leave
    SMs idle), else wide tiles filling
    half their waves, else the persistent kernel), twice."""
    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(4000, 5000, 3000), (1000, 4104, 777)])
@pytest.mark.parametrize("rp", [(32, 256, 4, 1), (8, 1024, 4, 0), (64, 512, 8, 1), (128, 256, 8, 0)])
def test_matmul_gpu_repack_configs(m, n, k, rp, gen):
    """Misaligned B repacked with each copy variant (autotuned GEMM)."""
    check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, misaligned_b="repack", repack=rp)


def test_default_tma_split_rule(monkeypatch):
    """Which M > SWAP_MAX_M (55) products the default path sends through the TMA split-K kernel, with what split."""
    from kernels import matmul_splitk as sk

    monkeypatch.setattr(sk, "SPLITK_TMA_CONFIG", None)
    assert sk.default_tma_split(64, 4096, 4096, 132) == 0
    monkeypatch.setattr(sk, "SPLITK_TMA_CONFIG", (4, 128, 128, 4, 4, True))
    assert sk.default_tma_split(64, 4096, 4096, 132) == 4  # 32 tiles x 4 = 128 programs
    assert sk.default_tma_split(64, 14336, 4096, 132) == 0  # 112 tiles: no room for a second chunk
    assert sk.default_tma_split(64, 4096, 1024, 132) == 2  # chunks of >= 4 K tiles
    monkeypatch.setattr(sk, "SPLITK_TMA_CONFIG", (1, 32, 128, 4, 6, True))
    assert sk.default_tma_split(64, 4096, 4096, 132) == 1  # 128 tiles: one wave
    assert sk.default_tma_split(64, 8192, 4096, 132) == 0
    # tiles leaving SMs idle, K >= NARROW_SPLIT_MIN_K: K split, programs within a wave, chunks of >=
    # NARROW_SPLIT_MIN_K_TILES K tiles
    assert sk.default_tma_split(64, 1024, 4096, 132) == 4  # 32 tiles x 4
    assert sk.default_tma_split(56, 2048, 4096, 132) == 2  # 64 tiles x 2
    assert sk.default_tma_split(64, 3072, 4096, 132) == 1  # 96 tiles: no room for a second chunk
    assert sk.default_tma_split(64, 1024, 2048, 132) == 1  # K under NARROW_SPLIT_MIN_K
    assert sk.default_tma_split(64, 1024, 1024, 132) == 1
    monkeypatch.setattr(sk, "NARROW_SPLIT_MIN_K", 2048)
    assert sk.default_tma_split(64, 1024, 2048, 132) == 2  # 16 K tiles: two chunks of 8
    assert sk.default_tma_split(64, 1024, 1024, 132) == 1  # 8 K tiles: one chunk
    assert sk.default_tma_split(64, 256, 14336, 132) == 8  # 8 tiles: NARROW_SPLIT_MAX
    assert sk.default_tma_split(64, 512, 14336, 132) == 8  # 16 tiles x 8 = 128 programs
    assert sk.default_tma_split(64, 1024, 14336, 132) == 4  # 32 tiles: 4 chunks fill the wave
    monkeypatch.setattr(sk, "NARROW_SPLIT_MAX", 1)
    assert sk.default_tma_split(64, 1024, 4096, 132) == 1


def test_default_tma_config_rule(monkeypatch):
    """Which M <= 64 products the default path sends through the TMA kernel, with which tiles (132 SMs)."""
    from kernels import matmul_splitk as sk

    narrow, (wide, mid) = sk.SPLITK_TMA_CONFIG, sk.WIDE_TMA_CONFIGS
    assert (wide[1], mid[1], narrow[1], sk.SWAP_MAX_M) == (128, 64, 32, 55)
    # M > 55: the tiles as they are
    assert sk.default_tma_config(64, 4096, 4096, 132) == narrow  # 128 tiles of 32 columns; 64 of 64: half a wave
    assert sk.default_tma_config(64, 1024, 4096, 132) == (4, *narrow[1:])  # 32 of them: K in 4 chunks (64-column
    # tiles in chunks of >= 8 K tiles: 16 x 4 programs, fewer)
    # split narrow tiles give way to 64-column ones split into as many programs (MID_SPLIT_CONFIG)
    mid_split = sk.MID_SPLIT_CONFIG
    assert mid_split[0] == 64
    assert sk.default_tma_config(64, 1024, 14336, 132) == (8, *mid_split)  # 16 x 8 against 32 x 4
    assert sk.default_tma_config(64, 2048, 4096, 132) == (4, *mid_split)  # 32 x 4 against 64 x 2
    assert sk.default_tma_config(64, 512, 14336, 132) == (8, *narrow[1:])  # 16 x 8 against 8 x 8
    monkeypatch.setattr(sk, "MID_SPLIT_CONFIG", None)
    assert sk.default_tma_config(64, 1024, 14336, 132) == (4, *narrow[1:])
    monkeypatch.undo()
    assert sk.default_tma_config(56, 8192, 4096, 132) == mid  # 256 narrow tiles: 128 of 64 columns
    assert sk.default_tma_config(64, 6144, 4096, 132) == mid  # 48 wide tiles are too few; 96 of 64 columns
    assert sk.default_tma_config(64, 11008, 4096, 132) == wide  # 86 tiles: 0.652 of a wave
    assert sk.default_tma_config(64, 28672, 4096, 132) == wide  # 224 tiles: two waves, 0.85 full
    assert sk.default_tma_config(64, 14336, 4096, 114) == wide  # another SM count: 112 tiles, 0.98 of a wave
    assert sk.default_tma_config(64, 4352, 4096, 132) == mid  # 136 narrow tiles: past one wave; 68 mid (0.52)
    assert sk.default_tma_config(64, 4480, 4096, 114) == mid  # 140 narrow tiles (two waves); 70 mid ones (0.61)
    assert sk.default_tma_config(56, 10240, 8192, 132) == wide  # 80 wide tiles (0.61): the last resort
    assert sk.default_tma_config(56, 4096, 4096, 132) == narrow
    # M <= 55: transposed (swap), A by pointer loads up to M = 8 (A's box rows: 16, 32 or 64)
    def swapped(cfg, split=1, a_ptr=False, stages=None):
        return (split, *cfg[1:4], stages or cfg[4], cfg[5], True, a_ptr)

    assert [sk.box_rows(m) for m in (1, 16, 17, 32, 33, 48, 64)] == [16, 16, 32, 32, 64, 64, 64]
    assert sk.default_tma_config(16, 14336, 4096, 132) == swapped(wide)  # 112 tiles of 128 columns
    assert sk.default_tma_config(1, 14336, 4096, 132) == swapped(wide, a_ptr=True)  # 1 of A's 16 box rows
    assert sk.default_tma_config(9, 14336, 4096, 132) == swapped(wide)
    assert sk.default_tma_config(32, 12288, 4096, 132) == swapped(wide)  # 96 tiles: 0.73 of a wave
    assert sk.default_tma_config(16, 8192, 4096, 132) == swapped(mid)  # 128 64-column tiles
    assert sk.default_tma_config(20, 5120, 4096, 132) == swapped(mid)  # 80 tiles (0.61): the last resort
    assert sk.default_tma_config(16, 10240, 8192, 132) == swapped(wide)  # 80 wide tiles (0.61), 160 mid (0.61)
    assert sk.default_tma_config(16, 18688, 4096, 132) == swapped(mid)  # 146 wide tiles fill 0.55 of two waves
    assert sk.default_tma_config(48, 4096, 4096, 132) == swapped(mid)  # 64 tiles (0.48): unsplit
    assert sk.default_tma_config(49, 4096, 4096, 132) == swapped(mid)  # A through its two windows (a_windows)
    assert sk.default_tma_config(55, 4096, 4096, 132) == swapped(mid)
    assert sk.default_tma_config(8, 4096, 4096, 132) == swapped(mid, a_ptr=True)
    assert sk.default_tma_config(12, 4096, 4096, 132) == swapped(mid)
    assert sk.default_tma_config(16, 4096, 512, 132) == swapped(mid)  # short K: unsplit all the same
    # fewer 64-column tiles than a quarter of the SMs: K split into chunks of >= 4 K tiles, about 66 programs, or up
    # to a whole wave in chunks of >= SWAP_WAVE_MIN_K_TILES (8) K tiles
    assert sk.SWAP_WAVE_MIN_K_TILES == 8
    assert sk.default_tma_config(16, 2048, 4096, 132) == swapped(mid, split=4, stages=sk.SWAP_SPLIT_STAGES)
    assert sk.default_tma_config(32, 1024, 14336, 132) == swapped(mid, split=8, stages=sk.SWAP_SPLIT_STAGES)
    assert sk.default_tma_config(48, 512, 14336, 132) == swapped(mid, split=8, stages=sk.SWAP_SPLIT_STAGES)
    assert sk.default_tma_config(1, 512, 8192, 132) == swapped(mid, split=8, a_ptr=True, stages=sk.SWAP_SPLIT_STAGES)
    assert sk.default_tma_config(32, 512, 1024, 132) == swapped(mid, split=2, stages=sk.SWAP_SPLIT_STAGES)
    assert sk.default_tma_config(32, 512, 512, 132) == swapped(mid)  # 4 K tiles: no second chunk
    # 114 SMs: 2 x 32 programs pass half of them (unsplit: no wider split either)
    assert sk.default_tma_config(32, 2048, 4096, 114) == swapped(mid)
    capped = swapped(mid, split=sk.SWAP_MAX_SPLIT, stages=sk.SWAP_SPLIT_STAGES)  # one tile: 57 chunks wanted
    assert sk.default_tma_config(40, 64, 65536, 114) == capped
    monkeypatch.setattr(sk, "SWAP_WAVE_MIN_K_TILES", None)  # half the SMs at most
    assert sk.default_tma_config(16, 2048, 4096, 132) == swapped(mid, split=2, stages=sk.SWAP_SPLIT_STAGES)
    assert sk.default_tma_config(32, 1024, 14336, 132) == swapped(mid, split=4, stages=sk.SWAP_SPLIT_STAGES)
    monkeypatch.setattr(sk, "SPLITK_TMA_CONFIG", None)  # the TMA route off
    assert sk.default_tma_config(16, 14336, 4096, 132) is None
    assert sk.default_tma_config(64, 14336, 4096, 132) is None


def test_small_m_routing_keeps_explicit_knobs(monkeypatch):
    """The default TMA route (ahead of split-K) is taken only where no knob is given; an explicit knob
    keeps the path it names.  Routing only: TMA cannot run on the CPU, so tma_ok is forced true and the two kernels
    record their calls instead of running."""
    from kernels import matmul as mm

    calls = []
    monkeypatch.setattr(mm, "tma_ok", lambda *tensors: True)
    monkeypatch.setattr(mm, "num_sms", lambda device: 132)
    monkeypatch.setattr(mm, "matmul_splitk_tma", lambda a, b, c, cfg: calls.append(("tma", cfg)) or c)
    monkeypatch.setattr(mm, "matmul_splitk", lambda a, b, c, sms, split=None, fused=None:
                        calls.append(("split-K", split, fused)) or c)
    a = torch.zeros(8, 1024, dtype=torch.bfloat16)
    b = torch.zeros(1024, 8192, dtype=torch.bfloat16)  # 128 tiles of 64 columns
    narrow = (2, 32, 128, 4, 6, True)
    mm.matmul(a, b)
    mm.matmul(a, b, splitk_fused=False)
    mm.matmul(a, b, split_k=4)
    mm.matmul(a, b, splitk_tma=narrow)
    mm.matmul(a, b[:, :4096])  # 64 such tiles, where split-K ran before session 15
    mm.matmul(a, torch.zeros(1024, 10240, dtype=torch.bfloat16))  # 160 such tiles (0.61 of two waves); 80 wide ones
    mid, wide = ((*cfg[:6], True, True) for cfg in reversed(mm._sk.WIDE_TMA_CONFIGS))  # swapped, A by pointer loads
    assert calls == [("tma", mid), ("split-K", None, False), ("split-K", 4, None), ("tma", narrow), ("tma", mid),
                     ("tma", wide)]
    calls.clear()  # where the TMA route cannot run (a column-major or misaligned operand, no sm_90): split-K
    monkeypatch.setattr(mm, "tma_ok", lambda *tensors: False)
    mm.matmul(a, b[:, :4096])
    mm.matmul(torch.zeros(32, 1024, dtype=torch.bfloat16), b[:, :4096])  # M > 16: not split-K
    assert calls == [("split-K", None, None)]


@pytest.mark.gpu
def test_matmul_gpu_small_m_takes_wide_tma_tiles(gen, monkeypatch):
    """An M <= 48 product goes through the TMA kernel's tiles transposed (ahead of split-K), correct, and an
    explicit split-K knob keeps split-K (the default TMA route needs a GPU: never under the interpreter)."""
    from kernels import matmul as mm

    seen = spy_tma_configs(monkeypatch)
    sms = mm.num_sms(torch.device("cuda"))
    mid = mm._sk.WIDE_TMA_CONFIGS[1]
    assert mid[1] == 64
    # one wave of 64-column tiles; 0.75 of one with K = 1024, which use_splitk would split
    for n, k in ((sms * 64, 40), (sms * 48, 1024)):
        check_matmul(5, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32)
    assert seen == [(*mid, True, True)] * 2
    assert mm.use_splitk(5, sms * 48, 1024, sms)
    seen.clear()  # an explicit knob keeps its path: split-K asked for, split-K given
    check_matmul(5, sms * 48, 1024, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, splitk_fused=True)
    assert seen == []


@pytest.mark.parametrize("config", [None, (32, 32, 16, 2, 4, 1, 0, True)])
def test_matmul_misaligned_b_overlap(config, device, gen):
    """Misaligned B repacked in two column parts, the second part's copy beside the first part's GEMM (in order
    on the CPU); 70x264: 3 x 9 tiles of 32 on 4 programs split after 5 tile columns."""
    from kernels.matmul import _overlap_split

    assert _overlap_split(70, 264, 4, config) == 160
    kw = {"config": config} if config else {}
    check_matmul(70, 264, 40, torch.bfloat16, device, gen, use_tma=True, misaligned_b="overlap", **kw)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(4000, 5000, 3000), (3000, 5000, 1000), (1000, 4104, 776)])
def test_matmul_gpu_misaligned_b_overlap(m, n, k, gen):
    """The overlapped repack (side stream) on the GPU, twice in a row."""
    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, misaligned_b="overlap")


@pytest.mark.parametrize(("capability", "optin", "want"), [((9, 0), 232448, True), ((10, 0), 232448, True),
                                                           ((12, 0), 101376, False), ((8, 0), 167936, False),
                                                           ((9, 0), None, True), ((12, 0), None, False)])
def test_tma_capable_needs_the_configs_shared_memory(capability, optin, want, monkeypatch):
    """The TMA kernels' configs use up to ~213 KB of shared memory a block: a GPU of compute capability >= 9 with
    less (sm_120: 99 KB) takes the pointer kernels; where torch does not report the opt-in size, only 9.x / 10.x
    parts count.  (The device queries are stood in for: this machine may have no GPU.)"""
    from types import SimpleNamespace

    from kernels import _checks

    props = SimpleNamespace() if optin is None else SimpleNamespace(shared_memory_per_block_optin=optin)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    _checks.tma_capable.cache_clear()
    try:
        assert _checks.tma_capable(torch.device("cuda", 0)) is want
    finally:
        _checks.tma_capable.cache_clear()
