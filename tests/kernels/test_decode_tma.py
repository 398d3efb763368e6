"""The Gluon TMA decode kernel (``kernels/decode_tma.py``): its 2-D cache views and routing on any machine, its
results on an sm_90 GPU (``gpu``)."""

from __future__ import annotations

import pytest
import torch

from kernels import decode_tma
from kernels.decode import decode_attention
from kernels.reference import decode_fp32, rel_err

from .test_decode import TOL


def _cache(b, h, seq, d, layout, dtype, cap=None, heads_buf=None, fill=None, device="cpu", h0=0, width=None,
           expand=False):
    """A (B, H, seq, D) cache in ``layout``, a view of a buffer ``cap`` rows long with ``heads_buf`` heads (the view's
    from head ``h0``) and rows ``width`` elements wide; the buffer's other slots hold ``fill`` (random where None).
    ``expand``: one head's buffer expanded to ``h`` heads (head stride 0)."""
    cap, heads_buf, width = cap or seq, 1 if expand else (heads_buf or h), width or d
    shape = (b, heads_buf, cap, width) if layout == "bhld" else (b, cap, heads_buf, width)
    buf = torch.randn(shape, dtype=torch.float32).to(device=device, dtype=dtype)
    hdim = 1 if layout == "bhld" else 2
    view = buf.narrow(3, 0, d).narrow(2 if layout == "bhld" else 1, 0, seq)
    view = view.expand(*[h if i == hdim else -1 for i in range(4)]) if expand else view.narrow(hdim, h0, h)
    if fill is not None:
        keep = view.clone()
        buf.fill_(fill)
        (view.narrow(hdim, 0, 1) if expand else view).copy_(keep.narrow(hdim, 0, 1) if expand else keep)
    return view


VIEWS = [
    (2, 3, 50, 64, "bhld", {}),
    (2, 3, 50, 64, "blhd", {}),
    (2, 3, 50, 128, "bhld", {"cap": 70}),  # a view of a longer cache
    (2, 3, 50, 64, "blhd", {"cap": 70, "heads_buf": 5}),  # longer, and the first 3 of 5 heads
    (2, 3, 50, 64, "blhd", {"heads_buf": 5, "h0": 2}),  # the last 3 of 5 heads
    (2, 2, 50, 64, "bhld", {"heads_buf": 5, "h0": 1}),  # heads 1-2 of 5
    (2, 3, 50, 64, "bhld", {"width": 72}),  # rows of 144 bytes, 64 elements used
    (2, 4, 50, 64, "bhld", {"expand": True}),  # one head expanded: head stride 0
    (1, 1, 7, 64, "bhld", {}),
    (3, 1, 9, 128, "blhd", {"cap": 12, "heads_buf": 2}),
]


@pytest.mark.parametrize(("b", "h", "seq", "d", "layout", "kw"), VIEWS)
def test_view_addresses_every_row(b, h, seq, d, layout, kw):
    """The (row, column) the kernel computes for each head (offset // row stride, offset % row stride) finds that
    head's rows in the 2-D view the descriptor is built on, and the view ends at the cache's last element."""
    cache = _cache(b, h, seq, d, layout, torch.float16, **kw)
    (rows, width), sb, sh, sl = decode_tma._view(cache, layout)
    flat = torch.as_strided(cache, (rows, width), (sl, 1))
    last = sum((n - 1) * s for n, s in zip(cache.shape, cache.stride(), strict=True))  # its last element
    assert (rows - 1) * sl + width - 1 == last
    for bi in range(b):
        for hi in range(h):
            row, col = divmod(bi * sb + hi * sh, sl)
            assert col + d <= width
            head = cache[bi, hi] if layout == "bhld" else cache[bi, :, hi]
            assert torch.equal(flat[row:row + seq, col:col + d], head)


def test_view_refuses_what_tma_cannot_read():
    base = torch.randn(2, 3, 40, 72, dtype=torch.float16)
    assert decode_tma._view(base[..., :64].transpose(2, 3).contiguous().transpose(2, 3), "bhld") is None  # d strided
    assert decode_tma._view(base[..., 1:65], "bhld") is None  # base 2 bytes past a 16-byte boundary
    assert decode_tma._view(torch.randn(2, 3, 40, 68, dtype=torch.float16)[..., :64], "bhld") is None  # 136-byte rows
    assert decode_tma._view(base[..., :64], "bhld") is not None  # 144-byte rows: 16-byte multiples


def test_preferred_rule():
    assert decode_tma.preferred(1, 64, 128, 132, True)  # the suite's 8 x 16 heads on an H100
    assert not decode_tma.preferred(4, 64, 128, 132, True)  # GQA
    assert not decode_tma.preferred(1, 128, 128, 132, True)  # level with Triton there
    assert not decode_tma.preferred(1, 64, 16, 132, True)  # few heads: the Triton kernel splits their keys
    assert not decode_tma.preferred(1, 64, 128, 132, False)  # a head's rows apart (blhd): not timed


