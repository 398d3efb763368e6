"""FlashAttention forward/backward against a float64 (CPU) / float32 (GPU) reference.

CPU: small odd shapes through the Triton interpreter.  GPU (``-m gpu``): real shapes, fast path.
Outputs are poisoned with NaN before every launch, so an unwritten element fails the check.
"""

from __future__ import annotations

import pytest
import torch

from kernels import _ptx_barriers, attention_ws
from kernels._checks import LOG2E, padded_dim, tma_capable
from kernels._checks import check_attention as check_dims
from kernels.attention import (
    FP8_DTYPES,
    FP8_FAST_EXP_LSE_TOL,
    HEAD_DIMS,
    attention_backward,
    attention_forward,
    attention_forward_fp8,
    attention_path,
    flash_attention,
    fp8_lse_tolerance,
    quantize_fp8,
)
from kernels.reference import attention_fp32, rel_err

# relative-error bounds ||out - ref|| / ||ref|| per dtype (fp16: 10 mantissa bits, bf16: 7)
FWD_TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}
BWD_TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _shape(b: int, h: int, seq: int, d: int, layout: str) -> tuple[int, int, int, int]:
    return (b, h, seq, d) if layout == "bhld" else (b, seq, h, d)


def _rand(shape, dtype, device, gen) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)


def _nan(shape, dtype, device) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _captured(fn) -> torch.cuda.CUDAGraph:
    """``fn`` run once on a side stream (the kernels built and their per-stream buffers made there, outside a
    capture), then captured in a CUDA graph on that stream."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return graph


def _assert_forward(out, lse, ref, ref_lse, dtype, tag: str) -> None:
    """Every output written and finite, within FWD_TOL of the reference; lse infinite exactly where the
    reference's is (rows that see no key), else within 2e-2."""
    assert torch.isfinite(out).all(), f"unwritten or non-finite output: {tag}"
    err = rel_err(out, ref)
    assert err < FWD_TOL[dtype], f"forward rel err {err:.2e}: {tag}"
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)), tag
    fin = torch.isfinite(ref_lse)
    assert (lse[fin].double() - ref_lse[fin].detach().double()).abs().max().item() < 2e-2, tag


def _qkv(b, hq, hk, lq, lk, d, layout, dtype, device, gen):
    """Random q, k, v (drawn in that order from ``gen``)."""
    q = _rand(_shape(b, hq, lq, d, layout), dtype, device, gen)
    k = _rand(_shape(b, hk, lk, d, layout), dtype, device, gen)
    v = _rand(_shape(b, hk, lk, d, layout), dtype, device, gen)
    return q, k, v


def check_attention(b, hq, hk, lq, lk, d, causal, layout, dtype, device, gen, *, use_tma=None, backward=True,
                    ref_dtype=torch.float64, config=None, bwd_configs=(None, None), impl="auto"):
    q, k, v = _qkv(b, hq, hk, lq, lk, d, layout, dtype, device, gen)
    out = _nan(q.shape, dtype, device)
    lse = _nan((b, hq, lq), torch.float32, device)
    attention_forward(q, k, v, causal, None, layout, use_tma=use_tma, out=out, lse=lse, config=config, impl=impl)
    qr, kr, vr = (t.detach().to(ref_dtype).requires_grad_() for t in (q, k, v))
    ref, ref_lse = attention_fp32(qr, kr, vr, causal, None, layout, dtype=ref_dtype)
    tag = f"seed={gen.initial_seed()} {layout} {dtype} causal={causal} q={tuple(q.shape)} k={tuple(k.shape)}"
    _assert_forward(out, lse, ref, ref_lse, dtype, tag)
    if not backward:
        return
    do = _rand(q.shape, dtype, device, gen)
    grads = [_nan(t.shape, dtype, device) for t in (q, k, v)]
    attention_backward(do, q, k, v, out, lse, causal, None, layout, use_tma=use_tma, configs=bwd_configs,
                       dq=grads[0], dk=grads[1], dv=grads[2])
    ref.backward(do.to(ref_dtype))
    for name, g, r in zip(("dq", "dk", "dv"), grads, (qr.grad, kr.grad, vr.grad), strict=True):
        assert torch.isfinite(g).all(), f"{name} unwritten or non-finite: {tag}"
        e = rel_err(g, r)
        assert e < BWD_TOL[dtype], f"{name} rel err {e:.2e}: {tag}"


CPU_CASES = [
    # b, hq, hk, lq, lk, d, causal, layout, dtype
    (1, 2, 2, 37, 37, 64, False, "bhld", torch.float16),
    (2, 2, 2, 50, 50, 64, True, "bhld", torch.bfloat16),
    (1, 4, 2, 37, 53, 64, True, "blhd", torch.float16),  # GQA, Lk > Lq: bottom-right diagonal
    (1, 2, 1, 61, 29, 64, True, "blhd", torch.bfloat16),  # Lq > Lk: first rows see no key
    (1, 3, 1, 17, 40, 128, False, "bhld", torch.float16),  # group of 3
    (1, 1, 1, 20, 33, 256, True, "blhd", torch.float16),
    (1, 2, 2, 1, 45, 64, True, "bhld", torch.bfloat16),  # a single query row
]


@pytest.mark.parametrize(("b", "hq", "hk", "lq", "lk", "d", "causal", "layout", "dtype"), CPU_CASES)
def test_attention_matches_reference(b, hq, hk, lq, lk, d, causal, layout, dtype, device, gen):
    check_attention(b, hq, hk, lq, lk, d, causal, layout, dtype, device, gen)


