"""trellis.torch: GPT-2 and Llama (transformers, tiny configs, eager
attention) made three ways (config importer, graph builder, PyTorch
frontend) give one loss, PyTorch's, and train alike on every mesh."""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trellis  # noqa: E402
import trellis.torch as trellis_torch  # noqa: E402
import transformer_graphs  # noqa: E402
from conftest import ROOT, batches  # noqa: E402

BATCH, SEQ, STEPS = 4, 16, 3


def config(kind: str) -> dict:
    name = "gpt2-tiny.json" if kind == "gpt2" else "llama-tiny.json"
    with open(os.path.join(ROOT, "examples", "configs", name)) as file:
        return json.load(file)


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


def torch_losses(module: "torch.nn.Module", data: list) -> list:
    """PyTorch's own training: the same losses Trellis's AdamW steps give."""
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3,
                                  betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.0)
    losses = []
    for tokens, targets in data:
        logits = module(torch.as_tensor(tokens, dtype=torch.long)).logits
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), torch.as_tensor(targets,
                                                  dtype=torch.long).flatten())
        optimizer.zero_grad()
        loss.backward()
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


class Cumulative(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        return torch.cumsum(self.embed(tokens), dim=1)


class WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.register_buffer("offset", torch.randn(8))

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        return self.embed(tokens) + self.offset


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
    with pytest.raises(trellis.Error, match=r"a constant tensor of shape \(8,\)"
                       r".*enters the computation"):
        trellis_torch.from_module(WithBuffer(), example)
    with pytest.raises(trellis.Error, match="writes its buffers"):
        trellis_torch.from_module(Counting(), example)
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
