"""The warp-specialised Gluon GEMM (kernels/_matmul_ws.py): B through cp.async at misaligned pitches, through TMA
at aligned ones.  Gluon does not run in the CPU interpreter: there only the fallbacks are checked."""

from __future__ import annotations

import pytest
import torch

from kernels import _matmul_gluon as mg
from kernels.matmul import matmul
from kernels.reference import rel_err
from tests.kernels.test_attention import _captured
from tests.kernels.test_matmul import check_matmul

WS_CFGS = [(128, 256, 64, 8, 3, 0), (128, 256, 64, 8, 4, 1), (128, 128, 64, 8, 4, 0), (128, 64, 64, 8, 8, 0),
           (128, 64, 64, 8, 6, 1), (128, 192, 64, 8, 4, 0), (128, 256, 64, 1, 3, 0)]
# 64-row tiles: one consumer warpgroup a CTA
HALF_CFGS = [mg.WS_HALF_CONFIG, mg.WS_HALF_WIDE_CONFIG, (64, 64, 64, 8, 12, 0), (64, 128, 64, 8, 8, 1),
             (64, 64, 64, 1, 6, 1), (64, 128, 64, 8, 4, 0), (64, 64, 64, 8, 8, 0), (64, 64, 128, 8, 6, 0),
             (64, 64, 128, 1, 4, 1)]  # and K steps of 128 (64x64 tiles only)


@pytest.mark.parametrize("how", ["ws", "ws-tma", "ws-repack", "ws-mc"])
def test_ws_falls_back_to_repack_where_it_cannot_run(how, device, gen):
    """The Gluon routes off an sm_90 GPU (or in the interpreter) take the repack path."""
    if mg.runnable(*(torch.empty(128, 128, dtype=torch.bfloat16, device=device) for _ in range(3))):
        pytest.skip("the Gluon kernel runs here: covered by the GPU tests")
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, use_tma=True, misaligned_b=how)
    check_matmul(70, 104, 40, torch.bfloat16, device, gen, misaligned_b=how, gluon=True)


def _stand_in_kernel(calls: list, flag: str, default: int, refused: Exception):
    """The Gluon kernel stood in for (it runs on sm_90 only): each launch records its constexpr ``flag`` in ``calls``
    and raises ``refused`` where that is not ``default`` (a build its PTX rewrite refuses), else computes the product
    from its descriptors."""

    class StandIn:
        def __getitem__(self, grid):
            def launch(a_desc, b_desc, c_desc, *args, **kwargs):
                calls.append(kwargs.get(flag, default))
                if calls[-1] != default:
                    raise refused
                c_desc.base.copy_((a_desc.base.float() @ b_desc.base.float()).to(c_desc.base.dtype))

            return launch

    return StandIn()


def test_cluster_build_failure_falls_back_once(device, gen, monkeypatch):
    """The clustered build failing (the PTX rewrite refusing Triton's PTX) is said once, switches the clustered route
    off, and the unclustered kernel takes the product; the Gluon kernel is stood in for (it runs on sm_90 only) by
    one that refuses CLUSTER=2 as the rewrite would and computes the product from its descriptors otherwise."""
    import warnings

    from kernels import _ptx_cluster
    from kernels import matmul as mm

    calls = []
    refused = _ptx_cluster.PtxRewriteError("found 0 copies through the descriptor of parameter 5")
    monkeypatch.setattr(mg, "matmul_ws_kernel", _stand_in_kernel(calls, "CLUSTER", 1, refused))
    monkeypatch.setattr(mg, "runnable", lambda *a: True)
    monkeypatch.setattr(mg, "_broken_cluster", [])
    monkeypatch.setattr(mm, "_tma_ok", lambda *ts: True)
    assert mm.MISALIGNED_B == "ws-mc"
    with pytest.warns(RuntimeWarning, match="clusters of two CTAs.*PtxRewriteError.*the repack route"):
        check_matmul(70, 104, 40, torch.bfloat16, device, gen, gluon=True)
    assert calls == [2, 1]  # the clustered try, then the unclustered kernel on the repacked B
    assert mg.status(cluster=True).startswith("disabled after a build failure (PtxRewriteError")
    assert mg.status() == "enabled"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        check_matmul(70, 104, 40, torch.bfloat16, device, gen, gluon=True)
    assert calls == [2, 1, 1]


