"""trellis.torch: GPT-2 and Llama (transformers, tiny configs, eager
attention) made three ways (config importer, graph builder, PyTorch
frontend) give one loss, PyTorch's, and train alike on every mesh."""

import json
import os
from typing import Any, Optional

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trellis  # noqa: E402
import trellis.torch as trellis_torch  # noqa: E402
import transformer_graphs  # noqa: E402
from conftest import ROOT, batches  # noqa: E402

BATCH, SEQ, STEPS = 4, 16, 3
EPSILON = 1e-4


def config(kind: str) -> dict:
    """The tiny config of `kind`: gpt2, llama, or the Llama family's mistral
    (no sliding window), qwen2 (query, key and value biases) and qwen3
    (each head's query and key normalized; heads of 32, so that the
    attention is wider than the hidden size)."""
    name = "gpt2-tiny.json" if kind == "gpt2" else "llama-tiny.json"
    with open(os.path.join(ROOT, "examples", "configs", name)) as file:
        fields = json.load(file)
    if kind == "mistral":
        fields.update(model_type="mistral",
                      architectures=["MistralForCausalLM"],
                      sliding_window=None)
    elif kind == "qwen2":
        fields.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                      use_sliding_window=False)
    elif kind == "mistral_window":
        # A window of 6 positions over sequences of 16.
        fields.update(model_type="mistral",
                      architectures=["MistralForCausalLM"], sliding_window=6)
    elif kind == "qwen2_window":
        # The window on the layers from max_window_layers on: layer 1.
        fields.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                      use_sliding_window=True, sliding_window=6,
                      max_window_layers=1)
    elif kind == "qwen3":
        fields.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                      use_sliding_window=False, head_dim=32)
    elif kind == "gemma":
        # RMSNorms scaling by 1 + weight, embeddings times sqrt(64), the
        # tanh GELU, heads of 16, the table tied to the head.
        fields.pop("hidden_act")
        fields.update(model_type="gemma", architectures=["GemmaForCausalLM"],
                      hidden_act="gelu_pytorch_tanh", head_dim=16,
                      tie_word_embeddings=True)
    elif kind == "gemma2":
        # Gemma's, with norms around both branches, soft caps small enough
        # to bend the tiny model's scores and logits, a window of 6 on the
        # even layers, and a query scale of its own.
        fields.pop("hidden_act")
        fields.update(model_type="gemma2",
                      architectures=["Gemma2ForCausalLM"],
                      hidden_activation="gelu_pytorch_tanh", head_dim=16,
                      tie_word_embeddings=True, query_pre_attn_scalar=24,
                      sliding_window=6, attn_logit_softcapping=0.5,
                      final_logit_softcapping=2.0)
    elif kind == "gemma3":
        # Gemma 2's layout with each head's query and key RMS-normalized,
        # no soft caps, a window of 6 on layer 0, and a rotary base per
        # layer kind: 10^4 on the sliding layer, 10^6 scaled linearly by 2
        # on the global one.
        fields.pop("hidden_act")
        fields.pop("rope_theta", None)
        fields.update(model_type="gemma3_text",
                      architectures=["Gemma3ForCausalLM"],
                      hidden_activation="gelu_pytorch_tanh", head_dim=16,
                      tie_word_embeddings=True, query_pre_attn_scalar=24,
                      sliding_window=6,
                      layer_types=["sliding_attention", "full_attention"],
                      rope_parameters={
                          "sliding_attention": {"rope_type": "default",
                                                "rope_theta": 10000.0},
                          "full_attention": {"rope_type": "linear",
                                             "rope_theta": 1000000.0,
                                             "factor": 2.0}})
    elif kind.startswith("phi3"):
        # Fused qkv_proj and gate_up_proj; LongRoPE's factors per pair, the
        # short ones for sequences within the original 64 positions, the
        # long ones past 8, cos and sin times sqrt(1 + ln(128 / 8) / ln 8).
        fields.pop("rope_theta", None)
        original = 8 if kind == "phi3_long" else 64
        fields.update(model_type="phi3", architectures=["Phi3ForCausalLM"],
                      rope_parameters={
                          "rope_type": "longrope", "rope_theta": 10000.0,
                          "short_factor": [1.0 + 0.25 * i for i in range(8)],
                          "long_factor": [2.0 + 0.5 * i for i in range(8)],
                          "original_max_position_embeddings": original},
                      original_max_position_embeddings=original)
    elif kind == "gpt_oss":
        # Attention sinks and biases on all four projections, a window of 6
        # on the even layers, YaRN (truncate false), and 4 experts with
        # biases, gate and up in alternating columns, a SwiGLU clamped at
        # 0.05 (weights of 0.02 give projections of about 0.15: most clamp).
        fields.pop("rope_theta", None)
        fields.pop("hidden_act", None)
        fields.update(model_type="gpt_oss", architectures=["GptOssForCausalLM"],
                      num_local_experts=4, num_experts_per_tok=2,
                      sliding_window=6, swiglu_limit=0.05, head_dim=16,
                      rope_parameters={
                          "rope_type": "yarn", "rope_theta": 10000.0,
                          "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                          "truncate": False,
                          "original_max_position_embeddings": 8})
    elif kind == "olmo2":
        # Each branch's output normalized (not its input), the whole query
        # and key projections RMS-normalized.
        fields.update(model_type="olmo2", architectures=["Olmo2ForCausalLM"])
    elif kind == "qwen2_yarn":
        # YaRN: frequencies blended over the pairs, cos and sin scaled by
        # 0.1 ln 4 + 1.
        fields.pop("rope_theta", None)
        fields.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                      use_sliding_window=False, rope_parameters={
                          "rope_type": "yarn", "rope_theta": 10000.0,
                          "factor": 4.0,
                          "original_max_position_embeddings": 8})
    return fields


def causal_lm(kind: str, **fields: Any) -> "torch.nn.Module":
    """Hugging Face's model of `kind` for `fields`."""
    classes = {
        "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config),
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
        "mistral": (transformers.MistralForCausalLM,
                    transformers.MistralConfig),
        "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
        "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config),
        "olmo2": (transformers.Olmo2ForCausalLM, transformers.Olmo2Config),
        "phi3": (transformers.Phi3ForCausalLM, transformers.Phi3Config),
        "gpt_oss": (transformers.GptOssForCausalLM,
                    transformers.GptOssConfig),
        "gemma": (transformers.GemmaForCausalLM, transformers.GemmaConfig),
        "gemma2": (transformers.Gemma2ForCausalLM, transformers.Gemma2Config),
        "gemma3": (transformers.Gemma3ForCausalLM,
                   transformers.Gemma3TextConfig),
    }
    model, settings = classes[kind.removesuffix("_window").removesuffix(
        "_yarn").removesuffix("_long")]
    return model(settings(**fields))


