"""Host side of the fused FlashAttention backward (kernels in ``kernels/_attn_bwd_fused.py``).

Three launches: delta pre-pass (which also zeroes the fp32 dQ scratch), the fused dK/dV/dQ kernel (5 MMAs
per tile pair, dQ accumulated with atomics or TMA reduce-adds), and the dQ post-pass (scale and cast).
**dq is not bitwise deterministic** on this path (atomics); ``attention_backward(..., impl="triton")`` keeps
the deterministic 2-kernel scheme.  Inputs are validated and outputs allocated by
``kernels.attention.attention_backward``; :func:`fused_backward` only launches.
"""

from __future__ import annotations

import torch
import triton

from kernels._attn_bwd_fused import _attn_bwd_fused, _bwd_pre_fused, _dq_post
from kernels._checks import (
    INTERPRET_CONFIG,
    LOG2E,
    AttnDims,
    cdiv,
    interpreting,
    launch,
    layout_strides,
    length_bucket,
    padded_dim,
    table_for,
)

# (BLOCK_M, BLOCK_N, num_warps, num_stages, USE_TMA, DQ_TMA): USE_TMA loads Q/dO/K/V through tensor
# descriptors; DQ_TMA adds the dQ partials with TMA bulk reduce-adds (the two are independent; call 1 measured
# TMA loads slower here and TMA reduce-adds faster than pointer atomics).  Entries with either flag are skipped
# when the inputs are not TMA-eligible, so every list keeps a pointer entry.
FUSED_CONFIGS: dict[int, list[tuple]] = {
    64: [(64, 64, 4, 3, False, True), (64, 64, 4, 3, True, True), (64, 128, 8, 3, False, True),
         (64, 128, 8, 3, False, False)],
    128: [(64, 128, 8, 3, False, True), (64, 128, 8, 2, False, True), (64, 128, 8, 3, False, False),
          (64, 128, 8, 3, True, True)],
    256: [(32, 64, 4, 2, False, False), (32, 32, 4, 2, False, False)],
}
STAGGER = True  # rotate each program's q-block order (see _attn_bwd_fused's docstring)
_KEYS = ["TUNE_KEY", "TMA_OK", "HEAD_DIM", "CAUSAL", "STAGGER"]
_PRE_BM = 64


def _to_config(c: tuple) -> triton.Config:
    return triton.Config({"BLOCK_M": c[0], "BLOCK_N": c[1], "USE_TMA": bool(c[4]), "DQ_TMA": bool(c[5])},
                         num_warps=c[2], num_stages=c[3])


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    d = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
    tma = bool(named_args.get("TMA_OK", kwargs.get("TMA_OK")))
    kept = [_to_config(c) for c in table_for(FUSED_CONFIGS, d) if tma or not (c[4] or c[5])]
    return kept or [_to_config((64, 64, 4, 2, False, False))]


# reset_to_zero: each timed candidate adds into the scratch, so the autotuner zeroes it before every
# candidate and once more before the real launch.
_fused_tuned = triton.autotune(
    [_to_config(c) for c in sorted({c for cs in FUSED_CONFIGS.values() for c in cs})], key=_KEYS,
    prune_configs_by={"early_config_prune": _prune}, reset_to_zero=["DQACC"], cache_results=True)(_attn_bwd_fused)


def fused_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, dims: AttnDims,
                   layout: str, causal: bool, scale: float, eligible: bool, *, config: tuple | None = None,
                   use_tma: bool | None = None, stagger: bool = STAGGER, skip_dq: bool = False) -> None:
    """Write dq, dk, dv (checked, preallocated, non-empty problem) through the fused kernel.

    ``eligible``: the inputs may be read through tensor descriptors.  ``config`` = (BLOCK_M, BLOCK_N,
    num_warps, num_stages[, USE_TMA, DQ_TMA]) bypasses the autotuner; without the flags, both follow
    ``use_tma`` (default: ``eligible``).  ``use_tma=False`` restricts the autotuner to pointer entries.
    ``skip_dq`` (with ``config``; a timing diagnostic, dq comes out zero) leaves out the dQ product and its adds.
    """
    delta = torch.empty_like(lse)
    dq_acc = torch.empty((dims.batch * dims.heads_q, dims.len_q, dims.head_dim), dtype=torch.float32,
                         device=q.device)
    block_d = padded_dim(dims.head_dim)
    _bwd_pre_fused[(cdiv(dims.len_q, _PRE_BM), dims.batch * dims.heads_q)](
        out, do, delta, dq_acc, *layout_strides(out, layout), *layout_strides(do, layout), dims.heads_q,
        dims.len_q, HEAD_DIM=dims.head_dim, BLOCK_D=block_d, BLOCK_M=_PRE_BM)
    tma_ok_arg = int(eligible if use_tma is None else use_tma)
    args = (q, k, v, do, lse, delta, dk, dv, dq_acc,
            *(x for t in (q, k, v, do, dk, dv) for x in layout_strides(t, layout)),
            dims.heads_q, dims.heads_kv, dims.group, dims.len_q, dims.len_k, scale * LOG2E, scale,
            length_bucket(max(dims.len_q, dims.len_k)), tma_ok_arg)
    interp = interpreting()
    consts = {"HEAD_DIM": dims.head_dim, "BLOCK_D": block_d, "CAUSAL": bool(causal), "STAGGER": bool(stagger),
              "DOT_F32": interp}
    if config is None and interp:  # launch() would pick it too, but a fixed config needs DQ_TMA / DQ_SKIP below
        config = INTERPRET_CONFIG
    load_tma = dq_tma = bool(tma_ok_arg)
    if config is not None:  # its own (USE_TMA, DQ_TMA) when given, else both follow TMA_OK
        if len(config) >= 6:
            load_tma, dq_tma = bool(config[4]), bool(config[5])
        consts.update(DQ_TMA=dq_tma, DQ_SKIP=skip_dq)
    launch(_fused_tuned, _attn_bwd_fused, lambda bm, bn: (cdiv(dims.len_k, bn), dims.batch * dims.heads_kv),
           args, consts, config, load_tma)
    _dq_post[(cdiv(dims.len_q, _PRE_BM), dims.batch * dims.heads_q)](
        dq_acc, dq, *layout_strides(dq, layout), dims.heads_q, dims.len_q, scale, HEAD_DIM=dims.head_dim,
        BLOCK_D=block_d, BLOCK_M=_PRE_BM)
