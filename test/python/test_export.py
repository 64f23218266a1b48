"""trellis export --hf: a trained checkpoint as a Hugging Face model that
transformers loads, whose forward equals Trellis's."""

import json
import os
import subprocess

import pytest

import trellis
from conftest import batches

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

BATCH, SEQ = 4, 16


def train_and_export(tmp_path, trellis_bin: str, config: str, *options):
    """3 AdamW steps of `config` saved, then exported; the checkpoint and
    the export's directories."""
    plan = str(tmp_path / "train.plan")
    subprocess.run([trellis_bin, "compile", config, "--batch", str(BATCH),
                    "--seq", str(SEQ), *options, "-o", plan], check=True)
    checkpoint = str(tmp_path / "checkpoint")
    subprocess.run([trellis_bin, "run", plan, "--steps", "3", "--save",
                    checkpoint], check=True, stdout=subprocess.DEVNULL)
    exported = str(tmp_path / "hf")
    subprocess.run([trellis_bin, "export", checkpoint, "--hf", exported],
                   check=True, stdout=subprocess.DEVNULL)
    return checkpoint, exported


#: Model types built as variants of llama-tiny.json: their fields.
VARIANTS = {
    "olmo2-tiny": dict(model_type="olmo2", architectures=["Olmo2ForCausalLM"]),
    "phi3-tiny": dict(model_type="phi3", architectures=["Phi3ForCausalLM"],
                      pad_token_id=0, original_max_position_embeddings=8,
                      rope_scaling={
                          "type": "longrope",
                          "short_factor": [1.0 + 0.25 * i for i in range(8)],
                          "long_factor": [2.0 + 0.5 * i for i in range(8)]}),
}


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny", "gemma2-tiny",
                                  "gemma3-tiny", "olmo2-tiny", "phi3-tiny"])
def test_exported_model_loads_and_computes_trellis_forward(
        tmp_path, trellis_bin: str, examples: str, name: str) -> None:
    config = os.path.join(examples, "configs", name + ".json")
    if name in VARIANTS:
        with open(os.path.join(examples, "configs", "llama-tiny.json")) as f:
            fields = dict(json.load(f), **VARIANTS[name])
        config = str(tmp_path / (name + ".json"))
        with open(config, "w") as f:
            json.dump(fields, f)
    _, exported = train_and_export(tmp_path, trellis_bin, config)
    assert sorted(os.listdir(exported)) == [
        "config.json", "generation_config.json", "model.safetensors"]
    model = transformers.AutoModelForCausalLM.from_pretrained(exported)
    model.eval()
    with open(config) as f:
        vocab = json.load(f)["vocab_size"]
    tokens, targets = batches(vocab, BATCH, SEQ, 1, seed=7)[0]
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens).long()).logits
        expected = torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocab).double(),
            torch.from_numpy(targets).long().reshape(-1)).item()
    # Trellis's forward of the same weights: a step without an optimizer.
    plan = trellis.compile(trellis.Model.from_file(config), batch=BATCH,
                           seq=SEQ, optimizer="none")
    with trellis.Session(plan) as session:
        session.load_weights(os.path.join(exported, "model.safetensors"))
        loss = session.step(tokens, targets)
    assert loss == pytest.approx(expected, rel=1e-5)


def test_bf16_export_rounds_the_masters_as_the_step_does(
        tmp_path, trellis_bin: str, gpt2_tiny: str) -> None:
    checkpoint, exported = train_and_export(tmp_path, trellis_bin, gpt2_tiny,
                                            "--precision", "bf16")
    master = safetensors_numpy.load_file(os.path.join(exported,
                                                      "model.safetensors"))
    half = str(tmp_path / "hf-bf16")
    subprocess.run([trellis_bin, "export", checkpoint, "--hf", half,
                    "--dtype", "bf16"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(half, "config.json")) as f:
        assert json.load(f)["dtype"] == "bfloat16"
    # safetensors.numpy has no bfloat16: compare the raw bytes through
    # torch's loader.
    import safetensors.torch
    rounded = safetensors.torch.load_file(os.path.join(half,
                                                       "model.safetensors"))
    trained = safetensors.torch.load_file(os.path.join(checkpoint,
                                                       "model.safetensors"))
    assert rounded.keys() == trained.keys() == master.keys()
    for name, tensor in rounded.items():
        assert tensor.dtype == torch.bfloat16
        # The step's bf16 weights are its fp32 masters rounded to nearest.
        assert torch.equal(tensor, trained[name]), name
        assert torch.equal(tensor, torch.from_numpy(master[name]).bfloat16())
