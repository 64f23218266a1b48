# Counts the collectives over one mesh axis of a step's MLIR (trellis
# compile --emit mlir) by model part and phase: one line per (part, phase,
# collective), in sorted order. Usage: count_collectives.py AXIS < step.mlir
import collections
import re
import sys

axis = sys.argv[1]
counts = collections.Counter()
inside = False
for line in sys.stdin:
    if "func.func @train_step" in line or "func.func @gradients" in line:
        inside = True
    if not inside:
        continue
    found = re.search(r"trellis\.(all_reduce|all_gather|reduce_scatter|all_to_all|collective_permute)"
                      rf' %\S+ over @mesh \["{axis}"\]', line)
    if not found:
        continue
    part = re.search(r"graph\.part = #graph\.part<([^>]*)>", line)
    phase = re.search(r'graph\.phase = "([a-z]+)"', line)
    counts[(part.group(1) if part else "step",
            phase.group(1) if phase else "step", found.group(1))] += 1
for (part, phase, op), count in sorted(counts.items()):
    print(f"{part} {phase} {op} {count}")
