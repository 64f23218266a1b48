# Checks that each element of tensor NAME in the F32 safetensors FILE is a
# whole number of steps of size STEP from zero, and prints how many are not
# zero ("N of M moved"); or says which element is not. Usage:
# tensor_steps.py FILE NAME STEP
import sys

from compare_safetensors_io import load

path, name, step = sys.argv[1], sys.argv[2], float(sys.argv[3])
shape, values = load(path)[name]
moved = 0
for index, value in enumerate(values):
    count = round(value / step)
    if abs(value - count * step) > 1e-6:
        sys.exit(f"{name}[{index}] = {value}: not a whole number of {step}")
    moved += count != 0
print(f"{moved} of {len(values)} moved")