def _padded_case(i: int, d: int) -> tuple:
    """A tiny case for head dim d, rotating layout / causal / GQA / dtype / length mismatch with i."""
    layout = ("bhld", "blhd")[i % 2]
    causal = i % 3 != 1
    dtype = (torch.float16, torch.bfloat16)[(i // 2) % 2]
    hq, hk = ((2, 1), (1, 1), (3, 1))[i % 3]
    lq, lk = ((17, 17), (11, 20), (19, 9))[(i // 3) % 3]
    return 1, hq, hk, lq, lk, d, causal, layout, dtype


NEW_DIMS = [d for d in HEAD_DIMS if d not in (64, 128, 256)]


@pytest.mark.parametrize("d", NEW_DIMS)
def test_every_head_dim_matches_reference(d, device, gen):
    """Every head dim 16..256 (multiples of 8) that is not a power of two, or a small one: forward and
    backward, pointer loads (padded tile, masked columns)."""
    check_attention(*_padded_case(NEW_DIMS.index(d), d), device, gen)


@pytest.mark.parametrize(("d", "causal", "layout"), [(24, True, "blhd"), (80, False, "bhld"), (192, True, "bhld")])
def test_padded_head_dim_tensor_descriptor_path(d, causal, layout, device, gen):
    """Tensor descriptors of width d read into a power-of-two box: the columns beyond d must arrive as zeros."""
    check_attention(1, 2, 1, 24, 40, d, causal, layout, torch.bfloat16, device, gen, use_tma=True)


def test_fast_exp_codes_are_powers_of_two():
    """The fp8 forward's fast_exp codes (kernels/_attn_fwd_ws.py _codes): y = (8 x + 120) / 128 rounded to fp32 and
    saturated to [0, 1] (fma.sat), then the low byte of the fp32 FMA y * 128 + 1.5 * 2^23, read as e4m3, is
    2^(x + 8) within -4.2 / +10.8 % for x in [-14, 0] (4.0 % high on average, the lse's correction EXP_LSE_BIAS), and
    0 from x = -15 (P under 2^-15 of its row's maximum, masked scores included)."""
    fwd = pytest.importorskip("kernels._attn_fwd_ws", reason="the Gluon kernel module does not import here")
    one, floor, bias = (float(c.value) for c in (fwd.EXP_CODE_ONE, fwd.EXP_FLOOR, fwd.EXP_LSE_BIAS))

    def value(x: torch.Tensor) -> torch.Tensor:  # x float64; each FMA's one rounding to fp32
        y = ((8 * x + one) / 128).to(torch.float32).clamp(0.0, 1.0)
        t = (y.to(torch.float64) * 128 + floor).to(torch.float32)
        return (t.view(torch.int32) & 0xFF).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64) / 256

    x = torch.arange(-14 * 4096, 1, dtype=torch.float64) / 4096
    ratio = value(x) / torch.exp2(x)
    assert ratio.min().item() > 0.957 and ratio.max().item() < 1.108
    assert abs(ratio.mean().item() - 2 ** (bias - 8)) < 1e-3
    assert value(torch.tensor([0.0], dtype=torch.float64)).item() == 1.0
    gone = value(torch.tensor([-15.0, -15.5, -40.0, -float("inf")], dtype=torch.float64))
    assert (gone == 0).all()


def _fp8_check(b, hq, hk, lq, lk, d, causal, layout, device, gen, v_pos_contig=False, out_dtype=torch.bfloat16,
               ref_dtype=torch.float64, tol=0.1, impl="auto", fast_exp=False):
    """fp8 forward against the attention of the dequantised inputs: lse tight (scales folded right; with
    ``fast_exp`` within FP8_FAST_EXP_LSE_TOL), the output loose (p is rounded to e4m3 for the p·v product, ~3-6 %
    relative error)."""
    q, k, v = (_rand(_shape(b, h, seq, d, layout), torch.float32, device, gen)
               for h, seq in ((hq, lq), (hk, lk), (hk, lk)))
    (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
    if v_pos_contig:
        dim = 2 if layout == "bhld" else 1
        v8 = v8.transpose(dim, 3).contiguous().transpose(dim, 3)
    out = _nan(q.shape, out_dtype, device)
    lse = _nan((b, hq, lq), torch.float32, device)
    attention_forward_fp8(q8, k8, v8, sq, sk, sv, causal, None, layout, out_dtype=out_dtype, out=out, lse=lse,
                          impl=impl, fast_exp=fast_exp)
    deq = [t.to(ref_dtype) * s for t, s in ((q8, sq), (k8, sk), (v8, sv))]
    ref, ref_lse = attention_fp32(*deq, causal, None, layout, dtype=ref_dtype)
    tag = (f"seed={gen.initial_seed()} fp8 {impl} {layout} causal={causal} out={out_dtype} q={tuple(q.shape)} "
           f"k={tuple(k.shape)}")
    assert torch.isfinite(out).all(), f"unwritten output: {tag}"
    err = rel_err(out, ref)
    assert err < tol, f"fp8 forward rel err {err:.2e}: {tag}"
    fin = torch.isfinite(ref_lse)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)), tag
    assert (lse[fin].double() - ref_lse[fin].double()).abs().max().item() < fp8_lse_tolerance(fast_exp), tag
    return err


@pytest.mark.parametrize(("d", "causal", "layout", "out_dtype"), [
    (64, True, "bhld", torch.bfloat16), (80, False, "blhd", torch.float32), (32, True, "blhd", torch.float16)])
def test_fp8_forward_matches_dequantised_reference(d, causal, layout, out_dtype, device, gen):
    _fp8_check(1, 2, 1, 37, 45, d, causal, layout, device, gen, out_dtype=out_dtype)


def test_fp8_forward_position_contiguous_v(device, gen):
    _fp8_check(1, 2, 2, 30, 33, 64, False, "bhld", device, gen, v_pos_contig=True)


def test_fp8_impl_choice_is_checked(device, gen):
    q8 = _rand((1, 2, 16, 64), torch.float32, device, gen).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="impl must be"):
        attention_forward_fp8(q8, q8, q8, impl="cudnn")
    v_t = q8.transpose(2, 3).contiguous().transpose(2, 3)
    out = torch.empty(q8.shape, dtype=torch.bfloat16, device=device)
    if not attention_ws.eligible_fp8(q8, q8, v_t, out, 64, "bhld"):  # CPU / interpreter, or not sm_90
        with pytest.raises(ValueError, match="Gluon fp8 forward cannot run these inputs"):
            attention_forward_fp8(q8, q8, v_t, impl="gluon")
    else:  # v stored row-major: the Gluon kernel needs it position-contiguous
        assert not attention_ws.eligible_fp8(q8, q8, q8, out, 64, "bhld")


def test_fp8_rejects_bf16(device):
    q = torch.randn(1, 2, 8, 64, device=device).to(torch.bfloat16)
    with pytest.raises(ValueError, match="dtype must be one of"):
        attention_forward_fp8(q, q, q)


@pytest.mark.parametrize(("causal", "layout"), [(True, "bhld"), (False, "blhd")])
def test_attention_tensor_descriptor_path(causal, layout, device, gen):
    """The TMA (tensor-descriptor) code path, which the interpreter can also run."""
    check_attention(1, 4, 2, 45, 70, 64, causal, layout, torch.bfloat16, device, gen, use_tma=True)


def test_autograd_function_and_non_contiguous_inputs(device, gen):
    """q, k, v as strided views of one packed (B, L, 3, H, D) tensor; gradients through autograd."""
    b, seq, h, d = 2, 33, 2, 64
    qkv = _rand((b, seq, 3, h, d), torch.float16, device, gen).requires_grad_()
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    out = flash_attention(q, k, v, causal=True, layout="blhd")
    qkv64 = qkv.detach().double().requires_grad_()
    ref, _ = attention_fp32(*qkv64.unbind(2), causal=True, layout="blhd", dtype=torch.float64)
    assert rel_err(out, ref) < FWD_TOL[torch.float16]
    do = _rand(out.shape, torch.float16, device, gen)
    out.backward(do)
    ref.backward(do.double())
    assert rel_err(qkv.grad, qkv64.grad) < BWD_TOL[torch.float16]


def test_custom_scale(device, gen):
    q, k, v = (_rand((1, 2, 24, 64), torch.float16, device, gen) for _ in range(3))
    out, lse = attention_forward(q, k, v, sm_scale=0.3)
    ref, ref_lse = attention_fp32(q, k, v, sm_scale=0.3, dtype=torch.float64)
    assert rel_err(out, ref) < FWD_TOL[torch.float16]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2


@pytest.mark.parametrize("causal", [False, True])
def test_zero_scale_is_uniform_attention(causal, device, gen):
    """sm_scale 0: every kept key weighs the same (the Gluon forward, which masks a raw score to -inf before scaling
    it, leaves it to the Triton kernel)."""
    q, k, v = (_rand((1, 2, 40, 64), torch.float16, device, gen) for _ in range(3))
    out, lse = attention_forward(q, k, v, causal, sm_scale=0.0)
    ref, ref_lse = attention_fp32(q, k, v, causal, sm_scale=0.0, dtype=torch.float64)
    assert rel_err(out, ref) < FWD_TOL[torch.float16]
    assert (lse.double() - ref_lse).abs().max().item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_zero_scale_short_causal_gpu(d, gen):
    """At a shape where "auto" prefers the Gluon forward (16-bit, causal, short keys: the row-bound mask), sm_scale 0
    runs the Triton kernel and matches the reference; impl="gluon" refuses it."""
    _needs_gluon()
    q, k, v = _qkv(2, 4, 4, 512, 512, d, "bhld", torch.bfloat16, "cuda", gen)
    out, lse = attention_forward(q, k, v, True, sm_scale=0.0)
    ref, ref_lse = attention_fp32(q, k, v, True, 0.0, "bhld")
    _assert_forward(out, lse, ref, ref_lse, torch.bfloat16, f"seed={gen.initial_seed()} d={d}")
    with pytest.raises(ValueError, match="positive sm_scale"):
        attention_forward(q, k, v, True, sm_scale=0.0, impl="gluon")


@pytest.mark.parametrize("entry", ["forward", "fp8", "backward"])
@pytest.mark.parametrize("option", ["config", "use_tma"])
def test_gluon_refuses_triton_options(entry, option, device, gen):
    """impl="gluon" with a Triton config or use_tma is an error, on any device (the forward used to run the Triton
    kernel instead, the backward to drop them)."""
    q = _rand((1, 2, 16, 64), torch.float16, device, gen)
    q8 = q.to(torch.float8_e4m3fn)
    lse = torch.zeros((1, 2, 16), dtype=torch.float32, device=device)
    cfg = (64, 64, 4, 2)
    if option == "use_tma":
        kw = {"use_tma": False}
    else:
        kw = {"configs": (cfg, None)} if entry == "backward" else {"config": cfg}
    run = {"forward": lambda: attention_forward(q, q, q, impl="gluon", **kw),
           "fp8": lambda: attention_forward_fp8(q8, q8, q8, impl="gluon", **kw),
           "backward": lambda: attention_backward(q, q, q, q, q, lse, impl="gluon", **kw)}[entry]
    with pytest.raises(ValueError, match="impl='gluon' takes no config/configs or use_tma"):
        run()


def test_impl_choice_is_checked(device, gen):
    q = _rand((1, 2, 16, 64), torch.float16, device, gen)
    with pytest.raises(ValueError, match="impl must be"):
        attention_forward(q, q, q, impl="cudnn")
    if not attention_ws.eligible(q, q, q, q, 64):  # CPU / interpreter, or a GPU that is not sm_90
        with pytest.raises(ValueError, match="Gluon forward cannot run these inputs"):
            attention_forward(q, q, q, impl="gluon")
        out, _ = attention_forward(q, q, q, impl="triton")
        assert rel_err(out, attention_fp32(q, q, q)[0]) < FWD_TOL[torch.float16]
    assert isinstance(attention_ws.status(), str) and attention_ws.status()


def _dims(seq: int, d: int, heads: int = 1):
    """AttnDims of one batch of ``heads`` bf16 heads, ``seq`` queries and keys (CPU tensors never filled), for the
    routing and config rules."""
    q = torch.empty(1, heads, seq, d, dtype=torch.bfloat16)
    return check_dims(q, q, q, "bhld", HEAD_DIMS)


@pytest.mark.parametrize(("d", "seq", "causal", "gluon"), [
    (128, 512, True, True), (128, 4096, False, True), (64, 512, False, True), (64, 512, True, True),
    (40, 1024, True, True), (64, 4096, True, True), (32, 1024, True, False), (24, 2047, True, False),
    (32, 2048, True, True), (192, 4096, False, False)])
def test_auto_prefers_the_kernel_measured_faster(d, seq, causal, gluon):
    """"auto"'s routing rule (kernels/NOTES.md): Gluon at head dims <= 128, except causal at head dims <= 32
    with short keys (Triton measured faster there; padded head dim 64 runs short causal attention on 64-key tiles
    since session 23); head dims above 128 are not Gluon's."""
    assert attention_ws.preferred(_dims(seq, d), causal) is gluon


@pytest.mark.parametrize(("d", "seq", "causal", "gluon"), [
    (128, 512, False, True), (128, 4096, False, True), (128, 4096, True, True), (128, 512, True, True),
    (64, 512, False, True), (64, 4096, True, True), (64, 1024, True, False), (64, 2048, True, True),
    (96, 1024, False, True), (32, 4096, False, False)])
def test_fp8_auto_prefers_the_kernel_measured_faster(d, seq, causal, gluon):
    assert attention_ws.preferred_fp8(_dims(seq, d), causal) is gluon


@pytest.mark.parametrize(("d", "seq", "causal", "fp8", "block_n", "consumers"), [
    (128, 512, True, False, 64, 2), (128, 2047, True, False, 64, 2), (128, 2048, True, False, 128, 2),
    (128, 512, False, False, 128, 2), (96, 512, True, False, 64, 2), (64, 512, True, False, 64, 2),
    (64, 2047, True, False, 64, 2), (64, 2048, True, False, 128, 2), (32, 512, True, False, 128, 2),
    (128, 512, True, True, 128, 2), (64, 1024, False, False, 128, 2), (64, 1024, False, True, 128, 2),
    (64, 2048, False, True, 128, 3), (64, 2048, False, False, 128, 3), (64, 4096, True, True, 128, 2),
    (48, 4096, False, False, 128, 3)])
def test_gluon_default_config_by_length(d, seq, causal, fp8, block_n, consumers):
    """16-bit causal attention over few keys takes 64-key tiles at padded head dims 64 and 128 (measured faster at
    512 keys, slower at 4096 at d128 and 2048 at d64); head dim 64 without a mask takes three consumers from 2048
    queries; everything else keeps the per-(head dim, mask) tables."""
    config = attention_ws.default_config(_dims(seq, d), causal, fp8)
    assert (config[0], config[2]) == (block_n, consumers)
    table = attention_ws.FP8_CONFIGS if fp8 else attention_ws.CONFIGS
    short = block_n == 64 or (seq < attention_ws.SHORT_QUERY_MAX_LEN and (padded_dim(d), causal) == (64, False))
    assert short or config == table[(padded_dim(d), causal)]


@pytest.mark.parametrize(("lq", "lk", "consumers"), [(1024, 8192, 2), (8192, 512, 3)])
def test_gluon_three_consumers_go_by_query_length(lq, lk, consumers):
    """Three consumers at head dim 64 without a mask from SHORT_QUERY_MAX_LEN queries, whatever the key length."""
    q, k = torch.empty(1, 1, lq, 64, dtype=torch.bfloat16), torch.empty(1, 1, lk, 64, dtype=torch.bfloat16)
    assert attention_ws.default_config(check_dims(q, k, k, "bhld", HEAD_DIMS), False, False)[2] == consumers


@pytest.mark.parametrize(("layout", "hk", "permutable"), [("bhld", 2, True), ("blhd", 1, True), ("blhd", 2, False)])
def test_fp8_three_consumers_only_with_permuted_k(layout, hk, permutable):
    """fp8 at head dim 64 takes three consumers only where K can be read permuted (P then stays in its threads,
    packed); otherwise two (three spill 804 bytes, offline build)."""
    k = torch.empty(_shape(2, hk, 4096, 64, layout), dtype=torch.float8_e4m3fn)
    q = torch.empty(_shape(2, 4, 4096, 64, layout), dtype=torch.float8_e4m3fn)
    dims = check_dims(q, k, k, layout, HEAD_DIMS, dtypes=FP8_DTYPES)
    assert attention_ws.k_permutable(k, layout, dims) is permutable
    assert attention_ws.default_config(dims, False, True, permutable)[2] == (3 if permutable else 2)


@pytest.mark.parametrize(("b", "h", "seq", "layout", "permuted"), [
    (2, 4, 1024, "bhld", True), (1, 1, 528, "blhd", True), (3, 1, 64, "blhd", True),
    (2, 4, 1024, "blhd", False), (2, 4, 1000, "bhld", False), (2, 4, -1024, "bhld", False)])
def test_fp8_permuted_k_only_where_heads_follow_one_another(b, h, seq, layout, permuted):
    """The fp8 Gluon kernel's permuted-K read views k as one (batch·heads·keys, dim) matrix: only a contiguous
    (B, H, L, D) k (or one head) with a key count that is a multiple of 16 allows it; the rest read k plainly."""
    if attention_ws.attn_fwd_ws is None:
        pytest.skip(f"no Gluon kernel with this Triton ({attention_ws.IMPORT_ERROR})")
    if seq < 0:  # the first -seq keys of a longer k: heads no longer follow one another at len_k rows
        k = torch.zeros(_shape(b, h, -2 * seq, 128, layout), dtype=torch.float8_e4m3fn)[:, :, :-seq]
        seq = -seq
    else:
        k = torch.zeros(_shape(b, h, seq, 128, layout), dtype=torch.float8_e4m3fn)
    desc = attention_ws._permuted_k_descriptor(k, layout, check_dims(k, k, k, layout, HEAD_DIMS, dtypes=FP8_DTYPES),
                                                      128)
    assert (desc is not None) is permuted
    if permuted:  # rows (key / 16, t1, q, t0) over every batch·head's keys, 128-key boxes
        assert list(desc.shape) == [b * h * seq // 16, 2, 4, 2, 128]
        assert list(desc.strides) == [16 * 128, 2 * 128, 4 * 128, 128, 1]
        assert list(desc.block_shape) == [8, 2, 4, 2, 128]


def test_empty_sequences(device):
    q = torch.randn(1, 2, 0, 64, dtype=torch.float16, device=device)
    k = torch.randn(1, 2, 5, 64, dtype=torch.float16, device=device)
    out, lse = attention_forward(q, k, k)
    assert out.shape == (1, 2, 0, 64) and lse.shape == (1, 2, 0)
    q2 = torch.randn(1, 2, 3, 64, dtype=torch.float16, device=device)
    k0 = torch.randn(1, 2, 0, 64, dtype=torch.float16, device=device)
    out2, lse2 = attention_forward(q2, k0, k0)
    assert torch.equal(out2, torch.zeros_like(out2)) and torch.isinf(lse2).all()


# --- GPU: real shapes, fast path ----------------------------------------------------------------------
GPU_CASES = [
    (2, 16, 16, 2048, 2048, 128, False, "bhld", torch.bfloat16),
    (2, 16, 16, 2048, 2048, 128, True, "bhld", torch.bfloat16),
    (2, 16, 16, 1531, 1531, 64, True, "bhld", torch.float16),
    (1, 32, 8, 1000, 3001, 128, True, "blhd", torch.bfloat16),
    (2, 8, 2, 2048, 2048, 64, False, "blhd", torch.float16),
    (1, 8, 8, 1024, 1024, 256, True, "bhld", torch.bfloat16),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "hq", "hk", "lq", "lk", "d", "causal", "layout", "dtype"), GPU_CASES)
def test_attention_gpu(b, hq, hk, lq, lk, d, causal, layout, dtype, gen):
    """The default (autotuned, Hopper-tuned) path at real shapes."""
    q = torch.empty(_shape(b, hq, lq, d, layout), device="cuda", dtype=dtype)
    if tma_capable(q.device):
        assert attention_path(q, q, q) == "hopper"
    check_attention(b, hq, hk, lq, lk, d, causal, layout, dtype, "cuda", gen, ref_dtype=torch.float32)


def _needs_gluon(fp8: bool = False) -> None:
    q = torch.empty(1, 1, 64, 64, device="cuda", dtype=torch.bfloat16)
    if fp8:  # e4m3 inputs, v position-contiguous, bf16 output
        q8 = q.to(torch.float8_e4m3fn)
        runs = attention_ws.eligible_fp8(q8, q8, q8.transpose(2, 3).contiguous().transpose(2, 3), q, 64, "bhld")
    else:
        runs = attention_ws.eligible(q, q, q, q, 64)
    if not runs:
        pytest.skip(f"the Gluon forward needs an sm_90 GPU ({attention_ws.status()})")


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["gluon", "triton"])
@pytest.mark.parametrize(("b", "hq", "hk", "lq", "lk", "d", "causal", "layout", "dtype"), GPU_CASES[:5])
def test_attention_gpu_each_forward(impl, b, hq, hk, lq, lk, d, causal, layout, dtype, gen):
    """Both forward kernels at real shapes (the default picks one per shape; both must stay right)."""
    if impl == "gluon":
        _needs_gluon()
    check_attention(b, hq, hk, lq, lk, d, causal, layout, dtype, "cuda", gen, ref_dtype=torch.float32,
                    backward=False, impl=impl)


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "config"), [
    (128, (128, 2, 2, True, False)), (128, (128, 2, 2, False, True)), (64, (128, 2, 3, True, True)),
    (64, (128, 3, 3, False, False)), (64, (128, 3, 2, True, True)), (40, (128, 2, 3, False, False)),
    (16, (128, 3, 2, True, False)), (112, (64, 3, 2, True, True)), (128, (64, 3, 2, False, False)),
    (128, (64, 3, 2, True, False)), (128, (64, 2, 2, False, False)), (128, (64, 2, 2, True, False)),
    (64, (64, 3, 2, True, False)),
])
@pytest.mark.parametrize("causal", [False, True])
def test_gluon_forward_configs_gpu(d, config, causal, gen):
    """Every kind of Gluon configuration (2 or 3 consumer warpgroups, persistent or one program per
    work item, causal row blocks in pairs, ping-pong turns or not; key tiles narrower than the row block, where
    causal consumers skip the tiles past their own diagonal) at ragged shapes: GQA, Lq != Lk both ways (causal rows
    that see no key), both layouts."""
    _needs_gluon()
    _gluon_forward_check(d, config, causal, gen)


