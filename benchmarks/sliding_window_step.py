"""Step time of a Mistral-shaped model (examples/configs/llama-tiny.json
as model_type mistral: 2 layers, hidden 64, 4 heads of 16, 2 kv heads) on
long sequences, causal and with a sliding window: Trellis on one rank and
PyTorch eager (transformers' MistralForCausalLM with its default SDPA
attention, torch AdamW) on the same weights, batch and threads, in
interleaved rounds (medians). Trellis's kernels skip the key tiles a
window hides; transformers' windowed mask is an explicit one.

Needs torch and transformers (a venv: never a test dependency) and the
build's Python package on PYTHONPATH.

Usage: sliding_window_step.py [rounds] [steps] [threads] [seq] [window]
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
CONFIG = os.path.join(ROOT, "examples", "configs", "llama-tiny.json")
BATCH = 2

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
seq = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
window = int(sys.argv[5]) if len(sys.argv) > 5 else 256
transformers.logging.set_verbosity_error()
torch.set_num_threads(threads)
rng = np.random.default_rng(0)


def fields(sliding):
    config = json.load(open(CONFIG))
    config.update(model_type="mistral", architectures=["MistralForCausalLM"],
                  max_position_embeddings=seq, sliding_window=sliding)
    return config


ids = rng.integers(0, fields(None)["vocab_size"], (BATCH, seq + 1),
                   dtype=np.int32)
tokens, targets = ids[:, :-1], ids[:, 1:]


def trellis_step(config, weights):
    plan = trellis.compile(trellis.Model.from_config(config), batch=BATCH,
                           seq=seq)
    with trellis.Session(plan, weights=weights, threads=threads) as session:
        session.step(tokens, targets)
        start = time.perf_counter()
        for _ in range(steps):
            session.step(tokens, targets)
        return (time.perf_counter() - start) / steps


cases = {}
for name, sliding in (("causal", None), (f"window {window}", window)):
    config = fields(sliding)
    torch.manual_seed(0)
    settings = {k: v for k, v in config.items()
                if k not in ("model_type", "architectures")}
    module = transformers.MistralForCausalLM(
        transformers.MistralConfig(**settings)).train()
    weights = {n: t.detach().numpy() for n, t in module.state_dict().items()}
    cases[name] = (config, weights, module)

results = {}
for _ in range(rounds):
    for name, (config, weights, module) in cases.items():
        results.setdefault(f"trellis {name}", []).append(
            trellis_step(config, weights))
        results.setdefault(f"pytorch {name}", []).append(
            eager_step_seconds(module, tokens, targets, steps))
print(f"Mistral-shaped tiny model; batch {BATCH} x {seq}; {threads} threads; "
      f"medians of {rounds} interleaved rounds of {steps} steps")
for name, times in sorted(results.items()):
    median = statistics.median(times)
    print(f"  {name:22s} {median * 1000:8.1f} ms/step  "
          f"{BATCH * seq / median:8.0f} tokens/s")
