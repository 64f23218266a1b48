# Prints, per rank kind of two `trellis compile --report-json` files of the
# same layout, what the second adds to the first: persistent bytes and bytes
# handed to each collective kind that differs (sends and receives
# included). Usage: compare_reports.py A.json B.json
import json
import sys

a, b = (json.load(open(path))["per_rank"] for path in sys.argv[1:3])
if len(a) != len(b):
    sys.exit(f"expected reports of one layout, found {len(a)} and {len(b)} rank kinds")
for x, y in zip(a, b):
    items = [f"persistent +{y['bytes']['persistent'] - x['bytes']['persistent']}"]
    for kind in sorted(set(x["comm_bytes"]) | set(y["comm_bytes"])):
        added = y["comm_bytes"].get(kind, 0) - x["comm_bytes"].get(kind, 0)
        if added:
            items.append(f"{kind} +{added}")
    print(f"stage {x['stage']}: " + ", ".join(items))
