# Compares every tensor of two F32 safetensors files: same names and shapes,
# values equal within |a - b| <= rtol * (max(|a|, |b|) + scale), where scale
# is the tensor's largest magnitude: elementwise relative error, measured
# against the tensor's scale for elements near zero (whose AdamW updates
# amplify roundoff). Usage: compare_safetensors.py A B [rtol]
import sys

from compare_safetensors_io import load

a, b = load(sys.argv[1]), load(sys.argv[2])
rtol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
if sorted(a) != sorted(b):
    sys.exit(f"different tensors: {sorted(set(a) ^ set(b))}")
for name in a:
    (shape_a, x), (shape_b, y) = a[name], b[name]
    if shape_a != shape_b:
        sys.exit(f"{name}: shape {shape_a} vs {shape_b}")
    scale = max((abs(u) for u in x), default=0.0)
    for i, (u, v) in enumerate(zip(x, y)):
        if abs(u - v) > rtol * (max(abs(u), abs(v)) + scale):
            sys.exit(f"{name}[{i}]: {u} vs {v}")
print(f"{len(a)} tensors agree within rtol {rtol}")
