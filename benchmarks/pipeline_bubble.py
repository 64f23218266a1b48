"""Measured pipeline bubble from a trace of `trellis run --trace`: the idle
share of the ranks' time, 1 - busy / (ranks * span), where busy is the time
each rank spent in instructions (its compute row, without waits and the
schedule actions' slices that enclose the instructions) and span
runs from the first slice to the last of any rank. Idle time between steps
(feeding the next batch) counts as bubble too.
Usage: pipeline_bubble.py TRACE.json"""
import collections
import json
import re
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"]
         for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
slices = [e for e in events if e["ph"] == "X"]
# Instructions only: not the waits, not the schedule actions enclosing them.
action = re.compile(r"[FBW][0-9]+(\.c[0-9]+)?|step")
busy = collections.Counter()
for e in slices:
    if names[(e["pid"], e["tid"])] == "compute" and \
            not e["name"].endswith("(wait)") and not action.fullmatch(e["name"]):
        busy[e["pid"]] += e["dur"]
span = max(e["ts"] + e["dur"] for e in slices) - min(e["ts"] for e in slices)
ranks = len(busy)
print(f"measured bubble {1 - sum(busy.values()) / (ranks * span):.3f} "
      f"({ranks} ranks, busy {', '.join(f'{busy[r] / span:.2f}' for r in sorted(busy))} of the span)")
