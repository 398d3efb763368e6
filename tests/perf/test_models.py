"""A real model in the suite: a small, randomly initialised transformers Llama (no download, seeded).

Prefill and one decode step with a KV cache, attention through SDPA, with the structure declared:
no layout copies (grouped-query attention handled inside SDPA), no math fallback, no host sync.
The known-bad variant is the same model with ``attn_implementation="eager"``: its ``repeat_kv``
and ``.transpose(1, 2).contiguous()`` copies must be flagged, and the evidence names the line of
transformers' ``modeling_llama.py`` that made them (the annotation stays at this file's line).

Skipped when transformers is not installed. CPU mode: 2 layers, hidden 64, 32 tokens (a few
seconds); on a GPU: 4 layers, hidden 2048, 4 x 512 tokens, bf16.
"""

from __future__ import annotations

import pytest
import torch

from tests.perf.shapes import DEVICE, GPU, pick

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")

SIZES = pick(
    {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 4,
     "num_attention_heads": 16, "num_key_value_heads": 4, "max_position_embeddings": 4096},
    {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256},
)
BATCH, PROMPT = pick((4, 512), (1, 32))
DTYPE = torch.bfloat16 if GPU else torch.float32
STEPS = ("prefill", "decode")
MAX_TIME_S = pick(5.0, 1.0)  # CPU mode: host times are reported, never gated; keep the suite quick


def _model(attn_implementation: str):
    # one config per model: from_config records the attention implementation on the config it gets
    config = transformers.LlamaConfig(**SIZES)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    return model.to(device=DEVICE, dtype=DTYPE).eval()


def _step(attn_implementation: str, step: str):
    """The callable for one step and the tokens it processes. Decode runs one token on a KV cache
    that holds the prompt, and trims the cache back after each call, so every call is the same step."""
    model = _model(attn_implementation)
    prompt = torch.randint(0, SIZES["vocab_size"], (BATCH, PROMPT), device=DEVICE)

    def prefill():
        with torch.no_grad():
            return model(prompt, use_cache=True).logits

    if step == "prefill":
        return prefill, BATCH * PROMPT, model
    with torch.no_grad():
        out = model(prompt, use_cache=True)
    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)

    def decode():
        with torch.no_grad():
            logits = model(token, past_key_values=cache, use_cache=True).logits
        cache.crop(-1)  # drop the token just added (a view: no kernel)
        return logits

    return decode, BATCH, model


def _flops(model, tokens: int) -> int:
    return 2 * tokens * sum(p.numel() for p in model.parameters())


@pytest.mark.perf(max_time=MAX_TIME_S)
@pytest.mark.parametrize("step", STEPS)
def test_llama_sdpa(perf, step):
    fn, tokens, model = _step("sdpa", step)
    perf.flops = _flops(model, tokens)
    perf.forbid("transpose", "math_sdpa", "sync")
    out = perf(fn)
    assert out.shape[:2] == (BATCH, PROMPT if step == "prefill" else 1)


@pytest.mark.perf(known_bad=["transpose"], max_time=MAX_TIME_S)
@pytest.mark.parametrize("step", STEPS)
def test_llama_eager_attention_is_flagged(perf, step):
    """attn_implementation="eager": repeat_kv copies K/V per query head and the output is transposed
    back with .contiguous(); perfci must flag the layout copies (the test passes when it does)."""
    fn, tokens, model = _step("eager", step)
    perf.flops = _flops(model, tokens)
    perf(fn)
