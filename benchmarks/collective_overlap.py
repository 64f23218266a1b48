"""How much of a collective's time ran while the compute lane was busy, per
rank, from a `trellis run --trace` file: the overlap of the collective's
slices on the communication lane with the compute lane's slices (other
than waits for collectives). Usage: collective_overlap.py TRACE NAME"""
import json
import sys

trace, name = sys.argv[1], sys.argv[2]
events = json.load(open(trace))["traceEvents"]
lanes = {(e["pid"], e["tid"]): e["args"]["name"]
         for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
slices = [e for e in events if e["ph"] == "X"]
for rank in sorted({e["pid"] for e in slices}):
    mine = [e for e in slices if e["pid"] == rank]
    compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine
                     if "comm" not in lanes[(rank, e["tid"])]
                     and "(wait)" not in e["name"])
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in mine
            if "comm" in lanes[(rank, e["tid"])] and e["name"] == name]
    waits = sum(e["dur"] for e in mine if e["name"] == f"{name} (wait)")
    total = sum(end - start for start, end in comm)
    overlapped = 0.0
    for start, end in comm:
        for c0, c1 in compute:
            if c1 <= start:
                continue
            if c0 >= end:
                break
            overlapped += min(end, c1) - max(start, c0)
    share = overlapped / total if total else 0.0
    print(f"rank {rank}: {len(comm)} {name}, {total / 1e3:.1f} ms, "
          f"{share:.0%} while computing; compute waited {waits / 1e3:.1f} ms")