def test_light_build_failure_falls_back_once(device, monkeypatch):
    """A LIGHT_PTX build failing (the barriers' rewrite refusing Triton's PTX) is said once and the plain build
    takes the product from then on; only LIGHT_TILES' tiles ask for it.  The Gluon kernel is stood in for (it runs
    on sm_90 only) by one that refuses LIGHT_PTX builds and computes the product from its descriptors otherwise."""
    import warnings

    from kernels import _ptx_barriers

    calls = []
    refused = _ptx_barriers.PtxRewriteError("a release barrier past an unknown instruction")
    monkeypatch.setattr(mg, "matmul_ws_kernel", _stand_in_kernel(calls, "LIGHT_PTX", 0, refused))
    monkeypatch.setattr(mg, "LIGHT_ERROR", None)
    monkeypatch.setattr(mg, "_broken_light", [])
    a = torch.randn(70, 40, dtype=torch.bfloat16, device=device)
    b = torch.randn(40, 104, dtype=torch.bfloat16, device=device)
    want = (a.float() @ b.float()).to(torch.bfloat16)
    c = torch.empty(70, 104, dtype=torch.bfloat16, device=device)
    with pytest.warns(RuntimeWarning, match="without its warpgroup barriers.*PtxRewriteError.*its plain build"):
        assert mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG)
    assert torch.equal(c, want) and calls == [_ptx_barriers.VERSION, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        assert mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG)
    monkeypatch.setattr(mg, "_broken_light", [])
    assert mg.matmul_ws(a, b, c, mg.WS_SLIM_CONFIG)  # 128x64 tiles: never light
    assert calls == [_ptx_barriers.VERSION, 0, 0, 0] and torch.equal(c, want)
    assert mg.status() == "enabled"


def test_gluon_default_rule():
    from kernels import matmul as mm

    assert mm.gluon_default(4096, 4096) and mm.gluon_default(4000, 5000)
    assert not mm.gluon_default(1000, 1024)  # 32 tiles of 128x256: under a wave
    assert not mm.gluon_default(64, 1 << 20)  # decode-sized M
    # under a wave, a B that TMA reads: from GLUON_MIN_M rows and GLUON_MIN_N columns
    assert mm.gluon_default(1024, 1024, aligned=True) and mm.gluon_default(2048, 2048, aligned=True)
    assert mm.gluon_default(128, 4096, aligned=True) and mm.gluon_default(512, 1024, aligned=True)
    assert mm.gluon_default(65, 4096, aligned=True) and mm.gluon_default(127, 1024, aligned=True)
    assert mm.gluon_default(4096, 512, aligned=True) and mm.gluon_default(16384, 128, aligned=True)
    assert not mm.gluon_default(2048, 2048)  # 128 tiles, B misaligned: the repack route as before
    assert mm.gluon_default(127, 64, aligned=True) and mm.gluon_default(16384, 64, aligned=True)  # one tile column
    assert not mm.gluon_default(4096, 56, aligned=True) and not mm.gluon_default(127, 8, aligned=True)
    assert not mm.gluon_default(64, 4096, aligned=True)  # decode-sized: the TMA kernel's transposed tiles


@pytest.mark.parametrize(("m", "n", "tiles"), [
    (1024, 2048, "narrow"),  # 64 wide tiles (0.48 of a round) against 128 narrow (0.97) and 256 slim (0.97)
    (2048, 3072, "mid"),  # 192 wide tiles in 2 rounds (0.73), 384 narrow in 3 (0.97), 256 mid ones in 2 (0.97)
    (768, 4096, "mid"), (1536, 4096, "mid"), (3072, 3072, "mid"),  # 132 / 264 / 384 mid tiles
    (768, 14336, "wide"), (6144, 4096, "wide"),  # mid tiles fill no better, or not enough better
    (512, 4096, "narrow"), (128, 14336, "narrow"),  # slim tiles fill as much as the narrow ones, at a lower rate
    (1024, 1024, "slim"),  # 32 wide tiles (0.24 of a round), 64 narrow (0.48), 128 slim (0.97)
    (256, 4096, "slim"), (2048, 512, "slim"),  # 128 slim tiles, 128 of 64x128 computing as much: the slim ones
    (2048, 2048, "wide"),  # 128 wide tiles fill 0.97 of a round: the narrower ones' 0.97 loses at their rates
    # at most 128 rows, 64x64 tiles in one round: the half tiles; else 64x128 ones in one round
    (65, 4096, "half"), (128, 4096, "half"), (96, 3072, "half"), (100, 4224, "half"), (64, 8192, "half"),
    (96, 2048, "half"), (96, 1536, "half"), (100, 1024, "half"), (96, 512, "half"), (1, 128, "half"),
    (96, 4352, "half_wide"), (128, 8192, "half_wide"), (96, 8448, "half_wide"), (96, 8704, "narrow"),
    (96, 14336, "narrow"),
    # above 128 rows the same where 64x64 tiles fit one round (64 slim tiles at 512x1024), and 64x128 tiles where they
    # fit one round and compute at most 3/4 of the 128-row tiles' elements (129-192 rows: 3 x 64 against 2 x 128)
    (512, 1024, "half"), (512, 512, "half"), (300, 1024, "half"), (4096, 128, "half"), (2048, 256, "half"),
    (129, 4096, "half_wide"), (130, 4096, "half_wide"), (192, 4096, "half_wide"), (160, 5632, "half_wide"),
    (319, 2048, "slim"), (200, 4096, "slim"), (160, 5760, "narrow"),
    (256, 14336, "wide"), (4096, 4096, "wide"), (8192, 8192, "wide"), (4096, 14336, "wide"), (4000, 5000, "wide"),
    # N under 1024: a ragged tile column counts whole (256 columns: two 128-column tiles, not 192 and a third of 192)
    (4096, 512, "narrow"), (8192, 256, "narrow"), (16384, 128, "narrow"),
    (4096, 896, "wide"), (4096, 768, "mid"),
    # over several rounds the slim tiles' rate is lower (call 9): 640 slim tiles in 5 rounds against 220 mid in 2
    (1280, 4096, "mid"), (2304, 2048, "mid"), (2048, 2560, "mid"), (5120, 2560, "narrow")])