def _gluon_forward(q, k, v, layout, causal, config):
    """(out, lse) of attention_ws.forward with ``config`` (None: its default), into NaN-filled buffers."""
    dims = check_dims(q, k, v, layout, HEAD_DIMS)
    out = _nan(q.shape, q.dtype, "cuda")
    lse = _nan((dims.batch, dims.heads_q, dims.len_q), torch.float32, "cuda")
    assert attention_ws.forward(q, k, v, out, lse, dims, layout, causal, dims.head_dim ** -0.5 * LOG2E, config)
    return out, lse


def _gluon_forward_check(d, config, causal, gen, shapes=((2, 8, 2, 1000, 1537, "blhd"), (1, 4, 4, 600, 300, "bhld"),
                                                         (3, 4, 1, 1, 513, "bhld")), dtype=torch.bfloat16):
    """attention_ws.forward with ``config`` (None: its default) against the fp32 reference at ``shapes``."""
    # 600 query rows: an odd count of 128-row blocks (a causal pair of one); Lq > Lk: rows that see no key
    for b, hq, hk, lq, lk, layout in shapes:
        q, k, v = _qkv(b, hq, hk, lq, lk, d, layout, dtype, "cuda", gen)
        out, lse = _gluon_forward(q, k, v, layout, causal, config)
        ref, ref_lse = attention_fp32(q, k, v, causal, None, layout)
        tag = f"seed={gen.initial_seed()} d={d} {config} causal={causal} q={tuple(q.shape)} k={tuple(k.shape)}"
        _assert_forward(out, lse, ref, ref_lse, dtype, tag)


