"""Mixture-of-experts models from their configs against transformers:
Mixtral, Qwen2-MoE (a shared expert), Qwen3-MoE (dense layers among the
sparse ones), OLMoE (norms over the whole query and key projections) and
DeepSeek-V3 (latent attention, grouped sigmoid routing with a score
correction bias, shared experts), with the router's load-balancing loss
where transformers has one, trained by
AdamW as torch trains them; and their weights read from and written to
the per-expert tensors of Hugging Face checkpoints."""

import json
import os
import subprocess
from typing import Callable, Dict, Optional

import numpy as np
import pytest

import trellis
from conftest import ROOT, batches

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

BATCH, SEQ, STEPS = 4, 16, 5
EPSILON = 1e-4


def config(kind: str) -> dict:
    """Tiny configs: mixtral-tiny.json, deepseek-v3-tiny.json, and Qwen's
    on Mixtral's sizes."""
    if kind.startswith("deepseek_v3"):
        with open(os.path.join(ROOT, "examples", "configs",
                               "deepseek-v3-tiny.json")) as file:
            fields = json.load(file)
        if kind == "deepseek_v3":
            return fields
        # The other forms: queries through one projection, rotary features
        # not interleaved, YaRN (its cos/sin factor and DeepSeek's softmax
        # factor), values wider than queries and keys, two shared experts,
        # every layer sparse.
        del fields["rope_theta"]
        return dict(fields, q_lora_rank=None, rope_interleave=False,
                    v_head_dim=32, n_shared_experts=2,
                    first_k_dense_replace=0, rope_parameters={
                        "rope_type": "yarn", "rope_theta": 10000.0,
                        "factor": 4.0, "original_max_position_embeddings": 32,
                        "mscale": 1.0, "mscale_all_dim": 0.7,
                        "beta_fast": 32, "beta_slow": 1})
    with open(os.path.join(ROOT, "examples", "configs",
                           "mixtral-tiny.json")) as file:
        fields = json.load(file)
    if kind == "mixtral":
        return fields
    if kind == "mixtral_megatron":
        # Megatron-Core's per-layer load-balancing loss and the z-loss.
        return dict(fields, router_aux_loss_kind="per_layer",
                    router_z_loss_coef=0.01)
    common = {k: fields[k] for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "vocab_size", "max_position_embeddings",
        "rms_norm_eps", "rope_theta", "tie_word_embeddings",
        "initializer_range", "num_experts_per_tok", "output_router_logits",
        "router_aux_loss_coef")}
    common.update(num_experts=8, moe_intermediate_size=48,
                  intermediate_size=96, use_sliding_window=False)
    if kind == "olmoe":
        return dict(common, model_type="olmoe",
                    architectures=["OlmoeForCausalLM"], norm_topk_prob=False)
    if kind == "qwen2_moe":
        return dict(common, model_type="qwen2_moe",
                    architectures=["Qwen2MoeForCausalLM"],
                    shared_expert_intermediate_size=80, norm_topk_prob=False)
    # Qwen3-MoE: heads of 32, each head's query and key normalized, the
    # experts' weights renormalized, layer 0 a dense MLP.
    return dict(common, model_type="qwen3_moe",
                architectures=["Qwen3MoeForCausalLM"], head_dim=32,
                norm_topk_prob=True, mlp_only_layers=[0], num_hidden_layers=3)


def hugging_face(kind: str, fields: dict) -> "torch.nn.Module":
    classes = {
        "mixtral": (transformers.MixtralForCausalLM,
                    transformers.MixtralConfig),
        "qwen2_moe": (transformers.Qwen2MoeForCausalLM,
                      transformers.Qwen2MoeConfig),
        "qwen3_moe": (transformers.Qwen3MoeForCausalLM,
                      transformers.Qwen3MoeConfig),
        "olmoe": (transformers.OlmoeForCausalLM, transformers.OlmoeConfig),
        "deepseek_v3": (transformers.DeepseekV3ForCausalLM,
                        transformers.DeepseekV3Config),
    }
    model, settings = classes[kind.removesuffix("_megatron").removesuffix(
        "_variant")]
    torch.manual_seed(0)
    module = model(settings(**fields, attn_implementation="eager"))
    # Scales where the router's choices differ between tokens and steps.
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.1)
        # DeepSeek-V3's score correction bias (a buffer): large enough to
        # change which experts and groups win.
        for name, buffer in module.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0.0, 0.05)
    return module.eval()


