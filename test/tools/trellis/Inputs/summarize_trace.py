"""Summarizes a Chrome trace written by `trellis run --trace`: per rank,
the slices on each row (collectives and pipeline transfers by name),
whether the ranks share one time origin, and whether every slice has a
name and a non-negative duration."""
import collections
import json
import sys

COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
               "broadcast", "send", "recv"}

events = json.load(open(sys.argv[1]))["traceEvents"]
slices = [e for e in events if e["ph"] == "X"]
names = {(e["pid"], e["tid"]): e["args"]["name"]
         for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
rows = collections.Counter((e["pid"], names[(e["pid"], e["tid"])])
                           for e in slices)
for (rank, row), count in sorted(rows.items()):
    kinds = sorted({e["name"] for e in slices
                    if e["pid"] == rank and names[(rank, e["tid"])] == row})
    collectives = [k for k in kinds if k.split()[0] in COLLECTIVES]
    print(f"rank {rank} {row}: {'some' if count else 'no'} slices;"
          f" {', '.join(collectives) or 'no collective'}")
print("origin", int(min(e["ts"] for e in slices)))
print("well-formed", all(e["name"] and e["dur"] >= 0 for e in slices))
