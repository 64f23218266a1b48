#!/usr/bin/env bash
# Step time of a small GPT-2 (examples/configs/gpt2-mini.json, batch 8, seq
# 128) on 1 rank, with data parallelism and with tensor parallelism over 2
# ranks, and the share of the step spent in communication (rank 0's
# profile).
# Usage: benchmarks/parallel_step.sh [steps]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
steps=${1:-10}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
config=$root/examples/configs/gpt2-mini.json
"$trellis" compile "$config" --batch 8 --seq 128 -o "$dir/1.plan"
"$trellis" compile "$config" --batch 8 --seq 128 --dp 2 --report -o "$dir/dp2.plan"
echo "== 1 rank =="
"$trellis" run "$dir/1.plan" --steps "$steps" --log-every "$steps" --profile | grep -E 'summary|profile|matmul'
echo "== dp=2 (2 processes) =="
"$trellis" run "$dir/dp2.plan" --nproc 2 --steps "$steps" --log-every "$steps" --profile | grep -E 'summary|profile|all_reduce|matmul'
"$trellis" compile "$config" --batch 8 --seq 128 --tp 2 --report -o "$dir/tp2.plan"
echo "== tp=2 (2 processes) =="
"$trellis" run "$dir/tp2.plan" --nproc 2 --steps "$steps" --log-every "$steps" --profile | grep -E 'summary|profile|all_reduce|all_gather|cross_entropy|matmul'
