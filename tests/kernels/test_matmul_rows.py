"""The TMA split kernel's 64-row tiles above SMALL_M rows (kernels/matmul_rows.py): the rule, the kernel at those
configs (interpreter here, real shapes on the GPU), and matmul's default route through them."""

from __future__ import annotations

import pytest
import torch

from kernels import matmul_rows as mr
from kernels._checks import cdiv
from kernels.matmul_splitk import tma_tiles
from tests.kernels.test_matmul import check_matmul, spy_tma_configs

T64, T128 = (64, 128, 4, 5, True), (128, 64, 4, 6, True)


def test_rows_configs_are_the_surveyed_tiles():
    assert mr.ROWS_CONFIGS == (T64, T128)
    assert (mr.ROWS_MIN_CHUNKS, mr.ROWS_MAX_CHUNKS, mr.ROWS_TIE_MAX_K_TILES, mr.ROWS_MIN_M, mr.ROWS_MIN_N) == \
        (4, 16, 8, 65, 128)


@pytest.mark.parametrize(("shape", "want"), [
    ((384, 128, 8192), (8, *T64)),     # 64x64: 6 x 2 tiles x 8 = 96 programs against 64x128's 48
    ((192, 256, 8192), (8, *T64)),
    ((512, 512, 8192), (4, *T128)),    # 64 tiles of 64x64 in 2 chunks (128), 32 of 64x128 in 4 (128): 16 K steps each
    ((384, 256, 8192), (8, *T128)),    # a tie at 96 programs, 64x64's chunks 16 K steps of 128: the last candidate
    ((384, 256, 4096), (4, *T64)),     # the same tie at K 4096, chunks of 8 K steps: the first
    ((2048, 128, 4096), (4, *T128)),   # 64 tiles in 2 chunks of 16 against 32 in 4
    ((256, 1024, 4096), (4, *T128)),   # past ROWS_WIDE_N from ROWS_WIDE_MIN_M rows
    ((200, 384, 6144), (8, *T128)),    # M past a multiple of 64: four 64-row tiles
    ((448, 192, 5120), (4, *T64)),     # 64x128 tiles would pass N: 64x64 ones alone (21 tiles x 4)
    ((128, 256, 8192), (8, *T64)),
    ((65, 256, 8192), (8, *T64)),      # from ROWS_MIN_M: two 64-row tiles, the second one row
    ((128, 128, 16384), (16, *T64)),   # ROWS_MAX_CHUNKS: 4 tiles x 16 chunks of 8 K steps
    ((256, 256, 16384), (16, *T128)),  # a tie at 128 programs, 64x64's chunks 16 K steps: 64x128 tiles in 16
    ((128, 128, 14336), (16, *T128)),  # 64x64 tiles in 16 would have 7 K steps a chunk: 8 of them tie 64x128's 16
    ((256, 256, 8192), (8, *T64)),     # the tie at K 8192 keeps 64x64 tiles in 8 chunks of 8 K steps
])
def test_rows_split_config_picks(shape, want):
    assert mr.rows_split_config(*shape, 132) == want


@pytest.mark.parametrize(("shape", "why"), [
    ((384, 1024, 8192), "64x128 tiles in 2 chunks, 64x64 unsplit: below ROWS_MIN_CHUNKS"),
    ((1024, 512, 4096), "2 chunks"),
    ((2048, 1024, 8192), "unsplit"),
    ((192, 1024, 4096), "past ROWS_WIDE_N below ROWS_WIDE_MIN_M"),
    ((64, 256, 8192), "below ROWS_MIN_M (matmul_splitk.default_tma_config's rows)"),
    ((1000, 192, 5120), "64x128 tiles would pass N; 64x64 ones in 2 chunks"),
    ((512, 200, 8192), "no tile width divides N (B a view of wider rows)"),
    ((512, 64, 8192), "below ROWS_MIN_N"),
    ((512, 256, 2048), "K below NARROW_SPLIT_MIN_K: unsplit"),
])
def test_rows_split_config_leaves_the_route(shape, why):
    assert mr.rows_split_config(*shape, 132) is None, why


def test_rows_split_config_follows_the_sms_and_the_switch(monkeypatch):
    assert mr.rows_split_config(512, 512, 8192, 132) == (4, *T128)
    assert mr.rows_split_config(512, 512, 8192, 64) is None  # 32 tiles of 64x128: 2 chunks fill 64 SMs
    assert mr.rows_split_config(512, 512, 8192, 264) == (8, *T128)
    monkeypatch.setattr(mr, "ROWS_SPLIT", False)
    assert mr.rows_split_config(512, 512, 8192, 132) is None


def test_rows_pick_has_the_most_programs():
    for m in (65, 100, 192, 256, 320, 512, 1000, 2048):
        for n in (128, 200, 512, 1024):
            for k in (4096, 8192, 16384):
                pick = mr.rows_pick(m, n, k, 132)
                if n % 128:  # 64x64 tiles alone, or no candidate
                    assert [c[1] for c in mr.rows_candidates(m, n, k, 132)] == ([64] if n % 64 == 0 else [])
                if pick is None:
                    continue
                progs = [c[0] * tma_tiles(m, n, c[1]) for c in mr.rows_candidates(m, n, k, 132)]
                assert pick[0] * tma_tiles(m, n, pick[1]) == max(progs)
                assert pick[0] == 1 or max(progs) <= 132  # split programs fit one round
                assert pick[0] <= mr.ROWS_MAX_CHUNKS and cdiv(k, pick[2]) // pick[0] >= 8  # chunks of >= 8 K steps


@pytest.mark.parametrize(("m", "n", "k"), [(130, 72, 160), (65, 40, 96)])
@pytest.mark.parametrize("cfg", [(4, *T64), (8, *T128), (16, *T128), (2, 128, 64, 4, 4, False)])
def test_rows_configs_run(m, n, k, cfg, device, gen, monkeypatch):
    """The rows configs through the kernel beyond 64 rows (several 64-row tiles, the last one partly past M), the
    partials summed by the second kernel (the route's setting)."""
    from kernels import matmul_splitk as sk

    monkeypatch.setattr(sk, "TMA_SPLIT_FUSED", False)
    check_matmul(m, n, k, torch.bfloat16, device, gen, splitk_tma=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(384, 128, 8192), (512, 512, 8192), (200, 384, 6144), (448, 192, 5120),
                                           (130, 256, 8192), (65, 128, 4096), (256, 256, 16384), (128, 128, 16384)])
def test_matmul_gpu_takes_the_rows_route(m, n, k, gen, monkeypatch):
    """matmul's default route through the split 64-row tiles where the rule picks them (the config the rule gives),
    right three calls in a row."""
    from kernels import matmul as mm

    seen = spy_tma_configs(monkeypatch)
    want = mr.rows_split_config(m, n, k, mm.num_sms(torch.device("cuda")))
    assert want is not None
    for _ in range(3):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32)
    assert seen == [want] * 3


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "kw"), [
    (512, 136, 8192, {}),              # B's pitch 272 bytes: not a multiple of 128 (the misaligned-B route)
    (384, 256, 8192, {"gluon": True}),  # the Gluon kernel asked for
    (384, 1024, 8192, {}),             # the rule leaves it
])
def test_matmul_gpu_rows_route_left(m, n, k, kw, gen, monkeypatch):
    seen = spy_tma_configs(monkeypatch)
    check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, **kw)
    assert seen == []