def test_head_major():
    assert decode_tma.head_major(_cache(2, 3, 10, 64, "bhld", torch.float16, cap=20), "bhld")
    assert not decode_tma.head_major(_cache(2, 3, 10, 64, "blhd", torch.float16), "blhd")
    assert decode_tma.head_major(_cache(2, 1, 10, 64, "blhd", torch.float16), "blhd")


def test_impl_is_checked(device):
    q = torch.randn(1, 2, 1, 64, dtype=torch.float16, device=device)
    k = torch.randn(1, 2, 16, 64, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="impl must be one of"):
        decode_attention(q, k, k, impl="cuda")
    with pytest.raises(ValueError, match="takes no num_splits"):
        decode_attention(q, k, k, impl="gluon", num_splits=1)
    gqa = torch.randn(1, 4, 1, 64, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="cannot run these inputs"):
        decode_attention(gqa, k, k, impl="gluon")  # GQA: never the Gluon kernel, here or on a GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_gluon_refused_without_gpu():
    q = torch.randn(1, 2, 1, 64, dtype=torch.float16)
    k = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="sm_90"):
        decode_attention(q, k, k, impl="gluon")
    assert torch.isfinite(decode_attention(q, k, k)).all()  # "auto" runs the Triton kernel


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon decode kernel needs an sm_90 GPU")
@pytest.mark.parametrize(
    ("b", "h", "seq", "d", "layout", "dtype", "kw"),
    [
        (8, 16, 2048, 64, "bhld", torch.float16, {}),  # the suite's shape
        (4, 16, 9000, 64, "bhld", torch.bfloat16, {"cap": 9100}),  # three chunks of 4096 keys: the rescale
        (2, 8, 8192, 64, "bhld", torch.float16, {"cap": 8300}),  # two whole chunks, no ragged tile (EVEN)
        (2, 8, 777, 128, "blhd", torch.float16, {"cap": 800}),  # ragged last tile, a view of a longer cache
        (3, 5, 1, 64, "bhld", torch.bfloat16, {"cap": 4}),  # one key
        (2, 6, 4096, 128, "blhd", torch.bfloat16, {"cap": 4100, "heads_buf": 8}),  # heads sliced from a wider buffer
        (1, 4, 129, 64, "blhd", torch.float16, {"cap": 300, "heads_buf": 6, "h0": 2}),
        (2, 3, 300, 64, "bhld", torch.float16, {"cap": 310, "heads_buf": 5, "h0": 1}),  # bhld head slice
        (3, 1, 257, 64, "bhld", torch.bfloat16, {"width": 72}),  # one head; rows of 72 elements, 64 used
        (2, 4, 500, 128, "bhld", torch.float16, {"expand": True, "cap": 520}),  # head stride 0
    ],
)
def test_decode_gluon_gpu(b, h, seq, d, layout, dtype, kw):
    """Forced Gluon kernel against the fp32 reference; the cache buffers' spare slots hold NaN (which must not
    reach the output); the output a strided view; three calls in a row."""
    q = _cache(b, h, 1, d, layout, dtype, device="cuda")
    k = _cache(b, h, seq, d, layout, dtype, fill=float("nan"), device="cuda", **kw)
    v = _cache(b, h, seq, d, layout, dtype, fill=float("nan"), device="cuda", **kw)
    ref = decode_fp32(q.float(), k.float(), v.float(), layout=layout)
    for _ in range(3):
        out = torch.full((*q.shape[:-1], d + 8), float("nan"), dtype=dtype, device="cuda")[..., :d]
        decode_attention(q, k, v, layout=layout, out=out, impl="gluon")
        assert torch.isfinite(out).all()
        assert rel_err(out, ref) < TOL[dtype], (b, h, seq, d, layout, dtype, kw)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the Gluon decode kernel needs an sm_90 GPU")
def test_decode_auto_takes_gluon_where_measured_faster():
    from torch.profiler import ProfilerActivity, profile

    def kernels(hq, hk, seq, d, batch=8, layout="bhld"):
        q = _cache(batch, hq, 1, d, layout, torch.float16, device="cuda")
        k = _cache(batch, hk, seq, d, layout, torch.float16, device="cuda")
        decode_attention(q, k, k, layout=layout)  # built before profiling
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            decode_attention(q, k, k, layout=layout)
            torch.cuda.synchronize()
        return " ".join(e.name for e in prof.events())

    assert "decode_kv_kernel" in kernels(16, 16, 2048, 64)
    assert "decode_kv_kernel" not in kernels(16, 16, 2048, 128)  # level with Triton: Triton's
    assert "decode_kv_kernel" not in kernels(32, 8, 2048, 64)  # GQA
    assert "decode_kv_kernel" not in kernels(16, 16, 2048, 64, batch=1)  # 16 heads: Triton splits their keys
    assert "decode_kv_kernel" not in kernels(16, 16, 2048, 64, layout="blhd")  # a head's rows apart: not timed
