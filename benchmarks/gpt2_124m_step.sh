#!/usr/bin/env bash
# Step time of a GPT-2 124M training step at batch 4, seq 256 on one rank,
# with the time per op kind. Usage: benchmarks/gpt2_124m_step.sh [steps] [threads]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
steps=${1:-4}
threads=${2:-1}
plan=$(mktemp --suffix=.plan)
trap 'rm -f "$plan"' EXIT
"$trellis" compile "$root/examples/configs/gpt2-124m.json" --batch 4 --seq 256 -o "$plan"
"$trellis" run "$plan" --steps "$steps" --threads "$threads" --profile
