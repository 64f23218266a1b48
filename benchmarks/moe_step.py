"""Step time of a Mixtral-shaped model (examples/configs/mixtral-small.json:
8 experts, top-2, 4 layers, hidden 256) on this machine: Trellis on one
rank, Trellis with expert parallelism over 2 ranks (--ep 2, one thread
each) with each dispatch (gather, all-to-all), and PyTorch eager
(transformers' MixtralForCausalLM, torch AdamW) on the same weights, batch
and threads, in interleaved rounds (medians). Also the bytes each ep = 2
rank sends per step, from the plans' reports, against the dispatches'
formulas (docs/MoE.md).

Needs torch and transformers (a venv: never a test dependency) and the
build's Python package on PYTHONPATH.

Usage: moe_step.py [rounds] [steps] [threads]   (TRELLIS: the CLI)
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers

import trellis
from torch_timing import eager_step_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRELLIS = os.environ.get("TRELLIS", os.path.join(ROOT, "build", "bin",
                                                 "trellis"))
CONFIG = os.path.join(ROOT, "examples", "configs", "mixtral-small.json")
BATCH, SEQ = 8, 128

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
transformers.logging.set_verbosity_error()
torch.set_num_threads(threads)
fields = json.load(open(CONFIG))
torch.manual_seed(0)
module = transformers.MixtralForCausalLM(
    transformers.MixtralConfig(**fields, attn_implementation="sdpa"))
module.train()
size = fields["intermediate_size"]
weights = {}
for name, tensor in module.state_dict().items():
    value = tensor.detach().numpy()
    if name.endswith(".mlp.experts.gate_up_proj"):
        prefix = name.replace(".mlp.experts.gate_up_proj",
                              ".block_sparse_moe.experts.*.")
        weights[prefix + "w1.weight"] = np.ascontiguousarray(value[:, :size])
        weights[prefix + "w3.weight"] = np.ascontiguousarray(value[:, size:])
    elif name.endswith(".mlp.experts.down_proj"):
        weights[name.replace(".mlp.experts.down_proj",
                             ".block_sparse_moe.experts.*.w2.weight")] = value
    elif ".mlp.gate." in name:
        weights[name.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = value
    else:
        weights[name] = value
rng = np.random.default_rng(0)
ids = rng.integers(0, fields["vocab_size"], (BATCH, SEQ + 1), dtype=np.int32)
tokens, targets = ids[:, :-1], ids[:, 1:]
work = tempfile.mkdtemp()
weights_path = os.path.join(work, "weights.safetensors")
import safetensors.numpy  # noqa: E402
safetensors.numpy.save_file(weights, weights_path)


def compile_plan(name, *flags):
    path = os.path.join(work, name + ".plan")
    report = subprocess.run(
        [TRELLIS, "compile", CONFIG, "--batch", str(BATCH), "--seq", str(SEQ),
         "--report", *flags, "-o", path], check=True, capture_output=True,
        text=True)
    return path, report.stdout + report.stderr


one_plan, _ = compile_plan("one")
ep_plan, ep_report = compile_plan("ep2", "--ep", "2")
a2a_plan, a2a_report = compile_plan("ep2-a2a", "--ep", "2", "--ep-dispatch",
                                    "all-to-all")


def trellis_one():
    plan = trellis.Plan.load(one_plan)
    with trellis.Session(plan, weights=weights, threads=threads) as session:
        session.step(tokens, targets)
        start = time.perf_counter()
        for _ in range(steps):
            session.step(tokens, targets)
        return (time.perf_counter() - start) / steps


def trellis_ep(plan):
    # Two processes of threads / 2 threads each: the same cores.
    out = subprocess.run(
        [TRELLIS, "run", plan, "--nproc", "2", "--steps", str(steps + 1),
         "--threads", str(max(1, threads // 2)), "--weights", weights_path,
         "--log-every", "1"], check=True, capture_output=True,
        text=True).stdout
    # The step lines' times ("step N | ... | 488.8 ms"), the first left out.
    times = [float(m) for m in re.findall(r"^step \d+ \|.*?\| ([\d.]+) ms(?: \||$)",
                                          out, re.MULTILINE)]
    return statistics.mean(times[1:]) / 1000


results = {"trellis 1 rank": [], "trellis ep=2": [],
           "trellis ep=2 a2a": [], "pytorch eager": []}
for _ in range(rounds):
    results["trellis 1 rank"].append(trellis_one())
    results["trellis ep=2"].append(trellis_ep(ep_plan))
    results["trellis ep=2 a2a"].append(trellis_ep(a2a_plan))
    results["pytorch eager"].append(
        eager_step_seconds(module, tokens, targets, steps))
tokens_per_step = BATCH * SEQ
print(f"Mixtral-shaped: {fields['num_hidden_layers']} layers, hidden "
      f"{fields['hidden_size']}, {fields['num_local_experts']} experts of "
      f"{size}, top-{fields['num_experts_per_tok']}; batch {BATCH} x {SEQ}; "
      f"{threads} threads; medians of {rounds} interleaved rounds of "
      f"{steps} steps")
for name, times in results.items():
    median = statistics.median(times)
    print(f"  {name:16s} {median * 1000:8.1f} ms/step  "
          f"{tokens_per_step / median:8.0f} tokens/s")

# The dispatch's bytes: the report's collectives over ep against the
# formula (docs/MoE.md), per rank and step, fp32.
for name, report in (("gather", ep_report), ("all-to-all", a2a_report)):
    print(f"communication per step and rank (--ep 2, {name} dispatch, from "
          "the report):")
    for line in report.splitlines():
        if " over ep" in line:
            print("  " + line.strip())
g, h, k = 2, fields["hidden_size"], fields["num_experts_per_tok"]
t = BATCH * SEQ // g
layers = fields["num_hidden_layers"]
# docs/MoE.md: per MoE layer, step and rank, (G - 1) T 4 (2H + 3k + 9kF +
# 5kH) bytes sent by the all-gather / reduce-scatter dispatch.
sent = layers * (g - 1) * t * 4 * (2 * h + 3 * k + 9 * k * size + 5 * k * h)
print(f"  formula (docs/MoE.md): {sent / 2**10:.1f} KiB sent over ep per rank "
      "(gather)")
# docs/MoE.md: f T k 4 9 (H + F + 1) bytes per MoE layer, f = (G - 1) / G
# with the experts balanced (all-to-all, the counts aside).
balanced = layers * (g - 1) / g * t * k * 4 * 9 * (h + size + 1)
print(f"  formula (docs/MoE.md): {balanced / 2**10:.1f} KiB sent per rank "
      "(all-to-all, experts balanced)")