def test_gluon_default_config_fills_the_rounds(m, n, tiles):
    want = {"wide": mg.WS_CONFIG, "mid": mg.WS_MID_CONFIG, "narrow": mg.WS_NARROW_CONFIG, "slim": mg.WS_SLIM_CONFIG,
            "half": mg.WS_HALF_CONFIG, "half_wide": mg.WS_HALF_WIDE_CONFIG}
    assert mg.default_config(m, n, 132) == want[tiles]


def test_gluon_default_config_mid_tiles_only_through_tma():
    """The 128x192 tiles read B by TMA: with B through cp.async the rule picks among the others."""
    assert mg.default_config(2048, 3072, 132, b_tma=False) == mg.WS_NARROW_CONFIG
    assert mg.default_config(768, 4096, 132, b_tma=False) == mg.WS_CONFIG  # 96 wide tiles against 384 slim ones
    assert mg.default_config(4096, 4096, 132, b_tma=False) == mg.WS_CONFIG
    assert mg.default_config(96, 4096, 132, b_tma=False) == mg.WS_SLIM_CONFIG  # the half tiles only through TMA too


def test_gluon_default_config_weighs_the_tiles_rates(monkeypatch):
    """At a rate equal to the wide tiles' the narrower ones win wherever they fill the rounds more; at none they never
    do."""
    assert mg.default_config(5120, 5120, 132) == mg.WS_CONFIG  # 800 wide tiles fill 0.87, 1600 narrow 0.93
    monkeypatch.setattr(mg, "NARROW_EFFICIENCY", 1.0)
    assert mg.default_config(5120, 5120, 132) == mg.WS_NARROW_CONFIG
    monkeypatch.setattr(mg, "SLIM_EFFICIENCY", 1.0)  # 3200 slim tiles fill 0.98
    assert mg.default_config(5120, 5120, 132) == mg.WS_SLIM_CONFIG
    monkeypatch.setattr(mg, "SLIM_EFFICIENCY", 0.0)  # 256 slim tiles (two rounds) against 128 narrow
    assert mg.default_config(1024, 2048, 132) == mg.WS_NARROW_CONFIG
    monkeypatch.setattr(mg, "NARROW_EFFICIENCY", 0.0)  # 88 mid tiles (0.67 of a round) against 64 wide (0.48)
    assert mg.default_config(1024, 2048, 132) == mg.WS_MID_CONFIG
    monkeypatch.setattr(mg, "MID_EFFICIENCY", 0.0)
    assert mg.default_config(1024, 2048, 132) == mg.WS_CONFIG


def test_ws_config_rejected_where_it_cannot_run(device):
    a = torch.randn(70, 40, dtype=torch.bfloat16, device=device)
    b = torch.randn(40, 104, dtype=torch.bfloat16, device=device)
    if mg.runnable(a, b, torch.empty(70, 104, dtype=torch.bfloat16, device=device)):
        pytest.skip("the Gluon kernel runs here")
    with pytest.raises(ValueError, match="Gluon GEMM"):
        matmul(a, b, ws=mg.WS_CONFIG)


@pytest.mark.parametrize("cfg", [(64, 256, 64, 8, 3, 0), (128, 192, 64, 8, 3, 1), (128, 96, 64, 8, 3, 0),
                                 (128, 256, 32, 8, 3, 0), (128, 256, 64, 0, 3, 0), (128, 256, 64, 8, 2, 0),
                                 (128, 256, 64, 8, 3, 2), (32, 64, 64, 8, 3, 0), (64, 192, 64, 8, 4, 0),
                                 (128, 256, 64, 8, 3), [128, 256, 64, 8, 3, 0], (128, 256, 64, 8, 8, 0),
                                 (128, 128, 64, 8, 6, 0), (128, 64, 64, 8, 5, 0), (128, 64, 64, 8, 12, 0),
                                 (64, 128, 64, 8, 12, 0), (64, 64, 64, 8, 16, 0), (64, 64, 64, 8, 5, 0),
                                 (64, 64, 128, 8, 8, 0), (64, 64, 128, 8, 3, 0), (64, 128, 128, 8, 4, 0),
                                 (128, 64, 128, 8, 4, 0), (64, 64, 256, 8, 4, 0)])
