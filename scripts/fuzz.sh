#!/usr/bin/env bash
# Builds the runtime alone with clang + libFuzzer + AddressSanitizer and
# fuzzes the plan loader for the given number of seconds (default 60),
# starting from plans of the tiny example models.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
build=$root/build-fuzz
corpus=$build/corpus
cmake -G Ninja -S "$root/runtime" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTRELLIS_BUILD_FUZZERS=ON >/dev/null
ninja -C "$build" trellis-plan-fuzzer
mkdir -p "$corpus"
if [[ -x $root/build/bin/trellis ]]; then
  for config in gpt2-tiny llama-tiny; do
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 1 --seq 4 -o "$corpus/$config.plan"
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 2 --seq 4 --pp 2 --microbatches 2 -o "$corpus/$config.pp2.plan"
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 4 --seq 4 --microbatches 4 -o "$corpus/$config.m4.plan"
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 4 --seq 4 --pp 2 --microbatches 4 --schedule zb-h1 \
      -o "$corpus/$config.zb.plan"
  done
  # Plan format v4 with several chunks per stage (interleaved 1F1B).
  "$root/build/bin/trellis" compile \
    "$root/test/tools/trellis/Inputs/llama-tiny-4layers.json" --batch 4 \
    --seq 4 --pp 2 --chunks 2 --schedule interleaved --microbatches 2 \
    -o "$corpus/llama.interleaved.plan"
  # Mixed precision: bf16 and f16 buffers, casts, a loss_scale argument.
  "$root/build/bin/trellis" compile "$root/examples/configs/llama-tiny.json" \
    --batch 1 --seq 4 --precision bf16 -o "$corpus/llama.bf16.plan"
  "$root/build/bin/trellis" compile "$root/examples/configs/gpt2-tiny.json" \
    --batch 2 --seq 4 --precision fp16 --pp 2 --microbatches 2 \
    -o "$corpus/gpt2.fp16.pp2.plan"
  # ZeRO: split states, masters, padded pieces (global_shape).
  "$root/build/bin/trellis" compile \
    "$root/test/tools/trellis/Inputs/llama-odd.json" --batch 4 --seq 4 \
    --dp 4 --zero 3 --precision bf16 -o "$corpus/llama-odd.z3.plan"
  "$root/build/bin/trellis" compile "$root/examples/configs/gpt2-tiny.json" \
    --batch 4 --seq 4 --mesh pp=2,dp=2 --microbatches 2 --zero 2 \
    -o "$corpus/gpt2.z2.pp2.plan" 2>/dev/null
fi
"$build/trellis-plan-fuzzer" "$corpus" -max_total_time="$seconds" \
  -max_len=200000 -print_final_stats=1
