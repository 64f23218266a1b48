#!/usr/bin/env bash
# What the cost query saves a planner: the time to price a candidate with
# `trellis compile --emit estimate` (import, autodiff, presets, propagation,
# stage assignment, the query) against compiling it and reporting
# (--report-json: partitioning, ring lowering, bucketing, the pipeline
# split, fusion, the plan and the report walk), on real-size configs.
# Medians of RUNS interleaved runs (default 5). Usage:
#   benchmarks/estimate_time.sh [RUNS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
runs=${1:-5}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

seconds() { # command...
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null 2>&1
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

while IFS='|' read -r label config flags; do
  args=("$root/examples/configs/$config.json" $flags)
  : > "$scratch/estimate" ; : > "$scratch/compile"
  for _ in $(seq "$runs"); do
    seconds "$trellis" compile "${args[@]}" --emit estimate -o /dev/null >> "$scratch/estimate"
    seconds "$trellis" compile "${args[@]}" --report-json /dev/null -o /dev/null >> "$scratch/compile"
  done
  printf '%-34s estimate %6.3f s   compile + report %6.3f s\n' "$label" \
    "$(median < "$scratch/estimate")" "$(median < "$scratch/compile")"
done <<'CONFIGS'
llama-3-8b dp32 tp8 zero1|llama-3-8b|--batch 32 --seq 4096 --mesh dp=32,tp=8 --zero 1 --precision bf16
llama-3-8b dp8 cp4 ring tp8|llama-3-8b|--batch 8 --seq 4096 --mesh dp=8,cp=4,tp=8 --cp-kind ring --precision bf16
llama-3-70b pp8 dp32 tp8 m8|llama-3-70b|--batch 256 --seq 4096 --mesh pp=8,dp=32,tp=8 --microbatches 8 --precision bf16 --zero 1
CONFIGS