def trellis_weights(kind: str, module: "torch.nn.Module",
                    fields: dict) -> Dict[str, np.ndarray]:
    """The module's weights under Trellis's names: transformers' fused
    [E, 2F, H] gate and up projections as two stacked parameters, the
    experts' `*` standing for their index as in the Hub's files."""
    mixtral = kind.startswith("mixtral")
    size = fields["intermediate_size" if mixtral or kind == "olmoe" else
                  "moe_intermediate_size"]
    gate, up, down = ("w1", "w3", "w2") if mixtral else (
        "gate_proj", "up_proj", "down_proj")
    weights = {}
    for name, tensor in module.state_dict().items():
        value = tensor.detach().numpy()
        block = ".block_sparse_moe." if mixtral else ".mlp."
        if name.endswith(".mlp.experts.gate_up_proj"):
            prefix = name.replace(".mlp.experts.gate_up_proj",
                                  block + "experts.*.")
            weights[prefix + gate + ".weight"] = np.ascontiguousarray(
                value[:, :size])
            weights[prefix + up + ".weight"] = np.ascontiguousarray(
                value[:, size:])
        elif name.endswith(".mlp.experts.down_proj"):
            weights[name.replace(".mlp.experts.down_proj",
                                 block + "experts.*." + down + ".weight")] = value
        elif ".mlp.gate." in name:
            weights[name.replace(".mlp.gate.", block + "gate.")] = value
        else:
            weights[name] = value
    return weights


def hub_tensors(weights: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Trellis's weights as the Hub's checkpoints store them: each stacked
    expert parameter ("*" in its name) as one tensor per expert."""
    hub = {}
    for name, value in weights.items():
        if "*" not in name:
            hub[name] = value
            continue
        for index in range(value.shape[0]):
            hub[name.replace("*", str(index))] = value[index]
    return hub


def megatron_router_losses(fields: dict, router_logits: tuple) -> "torch.Tensor":
    """Megatron-Core's switch_load_balancing_loss_func and z_loss_func for
    each layer's router logits [tokens, E], summed over the layers."""
    experts, k = fields["num_local_experts"], fields["num_experts_per_tok"]
    total = 0.0
    for logits in router_logits:
        logits = logits.float()
        tokens = logits.shape[0]
        probs = torch.softmax(logits, dim=-1)
        chosen = torch.topk(probs, k, dim=-1).indices
        counts = torch.nn.functional.one_hot(chosen, experts).sum((0, 1))
        total = total + (probs.sum(0) * counts).sum() * (
            experts * fields["router_aux_loss_coef"] / (k * tokens * tokens))
        total = total + fields["router_z_loss_coef"] * torch.logsumexp(
            logits, dim=-1).square().mean()
    return total


def torch_training(module, fields: dict, data: list, microbatches: int,
                   after_step: Optional[Callable[[], None]] = None):
    """AdamW steps as transformers trains: the loss with the router's
    auxiliary loss (transformers' or, for router_aux_loss_kind per_layer,
    Megatron-Core's with the z-loss), micro-batches accumulated as the mean
    of their losses; `after_step` runs after each optimizer step."""
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3,
                                  betas=(0.9, 0.999), eps=EPSILON,
                                  weight_decay=0.0)
    losses = []
    for tokens, targets in data:
        optimizer.zero_grad()
        total = 0.0
        rows = len(tokens) // microbatches
        for m in range(microbatches):
            piece = slice(m * rows, (m + 1) * rows)
            out = module(torch.as_tensor(tokens[piece], dtype=torch.long),
                         output_router_logits=True)
            loss = torch.nn.functional.cross_entropy(
                out.logits.flatten(0, 1),
                torch.as_tensor(targets[piece], dtype=torch.long).flatten())
            if fields.get("router_aux_loss_kind") == "per_layer":
                loss = loss + megatron_router_losses(fields, out.router_logits)
            elif fields["model_type"] != "deepseek_v3":
                # (transformers adds no load-balancing loss for DeepSeek-V3.)
                loss = loss + fields["router_aux_loss_coef"] * out.aux_loss
            (loss / microbatches).backward()
            total += loss.item() / microbatches
        optimizer.step()
        if after_step:
            after_step()
        losses.append(total)
    return losses


