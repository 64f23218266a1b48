#!/usr/bin/env bash
# Compile time (import + autodiff + plan emission) of the real-size configs'
# training steps (the longest sequence up to 4096; batch = dp) on 1 rank,
# dp=2, dp=32 and dp=32 x tp=8, and the plan sizes: neither may grow with
# the mesh. Usage: benchmarks/compile_time.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
plan=$(mktemp --suffix=.plan)
trap 'rm -f "$plan"' EXIT
for entry in gpt2-124m:1024 llama-3.2-1b:4096 llama-3-8b:4096 llama-3-70b:4096; do
  for mesh in 1:1 2:1 32:1 32:8; do
  dp=${mesh%%:*} tp=${mesh##*:}
  config=${entry%%:*}
  # GPT-2's vocabulary (50257) does not divide by 8.
  [[ $config == gpt2-124m && $tp != 1 ]] && continue
  start=$(date +%s.%N)
  "$trellis" compile "$root/examples/configs/$config.json" --batch "$dp" \
    --seq "${entry##*:}" --dp "$dp" --tp "$tp" -o "$plan"
  end=$(date +%s.%N)
  printf '%-14s dp=%-3s tp=%-2s compile %6.3f s  plan %8d bytes  %6d instructions\n' \
    "$config" "$dp" "$tp" "$(echo "$end - $start" | bc)" "$(stat -c %s "$plan")" \
    "$(grep -o '"op":' "$plan" | wc -l)"
  done
done
# Pipelines: the plan holds every micro-batch's forward and backward, so it
# grows with m (and not with the ranks of a stage).
for pipeline in "llama-3-8b 4096 8 8" "llama-3-8b 4096 8 32" "llama-3-70b 4096 16 32"; do
  read -r config seq pp m <<< "$pipeline"
  start=$(date +%s.%N)
  "$trellis" compile "$root/examples/configs/$config.json" --batch "$m" \
    --seq "$seq" --microbatches "$m" --mesh "pp=$pp,dp=1,tp=8" -o "$plan"
  end=$(date +%s.%N)
  printf '%-14s pp=%-2s m=%-3s tp=8 compile %6.3f s  plan %8d bytes  %6d instructions\n' \
    "$config" "$pp" "$m" "$(echo "$end - $start" | bc)" "$(stat -c %s "$plan")" \
    "$(grep -o '"op":' "$plan" | wc -l)"
done
