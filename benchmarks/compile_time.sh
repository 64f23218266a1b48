#!/usr/bin/env bash
# Compile time (import + autodiff + plan emission) of the real-size configs'
# training steps (the longest sequence up to 4096; batch = dp) on 1 rank,
# dp=2, dp=32 and dp=32 x tp=8, and the plan sizes: neither may grow with
# the mesh. Pipelines: the plan holds every micro-batch's forward and
# backward, so it grows with m (and not with the ranks of a stage).
# Usage: benchmarks/compile_time.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
plan=$(mktemp --suffix=.plan)
trap 'rm -f "$plan"' EXIT

# Compiles CONFIG with the remaining arguments and prints LABEL, the time,
# the plan's size and its instruction count.
time_compile() {
  local label=$1 config=$2
  shift 2
  local start end
  start=$(date +%s.%N)
  "$trellis" compile "$root/examples/configs/$config.json" "$@" -o "$plan"
  end=$(date +%s.%N)
  printf '%-14s %-22s compile %6.3f s  plan %8d bytes  %6d instructions\n' \
    "$config" "$label" "$(echo "$end - $start" | bc)" "$(stat -c %s "$plan")" \
    "$(grep -o '"op":' "$plan" | wc -l)"
}

for entry in gpt2-124m:1024 llama-3.2-1b:4096 llama-3-8b:4096 llama-3-70b:4096; do
  config=${entry%%:*} seq=${entry##*:}
  for mesh in 1:1 2:1 32:1 32:8; do
    dp=${mesh%%:*} tp=${mesh##*:}
    # GPT-2's vocabulary (50257) does not divide by 8.
    [[ $config == gpt2-124m && $tp != 1 ]] && continue
    time_compile "dp=$dp tp=$tp" "$config" --batch "$dp" --seq "$seq" \
      --dp "$dp" --tp "$tp"
  done
done
for pipeline in "llama-3-8b 4096 8 8" "llama-3-8b 4096 8 32" "llama-3-70b 4096 16 32"; do
  read -r config seq pp m <<< "$pipeline"
  time_compile "pp=$pp m=$m tp=8" "$config" --batch "$m" --seq "$seq" \
    --microbatches "$m" --mesh "pp=$pp,dp=1,tp=8"
done