def test_ws_config_checked_before_anything_runs(cfg, device):
    """A ws config outside what the kernel builds is a ValueError naming the allowed values, on any machine,
    before a launch (a build failure of an explicit config would otherwise have nothing to say)."""
    a = torch.randn(70, 40, dtype=torch.bfloat16, device=device)
    b = torch.randn(40, 104, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match=r"ws .*BLOCK_M in \(64, 128\)"):
        matmul(a, b, ws=cfg)
    for config in (mg.WS_CONFIG, mg.WS_NARROW_CONFIG, mg.WS_SLIM_CONFIG, mg.WS_MID_CONFIG, *HALF_CFGS):
        assert mg.check_ws_config(config) == config


def test_runnable_needs_aligned_rows(device):
    a = torch.empty(64, 40, dtype=torch.bfloat16, device=device)
    b = torch.empty(40, 100, dtype=torch.bfloat16, device=device)  # N not a multiple of 8
    assert not mg.runnable(a, b, torch.empty(64, 100, dtype=torch.bfloat16, device=device))
    a32 = torch.empty(64, 40, dtype=torch.float32, device=device)
    b32 = torch.empty(40, 104, dtype=torch.float32, device=device)
    assert not mg.runnable(a32, b32, torch.empty(64, 104, dtype=torch.float32, device=device))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(4000, 5000, 3000), (4000, 5000, 3072), (1000, 4104, 776), (70, 264, 40),
                                           (300, 8, 1000), (129, 5000, 72)])
@pytest.mark.parametrize("cfg", WS_CFGS + HALF_CFGS)
def test_matmul_gpu_ws_misaligned(m, n, k, cfg, gen):
    """B pitch not a multiple of 128 bytes: B through cp.async (ragged M, N, K; edges zero-filled / clipped)."""
    assert mg.status() == "enabled", mg.status()
    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, ws=cfg)
    assert mg.status() == "enabled", mg.status()


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "dtype"), [(4096, 4096, 4096, torch.bfloat16), (1000, 1024, 777 + 7,
                                                    torch.float16), (256, 512, 64, torch.bfloat16)])
@pytest.mark.parametrize("cfg", WS_CFGS[:6])
def test_matmul_gpu_ws_aligned(m, n, k, dtype, cfg, gen):
    """B pitch a multiple of 128 bytes: B through TMA."""
    check_matmul(m, n, k, dtype, "cuda", gen, ref_dtype=torch.float32, ws=cfg)
    assert mg.status() == "enabled", mg.status()


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["ws", "ws-tma", "ws-repack", "ws-mc", "repack"])
@pytest.mark.parametrize(("m", "n", "k"), [(4000, 5000, 3000), (4096, 5000, 3072), (1000, 4104, 776)])
def test_matmul_gpu_ws_routes(how, m, n, k, gen):
    """Each misaligned-B route at ragged shapes (twice: ring phases carried across calls are not state)."""
    for _ in range(2):
        check_matmul(m, n, k, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32, misaligned_b=how)
    assert mg.status() == "enabled", mg.status()


@pytest.mark.gpu
@pytest.mark.parametrize("gluon", [None, False, True])
@pytest.mark.parametrize(("m", "n", "k", "dtype"), [(4096, 4096, 4096, torch.bfloat16), (8192, 8192, 1024,
                                                    torch.float16), (4096, 14336, 4096, torch.bfloat16),
                                                    (3000, 5000, 1000, torch.bfloat16)])
def test_matmul_gpu_default_routes(gluon, m, n, k, dtype, gen):
    """The default (Gluon for large row-major GEMMs), the Triton kernel, and Gluon forced."""
    check_matmul(m, n, k, dtype, "cuda", gen, ref_dtype=torch.float32, gluon=gluon)
    assert mg.status() == "enabled", mg.status()


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "dtype"), [
    (1024, 1024, 1024, torch.bfloat16), (2048, 3072, 2048, torch.float16), (2048, 2048, 2048, torch.bfloat16),
    (1030, 1152, 712, torch.bfloat16), (130, 4096, 1024, torch.bfloat16),  # ragged M, N, K; pitches TMA reads
    (256, 4096, 4096, torch.float16), (200, 2048, 1032, torch.bfloat16), (1024, 2048, 2048, torch.bfloat16),
    (96, 4096, 4096, torch.bfloat16), (65, 1024, 520, torch.float16), (130, 4096, 1024, torch.bfloat16),
    (768, 4096, 1024, torch.bfloat16), (1000, 3072, 1000, torch.float16), (4096, 512, 1024, torch.bfloat16),
    (2000, 256, 520, torch.bfloat16),
    # above 128 rows on 64-row tiles: 64x64 (K split in 2 at 192x1024x8192), 64x128 at 129-192 rows
    (192, 1024, 8192, torch.bfloat16), (4096, 128, 1024, torch.float16), (160, 4096, 2048, torch.bfloat16),
    (319, 1024, 776, torch.bfloat16),
    # one tile column (N = 64): 64x64 tiles with K split, unsplit and past a round (128x64 tiles)
    (4096, 64, 4096, torch.bfloat16), (300, 64, 4096, torch.float16), (16384, 64, 520, torch.bfloat16)])
