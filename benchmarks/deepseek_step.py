"""Step time of a DeepSeek-V3-shaped model (examples/configs/
deepseek-v3-tiny.json widened: 4 layers, the first dense, hidden 256,
8 heads of latent attention (q rank 128, kv rank 64, 32 + 16 query/key
features, 32 value features), 16 experts of 128 in 4 groups, top-4 of the
best 2 groups, a shared expert) on this machine: Trellis on one rank, with
and without the bias update, and PyTorch eager (transformers'
DeepseekV3ForCausalLM, SDPA attention, torch AdamW) on the same weights,
batch and threads, in interleaved rounds (medians).

Needs torch and transformers (a venv: never a test dependency) and the
build's Python package on PYTHONPATH.

Usage: deepseek_step.py [rounds] [steps] [threads]
"""
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import transformers

import trellis
from torch_timing import eager_step_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "examples", "configs", "deepseek-v3-tiny.json")
BATCH, SEQ = 8, 128

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
transformers.logging.set_verbosity_error()
torch.set_num_threads(threads)
fields = dict(json.load(open(CONFIG)), hidden_size=256, intermediate_size=512,
              moe_intermediate_size=128, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=8, q_lora_rank=128,
              kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
              v_head_dim=32, n_routed_experts=16, num_experts_per_tok=4,
              n_group=4, topk_group=2, vocab_size=1024,
              max_position_embeddings=SEQ)
torch.manual_seed(0)
settings = {k: v for k, v in fields.items()
            if k not in ("model_type", "architectures")}
module = transformers.DeepseekV3ForCausalLM(
    transformers.DeepseekV3Config(**settings, attn_implementation="sdpa"))
module.train()
size = fields["moe_intermediate_size"]
weights = {}
for name, tensor in module.state_dict().items():
    value = tensor.detach().numpy().copy()
    if name.endswith(".mlp.experts.gate_up_proj"):
        prefix = name.replace(".mlp.experts.gate_up_proj", ".mlp.experts.*.")
        weights[prefix + "gate_proj.weight"] = np.ascontiguousarray(
            value[:, :size])
        weights[prefix + "up_proj.weight"] = np.ascontiguousarray(
            value[:, size:])
    elif name.endswith(".mlp.experts.down_proj"):
        weights[name.replace(".mlp.experts.down_proj",
                             ".mlp.experts.*.down_proj.weight")] = value
    else:
        weights[name] = value
rng = np.random.default_rng(0)
ids = rng.integers(0, fields["vocab_size"], (BATCH, SEQ + 1), dtype=np.int32)
tokens, targets = ids[:, :-1], ids[:, 1:]
model = trellis.Model.from_config(fields)
plans = {
    "trellis": trellis.compile(model, batch=BATCH, seq=SEQ),
    "trellis, bias update": trellis.compile(model, batch=BATCH, seq=SEQ,
                                            expert_bias_update=0.001),
}


def trellis_step(plan):
    with trellis.Session(plan, weights=weights, threads=threads) as session:
        session.step(tokens, targets)
        start = time.perf_counter()
        for _ in range(steps):
            session.step(tokens, targets)
        return (time.perf_counter() - start) / steps


results = {}
for _ in range(rounds):
    for name, plan in plans.items():
        results.setdefault(name, []).append(trellis_step(plan))
    results.setdefault("pytorch eager", []).append(
        eager_step_seconds(module, tokens, targets, steps))
print("DeepSeek-V3-shaped model; "
      f"batch {BATCH} x {SEQ}; {threads} threads; medians of {rounds} "
      f"interleaved rounds of {steps} steps")
for name, times in results.items():
    median = statistics.median(times)
    print(f"  {name:22s} {median * 1000:8.1f} ms/step  "
          f"{BATCH * SEQ / median:8.0f} tokens/s")
