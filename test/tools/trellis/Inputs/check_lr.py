# Checks the "lr X" of every step line of a run against the schedule's
# formula (docs/Training.md), written here apart from the runtime's.
# Usage: check_lr.py RUN_OUTPUT KIND PEAK MIN WARMUP DECAY [WSD_DECAY]
import math
import re
import sys

path, kind = sys.argv[1], sys.argv[2]
peak, minimum = float(sys.argv[3]), float(sys.argv[4])
warmup, decay = int(sys.argv[5]), int(sys.argv[6])
wsd = int(sys.argv[7]) if len(sys.argv) > 7 else 0


def rate(step):
    if step <= warmup and warmup > 0:
        return peak * step / warmup
    clamp = lambda x: min(max(x, 0.0), 1.0)
    cosine = lambda r: minimum + (peak - minimum) * 0.5 * (1 + math.cos(math.pi * r))
    if kind == "constant":
        return peak
    if kind == "linear":
        return peak - (peak - minimum) * clamp((step - warmup) / (decay - warmup))
    if kind == "cosine":
        return cosine(clamp((step - warmup) / (decay - warmup)))
    return cosine(clamp((step - (decay - wsd)) / wsd))


lines = re.findall(r"^step (\d+) \| .* \| lr ([0-9.eE+-]+)", open(path).read(), re.M)
if not lines:
    sys.exit("no step lines with a rate")
for step, printed in lines:
    expected = rate(int(step))
    if abs(float(printed) - expected) > 1e-5 * expected + 1e-12:
        sys.exit(f"step {step}: lr {printed}, the formula gives {expected:.6g}")
print(f"{len(lines)} steps follow the {kind} schedule")