def test_row_sums_by_wgmma_only_for_16_bit_inputs():
    """fp8 P is rounded to e4m3 for the P·V product and fp8 wgmma accumulates with less than fp32 precision: row
    sums by wgmma put the lse off the reference's by more than its 1e-2 (H100, session 16) and the output off by
    up to 3.2e-1 at 16384 keys (session 21); summed a key tile at a time into fp32 the output was right but the lse
    still 0.7-1.8e-2 off (session 22), so fp8 keeps the FADD sums on any consumer count."""
    assert not any(attention_ws.rowsum_mma(True, consumers) for consumers in (2, 3))
    assert attention_ws.rowsum_mma(False, 3) and not attention_ws.rowsum_mma(False, 2)


@pytest.mark.parametrize(("block_d", "causal", "fp8", "len_k", "config", "rowsum", "bufs"), [
    (128, False, False, 4096, None, False, 2),  # the measured case: CONFIGS' config, 16-bit, from 1024 keys
    (128, False, False, 1024, None, False, 2),
    (128, False, False, 512, None, False, 1),  # L512 lost 0.6-0.9 %
    (128, True, False, 4096, None, False, 1),  # causal lost 2.1 %
    (128, False, True, 4096, None, False, 1),  # fp8 lost 2.2 %
    (64, False, False, 4096, None, False, 1),  # d64 lost 2.8 %
    (128, False, False, 4096, None, True, 1),  # ROWSUM_MMA's tile of ones would not fit beside the second buffers
    (128, False, False, 4096, (64, 3, 2, True, False), False, 1),  # another config: not measured
])
def test_two_q_buffers_only_where_measured_faster(block_d, causal, fp8, len_k, config, rowsum, bufs):
    config = config or attention_ws.CONFIGS[(block_d, causal)]
    assert attention_ws.q_buffers(block_d, causal, fp8, len_k, config, rowsum) == bufs


