"""The trial harness: tiny random transformers models of every
architecture trellis.torch converts (docs/Python.md's table), each
converted from the module alone and trained against PyTorch: one-step
gradients, losses and every parameter after 3 AdamW steps (the
parameters against a float64 run too), and dp=2 and tp=2 (ep=2 for a
mixture of experts) as one rank. The architectures it refuses are
refused with the reason in words."""

from typing import Any, Callable, Dict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trellis  # noqa: E402
from parity import (TINY, convert, expect_trains_like_pytorch,  # noqa: E402
                    trained_scale)

VOCAB = 128
#: The Llama family's fields, for every model type that reads them.
COMMON = dict(TINY, pad_token_id=0, bos_token_id=0, eos_token_id=0)
GPT_J = dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
             n_positions=64, bos_token_id=0, eos_token_id=0)
MOE = dict(num_experts=8, num_local_experts=8, n_routed_experts=8,
           num_experts_per_tok=2, moe_intermediate_size=24,
           first_k_dense_replace=0)


def without(fields: Dict[str, Any], *names: str) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in names}


#: Model type -> its config's fields (besides eager attention, no cache).
ARCHITECTURES: Dict[str, Callable[[], Dict[str, Any]]] = {
    "gpt2": lambda: dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                         n_positions=64, bos_token_id=0, eos_token_id=0),
    "llama": lambda: COMMON,
    "mistral": lambda: dict(COMMON, sliding_window=6),
    "qwen2": lambda: COMMON,
    "qwen3": lambda: COMMON,
    "gemma": lambda: COMMON,
    "gemma2": lambda: dict(COMMON, sliding_window=6,
                           attn_logit_softcapping=0.5,
                           final_logit_softcapping=2.0,
                           query_pre_attn_scalar=8),
    "gemma3_text": lambda: dict(COMMON, sliding_window=6,
                                query_pre_attn_scalar=8),
    "olmo": lambda: COMMON,
    "olmo2": lambda: COMMON,
    "phi3": lambda: COMMON,
    "stablelm": lambda: without(COMMON, "head_dim"),
    "gpt_neox": lambda: without(COMMON, "head_dim", "num_key_value_heads"),
    "falcon": lambda: dict(without(COMMON, "head_dim", "num_key_value_heads",
                                   "intermediate_size")),
    "opt": lambda: dict(vocab_size=VOCAB, hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=4,
                        ffn_dim=48, max_position_embeddings=64,
                        word_embed_proj_dim=32, pad_token_id=0,
                        bos_token_id=0, eos_token_id=0),
    "gptj": lambda: GPT_J,
    "codegen": lambda: dict(GPT_J, n_ctx=64),
    "cohere": lambda: without(COMMON, "head_dim"),
    "helium": lambda: COMMON,
    "glm": lambda: COMMON,
    "glm4": lambda: COMMON,
    "ernie4_5": lambda: COMMON,
    "nemotron": lambda: COMMON,
    "persimmon": lambda: without(COMMON, "head_dim", "num_key_value_heads"),
    "deepseek_v2": lambda: dict(
        without(COMMON, "head_dim"), num_key_value_heads=4, **MOE,
        kv_lora_rank=12, q_lora_rank=None, qk_rope_head_dim=4,
        qk_nope_head_dim=8, v_head_dim=8, routed_scaling_factor=1.5,
        n_shared_experts=1),
    "deepseek_v3": lambda: dict(
        without(COMMON, "head_dim"), num_key_value_heads=4, q_lora_rank=16,
        kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
        v_head_dim=6, **MOE, n_group=4, topk_group=2, n_shared_experts=1),
    "mixtral": lambda: dict(COMMON, **MOE),
    "qwen2_moe": lambda: dict(COMMON, **MOE,
                              shared_expert_intermediate_size=40),
    "qwen3_moe": lambda: dict(COMMON, **MOE),
    "olmoe": lambda: dict(COMMON, **MOE),
    "minimax_m2": lambda: dict(COMMON, **MOE, rotary_dim=8),
    "hunyuan_v1_moe": lambda: dict(COMMON, **without(MOE, "num_experts_per_tok"),
                                   moe_topk=2),
    "glm4_moe": lambda: dict(COMMON, **MOE, n_group=2, topk_group=1,
                             routed_scaling_factor=1.8, n_shared_experts=1),
    "ernie4_5_moe": lambda: dict(COMMON, **MOE, moe_num_shared_experts=1),
    "cohere2_moe": lambda: dict(COMMON, **MOE, expert_selection_fn="sigmoid"),
    "granitemoe": lambda: dict(COMMON, **MOE),
    "dots1": lambda: dict(COMMON, **MOE, n_shared_experts=1),
    # Attention sinks, alternating sliding windows, YaRN's rotary, experts
    # with biases and a clamped SwiGLU of alternating gate and up columns.
    # (A limit of 0.5 clamps about half the gate and up values.)
    "gpt_oss": lambda: dict(COMMON, **MOE, sliding_window=6, swiglu_limit=0.5),
    # ALiBi on heads merged into the batch (baddbmm, bmm).
    "bloom": lambda: dict(vocab_size=VOCAB, hidden_size=32, n_layer=2,
                          n_head=4),
}

#: Model types whose rotary embedding pairs (2i, 2i + 1).
INTERLEAVED = {"gptj", "codegen", "cohere", "helium", "glm", "glm4",
               "ernie4_5", "ernie4_5_moe", "cohere2_moe", "deepseek_v2"}

#: Model type -> the reason trellis.torch gives when it refuses it.
REFUSED = {
    "phimoe": "weights them otherwise than the chosen scores",
}


def build(kind: str, fields: Dict[str, Any]) -> "torch.nn.Module":
    config = transformers.AutoConfig.for_model(
        kind, **fields, attn_implementation="eager", use_cache=False)
    torch.manual_seed(0)
    module = transformers.AutoModelForCausalLM.from_config(config)
    return trained_scale(module, fields.get("num_experts", 0))


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_architecture_trains_as_pytorch(kind: str) -> None:
    fields = ARCHITECTURES[kind]()
    module = build(kind, fields)
    converted = convert(module)
    if kind in INTERLEAVED:
        assert "interleaved" in converted.mlir()
    if kind == "bloom":
        assert "slopes" in converted.mlir()
    meshes = ["dp=2", "tp=2"] + (["ep=2"] if "num_experts" in fields else [])
    expect_trains_like_pytorch(module, converted, kind, VOCAB, meshes)


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_architecture_refused_with_its_reason(kind: str) -> None:
    module = build(kind, dict(COMMON, **MOE))
    with pytest.raises(trellis.Error) as refused:
        convert(module)
    assert REFUSED[kind] in str(refused.value)
