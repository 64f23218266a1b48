#!/usr/bin/env bash
# Two builds of Trellis side by side: CPU step time and compile time of
# each, rounds interleaved (which build goes first alternates), medians over
# the rounds. Each build compiles its own plans (plan formats may differ).
# Usage: benchmarks/compare_builds.sh BASE_TRELLIS NEW_TRELLIS [rounds] [steps] [threads]
#   MODELS: the step configurations, config:batch:seq:precision
#   (default gpt2-mini:8:128:fp32 gpt2-mini:8:128:bf16 gpt2-124m:4:256:fp32)
#   COMPILES: the compiles timed, config:seq:dp (default gpt2-124m:1024:1
#   llama-3-8b:4096:32 llama-3-70b:4096:1024)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BASE_TRELLIS NEW_TRELLIS [rounds] [steps] [threads]" >&2
  exit 2
fi
builds=("$1" "$2")
rounds=${3:-5}
steps=${4:-6}
threads=${5:-2}
for build in "${builds[@]}"; do
  [[ -x $build ]] || { echo "$build: not an executable" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() {
  sort -n | awk '{v[NR] = $1} END {
    if (NR == 0) print "-"; else if (NR % 2) printf "%.3f", v[(NR + 1) / 2];
    else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# Seconds of one compile by build $1 of config $2 at seq $3 and dp $4.
compileSeconds() {
  local start end
  start=$(date +%s.%N)
  "$1" compile "$root/examples/configs/$2.json" --batch "$4" --seq "$3" \
    --dp "$4" -o "$work/compile.plan" > /dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

# The mean step (ms, the first step left out by `trellis run`) of plan $2
# run by build $1.
stepMilliseconds() {
  "$1" run "$2" --steps "$steps" --threads "$threads" |
    sed -n -e 's/.*mean step \([0-9.]*\) ms.*/\1/p'
}

models=${MODELS:-gpt2-mini:8:128:fp32 gpt2-mini:8:128:bf16 gpt2-124m:4:256:fp32}
compiles=${COMPILES:-gpt2-124m:1024:1 llama-3-8b:4096:32 llama-3-70b:4096:1024}
for entry in $models; do
  IFS=: read -r config batch seq precision <<< "$entry"
  for b in 0 1; do
    "${builds[$b]}" compile "$root/examples/configs/$config.json" \
      --batch "$batch" --seq "$seq" --precision "$precision" \
      -o "$work/$config.$precision.$b.plan" > /dev/null
  done
done
for round in $(seq "$rounds"); do
  order=(0 1)
  ((round % 2 == 0)) && order=(1 0)
  for b in "${order[@]}"; do
    for entry in $models; do
      IFS=: read -r config batch seq precision <<< "$entry"
      ms=$(stepMilliseconds "${builds[$b]}" "$work/$config.$precision.$b.plan")
      echo "$ms" >> "$work/step.$config.$precision.$b"
    done
    for entry in $compiles; do
      IFS=: read -r config seq dp <<< "$entry"
      compileSeconds "${builds[$b]}" "$config" "$seq" "$dp" \
        >> "$work/compile.$config.$dp.$b"
    done
  done
done
printf 'medians of %d interleaved rounds, %d threads (base: %s, new: %s)\n' \
  "$rounds" "$threads" "${builds[0]}" "${builds[1]}"
for entry in $models; do
  IFS=: read -r config batch seq precision <<< "$entry"
  base=$(median < "$work/step.$config.$precision.0")
  new=$(median < "$work/step.$config.$precision.1")
  printf 'step    %-12s B%-3s S%-5s %-5s base %9s ms  new %9s ms  new/base %s\n' \
    "$config" "$batch" "$seq" "$precision" "$base" "$new" \
    "$(awk -v a="$new" -v b="$base" 'BEGIN {printf "%.3f", a / b}')"
done
for entry in $compiles; do
  IFS=: read -r config seq dp <<< "$entry"
  base=$(median < "$work/compile.$config.$dp.0")
  new=$(median < "$work/compile.$config.$dp.1")
  printf 'compile %-12s S%-5s dp=%-5s     base %9s s   new %9s s   new/base %s\n' \
    "$config" "$seq" "$dp" "$base" "$new" \
    "$(awk -v a="$new" -v b="$base" 'BEGIN {printf "%.3f", a / b}')"
done
