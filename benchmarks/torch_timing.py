"""The PyTorch eager side of the side-by-side step benchmarks: a causal LM's
training step (cross-entropy, torch AdamW without decay) timed as the
Trellis side is, one warm-up step first."""
import time

import torch


def eager_step_seconds(module, tokens, targets, steps: int) -> float:
    """Mean seconds per training step of `module` (a transformers causal
    LM) on `tokens` and `targets` ([batch, seq] integer arrays) over
    `steps` steps after one untimed."""
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3,
                                  weight_decay=0.0)
    inputs = torch.as_tensor(tokens, dtype=torch.long)
    labels = torch.as_tensor(targets, dtype=torch.long)

    def step():
        logits = module(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                 labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps
