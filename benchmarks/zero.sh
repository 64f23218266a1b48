#!/usr/bin/env bash
# ZeRO stages 0-3 on GPT-2 mini (B8 S128, AdamW, fp32) at dp = 2 and 4: per
# rank, the report's model states, memory plan and bytes sent per step,
# beside the buffers trellis run measured and the mean step time (first
# step left out). Then a trace of ZeRO-3 at dp = 4: how much of the
# parameters' all_gather time ran while the compute lane was busy (the next
# part's gathers in flight while the current part computes).
# Usage: benchmarks/zero.sh [steps]   (default 5)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
steps=${1:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mib() { python3 -c "import json,sys; r=json.load(open('$1'))['per_rank'][0]; b=r['bytes']; print('states %6.1f | plan %6.1f | sent %6.1f' % (b['model_states']/2**20, b['total_peak']/2**20, sum(r['comm_bytes'].values())/2**20))"; }
for dp in 2 4; do
  for zero in 0 1 2 3; do
    plan=$work/z$zero.dp$dp.plan
    "$trellis" compile "$root/examples/configs/gpt2-mini.json" --batch 8 \
      --seq 128 --dp "$dp" --zero "$zero" --report-json "$plan.json" -o "$plan"
    out=$("$trellis" run "$plan" --nproc "$dp" --steps "$steps")
    summary=$(grep '^summary' <<< "$out")
    step=$(sed -E 's/.*mean step ([0-9.]+) ms.*/\1/' <<< "$summary")
    buffers=$(sed -E 's/.*buffers ([0-9.]+) MiB.*/\1/' <<< "$summary")
    printf 'dp %d ZeRO-%d | %s MiB | measured buffers %6s MiB | step %s ms\n' \
      "$dp" "$zero" "$(mib "$plan.json")" "$buffers" "$step"
  done
done
plan=$work/z3.dp4.plan
"$trellis" run "$plan" --nproc 4 --steps 2 --trace "$work/z3.json" > /dev/null
python3 "$root/benchmarks/collective_overlap.py" "$work/z3.json" all_gather
