#!/usr/bin/env bash
# Memory against time on one CPU rank: a small GPT-2 (batch 8, seq 128)
# with gradient accumulation (--microbatches) and full recomputation
# (--recompute full), alone and together: buffer bytes, the compiler's
# activation estimate, and the mean step time. Usage:
# benchmarks/memory_tradeoffs.sh [steps]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
steps=${1:-4}
plan=$(mktemp --suffix=.plan)
trap 'rm -f "$plan"' EXIT
for microbatches in 1 4; do
  for recompute in none full; do
    estimate=$("$trellis" compile "$root/examples/configs/gpt2-mini.json" \
      --batch 8 --seq 128 --microbatches "$microbatches" \
      --recompute "$recompute" --report -o "$plan" 2>&1 |
      sed -n 's/^activations (peak live, estimate): \(.*\) per rank/\1/p')
    summary=$("$trellis" run "$plan" --steps "$steps" | tail -1)
    step=$(sed -n 's/.*mean step \([0-9.]*\) ms.*/\1/p' <<< "$summary")
    buffers=$(sed -n 's/.*buffers \([0-9.]*\) MiB.*/\1/p' <<< "$summary")
    printf 'microbatches %s  recompute %-4s  buffers %7s MiB  activation estimate %10s  step %7s ms\n' \
      "$microbatches" "$recompute" "$buffers" "$estimate" "$step"
  done
done