@pytest.mark.parametrize(("d", "causal", "fp8", "len_k", "config", "expected"), [
    (128, True, False, 512, None, True),  # measured: d128 L512 +5.3 %
    (64, True, False, 512, None, True),  # d64 L512 +3.8 %
    (128, True, False, 300, None, True),
    (128, True, False, 513, None, False),  # L768 level, L1024 -2.1 %
    (64, True, False, 768, None, False),  # -5.0 %
    (128, False, False, 512, (64, 3, 2, True, False), False),  # no mask: one loop would mask every tile
    (128, True, True, 512, (64, 3, 2, True, False), False),  # fp8: not measured
    (32, True, False, 512, None, False),  # no SHORT_CAUSAL_CONFIGS entry
    (128, True, False, 512, (64, 2, 2, True, False), False),  # another config: not measured
])
def test_one_loop_only_where_measured_faster(d, causal, fp8, len_k, config, expected):
    dims = _dims(len_k, d)
    config = config or attention_ws.default_config(dims, causal, fp8)
    assert attention_ws.one_loop(dims, causal, fp8, config) is expected


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "shape"), [
    (128, (2, 16, 16, 512, 512, "bhld")),  # the measured case
    (64, (2, 8, 2, 500, 512, "blhd")),  # GQA, a ragged query tail, rows past the diagonal offset
    (128, (1, 4, 4, 600, 300, "bhld")),  # rows that see no key
    (96, (3, 4, 1, 1, 513, "bhld")),  # one query row, a ragged key tail
])
def test_gluon_forward_one_loop_bitwise_gpu(d, shape, gen, monkeypatch):
    """Every key tile through the row-bound masked softmax (ONE_LOOP) gives the two loops' outputs bitwise: a tile
    that keeps every key gets the unmasked branch's bits from it, the scale being fused alike; and both match the
    fp32 reference."""
    _needs_gluon()
    config = attention_ws.SHORT_CAUSAL_CONFIGS[attention_ws.padded_dim(d)]
    _bitwise_either_way(monkeypatch, "one_loop", (False, True), d, True, config, shape, gen)


def _bitwise_either_way(monkeypatch, rule: str, values, d, causal, config, shape, gen):
    """attention_ws.forward with ``attention_ws.<rule>`` returning each of two ``values``: the outputs bitwise the
    same, and the second's matching the fp32 reference."""
    b, hq, hk, lq, lk, layout = shape
    q, k, v = _qkv(b, hq, hk, lq, lk, d, layout, torch.bfloat16, "cuda", gen)
    runs = []
    for value in values:
        monkeypatch.setattr(attention_ws, rule, lambda *a, value=value: value)
        runs.append(_gluon_forward(q, k, v, layout, causal, config))
    tag = f"seed={gen.initial_seed()} d={d} {config} causal={causal} {shape}"
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1]), tag
    ref, ref_lse = attention_fp32(q, k, v, causal, None, layout)
    _assert_forward(runs[1][0], runs[1][1], ref, ref_lse, torch.bfloat16, tag)


@pytest.mark.parametrize(("d", "causal", "fp8", "len_q", "config", "expected"), [
    (128, True, False, 4096, None, 9),  # 32 row blocks a head: cdiv(2 * 132, 32) heads' row blocks singly
    (128, True, False, 16384, None, 3),
    (64, True, False, 16384, None, 4),  # LONG_CAUSAL_CONFIGS' three consumers: 86 row blocks of 192 rows
    (128, True, False, 2048, None, 0),  # 128 pairs: one wave, no tail to fill
    (128, True, False, 2176, None, 16),  # 144 pairs, 17 row blocks a head: cdiv(264, 17) = 16, all 16 heads
    (128, False, False, 4096, None, 0),  # no mask: items of one row block, equal work
    (128, False, False, 4096, (128, 2, 2, False, False), 0),  # the same on one program an item
    (128, True, True, 4096, None, 9),  # fp8 alike (LPT_FP8)
    (128, False, True, 4096, None, 0),
    (128, True, False, 1024, None, 0),  # SHORT_CAUSAL_CONFIGS' persistent grid takes items in a fixed order
])
def test_lpt_heads_rule(d, causal, fp8, len_q, config, expected):
    dims = _dims(len_q, d, heads=16)
    config = config or attention_ws.default_config(dims, causal, fp8)
    lpt = attention_ws.lpt_heads(dims, causal, fp8, config, 132)
    assert lpt == expected
    n_items, n_pairs = attention_ws.work_items(dims, causal, config[2], lpt)
    row_blocks = -(-len_q // (64 * config[2]))
    if causal:  # every row block once: pairs of the first heads, the last heads' blocks singly
        assert n_pairs == (16 - lpt) * -(-row_blocks // 2) and n_items == n_pairs + lpt * row_blocks
    else:
        assert (n_items, n_pairs) == (16 * row_blocks, 0)


def test_long_causal_config_rule():
    """Head dim 64 with a causal mask takes three consumers from LONG_CAUSAL_MIN_LEN queries, and keeps CONFIGS'
    two below (where the last 192-row block's idle consumers cost more); fp8 and other head dims keep theirs."""
    def config(d, len_q, causal=True, fp8=False):
        return attention_ws.default_config(_dims(len_q, d), causal, fp8)

    long = attention_ws.LONG_CAUSAL_MIN_LEN
    assert config(64, long) == config(48, long) == attention_ws.LONG_CAUSAL_CONFIGS[64]
    assert config(64, long - 1) == attention_ws.CONFIGS[(64, True)]
    assert config(128, long) == attention_ws.CONFIGS[(128, True)]
    assert config(64, long, fp8=True) == attention_ws.FP8_CONFIGS[(64, True)]
    assert config(64, long, causal=False) == attention_ws.CONFIGS[(64, False)]


@pytest.mark.parametrize(("d", "fp8", "len_q", "config", "expected"), [
    (128, False, 4096, None, True),  # a causal grid of one program an item with a tail, two consumers
    (64, False, 4096, None, True),  # (one batch: at 2048 the 128 pairs make one wave)
    (128, True, 4096, None, True),  # fp8 alike
    (128, False, 2048, None, False),  # one wave of pairs: no tail, one program an item
    (64, False, 16384, None, False),  # LONG_CAUSAL_CONFIGS' three consumers: not timed with it
    (128, False, 1024, None, False),  # SHORT_CAUSAL_CONFIGS' persistent grid
])
def test_dynamic_grid_rule(d, fp8, len_q, config, expected):
    dims = _dims(len_q, d, heads=16)
    config = config or attention_ws.default_config(dims, True, fp8)
    lpt = attention_ws.lpt_heads(dims, True, fp8, config, 132)
    assert attention_ws.dynamic_grid(config, lpt) == expected
    assert not attention_ws.dynamic_grid(config, 0)  # never without a tail (no mask, or pairs only)


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "config", "shape"), [
    (128, (128, 2, 2, False, False), (2, 8, 2, 1000, 1537, "blhd")),  # GQA, Lk > Lq
    (64, (128, 3, 2, False, False), (4, 16, 16, 2048, 2048, "bhld")),  # the shipped case: 16 x 64 pairs + tail
    (96, (128, 2, 2, False, False), (2, 3, 3, 2100, 2100, "bhld")),  # an odd count of row blocks
    (128, (128, 2, 2, False, False), (3, 4, 1, 1, 513, "bhld")),  # one query row: one row block a head
    (128, None, (2, 16, 16, 4096, 4096, "bhld")),  # the default config: 512 pairs and a tail of single row blocks
])
def test_gluon_forward_dynamic_grid_bitwise_gpu(d, config, shape, gen, monkeypatch):
    """A persistent grid taking its items from the ticket (DYNAMIC) gives the outputs of one program an item, bitwise
    (each row block is computed alike, only by another program), twice in a row and from a replayed CUDA graph (the
    ticket is back at zero after every launch), and matches the fp32 reference."""
    _needs_gluon()
    _bitwise_either_way(monkeypatch, "dynamic_grid", (False, True), d, True, config, shape, gen)
    # dynamic_grid stays patched to True (the second value) for the rest: the ticket in a row and in a graph
    b, hq, hk, lq, lk, layout = shape
    q, k, v = _qkv(b, hq, hk, lq, lk, d, layout, torch.bfloat16, "cuda", gen)
    want = _gluon_forward(q, k, v, layout, True, config)
    again = _gluon_forward(q, k, v, layout, True, config)
    assert torch.equal(want[0], again[0]) and torch.equal(want[1], again[1])
    dims = check_dims(q, k, v, layout, HEAD_DIMS)
    out, lse = torch.empty_like(want[0]), torch.empty_like(want[1])
    scale = d ** -0.5 * LOG2E
    # the warm-up launch on the capture stream makes its ticket outside the capture
    graph = _captured(lambda: attention_ws.forward(q, k, v, out, lse, dims, layout, True, scale, config))
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want[0]) and torch.equal(lse, want[1])
    tickets = [t[:2] for t in attention_ws._TICKETS.values() if t.device == q.device]
    assert tickets and all(int(t.abs().sum()) == 0 for t in tickets)


