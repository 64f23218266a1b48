# Copies a .safetensors file with one element of one F32 tensor replaced.
# Usage: poison_safetensors.py IN OUT TENSOR INDEX VALUE (VALUE: nan, inf)
import json
import struct
import sys

source, target, name, index, value = sys.argv[1:6]
with open(source, "rb") as f:
    data = bytearray(f.read())
(length,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8 : 8 + length])
entry = header[name]
assert entry["dtype"] == "F32", entry["dtype"]
offset = 8 + length + entry["data_offsets"][0] + 4 * int(index)
data[offset : offset + 4] = struct.pack("<f", float(value))
with open(target, "wb") as f:
    f.write(data)