@pytest.mark.parametrize("kind,microbatches", [
    ("mixtral", 1), ("mixtral", 2), ("qwen2_moe", 1), ("qwen3_moe", 2),
    ("olmoe", 1), ("mixtral_megatron", 2), ("deepseek_v3", 1),
    ("deepseek_v3", 2), ("deepseek_v3_variant", 1)])
def test_moe_trains_like_hugging_face(kind: str, microbatches: int) -> None:
    """5 AdamW steps: losses (the load-balancing loss included) and every
    parameter equal transformers + torch AdamW within 1e-5."""
    fields = config(kind)
    module = hugging_face(kind, fields)
    weights = trellis_weights(kind, module, fields)
    data = batches(fields["vocab_size"], BATCH, SEQ, STEPS, seed=3)
    plan = trellis.compile(trellis.Model.from_config(fields), batch=BATCH,
                           seq=SEQ, adam_eps=EPSILON,
                           microbatches=microbatches)
    with trellis.Session(plan, weights=weights) as session:
        losses = [session.step(*batch) for batch in data]
        found = session.state_dict()
    expected = torch_training(module, fields, data, microbatches)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    trained = trellis_weights(kind, module, fields)
    assert found.keys() == trained.keys()
    for name, value in found.items():
        np.testing.assert_allclose(value, trained[name], rtol=1e-5,
                                   atol=1e-6, err_msg=name)


