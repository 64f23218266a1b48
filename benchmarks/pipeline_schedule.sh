#!/usr/bin/env bash
# Simulated pipeline schedules of real-size models: for GPipe, 1F1B and
# interleaved 1F1B (2 chunks) with m = 8 and 32 micro-batches, the stage
# split, the makespan, the bubble and the peak memory of stage 0 (the one
# that keeps the most micro-batches alive). Stage costs are roofline
# estimates for an H100-class device (400 TFLOP/s, 3 TB/s). Usage:
# benchmarks/pipeline_schedule.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
rates=(--flops-per-second 4e14 --bytes-per-second 3e12)
for entry in gpt2-124m:4:1024 llama-3-8b:8:2048; do
  IFS=: read -r config pp seq <<< "$entry"
  for m in 8 32; do
    for schedule in gpipe 1f1b interleaved; do
      chunks=1
      [[ $schedule == interleaved ]] && chunks=2
      out=$("$trellis" schedule "$root/examples/configs/$config.json" \
        --pp "$pp" --microbatches "$m" --schedule "$schedule" \
        --chunks "$chunks" --seq "$seq" "${rates[@]}")
      split=$(sed -n 's/.*virtual stages (balanced): //p' <<< "$out")
      makespan=$(sed -n 's/^makespan \([0-9.]*\) ms, bubble \([0-9.]*\)/\1 ms  bubble \2/p' <<< "$out")
      stage0=$(sed -n 's/^stage 0: .*peak live activations \([0-9]*\), peak memory \(.*\) (states.*/live \1  memory \2/p' <<< "$out")
      printf '%-11s pp=%s m=%-2s %-11s split [%s]  %s  stage 0: %s\n' \
        "$config" "$pp" "$m" "$schedule" "$split" "$makespan" "$stage0"
    done
  done
done
