#!/usr/bin/env bash
# Pipeline bubble, measured on the CPU against the simulator, and memory per
# stage for GPipe, 1F1B and zero-bubble (ZB-H1): a small GPT-2 (examples/configs/gpt2-mini.json,
# 4 layers, batch 8, seq 128) split over pp = 2 and pp = 4 ranks with m = 8
# micro-batches. Measured: the ranks' idle share in a trace of `trellis run`
# (benchmarks/pipeline_bubble.py). Simulated: `trellis schedule` with the
# model's per-stage costs, and with uniform stages (for GPipe and 1F1B
# (p - 1) / (m + p - 1)).
# With more ranks than cores the ranks share cores, which slows the busy
# ones: read pp = 4 on a 2-core machine as an upper bound.
# Usage: benchmarks/pipeline_bubble.sh [steps]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
steps=${1:-4}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$root/examples/configs/gpt2-mini.json
echo "cores: $(nproc)"
# One split for both schedules (the balancer may pick different ones per
# schedule), so that memory and time compare like with like.
for pp in 2 4; do
  layers=$([ "$pp" = 2 ] && echo 2,2 || echo 1,1,1,1)
  for schedule in gpipe 1f1b zb-h1; do
    plan=$dir/pp$pp.$schedule.plan
    "$trellis" compile "$config" --batch 8 --seq 128 --microbatches 8 \
      --pp "$pp" --pp-layers "$layers" --schedule "$schedule" -o "$plan"
    echo "== pp=$pp m=8 $schedule =="
    "$trellis" run "$plan" --nproc "$pp" --steps "$steps" --log-every "$steps" \
      --trace "$dir/trace.json" | grep -E 'summary|memory:'
    python3 "$root/benchmarks/pipeline_bubble.py" "$dir/trace.json"
    "$trellis" schedule "$config" --batch 1 --seq 128 --pp "$pp" \
      --pp-layers "$layers" --microbatches 8 --schedule "$schedule" |
      grep -E 'bubble'
    echo "uniform stages: $("$trellis" schedule --pp "$pp" --microbatches 8 \
      --schedule "$schedule" | grep makespan)"
  done
done