def test_matmul_gpu_small_aligned_take_the_gluon_kernel(m, n, k, dtype, gen):
    """Under a wave of wide tiles a B that TMA reads goes to the Gluon kernel on default_config's tiles (ragged edges
    clipped by the copy engine): the default's output is that kernel's, bitwise, and right."""
    from kernels import matmul as mm
    from kernels import matmul_rows as mr

    assert mm.gluon_default(m, n, aligned=True)
    assert mr.rows_split_config(m, n, k, mm.num_sms(torch.device("cuda"))) is None  # not the split 64-row tiles
    a, b = _inputs(m, n, k, gen, dtype=dtype)
    c = torch.empty(m, n, dtype=dtype, device="cuda")
    assert mg.matmul_ws(a, b, c, mg.default_config(m, n, mm.num_sms(a.device)))
    out = matmul(a, b)
    assert torch.equal(out, c)
    assert rel_err(out, a.float() @ b.float()) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "pitch"), [(1000, 4192, 776, None), (333, 336, 200, None),
                                                    (1000, 4192, 776, 4224), (129, 136, 72, None),
                                                    (129, 120, 72, None)])
def test_matmul_gpu_ws_mid_tiles_ragged_columns(m, n, k, pitch, gen):
    """128x192 tiles through two descriptors (128 + 64 columns): the last tile column's second part partly past N
    (4192 = 21 * 192 + 160, 336 = 192 + 144, 136 = 128 + 8) or wholly (120), pitches TMA reads aligned or not; the
    output bitwise the 128x256 tiles' (the same products in the same order) and right."""
    a, b = _inputs(m, n, k, gen, pitch)
    want = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    assert mg.matmul_ws(a, b, want, mg.WS_CONFIG, b_tma=True)
    for _ in range(2):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        assert mg.matmul_ws(a, b, c, mg.WS_MID_CONFIG)
        assert torch.equal(c, want), f"{m}x{n}x{k} pitch {b.stride(0)}"
    assert rel_err(want, a.double() @ b.double()) < 1e-2


def _inputs(m, n, k, gen, pitch=None, dtype=torch.bfloat16):
    a = torch.randn(m, k, generator=gen).to(device="cuda", dtype=dtype)
    b = torch.randn(k, pitch or n, generator=gen).to(device="cuda", dtype=dtype)[:, :n]
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "pitch", "dtype"), [
    (4000, 5000, 3000, None, torch.bfloat16), (4000, 5000, 3000, 5120, torch.bfloat16),
    (300, 1000, 3000, None, torch.bfloat16), (129, 5000, 72, None, torch.bfloat16),
    (1000, 4104, 776, None, torch.bfloat16), (4096, 4096, 4096, None, torch.bfloat16),
    (70, 264, 40, None, torch.bfloat16), (2000, 8, 512, None, torch.bfloat16),
    (4000, 5000, 3000, None, torch.float16), (333, 1000, 1000, None, torch.float16)])
def test_matmul_gpu_ws_cluster_bitwise(m, n, k, pitch, dtype, gen):
    """Clusters of two CTAs with B multicast (kernels/_ptx_cluster.py): the unclustered kernel's products in the
    same order, so bitwise its output (B by TMA there too), at odd tile-row counts (the last pair's second tile wholly
    past M), one tile column, misaligned and aligned pitches, bf16 and fp16; three calls in a row (the ring's phases
    and the cluster barriers carry nothing over), then captured in a CUDA graph and replayed."""
    a, b = _inputs(m, n, k, gen, pitch, dtype)
    want = torch.empty(m, n, device="cuda", dtype=dtype)
    assert mg.matmul_ws(a, b, want, b_tma=True, split=1)
    for _ in range(3):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        assert mg.matmul_ws(a, b, c, cluster=True)
        assert torch.equal(c, want), f"{m}x{n}x{k} pitch {b.stride(0)}"
    graph = _captured(lambda: mg.matmul_ws(a, b, c, cluster=True))
    for _ in range(2):
        c.fill_(float("nan"))
        graph.replay()
        assert torch.equal(c, want), f"graph replay {m}x{n}x{k}"
    assert rel_err(want, a.double() @ b.double()) < 1e-2
    assert mg.status(cluster=True) == "enabled", mg.status(cluster=True)


@pytest.mark.parametrize(("m", "n", "bm", "bn", "b_tma", "want"), [
    (4096, 4096, 128, 256, True, (0, False)), (4000, 5000, 128, 256, True, (1, True)),
    (4000, 5000, 128, 256, False, (1, False)), (128, 192, 128, 192, True, (0, False)),
    (96, 100, 128, 128, True, (2, False)), (64, 4096, 128, 64, True, (2, False)),
    (97, 4096, 128, 64, True, (0, False)), (127, 4096, 128, 64, True, (0, False)),
    (63, 4096, 128, 64, True, (0, False)), (130, 4100, 128, 64, True, (1, True)), (1, 8, 128, 256, True, (0, False)),
    (100, 4096, 64, 64, True, (1, False)), (32, 4100, 64, 64, True, (0, True)), (64, 96, 64, 64, True, (0, True))])
