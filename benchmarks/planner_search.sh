#!/usr/bin/env bash
# How long `trellis plan` searches real-size models on one core: Llama-3-70B
# on 64 and 1024 H100s and Llama-3.1-405B on 16,384, with the candidates it
# priced, pruned, and the short-model compiles their costs were composed
# from (docs/Planner.md). Usage:
#   benchmarks/planner_search.sh [THREADS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
threads=${1:-1}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

printf '%-16s %6s %8s %10s %8s %8s %9s  %s\n' model gpus batch priced pruned \
  compiles seconds best
while read -r config gpus batch seq; do
  "$trellis" plan "$root/examples/configs/$config.json" --cluster h100-sxm \
    --gpus "$gpus" --global-batch "$batch" --seq "$seq" --top 1 \
    --threads "$threads" --json "$scratch/plan.json" > /dev/null
  python3 - "$scratch/plan.json" "$config" "$gpus" "$batch" "$seq" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
best = result["plans"][0]["plan"] if result["plans"] else "none fits"
print(f"{sys.argv[2]:<16} {sys.argv[3]:>6} {sys.argv[4] + 'x' + sys.argv[5]:>8} "
      f"{result['candidates_evaluated']:>10} {result['candidates_pruned']:>8} "
      f"{result['short_model_compiles']:>8} {result['search_seconds']:>9.1f}  {best}")
PY
done <<'RUNS'
llama-3-70b 64 256 4096
llama-3-70b 1024 1024 4096
llama-3.1-405b 16384 2048 8192
RUNS
