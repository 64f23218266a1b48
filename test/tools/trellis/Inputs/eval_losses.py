# Compares the evaluations runs print ("eval step N | loss X | K batches").
# Usage: eval_losses.py same A B [tol]    every evaluation of A equals B's
#        eval_losses.py forward F E [tol] E's first evaluation equals the
#                                         mean of F's step losses (a plan
#                                         without optimizer reading the
#                                         same windows step by step)
import re
import sys


def evaluations(path):
    with open(path) as f:
        return [(int(m.group(1)), float(m.group(2))) for m in re.finditer(
            r"^eval step (\d+) \| loss ([0-9.eE+-]+)", f.read(), re.M)]


def step_losses(path):
    with open(path) as f:
        return [float(m.group(1)) for m in re.finditer(
            r"^step \d+ \| loss ([0-9.eE+-]+)", f.read(), re.M)]


def close(x, y, tolerance):
    return abs(x - y) <= tolerance * max(abs(x), abs(y))


mode, a, b = sys.argv[1:4]
tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
if mode == "same":
    first, second = evaluations(a), evaluations(b)
    if not first or [s for s, _ in first] != [s for s, _ in second]:
        sys.exit(f"different evaluations: {first} vs {second}")
    for (step, x), (_, y) in zip(first, second):
        if not close(x, y, tolerance):
            sys.exit(f"evaluation at step {step}: loss {x} vs {y}")
    print(f"{len(first)} evaluations agree within {tolerance:g}")
elif mode == "forward":
    losses, evaluated = step_losses(a), evaluations(b)
    if not losses or not evaluated:
        sys.exit(f"nothing to compare: {losses} and {evaluated}")
    mean = sum(losses) / len(losses)
    if not close(mean, evaluated[0][1], tolerance):
        sys.exit(f"evaluation {evaluated[0][1]} vs the forward's mean {mean}")
    print(f"the evaluation equals the forward's mean of {len(losses)} "
          f"batches within {tolerance:g}")
else:
    sys.exit(f"unknown mode {mode}")
