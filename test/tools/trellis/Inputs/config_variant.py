# Prints config BASE with fields set or removed: KEY=JSON sets KEY to the
# JSON value, -KEY removes it. Usage: config_variant.py BASE [KEY=JSON|-KEY]...
import json
import sys

config = json.load(open(sys.argv[1]))
for change in sys.argv[2:]:
    if change.startswith("-"):
        config.pop(change[1:], None)
    else:
        key, value = change.split("=", 1)
        config[key] = json.loads(value)
print(json.dumps(config, indent=2))