def test_fit_modes(m, n, bm, bn, b_tma, want, monkeypatch):
    """Ragged edges moved inside A's rows (the last tile row from M = a tile's rows; on 128-row tiles a single tile
    row of 64 to 96 rows as two halves, not on 64-row tiles) and B's columns (B by TMA, N at least a tile); nothing
    moved with FIT_EDGES off."""
    assert mg.fit_modes(m, n, bm, bn, b_tma) == want
    monkeypatch.setattr(mg, "FIT_EDGES", False)
    assert mg.fit_modes(m, n, bm, bn, b_tma) == (0, False)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "pitch"), [
    (65, 1024, 520, None), (80, 4096, 256, None), (96, 256, 64, None), (100, 4032, 264, None),
    (130, 4096, 1024, None), (1000, 4032, 776, None), (4000, 5000, 3000, None), (129, 5000, 72, 5120),
    (333, 1000, 1000, 1024), (70, 264, 40, None)])
@pytest.mark.parametrize("cfg", [None, *WS_CFGS[:6]])
def test_matmul_gpu_ws_fitted_edges_bitwise(m, n, k, pitch, cfg, gen, monkeypatch):
    """Ragged edges fitted inside A and B (FIT_M 1 or 2, FIT_N): the moved tiles recompute their neighbours' rows and
    columns, so the output is bitwise the unmoved tiles' (zero-filled copies, clipped stores), twice in a row, and
    right; B by TMA (aligned pitches; the 128x256 tiles also through cp.async)."""
    a, b = _inputs(m, n, k, gen, pitch)
    want = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    with monkeypatch.context() as patch:
        patch.setattr(mg, "FIT_EDGES", False)
        assert mg.matmul_ws(a, b, want, cfg, b_tma=True)
    for b_tma in (True, False) if cfg == WS_CFGS[0] else (True,):
        for _ in range(2):
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            assert mg.matmul_ws(a, b, c, cfg, b_tma=b_tma)
            assert torch.equal(c, want), f"{m}x{n}x{k} {cfg} b_tma={b_tma}"
    assert rel_err(want, a.double() @ b.double()) < 1e-2


@pytest.mark.parametrize(("m", "n", "k", "config", "want"), [
    (80, 4096, 4096, mg.WS_SLIM_CONFIG, 1),  # 64 tiles: over a quarter of the SMs
    (100, 1024, 4096, mg.WS_SLIM_CONFIG, 4),  # 16 tiles: 4 chunks of 16 K steps (SPLIT_MAX)
    (100, 1024, 2048, mg.WS_SLIM_CONFIG, 2),  # a chunk at least SPLIT_MIN_K_STEPS K steps
    (100, 1024, 1024, mg.WS_SLIM_CONFIG, 1), (130, 4096, 4096, mg.WS_SLIM_CONFIG, 1),
    (256, 1024, 8192, mg.WS_SLIM_CONFIG, 4), (512, 512, 8192, mg.WS_SLIM_CONFIG, 4),  # 32 tiles x 4: 128 items
    (640, 512, 8192, mg.WS_SLIM_CONFIG, 1),  # 40 tiles: over a quarter
    (768, 4096, 4096, mg.WS_MID_CONFIG, 1), (100, 1024, 4096, mg.WS_NARROW_CONFIG, 1),  # only 64-column tiles split
    # 64-row tiles: where they fill at most half the SMs and K has at least HALF_SPLIT_MIN_K_STEPS steps
    (100, 1024, 4096, mg.WS_HALF_CONFIG, 4), (96, 512, 4096, mg.WS_HALF_CONFIG, 4),
    (80, 1024, 8192, mg.WS_HALF_CONFIG, 4), (96, 2048, 8192, mg.WS_HALF_CONFIG, 2),
    (96, 4096, 4096, mg.WS_HALF_CONFIG, 1),
    (96, 2048, 4096, mg.WS_HALF_CONFIG, 1), (96, 2560, 4096, mg.WS_HALF_CONFIG, 1),  # over 3/8: 128 K steps
    (96, 1536, 4096, mg.WS_HALF_CONFIG, 2), (2304, 64, 4096, mg.WS_HALF_CONFIG, 2),  # 48 / 36 tiles: 64 steps
    (96, 1536, 2048, mg.WS_HALF_CONFIG, 1),
    (4096, 64, 4096, mg.WS_HALF_CONFIG, 1), (4096, 64, 8192, mg.WS_HALF_CONFIG, 2),
    (100, 1024, 4096, (64, 64, 64, 8, 8, 0), 4), (100, 1024, 2048, (64, 64, 64, 8, 8, 0), 1),  # 64-wide steps alike
    (100, 1024, 2048, mg.WS_HALF_CONFIG, 1), (128, 4096, 1024, mg.WS_HALF_CONFIG, 1),
    (512, 512, 8192, mg.WS_HALF_CONFIG, 2), (256, 512, 4096, mg.WS_HALF_CONFIG, 4),  # above 128 rows alike
    (1024, 512, 4096, mg.WS_HALF_CONFIG, 1),
    (100, 1024, 4096, (64, 128, 64, 8, 8, 0), 1),  # 64-row tiles of 128 columns: not timed split
    (256, 1024, 8192, mg.WS_CONFIG, 1), (4096, 4096, 4096, mg.WS_CONFIG, 1),
    # up to SPLIT_MAX_FEW chunks where they fill at most half the SMs (8 tiles), with chunks of 16 K steps or more
    (512, 64, 8192, mg.WS_HALF_CONFIG, 8), (256, 128, 16384, mg.WS_HALF_CONFIG, 8),
    (512, 64, 4096, mg.WS_HALF_CONFIG, 4), (1024, 64, 8192, mg.WS_HALF_CONFIG, 4)])
