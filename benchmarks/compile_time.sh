#!/usr/bin/env bash
# Compile time (import + autodiff + plan emission) of the real-size configs'
# training steps (batch 1, the longest sequence up to 4096), and the plan sizes. Usage: benchmarks/compile_time.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
plan=$(mktemp --suffix=.plan)
trap 'rm -f "$plan"' EXIT
for entry in gpt2-124m:1024 llama-3.2-1b:4096 llama-3-8b:4096 llama-3-70b:4096; do
  config=${entry%%:*}
  start=$(date +%s.%N)
  "$trellis" compile "$root/examples/configs/$config.json" --batch 1 --seq "${entry##*:}" -o "$plan"
  end=$(date +%s.%N)
  printf '%-14s compile %6.3f s  plan %8d bytes  %6d instructions\n' "$config" \
    "$(echo "$end - $start" | bc)" "$(stat -c %s "$plan")" \
    "$(grep -o '"op":' "$plan" | wc -l)"
done
