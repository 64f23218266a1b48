# Prints how row 0 (the padding row) and row 1 of a table moved between two
# F32 safetensors files: the ratio of row 0's values (one number when the
# row only decayed) and whether row 1 moved. Usage: padding_row.py A B NAME
import array
import json
import struct
import sys


def table(path, name):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8:8 + size])[name]
    begin, end = entry["data_offsets"]
    values = array.array("f")
    values.frombytes(data[8 + size + begin:8 + size + end])
    width = entry["shape"][1]
    return [values[r * width:(r + 1) * width] for r in range(2)]


before, after = table(sys.argv[1], sys.argv[3]), table(sys.argv[2], sys.argv[3])
ratios = {round(b / a, 6) for a, b in zip(before[0], after[0]) if a != 0}
moved = max(abs(b - a) for a, b in zip(before[1], after[1]))
print("row 0 ratios", sorted(ratios), "row 1 moved", moved > 1e-5)
