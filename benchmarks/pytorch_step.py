"""PyTorch eager's training step on a Trellis model config, for side-by-side
figures: Hugging Face transformers' GPT2LMHeadModel (dropout off: Trellis
steps have none, the same computation) or LlamaForCausalLM (SDPA
attention), as the config's model_type says, built from the same
config.json, torch AdamW (fused on a GPU), random tokens, fp32 or bf16
autocast (torch.autocast(device, dtype=torch.bfloat16)). Prints the mean
step time (the first step left out). Needs torch and transformers (a venv:
never a test dependency).

Usage: pytorch_step.py CONFIG BATCH SEQ STEPS THREADS fp32|bf16 [compile] [cuda]

With `compile`, the model's forward goes through torch.compile (inductor;
its compilation happens in the first step, which the mean leaves out, as
do the next two while it settles). With `cuda`, the model and its steps
run on the first GPU (autocast on "cuda"); each step ends with the loss
copied to the host, as a Trellis step does.
"""
import json
import sys
import time

import torch
import transformers

transformers.logging.set_verbosity_error()

config_path, batch, seq, steps, threads, precision = sys.argv[1:7]
compiled = "compile" in sys.argv[7:]
device = "cuda" if "cuda" in sys.argv[7:] else "cpu"
batch, seq, steps, threads = int(batch), int(seq), int(steps), int(threads)
torch.set_num_threads(threads)
torch.manual_seed(0)
fields = json.load(open(config_path))
if fields.get("model_type", "gpt2") == "llama":
    config = transformers.LlamaConfig(**fields)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).to(device)
else:
    fields.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config = transformers.GPT2Config(**fields)
    model = transformers.GPT2LMHeadModel(config).to(device)
model.train()
forward = torch.compile(model) if compiled else model
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0,
                              fused=device == "cuda")
tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), device=device)
inputs, targets = tokens[:, :-1], tokens[:, 1:]


def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16,
                        enabled=precision == "bf16"):
        logits = forward(input_ids=inputs).logits
    loss = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss.item()


times = []
for _ in range(steps):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
warmup = 3 if compiled else 1
mean = sum(times[warmup:]) / max(len(times) - warmup, 1)
kind = "torch.compile" if compiled else "eager"
where = torch.cuda.get_device_name() if device == "cuda" else f"threads {threads}"
print(f"pytorch {torch.__version__} {kind} {precision} {where} | "
      f"mean step {mean * 1e3:.2f} ms")