def test_default_split(m, n, k, config, want, monkeypatch):
    """K is split where 128x64 tiles fill at most a quarter of the SMs, 64-row tiles half with at least
    HALF_SPLIT_MIN_K_STEPS K steps (more above HALF_SPLIT_LOW_FILL): the largest power of two up to SPLIT_MAX
    (SPLIT_MAX_FEW where those fill at most half the SMs) whose chunks still fit one round, each at least
    SPLIT_MIN_K_STEPS K steps (64 wide whatever the tiles' BLOCK_K); none with both at 1."""
    assert mg.default_split(m, n, k, config, 132) == want
    monkeypatch.setattr(mg, "SPLIT_MAX", 1)
    monkeypatch.setattr(mg, "SPLIT_MAX_FEW", 1)
    assert mg.default_split(m, n, k, config, 132) == 1


def test_default_split_few_tiles_only_below_half_the_sms(monkeypatch):
    """SPLIT_MAX_FEW chunks only where they fill at most half the SMs: 8 tiles take 8 chunks on 132 SMs, 4 on 100
    (64 items over half of them); at SPLIT_MAX_FEW 4 never more than 4."""
    assert mg.default_split(512, 64, 8192, mg.WS_HALF_CONFIG, 132) == 8
    assert mg.default_split(512, 64, 8192, mg.WS_HALF_CONFIG, 100) == 4
    monkeypatch.setattr(mg, "SPLIT_MAX_FEW", 4)
    assert mg.default_split(512, 64, 8192, mg.WS_HALF_CONFIG, 132) == 4


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "pitch"), [
    (80, 4096, 4096, None), (100, 1024, 4096, None), (65, 1000, 3000, 1024), (300, 520, 1000, None),
    (127, 264, 2056, None), (512, 512, 8192, None), (1000, 264, 4040, 280), (1, 1000, 2048, None)])
@pytest.mark.parametrize("cfg", [None, mg.WS_CONFIG, mg.WS_NARROW_CONFIG, mg.WS_SLIM_CONFIG, mg.WS_HALF_CONFIG])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "second-kernel"])
def test_matmul_gpu_ws_split_k(m, n, k, pitch, cfg, fused, gen):
    """K in 2, 3 (a short last chunk), 4 and 8 chunks, the partials summed by each tile's last warpgroup or by a
    second kernel: right against fp64 as the unsplit kernel is; the same output over calls, whichever chunk completes a
    tile last (summed in chunk order), from a CUDA graph's replays, and either way of summing (bitwise); B by TMA and
    through cp.async (pitches not a multiple of 128 bytes), ragged M, N and K, fitted edges, and M = 1 (a constexpr in
    the kernel)."""
    a, b = _inputs(m, n, k, gen, pitch)
    ref = a.double() @ b.double()
    one = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    assert mg.matmul_ws(a, b, one, cfg, split=1)
    for split in (2, 3, 4, 8):
        want = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        assert mg.matmul_ws(a, b, want, cfg, split=split, fused=fused)
        assert rel_err(want, ref) < 1e-2 and rel_err(want, ref) < 2 * rel_err(one, ref) + 1e-3, (split, cfg)
        for _ in range(3):
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            assert mg.matmul_ws(a, b, c, cfg, split=split, fused=fused)
            assert torch.equal(c, want), f"{m}x{n}x{k} split {split} {cfg}"
        c.fill_(float("nan"))
        assert mg.matmul_ws(a, b, c, cfg, split=split, fused=not fused)
        assert torch.equal(c, want), f"{m}x{n}x{k} split {split} {cfg}: the other sum"
    graph = _captured(lambda: mg.matmul_ws(a, b, c, cfg, split=4, fused=fused))
    want = torch.empty_like(c)
    assert mg.matmul_ws(a, b, want, cfg, split=4, fused=fused)
    for _ in range(2):
        c.fill_(float("nan"))
        graph.replay()
        assert torch.equal(c, want), f"graph replay {m}x{n}x{k}"