def hugging_face(kind: str) -> "torch.nn.Module":
    torch.manual_seed(0)
    fields = dict(config(kind), attn_implementation="eager", bos_token_id=0,
                  eos_token_id=0)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**fields))
    else:
        model = transformers.LlamaForCausalLM(
            transformers.LlamaConfig(**fields))
    return model.eval()


def three_ways(kind: str, module: "torch.nn.Module", rows: int) -> dict:
    """The model from its config, built op by op, and from PyTorch, each
    with a forward of `rows` rows (one micro-batch)."""
    example = (torch.zeros(rows, SEQ, dtype=torch.long),) * 2
    build = transformer_graphs.gpt2 if kind == "gpt2" else transformer_graphs.llama
    return {
        "importer": trellis.Model.from_config(config(kind)),
        "builder": build(config(kind), rows, SEQ),
        "torch": trellis_torch.from_module(module, example),
    }


def torch_losses(module: "torch.nn.Module", data: list,
                 optimizer: Any = None, clip: Optional[float] = None,
                 norms: Optional[list] = None) -> list:
    """PyTorch's own training: the same losses Trellis's AdamW steps give
    (AdamW without decay unless another optimizer is given; gradients
    clipped to a global norm of `clip` when given, the norms before
    clipping appended to `norms`). The module stays as it is (evaluation
    mode: no dropout, as plans have none) and returns logits or an output
    holding them."""
    if optimizer is None:
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3,
                                      betas=(0.9, 0.999), eps=1e-8,
                                      weight_decay=0.0)
    losses = []
    for tokens, targets in data:
        output = module(torch.as_tensor(tokens, dtype=torch.long))
        # transformers' models return an output with logits, others logits.
        logits = getattr(output, "logits", output)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), torch.as_tensor(targets,
                                                  dtype=torch.long).flatten())
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
            if norms is not None:
                norms.append(float(norm))
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_three_ways_equal_pytorch(kind: str) -> None:
    module = hugging_face(kind)
    data = batches(256, BATCH, SEQ, STEPS)
    models = three_ways(kind, module, BATCH)
    weights = models["torch"].weights
    results = {}
    for way, model in models.items():
        plan = trellis.compile(model, batch=BATCH, seq=SEQ)
        with trellis.Session(plan, weights=weights) as session:
            results[way] = [session.step(*b) for b in data]
    expected = torch_losses(module, data)
    for way, losses in results.items():
        np.testing.assert_allclose(losses, results["importer"], rtol=1e-6,
                                   err_msg=way)
        np.testing.assert_allclose(losses, expected, rtol=1e-5, err_msg=way)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_three_ways_train_on_meshes(kind: str) -> None:
    module = hugging_face(kind)
    data = batches(256, BATCH, SEQ, STEPS, seed=1)
    layouts = [(None, 1), ("dp=2", 1), ("tp=2", 1), ("pp=2", 2)]
    for rows in (BATCH, BATCH // 2):
        models = three_ways(kind, module, rows)
        weights = models["torch"].weights
        for way, model in models.items():
            reference = None
            for mesh, microbatches in layouts:
                if BATCH // microbatches != rows:
                    continue
                plan = trellis.compile(model, batch=BATCH, seq=SEQ, mesh=mesh,
                                       microbatches=microbatches)
                losses = trellis.launch(plan, batches=data, weights=weights)[0]
                if reference is None:
                    reference = losses
                np.testing.assert_allclose(losses, reference, rtol=1e-5,
                                           err_msg=f"{way} {mesh}")


def test_grouped_query_heads_stay_grouped() -> None:
    """transformers' repeat_kv (traced as unsqueeze, expand, a contiguous
    clone and _unsafe_view) is undone: graph.attention reads Llama's 2 kv
    heads, not 4 copies of them."""
    model = trellis_torch.from_module(
        hugging_face("llama"), (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    lines = [line for line in model.mlir().splitlines()
             if "graph.attention " in line]
    assert len(lines) == 2
    for line in lines:
        assert line.endswith(f"tensor<{BATCH}x{SEQ}x4x16xf32>, "
                             f"tensor<{BATCH}x{SEQ}x2x16xf32>"), line


@pytest.mark.parametrize("kind", ["gpt2", "llama", "mistral_window"])
def test_default_attention_converts(kind: str) -> None:
    """transformers' default attention (scaled_dot_product_attention with a
    boolean causal mask, or Mistral's sliding-window one) converts and
    equals PyTorch."""
    torch.manual_seed(0)
    fields = dict(config(kind), bos_token_id=0, eos_token_id=0)
    module = causal_lm(kind, **fields).eval()
    assert module.config._attn_implementation == "sdpa"
    model = trellis_torch.from_module(
        module, (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    mlir = model.mlir()
    assert "graph.attention" in mlir and "causal = false" not in mlir
    assert ("window = 6 : i64" in mlir) == (kind == "mistral_window")
    data = batches(256, BATCH, SEQ, STEPS, seed=4)
    plan = trellis.compile(model, batch=BATCH, seq=SEQ)
    with trellis.Session(plan, weights=model.weights) as session:
        losses = [session.step(*b) for b in data]
    np.testing.assert_allclose(losses, torch_losses(module, data), rtol=1e-5)


def trained_torch_parameters(module: "torch.nn.Module", data: list,
                             decay: float, clip: Optional[float] = None,
                             norms: Optional[list] = None,
                             losses: Optional[list] = None) -> dict:
    """PyTorch's parameters after AdamW steps with the README's decay
    groups: tensors of 2+ dimensions decayed, biases and gains not (the
    steps' losses appended to `losses` when given)."""
    groups = [
        {"params": [p for p in module.parameters() if p.dim() >= 2],
         "weight_decay": decay},
        {"params": [p for p in module.parameters() if p.dim() < 2],
         "weight_decay": 0.0},
    ]
    found = torch_losses(module, data, torch.optim.AdamW(
        groups, lr=1e-3, betas=(0.9, 0.999), eps=EPSILON), clip, norms)
    if losses is not None:
        losses.extend(found)
    return {name: p.detach().numpy() for name, p in module.state_dict().items()}


@pytest.mark.parametrize("kind", ["gpt2", "llama", "mistral", "qwen2",
                                  "qwen3", "mistral_window", "qwen2_window",
                                  "qwen2_yarn", "olmo2", "phi3", "phi3_long",
                                  "gpt_oss", "gemma", "gemma2", "gemma3"])
def test_trained_parameters_equal_pytorch(kind: str) -> None:
    """Every parameter after 3 AdamW steps with weight decay equals
    PyTorch's, not only the losses: GPT-2's fused QKV bias is a 1-D bias
    (not decayed), Llama's padding row (pad_token_id 0, in every batch)
    gets no gradient, Mistral builds as Llama without a window and with
    one shorter than the sequence (Qwen2's on the layers it names), Qwen2's
    query, key and value biases and Qwen3's query and key norms train, as
    do Gemma's norms (1 + weight) and scaled embeddings, Gemma 2's norms
    around both branches, soft caps and windows, Gemma 3's query and key
    norms and rotary base per layer kind (linear scaling on the global
    layers), YaRN's rotary scaling, OLMo 2's output norms and
    normalized projections, Phi-3's fused projections and LongRoPE
    (its short factors, and its long ones past the original positions),
    and GPT-OSS's sinks, biases, windows, YaRN and clamped experts, from
    the config importer and from the module alike.
    AdamW's epsilon is 1e-4: at 1e-8 its division turns the roundoff of a
    near-zero gradient into a visible step (zero.test says more)."""
    fields = dict(config(kind), pad_token_id=0)
    torch.manual_seed(0)
    module = causal_lm(kind, **fields, attn_implementation="eager")
    # Biases and the padding row start away from zero (Hugging Face zeros
    # them), so that decaying them or moving the row would show.
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.02)
    data = batches(256, BATCH, SEQ, STEPS, seed=2)
    for tokens, _ in data:
        tokens[:, ::5] = 0
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module.eval(), example)
    weights = converted.weights
    ways = {"importer": trellis.Model.from_config(fields), "torch": converted}
    found = {}
    for way, model in ways.items():
        plan = trellis.compile(model, batch=BATCH, seq=SEQ, weight_decay=0.1,
                               adam_eps=EPSILON)
        with trellis.Session(plan, weights=weights) as session:
            for tokens, targets in data:
                session.step(tokens, targets)
            found[way] = session.state_dict()
    expected = trained_torch_parameters(module, data, decay=0.1)
    for way, parameters in found.items():
        for name, value in parameters.items():
            np.testing.assert_allclose(value, expected[name], rtol=1e-5,
                                       atol=1e-6, err_msg=f"{way} {name}")
    if kind == "llama":
        start = weights["model.embed_tokens.weight"][0]
        # The row moved by weight decay alone (an AdamW step moves by lr).
        np.testing.assert_allclose(
            found["importer"]["model.embed_tokens.weight"][0],
            start * (1 - 1e-3 * 0.1) ** STEPS, rtol=1e-6)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_clipped_training_equals_pytorch(kind: str) -> None:
    """--clip-grad: 3 AdamW steps with the global gradient norm clipped on
    every step (norms of 0.04 and more, the limit 0.01) equal PyTorch's
    clip_grad_norm_ then AdamW, GPT-2's tied table counted once; the
    session reports the norms clip_grad_norm_ returns."""
    torch.manual_seed(0)
    module = hugging_face(kind)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.02)
    data = batches(256, BATCH, SEQ, STEPS, seed=5)
    model = trellis_torch.from_module(
        module.eval(), (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    plan = trellis.compile(model, batch=BATCH, seq=SEQ, adam_eps=EPSILON,
                           clip_grad=0.01)
    norms = []
    with trellis.Session(plan, weights=model.weights) as session:
        assert session.grad_norm is None and session.metrics == {}
        for tokens, targets in data:
            session.step(tokens, targets)
            norms.append(session.grad_norm)
            # The same norm among the metrics the plan declares.
            assert session.metrics["grad_norm"].shape == ()
            assert float(session.metrics["grad_norm"]) == norms[-1]
        assert session.learning_rate is None
        found = session.state_dict()
    torch_norms = []
    expected = trained_torch_parameters(module, data, decay=0.0, clip=0.01,
                                        norms=torch_norms)
    assert min(torch_norms) > 0.01
    # Within 1e-6 (measured here: norms 2.2e-7, parameters 6e-8).
    np.testing.assert_allclose(norms, torch_norms, rtol=1e-6)
    for name, value in found.items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6,
                                   atol=1e-7, err_msg=name)


def cosine_rate(step: int, peak: float, minimum: float, warmup: int,
                decay: int) -> float:
    """Warmup then cosine decay, as Megatron and Hugging Face define it
    (step from 1)."""
    if step <= warmup:
        return peak * step / warmup
    ratio = min(max((step - warmup) / (decay - warmup), 0.0), 1.0)
    return minimum + (peak - minimum) * 0.5 * (1 + np.cos(np.pi * ratio))


def test_lr_schedule_equals_pytorch() -> None:
    """--lr-schedule cosine: 8 AdamW steps (2 of warmup, decay ending at
    step 6, then the minimum) equal torch AdamW under a LambdaLR of the same
    formula, losses and every parameter."""
    module = hugging_face("llama")
    data = batches(256, BATCH, SEQ, 8, seed=5)
    model = trellis_torch.from_module(
        module, (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    peak, minimum, warmup, decay = 1e-3, 1e-4, 2, 6
    plan = trellis.compile(model, batch=BATCH, seq=SEQ, adam_eps=EPSILON,
                           lr=peak, lr_schedule="cosine", warmup_steps=warmup,
                           decay_steps=decay, min_lr=minimum)
    with trellis.Session(plan, weights=model.weights) as session:
        losses, rates = [], []
        for batch in data:
            losses.append(session.step(*batch))
            rates.append(session.learning_rate)
        found = session.state_dict()
    np.testing.assert_allclose(
        rates, [cosine_rate(step, peak, minimum, warmup, decay)
                for step in range(1, len(data) + 1)], rtol=1e-12)
    optimizer = torch.optim.AdamW(module.parameters(), lr=peak,
                                  betas=(0.9, 0.999), eps=EPSILON,
                                  weight_decay=0.0)
    # LambdaLR's factor k applies to the (k + 1)-th update.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda k: cosine_rate(k + 1, peak, minimum, warmup, decay) / peak)
    expected = []
    for tokens, targets in data:
        expected += torch_losses(module, [(tokens, targets)], optimizer)
        schedule.step()
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for name, value in module.state_dict().items():
        np.testing.assert_allclose(found[name], value.detach().numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


def test_parameter_names_parts_and_weights() -> None:
    module = hugging_face("gpt2")
    model = trellis_torch.from_module(module, (torch.zeros(2, 8, dtype=torch.long),) * 2)
    # Tied weights take the name Hugging Face saves; QKV keeps its file shape.
    assert "transformer.wte.weight" in model.weights
    assert "lm_head.weight" not in model.weights
    assert model.weights["transformer.h.0.attn.c_attn.weight"].shape == (64, 192)
    mlir = model.mlir()
    assert "#graph.part<embedding>" in mlir
    assert "#graph.part<layer 1>" in mlir and "#graph.part<head>" in mlir
    assert "graph.attention" in mlir and "graph.layer_norm" in mlir
    llama = trellis_torch.from_module(hugging_face("llama"),
                                      (torch.zeros(2, 8, dtype=torch.long),) * 2)
    text = llama.mlir()
    assert "graph.rope" in text and "graph.rms_norm" in text
    assert text.count("graph.attention") == 2


def architecture(kind: str) -> "torch.nn.Module":
    """A tiny transformers model of an architecture the config importer
    does not build, converted from the module alone."""
    fields = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, attn_implementation="eager",
                  bos_token_id=0, eos_token_id=0, pad_token_id=0)
    sized = dict(intermediate_size=128, max_position_embeddings=64)
    classes = {
        # The fused QKV split with chunk, partial rotary embeddings.
        "gpt_neox": (transformers.GPTNeoXForCausalLM,
                     transformers.GPTNeoXConfig, sized),
        # The fused gate and up projection split with chunk.
        "phi3": (transformers.Phi3ForCausalLM, transformers.Phi3Config,
                 sized),
        # In-place adds (functionalized), multi-query heads picked by
        # indexing, parallel attention and MLP.
        "falcon": (transformers.FalconForCausalLM, transformers.FalconConfig,
                   {}),
        # Learned positions read from row 2 on.
        "opt": (transformers.OPTForCausalLM, transformers.OPTConfig,
                dict(ffn_dim=128, max_position_embeddings=64,
                     word_embed_proj_dim=64)),
        # LayerNorms without weight or bias.
        "olmo": (transformers.OlmoForCausalLM, transformers.OlmoConfig,
                 sized),
        # Soft-capped attention scores and logits, a sliding window on
        # every other layer, RMSNorms around both halves of each layer.
        # Caps small enough to bend the tiny model's scores.
        "gemma2": (transformers.Gemma2ForCausalLM, transformers.Gemma2Config,
                   dict(sized, head_dim=16, num_key_value_heads=2,
                        query_pre_attn_scalar=16, sliding_window=6,
                        attn_logit_softcapping=0.5,
                        final_logit_softcapping=2.0)),
        # Gemma 3: each head's query and key RMS-normalized (gains 1 +
        # weight), a window of 6 on layer 0, rotary bases of its own for
        # the sliding (10^4) and the global (10^6) layers, no soft caps.
        "gemma3": (transformers.Gemma3ForCausalLM,
                   transformers.Gemma3TextConfig,
                   dict(sized, head_dim=16, num_key_value_heads=2,
                        query_pre_attn_scalar=16, sliding_window=6,
                        layer_types=["sliding_attention",
                                     "full_attention"])),
        # DeepSeek-V3's multi-head latent attention (low-rank queries, a
        # shared latent expanded into keys and values through slice
        # copies, interleaved rotary pairs, values narrower than keys),
        # every layer dense.
        "deepseek_v3": (transformers.DeepseekV3ForCausalLM,
                        transformers.DeepseekV3Config,
                        dict(sized, num_key_value_heads=4, q_lora_rank=32,
                             kv_lora_rank=24, qk_nope_head_dim=16,
                             qk_rope_head_dim=8, v_head_dim=12,
                             rope_interleave=True, first_k_dense_replace=2,
                             n_routed_experts=8, num_experts_per_tok=2,
                             n_group=4, topk_group=2)),
    }
    model, settings, extra = classes[kind]
    torch.manual_seed(0)
    module = model(settings(**fields, **extra))
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.02)
    return module.eval()


@pytest.mark.parametrize("kind", ["gpt_neox", "phi3", "falcon", "opt",
                                  "olmo", "gemma2", "gemma3", "deepseek_v3"])
def test_more_architectures_train_like_pytorch(kind: str) -> None:
    """GPT-NeoX and Phi-3 (their fused projections split by aten.chunk),
    Falcon, OPT, OLMo, Gemma 2 (soft-capping, sliding windows), Gemma 3
    (query and key norms, a rotary base per layer kind) and DeepSeek-V3's
    latent attention (dense layers): losses
    and every parameter after 3 AdamW steps
    with weight decay equal PyTorch's, and dp=2 and tp=2 (the preset knows
    no name of theirs: replicated) train as one rank."""
    module = architecture(kind)
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module, example)
    expect_trains_like_pytorch(module, converted, kind)


def expect_trains_like_pytorch(module: "torch.nn.Module", converted: Any,
                               what: str) -> None:
    """`converted` (from `module`): losses and every parameter after 3
    AdamW steps with weight decay equal PyTorch's, and dp=2 and tp=2 train
    as one rank."""
    data = batches(256, BATCH, SEQ, STEPS, seed=5)
    found = {}
    for mesh in [None, "dp=2", "tp=2"]:
        plan = trellis.compile(converted, batch=BATCH, seq=SEQ, mesh=mesh,
                               weight_decay=0.1, adam_eps=EPSILON)
        if mesh is None:
            with trellis.Session(plan, weights=converted.weights) as session:
                losses = [session.step(*b) for b in data]
                found = session.state_dict()
        else:
            per_rank = trellis.launch(plan, batches=data,
                                      weights=converted.weights)
            np.testing.assert_allclose(per_rank[0], losses, rtol=1e-5)
    expected_losses: list = []
    expected = trained_torch_parameters(module, data, decay=0.1,
                                        losses=expected_losses)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    for name, value in found.items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5,
                                   atol=1e-6, err_msg=f"{what} {name}")


def test_deepseek_moe_trains_like_pytorch() -> None:
    """DeepSeek-V3 with a mixture-of-experts layer: its router (sigmoid
    scores, the score correction bias a state of its buffer's name, top-2
    of 4 groups, routed scaling 2.5) and its ungated shared expert; losses
    and every parameter after 3 AdamW steps equal PyTorch's, and dp=2 and
    tp=2 train as one rank."""
    dense = architecture("deepseek_v3")
    fields = dict(dense.config.to_dict(), first_k_dense_replace=1,
                  routed_scaling_factor=2.5, n_shared_experts=1)
    torch.manual_seed(0)
    module = transformers.DeepseekV3ForCausalLM(
        transformers.DeepseekV3Config(**fields))
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.02)
        # A bias that changes the choice, as a trained model's does.
        for name, buffer in module.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(torch.linspace(-0.02, 0.02, buffer.numel()))
    module.eval()
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module, example)
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in \
        converted.weights
    expect_trains_like_pytorch(module, converted, "deepseek_v3 moe")