def test_deepseek_bias_update_balances_as_deepseek() -> None:
    """DeepSeek-V3's auxiliary-loss-free balancing (expert_bias_update):
    after each step every router's e_score_correction_bias moves by the
    rate towards the mean load of the step (both micro-batches), the rule
    of DeepSeek-V3 and Megatron-Core's get_updated_expert_bias, written
    here in torch around transformers' model. 5 AdamW steps: losses,
    parameters and the biases equal within 1e-5 (a rate large enough to
    change which experts win)."""
    fields = config("deepseek_v3")
    module = hugging_face("deepseek_v3", fields)
    weights = trellis_weights("deepseek_v3", module, fields)
    rate, microbatches = 0.02, 2
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    # (The arrays share the module's memory, which training moves.)
    initial = weights[bias].copy()
    data = batches(fields["vocab_size"], BATCH, SEQ, STEPS, seed=5)
    plan = trellis.compile(trellis.Model.from_config(fields), batch=BATCH,
                           seq=SEQ, adam_eps=EPSILON,
                           microbatches=microbatches,
                           expert_bias_update=rate)
    with trellis.Session(plan, weights=weights) as session:
        losses = [session.step(*batch) for batch in data]
        found = session.state_dict()

    routers = [m for m in module.modules()
               if type(m).__name__ == "DeepseekV3TopkRouter"]
    chosen = {router: [] for router in routers}
    for router in routers:
        router.register_forward_hook(
            lambda router, inputs, output: chosen[router].append(output[2]))

    def update_biases() -> None:
        with torch.no_grad():
            for router in routers:
                counts = torch.bincount(
                    torch.cat(chosen[router]).flatten(),
                    minlength=router.num_experts).float()
                router.e_score_correction_bias += rate * torch.sign(
                    counts.mean() - counts)
                chosen[router].clear()

    expected = torch_training(module, fields, data, microbatches,
                              after_step=update_biases)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    trained = trellis_weights("deepseek_v3", module, fields)
    assert found.keys() == trained.keys()
    for name, value in found.items():
        np.testing.assert_allclose(value, trained[name], rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    assert not np.allclose(found[bias], initial)


def test_hub_checkpoints_load_and_export(tmp_path, trellis_bin: str) -> None:
    """Weights in the Hub's per-expert tensors load; a trained checkpoint
    exports to them, and transformers computes Trellis's loss from it."""
    fields = config("mixtral")
    module = hugging_face("mixtral", fields)
    weights = trellis_weights("mixtral", module, fields)
    hub = hub_tensors(weights)
    path = str(tmp_path / "hub.safetensors")
    safetensors_numpy.save_file(hub, path)
    data = batches(fields["vocab_size"], BATCH, SEQ, 1, seed=4)
    model = trellis.Model.from_config(fields)
    plan = trellis.compile(model, batch=BATCH, seq=SEQ, optimizer="none")
    with trellis.Session(plan, weights=weights) as session:
        expected = session.step(*data[0])
    with trellis.Session(plan) as session:
        session.load_weights(path)
        assert session.step(*data[0]) == expected
    # The same names in a Python dict load the same.
    with trellis.Session(plan, weights=hub) as session:
        assert session.step(*data[0]) == expected
    # An expert more than the model has, or one missing, is named; a
    # missing parameter's error lists the names given that were not used.
    wrong = dict(hub)
    wrong["model.layers.0.block_sparse_moe.experts.8.w1.weight"] = hub[
        "model.layers.0.block_sparse_moe.experts.7.w1.weight"]
    with pytest.raises(trellis.Error, match=r"weights: 'model\.layers\.0\."
                       r"block_sparse_moe\.experts\.8\.w1\.weight' is expert "
                       r"8 of .*, which the model has 8 of"):
        trellis.Session(plan, weights=wrong)
    wrong = {name.replace("model.norm", "model.final_norm"): values
             for name, values in hub.items()}
    with pytest.raises(trellis.Error) as refused:
        trellis.Session(plan, weights=wrong)
    assert str(refused.value) == (
        "weights: missing parameter 'model.norm.weight'; given but not a "
        "parameter: 'model.final_norm.weight'")
    wrong = dict(hub)
    del wrong["model.layers.1.block_sparse_moe.experts.3.w3.weight"]
    with pytest.raises(trellis.Error, match=r"weights: missing 'model\.layers"
                       r"\.1\.block_sparse_moe\.experts\.3\.w3\.weight' "
                       r"\(expert 3 of 8 of "):
        trellis.Session(plan, weights=wrong)
    # An expert more than the model has, or one missing, is named.
    extra = dict(hub)
    extra["model.layers.0.block_sparse_moe.experts.8.w1.weight"] = hub[
        "model.layers.0.block_sparse_moe.experts.7.w1.weight"]
    safetensors_numpy.save_file(extra, path)
    with trellis.Session(plan) as session:
        with pytest.raises(RuntimeError, match=r"experts\.8\.w1\.weight\" is "
                           r"slice 8 of .*, which the model has 8 of"):
            session.load_weights(path)
    del hub["model.layers.1.block_sparse_moe.experts.7.w2.weight"]
    safetensors_numpy.save_file(hub, path)
    with trellis.Session(plan) as session:
        with pytest.raises(RuntimeError, match=r"missing \"model\.layers\.1\."
                           r"block_sparse_moe\.experts\.7\.w2\.weight\" "
                           r"\(slice 7 of 8"):
            session.load_weights(path)

    # Trained, saved, exported: transformers loads the per-expert tensors.
    config_path = str(tmp_path / "config.json")
    with open(config_path, "w") as file:
        json.dump(fields, file)
    plan_path = str(tmp_path / "train.plan")
    subprocess.run([trellis_bin, "compile", config_path, "--batch",
                    str(BATCH), "--seq", str(SEQ), "-o", plan_path],
                   check=True)
    checkpoint = str(tmp_path / "checkpoint")
    subprocess.run([trellis_bin, "run", plan_path, "--steps", "2", "--save",
                    checkpoint], check=True, stdout=subprocess.DEVNULL)
    exported = str(tmp_path / "hf")
    subprocess.run([trellis_bin, "export", checkpoint, "--hf", exported],
                   check=True, stdout=subprocess.DEVNULL)
    stored = safetensors_numpy.load_file(os.path.join(exported,
                                                      "model.safetensors"))
    assert "model.layers.0.block_sparse_moe.experts.7.w3.weight" in stored
    assert not any("*" in name for name in stored)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(exported)
    loaded.eval()
    tokens, targets = data[0]
    with torch.no_grad():
        out = loaded(torch.from_numpy(tokens).long(),
                     output_router_logits=True)
        hf_loss = (torch.nn.functional.cross_entropy(
            out.logits.flatten(0, 1),
            torch.from_numpy(targets).long().flatten()) +
            fields["router_aux_loss_coef"] * out.aux_loss).item()
    with trellis.Session(plan) as session:
        session.load_weights(os.path.join(exported, "model.safetensors"))
        assert session.step(tokens, targets) == pytest.approx(hf_loss,
                                                              rel=1e-5)


def test_deepseek_hub_checkpoint_loads_and_exports(tmp_path,
                                                  trellis_bin: str) -> None:
    """DeepSeek-V3's Hub layout (per-expert tensors, the routers'
    e_score_correction_bias beside the weights) loads, and gives
    transformers' loss; after training with the bias update, the export
    loads into transformers (the moved biases included), which computes
    Trellis's loss."""
    fields = config("deepseek_v3")
    module = hugging_face("deepseek_v3", fields)
    hub = hub_tensors(trellis_weights("deepseek_v3", module, fields))
    path = str(tmp_path / "hub.safetensors")
    safetensors_numpy.save_file(hub, path)
    tokens, targets = batches(fields["vocab_size"], BATCH, SEQ, 1, seed=4)[0]

    def hugging_face_loss(model) -> float:
        with torch.no_grad():
            logits = model(torch.from_numpy(tokens).long()).logits
            return torch.nn.functional.cross_entropy(
                logits.flatten(0, 1),
                torch.from_numpy(targets).long().flatten()).item()

    plan = trellis.compile(trellis.Model.from_config(fields), batch=BATCH,
                           seq=SEQ, optimizer="none")
    with trellis.Session(plan) as session:
        session.load_weights(path)
        assert session.step(tokens, targets) == pytest.approx(
            hugging_face_loss(module), rel=1e-5)

    config_path = str(tmp_path / "config.json")
    with open(config_path, "w") as file:
        json.dump(fields, file)
    plan_path = str(tmp_path / "train.plan")
    subprocess.run([trellis_bin, "compile", config_path, "--batch",
                    str(BATCH), "--seq", str(SEQ), "--expert-bias-update",
                    "0.01", "-o", plan_path], check=True)
    checkpoint = str(tmp_path / "checkpoint")
    subprocess.run([trellis_bin, "run", plan_path, "--steps", "2",
                    "--weights", path, "--save", checkpoint], check=True,
                   stdout=subprocess.DEVNULL)
    exported = str(tmp_path / "hf")
    subprocess.run([trellis_bin, "export", checkpoint, "--hf", exported],
                   check=True, stdout=subprocess.DEVNULL)
    stored = safetensors_numpy.load_file(os.path.join(exported,
                                                      "model.safetensors"))
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    assert "model.layers.2.mlp.experts.7.down_proj.weight" in stored
    assert not np.allclose(stored[bias], hub[bias])
    loaded = transformers.AutoModelForCausalLM.from_pretrained(exported)
    loaded.eval()
    np.testing.assert_array_equal(
        loaded.model.layers[1].mlp.gate.e_score_correction_bias.numpy(),
        stored[bias])
    # Exported in bf16, the routers stay fp32 (as transformers keeps them).
    subprocess.run([trellis_bin, "export", checkpoint, "--hf",
                    exported + "-bf16", "--dtype", "bf16"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(exported + "-bf16", "model.safetensors"),
              "rb") as file:
        size = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(size))
    assert header[bias]["dtype"] == "F32"
    assert header["model.layers.1.mlp.gate.weight"]["dtype"] == "F32"
    assert header["model.layers.1.mlp.shared_experts.gate_proj.weight"][
        "dtype"] == "BF16"
    with trellis.Session(plan) as session:
        session.load_weights(os.path.join(exported, "model.safetensors"))
        assert session.step(tokens, targets) == pytest.approx(
            hugging_face_loss(loaded), rel=1e-5)


def train_and_read(session, data):
    """A rank's losses over `data`, the whole tensors after and the last
    step's expert load."""
    losses = [session.step(*batch) for batch in data]
    return losses, session.state_dict(), session.expert_load


def test_tied_router_scores_send_every_token_to_the_first_experts() -> None:
    """A zero router ties every score: each token takes experts 0 and 1
    (ties to the lower index), so under ep = 2 every slot is on rank 0's
    experts and experts 2-7 receive no token. A step leaves their weights
    as they were (no gradient, no decay), and ep = 2 and 4 step as one
    rank, with either dispatch (all-to-all: rank 0 receives every slot,
    the others none). (The step moves the router: later steps route
    elsewhere.)"""
    fields = config("mixtral")
    module = hugging_face("mixtral", fields)
    weights = trellis_weights("mixtral", module, fields)
    for name in weights:
        if name.endswith("block_sparse_moe.gate.weight"):
            weights[name] = np.zeros_like(weights[name])
    data = batches(fields["vocab_size"], BATCH, SEQ, 1, seed=6)
    model = trellis.Model.from_config(fields)
    results = {}
    layouts = [(1, "gather"), (2, "gather"), (4, "gather"), (2, "all-to-all"),
               (4, "all-to-all")]
    for ep, dispatch in layouts:
        plan = trellis.compile(model, batch=BATCH, seq=SEQ, adam_eps=EPSILON,
                               mesh=f"ep={ep}" if ep > 1 else None,
                               ep_dispatch=dispatch)
        results[ep, dispatch] = trellis.launch(
            plan, fn=train_and_read, args=(data,), weights=weights)[0]
    losses, found, _ = results[1, "gather"]
    for layout in layouts[1:]:
        np.testing.assert_allclose(results[layout][0], losses, rtol=1e-5)
        for name, value in results[layout][1].items():
            np.testing.assert_allclose(value, found[name], rtol=1e-5,
                                       atol=1e-6, err_msg=f"{layout} {name}")
    # The step's load, every rank's tokens counted: experts 0 and 1 took
    # every token of both layers.
    for layout in layouts:
        np.testing.assert_array_equal(
            results[layout][2], [[BATCH * SEQ] * 2 + [0] * 6] * 2)
    w1 = "model.layers.0.block_sparse_moe.experts.*.w1.weight"
    start, trained = weights[w1], found[w1]
    assert not np.array_equal(trained[:2], start[:2])
    np.testing.assert_array_equal(trained[2:], start[2:])


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe", "olmoe"])
def test_from_module_converts_transformers_moe(kind: str) -> None:
    """trellis.torch.from_module: transformers' sparse MoE blocks (a loop
    over the experts hit, which torch.export cannot trace) convert through
    the router and expert ops; 3 AdamW steps equal the module's own
    training (the cross-entropy loss: from_module's default), losses and
    parameters, under the module's own names. The blocks' forwards are the
    module's again after."""
    import trellis.torch as trellis_torch
    fields = dict(config(kind), output_router_logits=False)
    module = hugging_face(kind, fields)
    data = batches(fields["vocab_size"], BATCH, SEQ, 3, seed=8)
    model = trellis_torch.from_module(
        module, (torch.zeros(BATCH, SEQ, dtype=torch.long),) * 2)
    assert "graph.moe_route" in model.mlir()
    assert not any("forward" in vars(child) for child in module.modules())
    plan = trellis.compile(model, batch=BATCH, seq=SEQ, adam_eps=EPSILON)
    with trellis.Session(plan, weights=model.weights) as session:
        losses = [session.step(*batch) for batch in data]
        found = session.state_dict()
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3,
                                  betas=(0.9, 0.999), eps=EPSILON,
                                  weight_decay=0.0)
    expected = []
    for tokens, targets in data:
        logits = module(torch.as_tensor(tokens, dtype=torch.long)).logits
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1),
            torch.as_tensor(targets, dtype=torch.long).flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        expected.append(loss.item())
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for name, value in module.state_dict().items():
        np.testing.assert_allclose(found[name], value.detach().numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)
