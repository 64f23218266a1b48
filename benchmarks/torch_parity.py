"""Trellis against Hugging Face transformers + torch AdamW on tiny GPT-2:
the same initial weights (a Trellis checkpoint at step 0), the same batch
(a token file of seq + 1 tokens: every row of every step is that window),
AdamW with weight decay in parameter groups as Megatron and the Hugging Face
Trainer make them (1-D parameters undecayed; with --decay-1d, all decayed).
Prints each step's two losses and the largest relative difference, then
every parameter after the run: its largest difference relative to the
tensor's scale (a loss can agree while a parameter trains apart). Needs
torch, transformers and safetensors (a venv: never a test dependency).

Usage: torch_parity.py TRELLIS_BIN CONFIG [--decay-1d] [--steps N]
                       [--adam-eps E]
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

import numpy
import safetensors.torch
import torch
import transformers

transformers.logging.set_verbosity_error()
parser = argparse.ArgumentParser()
parser.add_argument("trellis")
parser.add_argument("config")
parser.add_argument("--decay-1d", action="store_true")
parser.add_argument("--steps", type=int, default=5)
# At 1e-8 AdamW's division turns the roundoff of a near-zero gradient into
# a step of up to the learning rate: parameters then differ by ~1e-3 of
# their scale though every loss agrees; 1e-4 shows the arithmetic itself.
parser.add_argument("--adam-eps", type=float, default=1e-8)
args = parser.parse_args()
batch, seq, lr, decay = 4, 32, 1e-3, 0.1

work = tempfile.mkdtemp()
config = json.load(open(args.config))
tokens = numpy.random.default_rng(0).integers(
    0, config["vocab_size"], seq + 1, dtype=numpy.uint16)
tokens.tofile(os.path.join(work, "tokens.bin"))
plan = os.path.join(work, "step.plan")
flags = ["--decay-1d"] if args.decay_1d else []
subprocess.run([args.trellis, "compile", args.config, "--batch", str(batch),
                "--seq", str(seq), "--lr", str(lr), "--adam-eps",
                str(args.adam_eps), "--weight-decay",
                str(decay), "-o", plan] + flags, check=True)
subprocess.run([args.trellis, "run", plan, "--steps", "0", "--save",
                os.path.join(work, "initial")], check=True,
               stdout=subprocess.DEVNULL)
run = subprocess.run([args.trellis, "run", plan, "--steps", str(args.steps),
                      "--data", os.path.join(work, "tokens.bin"), "--save",
                      os.path.join(work, "final")],
                     check=True, capture_output=True, text=True).stdout
trellis = [float(x) for x in re.findall(r"^step \d+ \| loss ([0-9.]+)", run,
                                        re.M)]

torch.manual_seed(0)
hf = transformers.GPT2Config(**config, resid_pdrop=0.0, embd_pdrop=0.0,
                             attn_pdrop=0.0)
model = transformers.GPT2LMHeadModel(hf)
weights = safetensors.torch.load_file(
    os.path.join(work, "initial", "model.safetensors"))
missing, unexpected = model.load_state_dict(weights, strict=False)
assert not unexpected and all("lm_head" in m or "attn.bias" in m
                              for m in missing), (missing, unexpected)
model.tie_weights()
decayed = [p for p in model.parameters() if p.ndim >= 2 or args.decay_1d]
undecayed = [p for p in model.parameters()
             if p.ndim < 2 and not args.decay_1d]
optimizer = torch.optim.AdamW(
    [{"params": decayed, "weight_decay": decay},
     {"params": undecayed, "weight_decay": 0.0}], lr=lr, eps=args.adam_eps)
window = torch.tensor(tokens.astype(numpy.int64))
inputs = window[:-1].repeat(batch, 1)
targets = window[1:].repeat(batch, 1)
reference = []
for _ in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    logits = model(input_ids=inputs).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    optimizer.step()
    reference.append(loss.item())

worst = 0.0
for step, (ours, theirs) in enumerate(zip(trellis, reference), 1):
    difference = abs(ours - theirs) / abs(theirs)
    worst = max(worst, difference)
    print(f"step {step} | trellis {ours:.7f} | torch {theirs:.7f} | "
          f"relative {difference:.2e}")
print(f"largest relative difference {worst:.2e} over {len(reference)} steps "
      f"({'every parameter decayed' if args.decay_1d else '1-D parameters undecayed'})")

trained = safetensors.torch.load_file(
    os.path.join(work, "final", "model.safetensors"))
state = model.state_dict()
farthest = ("", 0.0)
for name, ours in sorted(trained.items()):
    theirs = state[name].detach()
    difference = ((ours - theirs).abs().max() /
                  max(theirs.abs().max().item(), 1e-30)).item()
    farthest = max(farthest, (name, difference), key=lambda x: x[1])
print(f"parameters: {len(trained)} compared, the farthest {farthest[0]} at "
      f"{farthest[1]:.2e} of its scale")