class NanoGptAttention(torch.nn.Module):
    """nanoGPT's CausalSelfAttention (karpathy/nanoGPT model.py): q, k and
    v split from one nn.Linear, flash attention."""

    def __init__(self, width: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = torch.nn.Linear(width, 3 * width, bias=bias)
        self.c_proj = torch.nn.Linear(width, width, bias=bias)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class NanoGptMlp(torch.nn.Module):
    def __init__(self, width: int, bias: bool) -> None:
        super().__init__()
        self.c_fc = torch.nn.Linear(width, 4 * width, bias=bias)
        self.c_proj = torch.nn.Linear(4 * width, width, bias=bias)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        return self.c_proj(torch.nn.functional.gelu(self.c_fc(x)))


class NanoGptBlock(torch.nn.Module):
    def __init__(self, width: int, heads: int, bias: bool) -> None:
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(width, bias=bias)
        self.attn = NanoGptAttention(width, heads, bias)
        self.ln_2 = torch.nn.LayerNorm(width, bias=bias)
        self.mlp = NanoGptMlp(width, bias)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGpt(torch.nn.Module):
    """nanoGPT's GPT: tied embedding and head, learned positions, and a
    forward(idx, targets) that returns (logits, loss) with ignore_index
    -1."""

    def __init__(self, vocab: int = 256, width: int = 64, heads: int = 4,
                 layers: int = 2, positions: int = 64,
                 bias: bool = False) -> None:
        super().__init__()
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(vocab, width),
            wpe=torch.nn.Embedding(positions, width),
            h=torch.nn.ModuleList(
                [NanoGptBlock(width, heads, bias) for _ in range(layers)]),
            ln_f=torch.nn.LayerNorm(width, bias=bias)))
        self.lm_head = torch.nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx: "torch.Tensor", targets: "torch.Tensor") -> Any:
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1),
            ignore_index=-1)
        return logits, loss


