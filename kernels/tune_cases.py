"""What ``kernels/tune.py`` sweeps and compares: variants, shapes, inputs, references.

Module-level lists are the sweep candidates (run history and results in kernels/NOTES.md);
``dry_setup`` shrinks everything for a CPU-interpreter run of the script itself.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

DEVICE = "cuda"  # "cpu" with --dry (interpreter, tiny shapes: checks the script, not speed)


@dataclass
class Variant:
    section: str
    case: tuple
    params: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.section}{self.case} " + " ".join(f"{k}={v}" for k, v in self.params.items())


# forward: (BLOCK_M, BLOCK_N, num_warps, num_stages), each with TMA on and off
FWD_D = {
    96: [(128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3)],
    80: [(128, 128, 8, 3), (128, 64, 8, 3)],
}
FWD_CAUSAL = (False, True)
# fp8 forward d128: (BLOCK_M, BLOCK_N, warps, stages) x TMA x V stored position-contiguous (V_T)
FP8 = [(128, 128, 8, 3), (128, 128, 8, 4), (128, 64, 8, 3), (128, 256, 8, 2)]
FP8_D = [128]
BWD_D = [96]  # backward head dims swept (d128 in run 1 of Nov 22, d64 in run 2)
DKDV = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 3)]
DQ = [(128, 64, 8, 3), (128, 128, 8, 2)]
BWD_CAUSAL = (False,)
# decode: (BLOCK_N, warps, stages, waves, TMA, fused combine)   (waves 0: one chunk per head, output written
# directly; with fused combine, the chunks are merged by the last-arriving program)
DEC = [(128, 4, 3, 0, False, False), (128, 4, 3, 1, False, True), (128, 4, 3, 2, False, True),
       (128, 4, 3, 2, False, False), (64, 4, 3, 2, False, True), (64, 4, 3, 4, False, True),
       (128, 4, 4, 1, False, True), (128, 8, 3, 1, False, True), (64, 4, 3, 2, False, False)]
# GEMM: (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages, EPI, FLATTEN), persistent grid
MM = [(128, 256, 64, 8, 8, 4, 1, True), (128, 256, 64, 4, 8, 3, 0, True), (128, 256, 64, 8, 8, 3, 0, True),
      (128, 256, 64, 16, 8, 3, 0, True), (128, 256, 64, 1, 8, 3, 0, True), (128, 256, 64, 8, 8, 3, 0, False),
      (256, 128, 64, 8, 8, 3, 0, True), (256, 128, 64, 8, 8, 4, 1, True), (128, 128, 64, 8, 8, 4, 0, True),
      (128, 128, 64, 8, 4, 4, 0, True), (128, 128, 128, 8, 8, 3, 0, True)]
MM_SMALL = [(64, 32, 256, 1, 4, 4, 2, False), (64, 128, 64, 1, 4, 6, 2, False), (64, 32, 128, 1, 4, 6, 2, False),
            (64, 64, 128, 1, 4, 6, 2, False), (64, 128, 128, 1, 4, 4, 2, False)]
# split-K for decode-sized GEMMs: (split or 0 = auto, (BLOCK_N, BLOCK_K, warps, stages), fused reduction)
MMK = [(0, (64, 128, 4, 4), False), (0, (64, 128, 4, 4), True), (4, (64, 128, 4, 4), True),
       (4, (128, 128, 4, 4), True), (2, (128, 128, 4, 4), True), (4, (128, 128, 8, 4), True),
       (8, (256, 64, 8, 4), True), (4, (128, 64, 4, 6), True), (2, (64, 128, 4, 4), True)]
# ragged-GEMM diagnosis: the 4000x5000x3000 case with B's / C's row pitch padded to 5120 columns (views), and
# M-raggedness apart from N-raggedness (both with the 10000-byte pitch or without)
MM_PAD = ["b", "c", "bc"]
MM_PAD_CFGS = [(128, 256, 64, 8, 8, 3, 0, True), (128, 256, 64, 8, 8, 4, 1, True), (256, 128, 64, 8, 8, 3, 0, True)]
# misaligned B pitch (the ragged shapes): B through cp.async pointer loads ("ptr") or repacked first ("repack")
MM_MISALIGNED = {"ptr": [(128, 256, 64, 8, 8, 3, 0, False), (128, 256, 64, 4, 8, 3, 0, False),
                         (256, 128, 64, 8, 8, 3, 0, False), (128, 256, 64, 8, 8, 3, 2, False),
                         (128, 256, 64, 8, 8, 4, 1, False), (128, 128, 64, 8, 8, 4, 0, False)],
                 "repack": [(128, 256, 64, 8, 8, 3, 0, True), (128, 256, 64, 8, 8, 4, 1, True)]}
# session 6 (issue 16): "s6" sweeps only the two shapes still below 0.95x cuBLAS; "s5" the lists above; "s8" the
# warp-specialised Gluon GEMM (MM_WS) at the ragged shape and 4096^3, and decode at kv2048 (DEC_S8, DEC_FLOOR).
MM_SWEEP = os.environ.get("PERFCI_MM_SWEEP", "s6")
# Gluon GEMM (kernels/_matmul_ws.py): (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, EPI); B through cp.async where
# its pitch is misaligned, through TMA where it is not (the "pad" rows, 4096^3)
MM_WS = [(128, 256, 64, 8, 3, 0), (128, 256, 64, 8, 4, 1), (128, 256, 64, 4, 3, 0), (128, 256, 64, 16, 3, 0),
         (128, 256, 64, 1, 3, 0), (128, 128, 64, 8, 4, 0)]
MM_WS_ALIGNED = [(4096, 4096, 4096)]
# decode at 8x16 heads kv2048 d64 (DEC_SHAPES[0]), "s8": tile / stage / warp / split choices beside DEC's.  Session 8
# call 1 (H100, graph-timed): direct (128, 4, 3) 26.1 us, 2 chunks 25.9 (combine kernel or fused), BLOCK_N 64 with 4
# or 6 stages 26.7-26.8, 8 warps 26.2, 2 stages 33.9, BLOCK_N 256 29.5
DEC_S8 = [(128, 4, 3, 0, False, False), (128, 8, 3, 0, False, False), (128, 4, 3, 2, False, False),
          (128, 4, 3, 2, False, True), (64, 4, 3, 4, False, False)]
# the read floor of the same bytes (decode.read_floor): (programs, BLOCK_N, warps, stages); call 1: 128 programs
# 34.3 us, 264 27.2, 528 x 64 rows 25.25 (88.6 % of copy), 128 x 8 warps x 4 stages 29.9
DEC_FLOOR = [(528, 64, 4, 3), (1056, 64, 4, 3), (528, 128, 8, 3)]
# 16 < M <= 64 through the tensor-descriptor split-K kernel (matmul_splitk_tma), graph-timed as "mmk" rows:
# (split, BLOCK_N, BLOCK_K, warps, stages, host descriptors); BLOCK_M = the next power of two >= M, 16 to 64 (64 before
# session 14).  Split 1 = unsplit, one tile per program.
MM_SKTMA = [(1, 32, 128, 4, 6, True), (1, 32, 128, 4, 6, False), (1, 64, 128, 4, 6, True),
            (2, 64, 128, 4, 6, True), (2, 64, 128, 4, 6, False), (2, 32, 128, 4, 3, True),
            (4, 128, 128, 4, 4, True), (4, 128, 128, 4, 4, False), (4, 128, 64, 4, 8, True),
            (4, 128, 128, 8, 4, True), (4, 64, 128, 4, 3, True), (3, 128, 128, 4, 4, True),
            (2, 128, 128, 4, 4, True), (4, 256, 64, 8, 4, True), (8, 256, 64, 8, 4, True)]
MM_SKTMA_SHAPES = [(64, 4096, 4096)]
MM_SKTMA_BASE = [(64, 32, 128, 1, 4, 6, 2, False), (64, 64, 128, 1, 4, 6, 2, False)]  # the unsplit kernel
# the repack copy alone (graph-timed "mmk" rows) at the ragged shape: (BLOCK_R, BLOCK_C, warps, EVICT)
MM_REPACK = [(32, 256, 4, 0), (32, 256, 4, 1), (16, 512, 4, 0), (64, 256, 8, 0), (8, 1024, 4, 0),
             (32, 512, 8, 0), (64, 512, 8, 1), (128, 256, 8, 0)]
MM_REPACK_GEMM = [(32, 256, 4, 0), (32, 256, 4, 1), (64, 256, 8, 0)]  # whole GEMM with these repacks
FWD_SHAPE = (2, 16, 8192)  # B, H, L for the forward/backward sweeps
DEC_SHAPES = [(8, 16, 16, 2048, 64, torch.float16), (8, 16, 16, 8192, 128, torch.float16),
              (2, 32, 8, 32768, 128, torch.bfloat16), (1, 8, 8, 131072, 128, torch.float16)]
MM_SHAPES = [(4000, 5000, 3000), (4096, 5120, 3072), (4000, 5000, 3072), (4096, 5000, 3072), (4000, 5120, 3072)]
MM_SMALL_SHAPES = [(1, 4096, 4096), (16, 14336, 4096), (64, 4096, 4096)]
FINAL_FWD = [(128, 4096, 4), (128, 16384, 1), (64, 4096, 4), (96, 4096, 4), (80, 4096, 4), (128, 512, 32)]
FINAL_FP8 = [(128, 4096, 4), (128, 16384, 1)]  # d, L, B (H=16)
FINAL_BWD = [(128, 4096, 4), (96, 4096, 4), (80, 4096, 4), (64, 4096, 4)]
FINAL_DEC = list(DEC_SHAPES)
def _env_shapes(name: str) -> list[tuple] | None:
    """``MxNxK,MxNxK`` from the environment (a shorter finals list for one device call), else None."""
    val = os.environ.get(name, "")
    return [tuple(int(x) for x in t.split("x")) for t in val.split(",")] if val else None


FINAL_MM = _env_shapes("PERFCI_MM_FINAL") or [
    (4096, 4096, 4096), (8192, 8192, 8192), (4000, 5000, 3000), (4096, 14336, 4096), (1, 4096, 4096),
    (16, 14336, 4096), (64, 4096, 4096), (4096, 5120, 3072), (4000, 5000, 3072)]


def sweep_variants() -> list[Variant]:
    out: list[Variant] = []
    b, h, seq = FWD_SHAPE
    for d, cfgs in FWD_D.items():
        for causal in FWD_CAUSAL:
            for tma in (True, False):
                for cfg in cfgs:
                    out.append(Variant("fwd", (b, h, seq, d, causal), {"cfg": cfg, "tma": tma}))
    for d in FP8_D:
        for tma in (True, False):
            for vt in (True, False):
                for cfg in FP8:
                    out.append(Variant("fp8", (b, h, seq, d, False), {"cfg": cfg, "tma": tma, "vt": vt}))
    for d in BWD_D:
        for causal in BWD_CAUSAL:
            for tma in (True, False):
                for cfg in DKDV:
                    out.append(Variant("bwd", (b, h, seq, d, causal), {"dkdv": cfg, "dq": DQ[0], "tma": tma}))
                for cfg in DQ[1:]:
                    out.append(Variant("bwd", (b, h, seq, d, causal), {"dkdv": DKDV[0], "dq": cfg, "tma": tma}))
    for shp in DEC_SHAPES if MM_SWEEP not in ("s8", "s8dec") else []:
        for bn, w, s, waves, tma, fused in DEC:
            if bn * shp[4] * 4 * (s - 1) > 220_000:
                continue  # K+V stages beyond shared memory
            if waves == 0 and shp[0] * shp[2] < 0.9 * 132:
                continue  # one chunk per head only runs when the (batch, kv head) pairs fill the GPU
            out.append(Variant("dec", shp, {"bn": bn, "w": w, "s": s, "waves": waves, "tma": tma, "fused": fused}))
    if MM_SWEEP in ("s8", "s8dec"):
        return out + [v for v in _s8_variants() if MM_SWEEP == "s8" or v.section == "dec"]
    if MM_SWEEP == "s6":
        for shp in MM_SKTMA_SHAPES:
            for cfg in MM_SKTMA_BASE:
                out.append(Variant("mm", shp, {"cfg": cfg}))
            for cfg in MM_SKTMA:
                out.append(Variant("mmk", shp, {"sktma": cfg}))
        for cfg in MM_REPACK:
            out.append(Variant("mmk", MM_SHAPES[0], {"rp": cfg}))
        for rp in MM_REPACK_GEMM:
            out.append(Variant("mm", MM_SHAPES[0], {"cfg": MM_PAD_CFGS[0], "mb": "repack", "rp": rp}))
        out.append(Variant("mm", MM_SHAPES[0], {"cfg": MM_PAD_CFGS[0], "pad": "b"}))
        return out
    for shp in MM_SHAPES:
        for cfg in MM if shp == MM_SHAPES[0] else MM[:4]:
            out.append(Variant("mm", shp, {"cfg": cfg}))
    for shp in MM_SHAPES[0:3:2]:
        for how, cfgs in MM_MISALIGNED.items():
            for cfg in cfgs:
                out.append(Variant("mm", shp, {"cfg": cfg, "mb": how}))
    for pad in MM_PAD:
        for cfg in MM_PAD_CFGS:
            out.append(Variant("mm", MM_SHAPES[0], {"cfg": cfg, "pad": pad}))
    for cfg in MM_PAD_CFGS[:1]:
        out.append(Variant("mm", MM_SHAPES[0], {"cfg": cfg, "persistent": False}))
    for shp in MM_SMALL_SHAPES:
        for cfg in MM_SMALL:
            out.append(Variant("mm", shp, {"cfg": cfg}))
        for split, cfg, fused in MMK:
            out.append(Variant("mmk", shp, {"split": split, "cfg": cfg, "fused": fused}))
    return out


def _s8_variants() -> list[Variant]:
    out = []
    shp = MM_SHAPES[0]
    out.append(Variant("mm", shp, {"cfg": MM_PAD_CFGS[0], "mb": "repack"}))  # the session-6 default
    out.append(Variant("mm", shp, {"cfg": MM_PAD_CFGS[0], "pad": "b"}))  # Triton on a padded pitch
    for cfg in MM_WS:
        out.append(Variant("mm", shp, {"ws": cfg}))
    for cfg in MM_WS[:2]:
        out.append(Variant("mm", shp, {"ws": cfg, "pad": "b"}))  # Gluon with B through TMA, padded pitch
    for shp in MM_WS_ALIGNED:
        out.append(Variant("mm", shp, {"cfg": MM_PAD_CFGS[0]}))
        for cfg in MM_WS[:3]:
            out.append(Variant("mm", shp, {"ws": cfg}))
    for bn, w, s, waves, tma, fused in DEC_S8:
        out.append(Variant("dec", DEC_SHAPES[0], {"bn": bn, "w": w, "s": s, "waves": waves, "tma": tma,
                                                  "fused": fused}))
    for progs, bn, w, s in DEC_FLOOR:
        out.append(Variant("dec", DEC_SHAPES[0], {"floor": progs, "bn": bn, "w": w, "s": s}))
    out.append(Variant("dec", DEC_SHAPES[0], {"floor": "copy"}))  # torch copy of K and V: the same bytes moved
    return out


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator(device=DEVICE)
    g.manual_seed(seed)
    return g


def randn(shape, dtype, seed) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE, dtype=dtype, generator=_gen(seed))


def fp8_inputs(b: int, h: int, seq: int, d: int, vt: bool) -> tuple:
    """bf16 q, k, v and their per-tensor e4m3 quantisations (v optionally stored position-contiguous)."""
    from kernels.attention import quantize_fp8

    q, k, v = (randn((b, h, seq, d), torch.bfloat16, i) for i in range(3))
    (q8, sq), (k8, sk), (v8, sv) = (quantize_fp8(t) for t in (q, k, v))
    if vt:
        v8 = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
    return (q, k, v), (q8, k8, v8, sq, sk, sv)


_INPUTS: dict[tuple, Any] = {}


def padded(t: torch.Tensor, cols: int) -> torch.Tensor:
    """A copy of 2-D ``t`` whose rows are ``cols`` elements apart (a view of a wider buffer)."""
    buf = torch.zeros((t.shape[0], cols), dtype=t.dtype, device=t.device)
    buf[:, : t.shape[1]].copy_(t)
    return buf[:, : t.shape[1]]


def inputs(section: str, case: tuple, vt: bool = False) -> Any:
    """Random inputs per case, cached (one set per case in a process)."""
    key = (section, case, vt)
    if key in _INPUTS:
        return _INPUTS[key]
    _INPUTS.clear()
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    if section in ("fwd", "bwd"):
        b, h, seq, d = case[:4]
        val = tuple(randn((b, h, seq, d), torch.bfloat16, i) for i in range(4))
    elif section == "fp8":
        b, h, seq, d = case[:4]
        val = fp8_inputs(b, h, seq, d, vt)
    elif section == "dec":
        b, hq, hk, seq, d, dt = case
        val = (randn((b, hq, 1, d), dt, 1), randn((b, hk, seq, d), dt, 2), randn((b, hk, seq, d), dt, 3))
    else:
        m, n, k = case
        val = (randn((m, k), torch.bfloat16, 1), randn((k, n), torch.bfloat16, 2))
    _INPUTS[key] = val
    return val


def make_fn(v: Variant):
    """The callable of one sweep variant."""
    from kernels import attention, decode, matmul
    from kernels._checks import sm_count

    p = v.params
    if v.section == "fwd":
        q, k, kk, _ = inputs("fwd", v.case)
        return partial(attention.attention_forward, q, k, kk, v.case[4], config=p["cfg"], use_tma=p["tma"])
    if v.section == "fp8":
        _, (q8, k8, v8, sq, sk, sv) = inputs("fp8", v.case, p["vt"])
        return partial(attention.attention_forward_fp8, q8, k8, v8, sq, sk, sv, v.case[4], config=p["cfg"],
                       use_tma=p["tma"])
    if v.section == "bwd":
        q, k, vv, do = inputs("bwd", v.case)
        causal = v.case[4]
        o, lse = attention.attention_forward(q, k, vv, causal, config=(128, 64, 4, 3), use_tma=False)
        return partial(attention.attention_backward, do, q, k, vv, o, lse, causal, configs=(p["dkdv"], p["dq"]),
                       use_tma=p["tma"])
    if v.section == "dec" and p.get("floor") == "copy":  # half of K and V read, half written: 67 MB moved
        _, k, vv = inputs("dec", v.case)
        src = torch.cat([k.flatten()[: k.numel() // 2], vv.flatten()[: vv.numel() // 2]])
        dst = torch.empty_like(src)
        return partial(dst.copy_, src)
    if v.section == "dec" and "floor" in p:
        _, k, vv = inputs("dec", v.case)
        return partial(decode.read_floor, k, vv, p["floor"], p["bn"], p["w"], p["s"])
    if v.section == "dec":
        q, k, vv = inputs("dec", v.case)
        b, _, hk, seq = v.case[:4]
        sms = sm_count(q.device, cpu_default=decode.NUM_SMS_DEFAULT)
        ns = decode.choose_splits(b, hk, seq, p["bn"], sms, waves=p["waves"]) if p["waves"] else 1
        return partial(decode.decode_attention, q, k, vv, num_splits=ns, block_n=p["bn"], num_warps=p["w"],
                       num_stages=p["s"], use_tma=p.get("tma", False), fused_combine=p.get("fused", False))
    a, bm = inputs("mm", v.case)
    if v.section == "mmk" and "rp" in p:  # the repack copy alone
        return partial(matmul.repack_rows, bm, p["rp"])
    if v.section == "mmk":
        from kernels.matmul_splitk import matmul_splitk, matmul_splitk_tma

        c = torch.empty((a.shape[0], bm.shape[1]), dtype=a.dtype, device=a.device)
        if "sktma" in p:
            return partial(matmul_splitk_tma, a, bm, c, p["sktma"])
        return partial(matmul_splitk, a, bm, c, sm_count(a.device, cpu_default=4), split=p["split"] or None,
                       config=p["cfg"], fused=p.get("fused"))
    pad = p.get("pad", "")
    n = bm.shape[1]
    wide = (n + 127) // 128 * 128 + (128 if n % 128 == 0 else 0)  # a 256-byte-aligned pitch wider than n
    if "b" in pad:
        bm = padded(bm, wide)
    out = padded(torch.empty((a.shape[0], n), dtype=a.dtype, device=a.device), wide) if "c" in pad else None
    if "ws" in p:
        return partial(matmul.matmul, a, bm, ws=p["ws"], out=out)
    return partial(matmul.matmul, a, bm, config=p["cfg"], use_tma=p.get("tma"), persistent=p.get("persistent", True),
                   out=out, misaligned_b=p.get("mb"), repack=p.get("rp"))


def flops_bytes(v: Variant) -> tuple[float, float]:
    if v.section in ("fwd", "bwd", "fp8"):
        b, h, seq, d, causal = v.case
        f = 4.0 * b * h * seq * seq * d * (0.5 if causal else 1.0)
        return (2.5 * f if v.section == "bwd" else f), 0.0
    if v.section == "dec":
        b, hq, hk, seq, d, _ = v.case
        return 4.0 * b * hq * seq * d, 2.0 * (2 * b * hk * seq * d + 2 * b * hq * d)
    m, n, k = v.case  # mm, mmk
    if "rp" in v.params and v.section == "mmk":  # repack alone: B read and written
        return 0.0, 4.0 * k * n
    return 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n)


_REFS: dict[tuple, Any] = {}


def reference(v: Variant):
    from kernels import reference as ref

    key = (v.section, v.case)
    if key not in _REFS:
        _REFS.clear()
        if v.section == "fwd":
            q, k, vv, _ = inputs("fwd", v.case)
            _REFS[key] = ref.sdpa(q, k, vv, v.case[4], "flash")
        elif v.section == "fp8":  # the fp32 attention of the unquantised bf16 inputs
            (q, k, vv), _ = inputs("fp8", v.case, v.params["vt"])
            _REFS[key] = ref.attention_fp32(q, k, vv, v.case[4])[0]
        elif v.section == "bwd":
            q, k, vv, do = inputs("bwd", v.case)
            qq, kk, vvv = (t.detach().clone().requires_grad_() for t in (q, k, vv))
            out = ref.sdpa(qq, kk, vvv, v.case[4], "flash")
            _REFS[key] = torch.autograd.grad(out, (qq, kk, vvv), do)
        elif v.section == "dec":
            q, k, vv = inputs("dec", v.case)
            _REFS[key] = ref.decode_fp32(q, k, vv)
        else:
            a, b = inputs("mm", v.case)
            _REFS[key] = a.float() @ b.float()
    return _REFS[key]


def check(v: Variant, result) -> float:
    from kernels.reference import rel_err

    if v.section == "mmk" and "rp" in v.params:
        return rel_err(result, inputs("mm", v.case)[1])
    if v.section == "dec" and "floor" in v.params:  # a sum of the caches, no reference: finite is enough
        return 0.0 if bool(torch.isfinite(result).all()) else float("inf")
    r = reference(v)
    if v.section in ("fwd", "fp8"):
        result = result[0]
    if v.section == "bwd":
        return max(rel_err(x, y) for x, y in zip(result, r, strict=True))
    return rel_err(result, r)


def bench(fn, graph: bool = False) -> float:
    import triton.testing as tt

    if DEVICE == "cpu":
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    if graph:
        return tt.do_bench_cudagraph(fn, rep=60, return_mode="median")
    return tt.do_bench(fn, warmup=20, rep=60, return_mode="median")


def rounds_in_turns(fns: dict, rounds: int, timer=None, on_error=None) -> dict:
    """Time each of ``fns`` (name -> callable) once a round, in the given order in even rounds and reversed in odd
    ones (so no variant always follows the same one), over ``rounds`` rounds; each name's times in round order.
    ``timer`` (default graph-timed :func:`bench`) returns a time; ``on_error(name, exc)`` is told of a failed timing
    (default: raise), which is then left out (a name that never timed is left out)."""
    timer = timer or (lambda fn: bench(fn, graph=True))
    times: dict = {}
    for rnd in range(rounds):
        for name, fn in (list(fns.items()) if rnd % 2 == 0 else list(reversed(fns.items()))):
            try:
                t = timer(fn)
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(name, exc)
                continue
            times.setdefault(name, []).append(t)
    return times


def in_turns(fns: dict, rounds: int, timer=None, on_error=None) -> dict:
    """:func:`rounds_in_turns`' lowest time of each name (ms with the default timer)."""
    return {name: min(ts) for name, ts in rounds_in_turns(fns, rounds, timer, on_error).items()}


