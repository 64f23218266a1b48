# Reads an F32 safetensors file: name -> (shape, array of floats).
import array
import json
import struct

def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    base = 8 + size
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        values = array.array("f")
        values.frombytes(data[base + begin:base + end])
        tensors[name] = (entry["shape"], values)
    return tensors

