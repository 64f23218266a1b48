# Checks trellis compile --report-json files of ZeRO stages 0-3 (in that
# order) against the ZeRO paper: for Psi parameters in bf16 mixed precision
# with AdamW (K = 12) on Nd data-parallel ranks, model states per rank of
# 16 Psi, 4 Psi + 12 Psi / Nd, 2 Psi + 14 Psi / Nd and 16 Psi / Nd (within
# 1%); and bytes sent per step: stages 0-2 equal (all_reduce = reduce_scatter
# + all_gather), stage 3 about 1.5x: every weight gathered for the forward
# and again for the backward (the embedding table is not, its backward
# reads no weights: a little less; a tied table is gathered for its
# forward uses in the embedding and the head and again for the head's
# backward: more, bounds given as LOW HIGH).
# Usage: check_zero_report.py ND Z0.json Z1.json Z2.json Z3.json [LOW HIGH]
import json
import sys

nd = int(sys.argv[1])
reports = [json.load(open(path)) for path in sys.argv[2:6]]
psi = reports[0]["model_parameters"]
expected = [16 * psi, 4 * psi + 12 * psi / nd, 2 * psi + 14 * psi / nd,
            16 * psi / nd]
sent = []
for stage, (report, want) in enumerate(zip(reports, expected)):
    rank = report["per_rank"][0]
    states = rank["bytes"]["model_states"]
    if abs(states - want) > 0.01 * want:
        sys.exit(f"ZeRO-{stage}: model states {states} bytes, expected {want}")
    print(f"ZeRO-{stage}: {states / psi:.4f} bytes per parameter "
          f"({states / 2**30:.2f} GiB for {psi / 1e9:.2f} B)")
    sent.append(sum(rank["comm_bytes"].values()))
for stage in (1, 2):
    if abs(sent[stage] - sent[0]) > 0.01 * sent[0]:
        sys.exit(f"ZeRO-{stage} sends {sent[stage]}, ZeRO-0 {sent[0]}")
ratio = sent[3] / sent[0]
low = float(sys.argv[6]) if len(sys.argv) > 6 else 1.4
high = float(sys.argv[7]) if len(sys.argv) > 7 else 1.5
if not low <= ratio <= high:
    sys.exit(f"ZeRO-3 sends {ratio:.3f}x ZeRO-0")
print(f"communication: stages 0-2 equal, stage 3 {ratio:.2f}x")
