# Compares the memory plan of trellis compile --report-json (each rank
# kind's total_peak) with the buffers trellis run allocated (its summary, or
# one "memory: rank R (stage S)" line per rank of a pipeline): equal, to the
# 0.1 MiB the run prints (both come from one lifetime analysis,
# planStepMemory).
# Usage: check_memory_plan.py REPORT.json RUN.out
import json
import re
import sys

report = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
planned = {rank["stage"]: rank["bytes"]["total_peak"] / 2**20
           for rank in report["per_rank"]}
measured = {}
for stage, mib in re.findall(r"^memory: rank \d+ \(stage (\d+)\) \| buffers ([0-9.]+) MiB", text, re.M):
    measured[int(stage)] = float(mib)
if not measured:
    measured[0] = float(re.search(r"^summary: .*\| buffers ([0-9.]+) MiB", text, re.M).group(1))
for stage, mib in sorted(planned.items()):
    if abs(measured[stage] - mib) > 0.05 + 1e-9:
        sys.exit(f"stage {stage}: planned {mib:.2f} MiB, measured {measured[stage]} MiB")
    print(f"stage {stage}: planned {mib:.1f} MiB, measured {measured[stage]:.1f} MiB")
