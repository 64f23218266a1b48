#!/usr/bin/env bash
# Compile time (import + autodiff + sharding + pipeline split + plan
# emission) of the real-size configs' training steps (the longest sequence
# up to 4096; batch = dp x micro-batches) and the plan sizes: neither may
# grow with the mesh (dp = 2 vs 1024) or with the micro-batches (m = 8 vs
# 128, pipelined or not): programs are written once per action, only the
# schedule follows m.
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
# Llama-3-70B: the issue's rows (mesh size, micro-batches, pipelines).
for dp in 2 1024; do
  time_compile "dp=$dp" llama-3-70b --batch "$dp" --seq 4096 --dp "$dp"
done
for m in 8 128; do
  time_compile "m=$m" llama-3-70b --batch "$m" --seq 4096 --microbatches "$m"
done
for m in 8 32 128; do
  time_compile "pp=8 dp=32 tp=8 m=$m" llama-3-70b --batch $((32 * m)) \
    --seq 4096 --microbatches "$m" --mesh pp=8,dp=32,tp=8
done
