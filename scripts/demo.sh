#!/usr/bin/env bash
# Sets up and builds Trellis, then runs the main job on its embedded default:
# compile the tiny GPT-2 of examples/ into a data-parallel training plan and
# train it for 30 steps on 2 CPU ranks (2 processes), then the same model as
# a 2-stage 1F1B pipeline of 4 micro-batches (the same losses), then print
# the process groups of a 3-D mesh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TRELLIS_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh" >/dev/null

plan=$(mktemp --suffix=.plan)
trap 'rm -f "$plan"' EXIT
echo "== trellis compile examples/configs/gpt2-tiny.json --batch 8 --seq 64 --dp 2 --report =="
"$build/bin/trellis" compile "$root/examples/configs/gpt2-tiny.json" \
  --batch 8 --seq 64 --lr 3e-3 --dp 2 --report -o "$plan"
echo "== trellis run --nproc 2 (30 steps, synthetic data) =="
"$build/bin/trellis" run "$plan" --nproc 2 --steps 30 --log-every 5
echo
echo "== trellis compile examples/configs/gpt2-tiny.json --batch 8 --seq 64 --pp 2 --microbatches 4 --schedule 1f1b =="
"$build/bin/trellis" compile "$root/examples/configs/gpt2-tiny.json" \
  --batch 8 --seq 64 --lr 3e-3 --pp 2 --microbatches 4 --schedule 1f1b \
  -o "$plan"
echo "== trellis run --nproc 2 (30 steps, synthetic data) =="
"$build/bin/trellis" run "$plan" --nproc 2 --steps 30 --log-every 5
echo
echo "== trellis groups --mesh dp=2,pp=2,tp=4 --rank 3 =="
"$build/bin/trellis" groups --mesh dp=2,pp=2,tp=4 --rank 3