@pytest.mark.parametrize("kw", [{"split": 0}, {"split": 2, "cluster": True}, {"split": 2, "config": mg.WS_MID_CONFIG}])
def test_ws_split_checked_before_anything_runs(kw, device):
    """No K split below one chunk, with clusters or on 128x192 tiles: a ValueError before any launch."""
    a = torch.zeros(64, 64, device=device, dtype=torch.bfloat16)
    c = torch.full((64, 64), 7.0, device=device, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="split must be"):
        mg.matmul_ws(a, a, c, **kw)
    assert (c == 7).all()


@pytest.mark.gpu
def test_misaligned_b_takes_the_clusters_by_default(gen, monkeypatch):
    """A large product with a B pitch not a multiple of 128 bytes: the default route (ws-mc) is the clustered
    kernel on B as it is (bitwise its output, and the only Gluon call); with gluon=False, or a product too small for
    the Gluon kernel, the repack route (Triton's kernel) gives the product too."""
    from kernels import matmul as mm

    assert mm.MISALIGNED_B == "ws-mc"
    a, b = _inputs(4000, 5000, 3000, gen)
    want = torch.empty(4000, 5000, device="cuda", dtype=torch.bfloat16)
    assert mg.matmul_ws(a, b, want, cluster=True)
    calls, plain = [], mg.matmul_ws
    monkeypatch.setattr(mg, "matmul_ws", lambda *args, **kw: calls.append((args[1].stride(0), kw)) or plain(*args,
                                                                                                          **kw))
    assert torch.equal(matmul(a, b), want)
    assert calls == [(5000, {"cluster": True})]  # B as it is, not repacked
    monkeypatch.undo()
    assert rel_err(matmul(a, b, gluon=False), a.double() @ b.double()) < 1e-2
    check_matmul(1000, 1000, 512, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "pitch"), [
    (104, 4096, 4096, None), (512, 1024, 1000, None), (65, 1000, 3000, 1024), (1, 1000, 2048, None),
    (300, 520, 1000, None)])
def test_matmul_gpu_ws_light_build_bitwise(m, n, k, pitch, gen, monkeypatch):
    """64x64 tiles built without the consumer's warpgroup barriers (``LIGHT_TILES``, kernels/_ptx_barriers.py's
    rewrite): bitwise the plain build, unsplit and split (partials summed either way), B by TMA and through cp.async,
    ragged M, N and K, M = 1."""
    assert mg.LIGHT_ERROR is None and (64, 64) in mg.LIGHT_TILES
    a, b = _inputs(m, n, k, gen, pitch)
    aligned = (b.stride(0) * b.element_size()) % 128 == 0
    for split, fused in ((1, True), (2, True), (2, False)):
        for b_tma in (True, False) if aligned else (False,):
            want = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            with monkeypatch.context() as mp:
                mp.setattr(mg, "LIGHT_TILES", ())
                assert mg.matmul_ws(a, b, want, mg.WS_HALF_CONFIG, b_tma=b_tma, split=split, fused=fused)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            assert mg.matmul_ws(a, b, c, mg.WS_HALF_CONFIG, b_tma=b_tma, split=split, fused=fused)
            assert torch.equal(c, want), f"{m}x{n}x{k} split={split} fused={fused} b_tma={b_tma}"
    assert rel_err(want, a.double() @ b.double()) < 1e-2
    assert not mg._broken_light and mg.status() == "enabled"


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "pitch"), [
    (65, 4096, 4096, None), (100, 4096, 1024, None), (128, 4032, 776, None), (96, 264, 40, None),
    (127, 1000, 776, 1024), (200, 4104, 520, None), (30, 520, 1000, None), (1, 1000, 2048, None),
    (333, 1000, 1000, 1024)])
@pytest.mark.parametrize("cfg", HALF_CFGS)
def test_matmul_gpu_ws_half_tiles_bitwise(m, n, k, pitch, cfg, gen):
    """64-row tiles (one consumer warpgroup a CTA), unsplit, sum each output element's K steps in the order the
    128x64 tiles (unsplit) do: bitwise their output, twice in a row and from a CUDA graph's replays; B by TMA and
    through cp.async (pitches not a multiple of 128 bytes), ragged M, N and K, the last tile row fitted inside A,
    M = 1."""
    a, b = _inputs(m, n, k, gen, pitch)
    want = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    assert mg.matmul_ws(a, b, want, mg.WS_SLIM_CONFIG, b_tma=True, split=1)
    aligned = (b.stride(0) * b.element_size()) % 128 == 0
    for b_tma in (True, False) if aligned else (False,):
        for _ in range(2):
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            assert mg.matmul_ws(a, b, c, cfg, b_tma=b_tma, split=1)
            assert torch.equal(c, want), f"{m}x{n}x{k} {cfg} b_tma={b_tma}"
    graph = _captured(lambda: mg.matmul_ws(a, b, c, cfg, split=1))
    for _ in range(2):
        c.fill_(float("nan"))
        graph.replay()
        assert torch.equal(c, want), f"graph replay {m}x{n}x{k} {cfg}"
    assert rel_err(want, a.double() @ b.double()) < 1e-2
    assert mg.status() == "enabled", mg.status()
