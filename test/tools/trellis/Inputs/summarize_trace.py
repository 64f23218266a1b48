"""Summarizes a Chrome trace written by `trellis run --trace`: per rank,
the slices on each row (collectives and pipeline transfers by name), the
pipeline actions each rank ran in its first step,
whether the ranks share one time origin, and whether every slice has a
name and a non-negative duration."""
import collections
import json
import re
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
# Pipeline schedule actions (F3, B3, F3.c1, step) in the order they ran,
# for each rank's first step.
for rank in sorted({e["pid"] for e in slices}):
    actions = sorted((e["ts"], e["name"]) for e in slices if e["pid"] == rank
                     and re.fullmatch(r"[FB][0-9]+(\.c[0-9]+)?|step",
                                      e["name"]))
    names = [name for _, name in actions]
    if names:
        print(f"rank {rank} actions:",
              " ".join(names[:names.index("step") + 1]))
print("origin", int(min(e["ts"] for e in slices)))
print("well-formed", all(e["name"] and e["dur"] >= 0 for e in slices))
