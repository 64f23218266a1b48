# Compares the "step N | loss X" lines of two runs: same steps, losses equal
# within a relative tolerance (default 1e-5), and the lines' "grad norm Y"
# too where both runs print one. Usage: compare_losses.py A B [tol]
import re
import sys

def losses(path):
    with open(path) as f:
        return [(int(m.group(1)), float(m.group(2)))
                for m in re.finditer(r"^step (\d+) \| loss ([0-9.eE+-]+)", f.read(), re.M)]

a, b = losses(sys.argv[1]), losses(sys.argv[2])
tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
if not a or [s for s, _ in a] != [s for s, _ in b]:
    sys.exit(f"different steps: {a} vs {b}")
for (step, x), (_, y) in zip(a, b):
    if abs(x - y) > tolerance * max(abs(x), abs(y)):
        sys.exit(f"step {step}: loss {x} vs {y}")

def norms(path):
    with open(path) as f:
        return [float(m.group(1))
                for m in re.finditer(r"^step \d+ \|.*\| grad norm ([0-9.eE+-]+)", f.read(), re.M)]

na, nb = norms(sys.argv[1]), norms(sys.argv[2])
if na and nb:
    if len(na) != len(nb):
        sys.exit(f"different grad norm lines: {na} vs {nb}")
    for step, (x, y) in enumerate(zip(na, nb), 1):
        if abs(x - y) > tolerance * max(abs(x), abs(y)):
            sys.exit(f"step {step}: grad norm {x} vs {y}")
    print(f"{len(a)} steps agree within {tolerance} (grad norms too)")
else:
    print(f"{len(a)} steps agree within {tolerance}")