@pytest.mark.parametrize(("d", "causal", "fp8", "len_q", "config", "expected"), [
    (128, False, False, 4096, None, True),  # measured: +2.7 / +3.7 % on two H200s
    (128, True, False, 4096, None, True),  # +1.6 / +1.7 %
    (128, False, False, 16384, None, True),  # +4.3 %
    (80, False, False, 4096, None, True),  # padded to 128: the same config
    (128, False, False, 512, None, False),  # -1.5 % at L512
    (128, True, False, 1024, None, False),  # 64-key tiles (SHORT_CAUSAL_CONFIGS)
    (64, False, False, 4096, None, False),  # three consumers with turns: -3.2 / -3.6 %
    (64, True, False, 4096, None, False),  # d64 causal: -3.1 / -4.2 %
    (128, False, True, 4096, None, False),  # fp8: level
    (128, False, False, 4096, (128, 2, 2, True, True), False),  # ping-pong turns: not measured for 16-bit
])
def test_light_barriers_rule(d, causal, fp8, len_q, config, expected, monkeypatch):
    monkeypatch.setattr(attention_ws, "LIGHT_ERROR", None)  # as on Triton 3.6 (this machine's may be another)
    dims = _dims(len_q, d, heads=16)
    config = config or attention_ws.default_config(dims, causal, fp8)
    assert attention_ws.light_barriers(dims, causal, fp8, config) == expected
    monkeypatch.setattr(attention_ws, "LIGHT_ERROR", "Triton 3.9.0: the PTX rewrites know Triton 3.6.x only")
    assert not attention_ws.light_barriers(dims, causal, fp8, config)


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "causal", "config", "shape"), [
    (128, False, None, (2, 8, 2, 1000, 1537, "blhd")),  # GQA, ragged lengths, Lk > Lq
    (128, True, None, (2, 16, 16, 4096, 4096, "bhld")),  # the ticket grid with LPT's single row blocks
    (128, False, None, (1, 4, 4, 4096, 4096, "bhld")),  # two Q buffers a consumer
    (80, True, (128, 2, 2, False, False), (3, 4, 1, 1, 513, "bhld")),  # one query row, padded head dim
    (64, True, (128, 3, 2, False, False), (2, 4, 4, 2048, 2048, "blhd")),  # a 64-dim build through it too
    (64, False, (128, 2, 3, True, True), (1, 4, 4, 2048, 2048, "bhld")),  # three consumers taking turns
])
def test_gluon_forward_light_barriers_bitwise_gpu(d, causal, config, shape, gen, monkeypatch):
    """The forward built without its consumers' warpgroup barriers before mbarrier operations (LIGHT_PTX, through
    kernels/_ptx_barriers.py) gives the outputs of the build with them, bitwise (the same arithmetic in the same
    order), and matches the fp32 reference; its PTX says the barriers went."""
    _needs_gluon()
    attention_ws.attn_fwd_ws.device_caches.clear()  # the builds below only: this test's two
    _bitwise_either_way(monkeypatch, "light_barriers", (False, True), d, causal, config, shape, gen)
    _assert_one_light_build_of_two(attention_ws.attn_fwd_ws)


def _assert_one_light_build_of_two(jit_fn) -> None:
    """``jit_fn``'s cached builds are two, one of them rewritten by kernels/_ptx_barriers.py (its PTX's mark)."""
    marks = [_ptx_barriers.removed(k.asm["ptx"]) for cache in jit_fn.device_caches.values() for k in cache[0].values()]
    light = [n for n in marks if n is not None]
    assert len(marks) == 2 and len(light) == 1 and light[0] > 0, marks


C3_CAUSAL = (128, 2, 3, False, True)  # LONG_CAUSAL_CONFIGS' three consumers: 192-row blocks on 128-key tiles