def test_nanogpt_converts_as_written() -> None:
    """A model that computes its own loss converts with forward=: nanoGPT's
    GPT (LayerNorm without bias, nn.Linear fused QKV, tied head) trains
    like PyTorch, parameters included, and dp=2 and tp=2 as one rank."""
    torch.manual_seed(0)
    module = NanoGpt().eval()
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(
        module, example,
        forward=lambda model, tokens, targets: model(tokens, targets)[1])
    data = batches(256, BATCH, SEQ, STEPS, seed=8)
    plan = trellis.compile(converted, batch=BATCH, seq=SEQ, weight_decay=0.1,
                           adam_eps=EPSILON)
    with trellis.Session(plan, weights=converted.weights) as session:
        losses = [session.step(*b) for b in data]
        found = session.state_dict()
    dp2 = trellis.compile(converted, batch=BATCH, seq=SEQ, mesh="dp=2",
                          weight_decay=0.1, adam_eps=EPSILON)
    np.testing.assert_allclose(
        trellis.launch(dp2, batches=data, weights=converted.weights)[0],
        losses, rtol=1e-5)
    # nanoGPT's configure_optimizers: 2-D tensors decayed, the rest not.
    optimizer = torch.optim.AdamW([
        {"params": [p for p in module.parameters() if p.dim() >= 2],
         "weight_decay": 0.1},
        {"params": [p for p in module.parameters() if p.dim() < 2],
         "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.999), eps=EPSILON)
    expected = []
    for tokens, targets in data:
        _, loss = module(torch.as_tensor(tokens, dtype=torch.long),
                         torch.as_tensor(targets, dtype=torch.long))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        expected.append(loss.item())
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    state = {name: p.detach().numpy() for name, p in module.state_dict().items()}
    for name, value in found.items():
        np.testing.assert_allclose(value, state[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    with pytest.raises(trellis.Error, match="forward must be callable"):
        trellis_torch.from_module(module, example, forward=1)
    # Its nn.Linear weights carry GPT-2's names with the other orientation,
    # and its QKV is held as [3, E, E]: the Megatron preset splits each by
    # the features the forward reads, and tp=2 trains as one rank.
    assert "tensor<3x64x64xf32>" in converted.mlir()
    tp2 = trellis.compile(converted, batch=BATCH, seq=SEQ, mesh="tp=2",
                          weight_decay=0.1, adam_eps=EPSILON)
    np.testing.assert_allclose(
        trellis.launch(tp2, batches=data, weights=converted.weights)[0],
        losses, rtol=1e-5)


class ShapeOps(torch.nn.Module):
    """unflatten, unbind, select, chunk and Tensor.T, as models write
    them."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Parameter(torch.randn(16, 8) * 0.1)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        hidden = self.embed(tokens)
        low, high = hidden.unflatten(-1, (2, 4)).unbind(dim=2)
        first, second = torch.cat([high, low], -1).chunk(2, dim=-1)
        mixed = torch.cat([second, first * 0.5], -1)
        return mixed @ self.head.T + hidden.select(-1, 3).unsqueeze(-1)


def test_shape_ops_equal_pytorch() -> None:
    torch.manual_seed(0)
    module = ShapeOps().eval()
    tokens, targets = batches(16, BATCH, SEQ, 1, seed=6)[0]
    converted = trellis_torch.from_module(
        module, (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    plan = trellis.compile(converted, batch=BATCH, seq=SEQ)
    with trellis.Session(plan, weights=converted.weights) as session:
        loss = session.step(tokens, targets)
    with torch.no_grad():
        logits = module(torch.as_tensor(tokens, dtype=torch.long))
        expected = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1),
            torch.as_tensor(targets, dtype=torch.long).flatten()).item()
    assert loss == pytest.approx(expected, rel=1e-5)


class TorchEncoderLM(torch.nn.Module):
    """torch's own nn.TransformerEncoderLayer under a causal float mask:
    its fused input projection is unflattened and selected per q, k, v."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, 32)
        self.layer = torch.nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(32, 256)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        mask = torch.nn.Transformer.generate_square_subsequent_mask(
            tokens.shape[1])
        hidden = self.layer(self.embed(tokens), src_mask=mask, is_causal=True)
        return self.head(hidden)


def test_torch_encoder_layer_trains_like_pytorch() -> None:
    torch.manual_seed(0)
    module = TorchEncoderLM().eval()
    converted = trellis_torch.from_module(
        module, (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    expect_trains_like_pytorch(module, converted, "TransformerEncoderLayer")


class Gathered(torch.nn.Module):
    """Indexes a dimension at positions that are not consecutive."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        hidden = self.embed(tokens)
        return torch.cat([hidden[..., [0, 2]]] * 8, -1)


class Cumulative(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        return torch.cumsum(self.embed(tokens), dim=1)


class ManyUnsupported(torch.nn.Module):
    """Three calls of two ops no handler translates."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        once = torch.cumsum(self.embed(tokens), dim=1)
        return torch.flip(torch.cumsum(once, dim=1), [2])


class WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.register_buffer("offset", torch.randn(8))

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        return self.embed(tokens) + self.offset


class ComplexSquare(torch.nn.Module):
    """Squares its features as complex numbers: no rotary embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        x = self.embed(tokens)
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * pairs).flatten(-2)


class Counting(torch.nn.Module):
    """Writes a buffer in forward (as BatchNorm's running statistics do)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        self.calls.add_(1)
        return self.embed(tokens)


def test_errors() -> None:
    example = (torch.zeros(4, 8, dtype=torch.long),) * 2
    with pytest.raises(trellis.Error, match=r"unsupported ATen op "
                       r"aten.cumsum.default \(cumsum, at .*test_torch.py:\d+\)"):
        trellis_torch.from_module(Cumulative(), example)
    # Every op a model lacks, in one error: each at its first call, counted.
    with pytest.raises(trellis.Error, match=r"unsupported ATen ops \(2\) "
                       r"aten.cumsum.default \(cumsum, at .*test_torch.py:"
                       r"\d+\) and 1 more call; aten.flip.default \(flip, at "
                       r".*test_torch.py:\d+\): trellis.torch.SUPPORTED_OPS"):
        trellis_torch.from_module(ManyUnsupported(), example)
    with pytest.raises(trellis.Error, match=r"a constant tensor of shape \(8,\)"
                       r".*enters the computation"):
        trellis_torch.from_module(WithBuffer(), example)
    with pytest.raises(trellis.Error, match=r"indexing dimension 2 at "
                       r"\[0, 2\]: expected consecutive indices"):
        trellis_torch.from_module(Gathered(), example)
    with pytest.raises(trellis.Error, match=r"cross_entropy ignoring target "
                       r"3, a token id of the vocabulary \[0, 16\)"):
        trellis_torch.from_module(
            ShapeOps(), example,
            loss=lambda logits, targets: torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), targets.flatten(), ignore_index=3))
    with pytest.raises(trellis.Error, match="writes its buffers"):
        trellis_torch.from_module(Counting(), example)
    with pytest.raises(trellis.Error, match=r"complex numbers used otherwise "
                       r"than as a rotary embedding"):
        trellis_torch.from_module(ComplexSquare(), example)
    batch = torch.export.Dim("batch", min=2)
    with pytest.raises(trellis.Error, match=r"input tokens: dimension 0 is "
                       r"dynamic"):
        trellis_torch.from_module(
            WithBuffer(), example,
            dynamic_shapes={"tokens": {0: batch}, "targets": {0: batch}})
    with pytest.raises(trellis.Error, match=r"torch.bfloat16: expected "
                       r"float32"):
        trellis_torch.from_module(hugging_face("gpt2").to(torch.bfloat16),
                                  example)
    with pytest.raises(trellis.Error, match=r"dropout with p=0.1 in training "
                       r"mode"):
        trellis_torch.from_module(hugging_face("gpt2").train(), example)
    with pytest.raises(trellis.Error, match="expected a torch.nn.Module"):
        trellis_torch.from_module(lambda x: x, example)
    with pytest.raises(trellis.Error, match=r"of one shape \[batch, seq\]"):
        trellis_torch.from_module(hugging_face("gpt2"),
                                  (example[0], example[1][:, :4]))
    assert "aten.embedding.default" in trellis_torch.SUPPORTED_OPS


#: Published configs (the Hub's config.json fields that decide the
#: parameters), by model type.
HUB_CONFIGS = {
    # allenai/OLMo-2-1124-7B
    "olmo2": dict(model_type="olmo2", architectures=["Olmo2ForCausalLM"],
                  hidden_size=4096, intermediate_size=11008,
                  num_attention_heads=32, num_hidden_layers=32,
                  num_key_value_heads=32, vocab_size=100352,
                  max_position_embeddings=4096, rms_norm_eps=1e-06,
                  rope_theta=500000, tie_word_embeddings=False,
                  attention_bias=False, pad_token_id=100277),
    # microsoft/Phi-3-mini-128k-instruct (LongRoPE's 48 factor pairs)
    # gpt-oss-20b (its bf16 weights: no quantization_config).
    "gpt_oss": dict(model_type="gpt_oss", architectures=["GptOssForCausalLM"],
                    attention_bias=True, head_dim=64, hidden_act="silu",
                    hidden_size=2880, initializer_range=0.02,
                    intermediate_size=2880,
                    layer_types=["sliding_attention", "full_attention"] * 12,
                    max_position_embeddings=131072, num_attention_heads=64,
                    num_experts_per_tok=4, num_hidden_layers=24,
                    num_key_value_heads=8, num_local_experts=32,
                    output_router_logits=False, pad_token_id=199999,
                    rms_norm_eps=1e-05,
                    rope_scaling={"beta_fast": 32.0, "beta_slow": 1.0,
                                  "factor": 32.0,
                                  "original_max_position_embeddings": 4096,
                                  "rope_type": "yarn", "truncate": False},
                    rope_theta=150000, router_aux_loss_coef=0.9,
                    sliding_window=128, swiglu_limit=7.0,
                    tie_word_embeddings=False, vocab_size=201088),
    "phi3": dict(model_type="phi3", architectures=["Phi3ForCausalLM"],
                 hidden_size=3072, intermediate_size=8192,
                 num_attention_heads=32, num_hidden_layers=32,
                 num_key_value_heads=32, vocab_size=32064,
                 max_position_embeddings=131072,
                 original_max_position_embeddings=4096, rms_norm_eps=1e-05,
                 rope_theta=10000.0, sliding_window=262144,
                 tie_word_embeddings=False, pad_token_id=32000,
                 rope_scaling={"type": "longrope",
                               "short_factor": [1.05] * 48,
                               "long_factor": [1.5] * 48}),
}


def trellis_parameter_count(fields: dict) -> int:
    """The parameters the config importer builds, from its MLIR."""
    import re
    text = trellis.Model.from_config(fields).mlir()
    count = 0
    for shape in re.findall(r"tensor<([0-9x]+)xf32> \{[^}]*graph.role = "
                            r'"param"', text):
        count += int(np.prod([int(s) for s in shape.split("x")]))
    return count


@pytest.mark.parametrize("kind", sorted(HUB_CONFIGS))
def test_hub_configs_import_with_transformers_parameter_count(kind: str) -> None:
    """A published config imports with exactly the parameters transformers
    builds from it (counted on the meta device)."""
    fields = HUB_CONFIGS[kind]
    config = transformers.AutoConfig.for_model(**fields)
    with torch.device("meta"):
        module = transformers.AutoModelForCausalLM.from_config(config)
    expected = sum(p.numel() for p in module.parameters())
    assert trellis_parameter_count(fields) == expected


def expect_small_module_trains(module: "torch.nn.Module",
                               converted: Any) -> None:
    """`converted` (from `module`, a vocabulary of 32): losses and every
    parameter after 3 AdamW steps equal PyTorch's."""
    data = batches(32, BATCH, SEQ, STEPS, seed=4)
    plan = trellis.compile(converted, batch=BATCH, seq=SEQ, adam_eps=EPSILON)
    with trellis.Session(plan, weights=converted.weights) as session:
        losses = [session.step(*batch) for batch in data]
        found = session.state_dict()
    expected_losses: list = []
    expected = trained_torch_parameters(module, data, decay=0.0,
                                        losses=expected_losses)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    for name, value in found.items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5,
                                   atol=1e-6, err_msg=name)


class TiledNorms(torch.nn.Module):
    """torch's own rms_norm, repeat (tiling the features, and the batch
    with a leading repeat) and view_as."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.gain = torch.nn.Parameter(1 + 0.1 * torch.randn(8))
        self.head = torch.nn.Linear(16, 32)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        x = self.embed(tokens)
        normed = torch.nn.functional.rms_norm(x, (8,), self.gain, 1e-5)
        tiled = normed.repeat(1, 1, 2)
        batch = x.repeat(2, 1, 1)[:x.shape[0]]
        return self.head(tiled.view_as(torch.cat([batch, batch], -1)))


def test_rms_norm_repeat_and_view_as_convert() -> None:
    """aten.rms_norm becomes graph.rms_norm, aten.repeat a broadcast of
    each dimension tiled, aten.view_as a reshape: losses and every
    parameter after 3 AdamW steps equal PyTorch's."""
    torch.manual_seed(0)
    module = TiledNorms().eval()
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module, example)
    assert "graph.rms_norm" in converted.mlir()
    expect_small_module_trains(module, converted)


class SoftAbs(torch.nn.Module):
    """softplus (beta 1 and 2) and abs of the hidden states."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 32)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        x = self.embed(tokens)
        y = torch.nn.functional.softplus(x) - torch.nn.functional.softplus(
            x, beta=2.0) + 0.5 * x.abs()
        return self.head(y)


class LikeConstants(torch.nn.Module):
    """zeros_like, ones_like and full_like of the hidden states, and a
    copying cast to float32 (aten._to_copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 32)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        x = torch.ops.aten._to_copy(self.embed(tokens), dtype=torch.float32)
        shifted = x + torch.ones_like(x) - 2.0 * torch.full_like(x, 0.25)
        return self.head(shifted * (1 + torch.zeros_like(x)))


def test_like_constants_and_copying_casts_convert() -> None:
    """aten.zeros_like, ones_like and full_like become graph.fill, a
    float32 _to_copy passes its value through: losses and every parameter
    after 3 AdamW steps equal PyTorch's."""
    torch.manual_seed(0)
    module = LikeConstants().eval()
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module, example)
    assert "graph.fill" in converted.mlir()
    expect_small_module_trains(module, converted)


def test_softplus_and_abs_convert() -> None:
    """aten.softplus becomes graph.softplus (other betas scaled around
    it), aten.abs graph.abs: losses and every parameter after 3 AdamW
    steps equal PyTorch's."""
    torch.manual_seed(0)
    module = SoftAbs().eval()
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module, example)
    text = converted.mlir()
    assert "graph.softplus" in text and "graph.abs" in text
    expect_small_module_trains(module, converted)


class SinkAttention(torch.nn.Module):
    """GPT-OSS's eager attention: causal scores of grouped-query heads, a
    learned logit per head (the sink) joining each row's softmax, its
    column dropped after. Hugging Face's projection names (tp splits
    them by heads)."""

    def __init__(self, width: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = width // heads
        self.q_proj = torch.nn.Linear(width, width)
        self.k_proj = torch.nn.Linear(width, kv_heads * self.head_dim)
        self.v_proj = torch.nn.Linear(width, kv_heads * self.head_dim)
        self.o_proj = torch.nn.Linear(width, width)
        self.sinks = torch.nn.Parameter(torch.randn(heads))

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, -1).transpose(1, 2)
        groups = self.heads // self.kv_heads
        k, v = (p(x).view(b, s, self.kv_heads, -1).transpose(1, 2)[
            :, :, None].expand(b, self.kv_heads, groups, s, -1).reshape(
                b, self.heads, s, -1) for p in (self.k_proj, self.v_proj))
        mask = torch.full((s, s), float("-inf")).triu(1)
        scores = q @ k.transpose(2, 3) * self.head_dim ** -0.5 + mask
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)
        combined = torch.cat([scores, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probabilities = torch.softmax(combined, dim=-1)[..., :-1]
        out = (probabilities @ v).transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


def expect_attention_trains_on_every_layout(attention: "torch.nn.Module",
                                            operand: str) -> None:
    """AttentionModel(attention) converts with `operand` on its
    graph.attention and trains as PyTorch (one-step gradients, losses,
    parameters), and as one rank on dp=2, tp=2 and cp=2 (Ulysses, keys
    gathered, ring attention)."""
    from parity import expect_trains_like_pytorch
    torch.manual_seed(0)
    module = AttentionModel(attention).eval()
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    converted = trellis_torch.from_module(module, example)
    assert any(operand in line for line in converted.mlir().splitlines()
               if "graph.attention " in line)
    expect_trains_like_pytorch(
        module, converted, operand, 32,
        ["dp=2", "tp=2", "cp=2", ("cp=2", {"cp_kind": "ring"}),
         ("cp=2", {"cp_kind": "allgather"})])


class AttentionModel(torch.nn.Module):
    """Tokens (32 of them, width 32), one attention layer with its
    residual, logits."""

    def __init__(self, attention: "torch.nn.Module") -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(32, 32)
        self.self_attn = attention
        self.lm_head = torch.nn.Linear(32, 32, bias=False)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        x = self.embed_tokens(tokens)
        return self.lm_head(x + self.self_attn(x))


def test_attention_sinks_train_as_pytorch_on_every_layout() -> None:
    """GPT-OSS's sinks become graph.attention's `sinks`: one-step
    gradients (the sinks' too), losses and every parameter equal
    PyTorch's, and dp=2, tp=2 (heads split, the sinks with them) and
    cp=2 (Ulysses; keys gathered; ring attention in zigzag order, the
    sinks in the rank's own block) train as one rank."""
    expect_attention_trains_on_every_layout(
        SinkAttention(32, heads=4, kv_heads=2), "sinks")


def train_and_read(session: Any, data: list) -> Any:
    """A rank's losses over `data` and the parameters after (whole)."""
    losses = [session.step(*batch) for batch in data]
    return losses, session.state_dict()


def test_gpt_oss_from_its_config_trains_alike_on_every_layout() -> None:
    """GPT-OSS from its config: dp=2, tp=2 (heads and their sinks split),
    ep=2 (the experts and their biases split), cp=2 (ring attention, the
    sinks in the rank's own block) and pp=2 give the one-rank losses and
    parameters."""
    fields = dict(config("gpt_oss"), pad_token_id=0)
    torch.manual_seed(0)
    module = causal_lm("gpt_oss", **fields, attn_implementation="eager")
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.02)
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    weights = trellis_torch.from_module(module.eval(), example).weights
    model = trellis.Model.from_config(fields)
    data = batches(256, BATCH, SEQ, STEPS, seed=3)
    reference = None
    for mesh, options in [(None, {}), ("dp=2", {}), ("tp=2", {}),
                          ("ep=2", {}), ("cp=2", {"cp_kind": "ring"}),
                          ("pp=2", {"microbatches": 2})]:
        plan = trellis.compile(model, batch=BATCH, seq=SEQ, mesh=mesh,
                               adam_eps=EPSILON, **options)
        losses, parameters = trellis.launch(
            plan, fn=train_and_read, args=(data,), weights=weights)[0]
        if reference is None:
            reference = (losses, parameters)
        np.testing.assert_allclose(losses, reference[0], rtol=1e-5,
                                   err_msg=str(mesh))
        assert parameters.keys() == reference[1].keys()
        for name, value in parameters.items():
            np.testing.assert_allclose(value, reference[1][name], rtol=1e-5,
                                       atol=1e-7, err_msg=f"{mesh} {name}")


class AlibiAttention(torch.nn.Module):
    """BLOOM's attention with ALiBi on heads merged into the batch:
    baddbmm of the bias (a slope per head times the key's position, or,
    `squared`, times its square: no ALiBi), the queries and the keys, a
    causal mask, bmm with the values. Hugging Face's projection names (tp
    splits them by heads)."""

    def __init__(self, width: int, heads: int, squared: bool = False) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.squared = squared
        self.q_proj = torch.nn.Linear(width, width)
        self.k_proj = torch.nn.Linear(width, width)
        self.v_proj = torch.nn.Linear(width, width)
        self.o_proj = torch.nn.Linear(width, width)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        b, s, _ = x.shape
        h = self.heads
        q, k, v = (p(x).view(b, s, h, -1).transpose(1, 2).reshape(
            b * h, s, -1) for p in (self.q_proj, self.k_proj, self.v_proj))
        slopes = 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=q.dtype) / h)
        positions = torch.arange(s, dtype=q.dtype)
        if self.squared:
            positions = positions * positions / s
        bias = (slopes[:, None] * positions).repeat(b, 1)[:, None, :]
        scores = bias.baddbmm(q, k.transpose(1, 2),
                              alpha=self.head_dim ** -0.5)
        mask = torch.full((s, s), float("-inf"), dtype=q.dtype).triu(1)
        probabilities = torch.softmax(scores.view(b, h, s, s) + mask, dim=-1)
        out = torch.bmm(probabilities.view(b * h, s, s), v)
        return self.o_proj(out.view(b, h, s, -1).transpose(1, 2).reshape(
            b, s, -1))


def test_alibi_trains_as_pytorch_on_every_layout() -> None:
    """BLOOM's ALiBi becomes graph.attention's `slopes` (a graph.constant
    per head, measured from the bias): one-step gradients, losses and
    every parameter equal PyTorch's, and dp=2, tp=2 (heads split, each
    rank its slopes), cp=2 (Ulysses, keys gathered, ring attention over
    zigzag blocks, each block's positions its own) train as one rank. A
    bias that is not a slope times the position is refused."""
    expect_attention_trains_on_every_layout(AlibiAttention(32, heads=4),
                                            "slopes")
    example = (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2
    with pytest.raises(trellis.Error, match="not a slope per head times the "
                       "key's position"):
        trellis_torch.from_module(AttentionModel(AlibiAttention(
            32, heads=4, squared=True)).eval(), example)