def dry_setup() -> None:
    """CPU interpreter, tiny shapes: exercises the script, not the kernels' speed."""
    global DEVICE, FWD_SHAPE, MM_SHAPES, MM_SMALL_SHAPES, FINAL_FWD, FINAL_FP8, FINAL_BWD, FINAL_DEC, FINAL_MM
    os.environ["TRITON_INTERPRET"] = "1"
    DEVICE = "cpu"
    FWD_SHAPE = (1, 2, 40)
    MM_SHAPES, MM_SMALL_SHAPES = [(40, 48, 56)], [(3, 40, 32)]
    FINAL_FWD, FINAL_FP8, FINAL_BWD = [(64, 48, 1), (80, 40, 1)], [(64, 40, 1)], [(64, 48, 1)]
    FINAL_DEC, FINAL_MM = [(1, 2, 2, 100, 64, torch.float16)], [(40, 24, 32)]
    DEC_SHAPES[:] = [(1, 4, 2, 70, 128, torch.float16)]
    for key in list(FWD_D)[1:]:
        del FWD_D[key]
    for key in FWD_D:
        FWD_D[key] = FWD_D[key][:1]
    MM[:] = [(32, 32, 16, 2, 4, 1, 0, False), (32, 32, 16, 2, 4, 1, 2, True)]
    MM_SMALL[:] = [(16, 32, 16, 1, 4, 1, 2, False)]
    MM_PAD_CFGS[:] = MM[:1]
    MM_MISALIGNED.update(ptr=[(32, 32, 16, 2, 4, 1, 0, False)], repack=[(32, 32, 16, 2, 4, 1, 0, True)])
    MM_SKTMA_SHAPES[:] = [(40, 48, 56)]
    MM_WS_ALIGNED[:] = [(64, 64, 64)]
    del DEC_S8[3:], DEC_FLOOR[1:]
    MM_SKTMA[:] = [(1, 32, 16, 4, 1, True), (2, 32, 16, 4, 1, False)]
    MM_SKTMA_BASE[:] = MM_SMALL[:1]
    del MM_REPACK[2:], MM_REPACK_GEMM[1:]
    del DEC[2:], DKDV[1:], DQ[2:], FP8[1:], MMK[2:], MM_PAD[1:]