@pytest.mark.parametrize(("len_q", "causal", "config", "expected"), [
    (4096, True, C3_CAUSAL, -128),  # 22 row blocks of 192 rows: 4224, two consumers' rows idle
    (8192, True, C3_CAUSAL, -64),  # 43 * 192 = 8256
    (8064, True, C3_CAUSAL, 0),  # 42 * 192: no idle row, the shifted build all the same
    (100, True, C3_CAUSAL, -64),  # 92 idle rows: whole 64-row consumers only
    (1, True, C3_CAUSAL, -128),
    (16384, True, None, -128),  # the default config there (LONG_CAUSAL_CONFIGS)
    (4096, False, C3_CAUSAL, None),  # no mask: every row block runs every key tile
    (4000, True, (128, 2, 2, False, False), None),  # 128-row blocks start on a key tile
    (1000, True, None, None),  # SHORT_CAUSAL_CONFIGS' 64-key tiles (not timed shifted)
])
def test_first_row_rule(len_q, causal, config, expected):
    dims = _dims(len_q, 64, heads=16)
    config = config or attention_ws.default_config(dims, causal, False)
    assert attention_ws.first_row(dims, causal, config) == expected


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "config", "shape"), [
    (64, C3_CAUSAL, (1, 4, 2, 1000, 1300, "bhld")),  # GQA, Lk > Lq: one consumer's rows before row 0
    (64, C3_CAUSAL, (2, 4, 4, 4000, 4000, "blhd")),  # two consumers' rows before row 0
    (64, C3_CAUSAL, (1, 2, 2, 1, 1, "bhld")),  # one query row: the row block's first two consumers idle
    (64, C3_CAUSAL, (1, 4, 4, 600, 300, "bhld")),  # Lq > Lk: rows that see no key
    (64, None, (1, 2, 2, 8192, 8192, "bhld")),  # the default config (LONG_CAUSAL_CONFIGS)
])
def test_gluon_forward_first_row_gpu(d, config, shape, gen, monkeypatch):
    """Causal row blocks starting before row 0 (the kernel's SHIFT, attention_ws.first_row) match the fp32
    reference as the unshifted ones do, and write nothing outside the output: it is a view inside a buffer whose other
    rows hold a sentinel (a consumer whose rows lie before row 0 copies nothing)."""
    _needs_gluon()
    b, hq, hk, lq, lk, layout = shape
    q, k, v = _qkv(b, hq, hk, lq, lk, d, layout, torch.bfloat16, "cuda", gen)
    dims = check_dims(q, k, v, layout, HEAD_DIMS)
    config = config or attention_ws.default_config(dims, True, False)
    assert attention_ws.first_row(dims, True, config) is not None
    ref, ref_lse = attention_fp32(q, k, v, True, None, layout)
    tag = f"seed={gen.initial_seed()} d={d} {config} {shape}"
    pos = 1 if layout == "blhd" else 2  # the position dim: 128 guard rows before the output and after it
    outer_shape = [b, hq, d]
    outer_shape.insert(pos, lq + 256)
    outer = torch.full(outer_shape, 7.0, dtype=torch.bfloat16, device="cuda")
    out = outer.narrow(pos, 128, lq)
    lse = _nan((b, hq, lq), torch.float32, "cuda")
    assert attention_ws.forward(q, k, v, out, lse, dims, layout, True, d ** -0.5 * LOG2E, config)
    _assert_forward(out, lse, ref, ref_lse, torch.bfloat16, tag)
    guards = (outer.narrow(pos, 0, 128), outer.narrow(pos, 128 + lq, 128))
    assert all(bool((g == 7).all()) for g in guards), tag
    monkeypatch.setattr(attention_ws, "first_row", lambda *a: None)
    plain, plain_lse = _gluon_forward(q, k, v, layout, True, config)
    _assert_forward(plain, plain_lse, ref, ref_lse, torch.bfloat16, tag)


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "config", "shape", "lpt"), [
    (128, (128, 2, 2, False, False), (2, 8, 2, 1000, 1537, "blhd"), 5),  # GQA, the last 5 of 16 heads singly
    (64, (128, 2, 3, False, True), (1, 4, 4, 600, 300, "bhld"), 4),  # three consumers, every head singly; rows
    # that see no key
    (128, (128, 2, 2, False, False), (3, 4, 1, 1, 513, "bhld"), 2),  # one query row: one row block a head
    (96, (128, 2, 2, False, False), (2, 3, 3, 2100, 2100, "bhld"), 1),  # an odd count of row blocks
])
def test_gluon_forward_lpt_bitwise_gpu(d, config, shape, lpt, gen, monkeypatch):
    """A causal grid ending in single row blocks, heaviest first (the kernel's LPT), gives the outputs of pairs
    only, bitwise (each row block is computed alike, only by another program), and matches the fp32 reference."""
    _needs_gluon()
    _bitwise_either_way(monkeypatch, "lpt_heads", (0, lpt), d, True, config, shape, gen)


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "causal", "config", "shape"), [
    (128, False, None, (4, 16, 4, 2000, 2100, "bhld")),  # the shipped case: ~8 row blocks a persistent program
    (96, False, None, (2, 16, 16, 2048, 1500, "blhd")),  # padded to 128, ragged key tail
    (128, True, (64, 3, 2, True, False), (4, 16, 4, 1000, 1000, "bhld")),  # causal pairs on a persistent grid
])
def test_gluon_forward_two_q_buffers_bitwise_gpu(d, causal, config, shape, gen, monkeypatch):
    """Two Q buffers a consumer (the next row block's Q loaded while the current one is computed) give the outputs
    of one, bitwise, at shapes where each persistent program runs several row blocks (both buffers in turn, their
    barriers through several phases), and match the fp32 reference."""
    _needs_gluon()
    _bitwise_either_way(monkeypatch, "q_buffers", (1, 2), d, causal, config, shape, gen)


@pytest.mark.gpu
@pytest.mark.parametrize("rowsum", [False, True], ids=["fadd-sums", "wgmma-sums"])
@pytest.mark.parametrize(("d", "causal", "config", "dtype"), [
    (128, False, None, torch.bfloat16), (128, True, None, torch.bfloat16), (64, False, None, torch.bfloat16),
    (64, True, None, torch.bfloat16), (64, False, (128, 3, 3, False, False), torch.bfloat16),
    (96, True, (64, 3, 2, True, True), torch.bfloat16), (64, False, None, torch.float16)])
def test_gluon_forward_row_sums_either_way_gpu(rowsum, d, causal, config, dtype, gen, monkeypatch):
    """The softmax's row sums by FADDs or by the tensor cores (ROWSUM_MMA: P times a tile of ones), each forced,
    on two and three consumers (head dim 64 without a mask: three), persistent or not, ping-pong turns or not;
    GQA, Lq != Lk (causal rows that see no key)."""
    _needs_gluon()
    monkeypatch.setattr(attention_ws, "rowsum_mma", lambda fp8, consumers, codes=False: rowsum)
    _gluon_forward_check(d, config, causal, gen, ((2, 8, 2, 2100, 1537, "blhd"), (1, 4, 4, 600, 300, "bhld")), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("use_tma", [True, False], ids=["tma", "pointer"])
@pytest.mark.parametrize(("d", "fwd", "bwd"), [
    (128, (128, 64, 8, 3), ((64, 128, 8, 2), (128, 64, 8, 3))),
    (128, (128, 128, 8, 3), ((64, 128, 8, 3), (128, 128, 8, 2))),
    (64, (128, 128, 4, 3), ((64, 64, 4, 3), (128, 64, 8, 3))),
])
def test_attention_gpu_load_paths(use_tma, d, fwd, bwd, gen):
    """Both compiled load paths at ragged shapes (GQA, Lq != Lk, causal), explicit Hopper configs."""
    if use_tma and not tma_capable(torch.device("cuda", torch.cuda.current_device())):
        pytest.skip("tensor descriptors need compute capability 9 and the shared memory of the Hopper configs")
    check_attention(1, 8, 2, 1021, 1500, d, True, "blhd", torch.bfloat16, "cuda", gen, use_tma=use_tma,
                    ref_dtype=torch.float32, config=fwd, bwd_configs=bwd)


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "layout", "causal"), [(80, "bhld", True), (96, "blhd", False), (192, "bhld", True),
                                                     (24, "blhd", True), (40, "bhld", False), (112, "blhd", True)])
