# Prints a .safetensors file's tensors from its header, one per line in name
# order: "name dtype [shape]". Usage: safetensors_header.py FILE
import json
import struct
import sys

with open(sys.argv[1], "rb") as f:
    (length,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(length))
header.pop("__metadata__", None)
for name in sorted(header):
    entry = header[name]
    print(name, entry["dtype"], entry["shape"])
