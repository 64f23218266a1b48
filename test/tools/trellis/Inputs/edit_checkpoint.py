# Edits a checkpoint the way a hand or a bug could, then reseals its
# manifest (sizes and CRC-32s), if it has one, so that only the edit is
# wrong.
# Usage: edit_checkpoint.py DIR FILE KEY VALUE  (a __metadata__ entry of
#        DIR/FILE, a .safetensors file)
#        edit_checkpoint.py DIR manifest.json JSON  (the manifest's text)
import json
import os
import struct
import sys
import zlib

directory, name = sys.argv[1:3]
path = os.path.join(directory, name)
if name == "manifest.json":
    with open(path, "w") as f:
        f.write(sys.argv[3])
    sys.exit(0)
key, value = sys.argv[3:5]
with open(path, "rb") as f:
    data = f.read()
(length,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + length])
header.setdefault("__metadata__", {})[key] = value
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data[8 + length:])
manifest_path = os.path.join(directory, "manifest.json")
if not os.path.exists(manifest_path):
    sys.exit(0)  # a checkpoint from before manifests
with open(manifest_path) as f:
    manifest = json.load(f)
for entry in manifest["files"]:
    with open(os.path.join(directory, entry["name"]), "rb") as f:
        contents = f.read()
    entry["bytes"] = len(contents)
    entry["crc32"] = zlib.crc32(contents)
with open(manifest_path, "w") as f:
    json.dump(manifest, f)