def test_padded_head_dims_gpu(d, layout, causal, gen):
    """Non-power-of-two head dims through the default (autotuned) path, GQA and Lq != Lk."""
    check_attention(1, 8, 2, 777, 1201, d, causal, layout, torch.bfloat16, "cuda", gen, ref_dtype=torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("v_pos_contig", [False, True], ids=["v-rows", "v-pos-contig"])
@pytest.mark.parametrize(("d", "causal"), [(128, False), (128, True), (64, True), (96, False)])
@pytest.mark.parametrize("fast_exp", [False, True], ids=["exp2", "fast-exp"])
def test_fp8_forward_gpu(d, causal, v_pos_contig, fast_exp, gen):
    _fp8_check(2, 8, 4, 1500, 1500, d, causal, "bhld", "cuda", gen, v_pos_contig, ref_dtype=torch.float32,
               fast_exp=fast_exp)


@pytest.mark.gpu
@pytest.mark.parametrize(("impl", "fast_exp"), [("gluon", False), ("gluon", True), ("triton", False)],
                         ids=["gluon-exp2", "gluon-fast-exp", "triton"])  # (the Triton kernel has no fast_exp)
@pytest.mark.parametrize(("b", "hq", "hk", "lq", "lk", "d", "causal", "layout", "out_dtype"), [
    (2, 8, 4, 2048, 2048, 128, True, "bhld", torch.bfloat16),
    (1, 8, 2, 1000, 1536, 128, True, "blhd", torch.float32),
    (2, 4, 4, 600, 304, 64, True, "bhld", torch.float16),
    (3, 4, 1, 1, 528, 96, False, "blhd", torch.bfloat16),
    (1, 4, 4, 777, 784, 80, False, "bhld", torch.float32),
    (2, 4, 2, 2100, 2064, 64, False, "bhld", torch.bfloat16),  # three consumers (SHORT_QUERY_MAX_LEN)
    (2, 4, 2, 2100, 2064, 64, False, "blhd", torch.bfloat16),  # K not permutable: two consumers
])
def test_fp8_forward_each_kernel_gpu(impl, fast_exp, b, hq, hk, lq, lk, d, causal, layout, out_dtype, gen):
    """The Gluon and the Triton fp8 forward (v position-contiguous) at ragged shapes: GQA, Lq != Lk both ways,
    both layouts, every output type, with P's exponentials and with its codes (``fast_exp``: the Gluon kernel where
    K is read permuted; the Triton kernel and the Gluon one reading K in key order take exponentials either way).
    Key lengths are multiples of 16: v's dim stride (its length) must be a 16-byte multiple for the copy engine to
    read it position-contiguous (the Triton kernel takes the rest)."""
    if impl == "gluon":
        _needs_gluon(fp8=True)
    _fp8_check(b, hq, hk, lq, lk, d, causal, layout, "cuda", gen, True, out_dtype, torch.float32, impl=impl,
               fast_exp=fast_exp)


@pytest.mark.gpu
@pytest.mark.parametrize("fp8", [False, True, "fast_exp"], ids=["bf16", "fp8", "fp8-fast-exp"])
@pytest.mark.parametrize(("d", "causal"), [(128, False), (128, True), (64, False), (64, True)])
def test_gluon_forward_maxima_growing_along_keys_gpu(d, causal, fp8, gen):
    """Scores that grow along the keys (positive queries, keys scaled up 60x over the sequence), so every row's
    running maximum keeps moving, late tiles included, and the output's rescaling runs at every step: the Gluon
    forward (bf16, and fp8 with P carried packed) against the attention of the same (dequantised) inputs.  The
    fp8 lse is held to 2e-3 of its size besides: fp8 wgmma accumulates the scores with less than fp32 precision
    (seen on an H100: lse ~42 read 0.015-0.041 low, session 13), which random data's small scores do not show."""
    _needs_gluon(fp8=fp8)
    q, k, v = (_rand((2, 4, 2048, d), torch.float32, "cuda", gen) for _ in range(3))
    q = q.abs() + 0.5
    k = k.abs() * torch.linspace(0.05, 3.0, 2048, device="cuda")[None, None, :, None]
    if fp8:
        (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
        out, lse = attention_forward_fp8(q8, k8, v8.transpose(2, 3).contiguous().transpose(2, 3), sq, sk, sv,
                                         causal, impl="gluon", fast_exp=fp8 == "fast_exp")
        ref, ref_lse = attention_fp32(*(t.float() * s for t, s in ((q8, sq), (k8, sk), (v8, sv))), causal)
        tol = 0.1
    else:
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        out, lse = attention_forward(q, k, v, causal, impl="gluon")
        ref, ref_lse = attention_fp32(q.float(), k.float(), v.float(), causal)
        tol = FWD_TOL[torch.bfloat16]
    assert torch.isfinite(out).all()
    assert rel_err(out, ref) < tol
    slack = (FP8_FAST_EXP_LSE_TOL if fp8 == "fast_exp" else 2e-2) + (2e-3 * ref_lse.double().abs() if fp8 else 0.0)
    assert ((lse.double() - ref_lse.double()).abs() < slack).all()


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_fast_exp_takes_codes_where_k_is_permuted_gpu(causal, gen):
    """fast_exp (the default) runs P's codes where the Gluon kernel reads K permuted (bhld): its output near the
    exact path's but not the same bits, its lse within FP8_FAST_EXP_LSE_TOL; where K is read in key order (blhd, several
    heads) both runs are the exact path, bitwise."""
    _needs_gluon(fp8=True)
    for layout, permuted in (("bhld", True), ("blhd", False)):
        shape = (2, 4, 1040, 128) if layout == "bhld" else (2, 1040, 4, 128)
        q, k, v = (_rand(shape, torch.float32, "cuda", gen) for _ in range(3))
        (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
        dim = 2 if layout == "bhld" else 1
        v8 = v8.transpose(dim, 3).contiguous().transpose(dim, 3)
        (out_f, lse_f), (out_e, lse_e) = (
            attention_forward_fp8(q8, k8, v8, sq, sk, sv, causal, None, layout, impl="gluon", fast_exp=fast)
            for fast in (True, False))
        if permuted:
            assert not torch.equal(out_f, out_e)
            assert rel_err(out_f.float(), out_e.float()) < 0.1
            assert (lse_f - lse_e).abs().max().item() < FP8_FAST_EXP_LSE_TOL
        else:
            assert torch.equal(out_f, out_e) and torch.equal(lse_f, lse_e)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_gluon_permuted_k_matches_plain_read_gpu(causal, gen, monkeypatch):
    """The permuted-K read (keys reordered in shared memory, P handed to the P·V product without an exchange)
    gives the plain read's output up to the order of fp32 sums, and the same lse: a wrong key order would
    mismatch by the size of the output."""
    _needs_gluon(fp8=True)
    q, k, v = (_rand((2, 4, seq, 128), torch.float32, "cuda", gen) for seq in (700, 1040, 1040))
    (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
    v8 = v8.transpose(2, 3).contiguous().transpose(2, 3)
    dims = check_dims(q8, k8, v8, "bhld", HEAD_DIMS, dtypes=FP8_DTYPES)
    assert attention_ws._permuted_k_descriptor(k8, "bhld", dims, 128) is not None  # the permuted read runs
    runs = []
    for permute in (True, False):
        monkeypatch.setattr(attention_ws, "PERMUTE_K", permute)
        runs.append(attention_forward_fp8(q8, k8, v8, sq, sk, sv, causal, impl="gluon", fast_exp=False))
    (out_p, lse_p), (out_r, lse_r) = runs
    assert rel_err(out_p.float(), out_r.float()) < 1e-2
    assert torch.allclose(lse_p, lse_r, atol=1e-3, rtol=0)
