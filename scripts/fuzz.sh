#!/usr/bin/env bash
# Builds a fuzz target with clang + libFuzzer + AddressSanitizer and runs it
# for the given number of seconds (default 60), starting from the
# repository's own inputs:
#   scripts/fuzz.sh [plan] [SECONDS]   the plan loader (and each stage run once)
#   scripts/fuzz.sh mlir [SECONDS]     MLIR text: parse, verify, compile
#   scripts/fuzz.sh config [SECONDS]   config.json: parse, import, compile
#   scripts/fuzz.sh types [SECONDS]    every field of compiled plans as every
#                                      JSON type (trellis-plan-type-fuzz, the
#                                      normal build; no clang needed)
# The plan target builds the runtime alone (build-fuzz); the other two build
# the whole project with clang-22 (build-fuzz-compiler; apt-get install
# clang-22 libclang-rt-22-dev libomp-dev), with OpenMP from libomp-dev (not
# libomp-22-dev: it puts a libgomp.so.1 into MLIR's library directory, which
# the normal build's binaries would then load instead of GCC's). Any crash
# leaves its input in the build directory and a non-zero exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=plan
if [[ ${1:-} =~ ^(plan|mlir|config|types)$ ]]; then
  target=$1
  shift
fi
seconds=${1:-60}

# Compiles the plans both plan targets start from into directory $1: one
# rank and pipelines, micro-batches, zero-bubble and interleaved schedules,
# mixed precision, ZeRO with padded pieces, the parallelisms' collectives.
compile_plans() {
  for config in gpt2-tiny llama-tiny; do
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 1 --seq 4 -o "$1/$config.plan"
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 2 --seq 4 --pp 2 --microbatches 2 -o "$1/$config.pp2.plan"
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 4 --seq 4 --microbatches 4 -o "$1/$config.m4.plan"
    "$root/build/bin/trellis" compile "$root/examples/configs/$config.json" \
      --batch 4 --seq 4 --pp 2 --microbatches 4 --schedule zb-h1 \
      -o "$1/$config.zb.plan"
  done
  # Plan format v4 with several chunks per stage (interleaved 1F1B).
  "$root/build/bin/trellis" compile \
    "$root/test/tools/trellis/Inputs/llama-tiny-4layers.json" --batch 4 \
    --seq 4 --pp 2 --chunks 2 --schedule interleaved --microbatches 2 \
    -o "$1/llama.interleaved.plan"
  # Mixed precision: bf16 and f16 buffers, casts, a loss_scale argument.
  "$root/build/bin/trellis" compile "$root/examples/configs/llama-tiny.json" \
    --batch 1 --seq 4 --precision bf16 -o "$1/llama.bf16.plan"
  "$root/build/bin/trellis" compile "$root/examples/configs/gpt2-tiny.json" \
    --batch 2 --seq 4 --precision fp16 --pp 2 --microbatches 2 \
    -o "$1/gpt2.fp16.pp2.plan"
  # ZeRO: split states, masters, padded pieces (global_shape).
  "$root/build/bin/trellis" compile \
    "$root/test/tools/trellis/Inputs/llama-odd.json" --batch 4 --seq 4 \
    --dp 4 --zero 3 --precision bf16 -o "$1/llama-odd.z3.plan"
  "$root/build/bin/trellis" compile "$root/examples/configs/gpt2-tiny.json" \
    --batch 4 --seq 4 --mesh pp=2,dp=2 --microbatches 2 --zero 2 \
    -o "$1/gpt2.z2.pp2.plan" 2>/dev/null
  # Collectives of tensor, sequence, context and expert parallelism.
  "$root/build/bin/trellis" compile "$root/examples/configs/llama-tiny.json" \
    --batch 2 --seq 4 --tp 2 --sp -o "$1/llama.tp2.sp.plan"
  "$root/build/bin/trellis" compile "$root/examples/configs/llama-tiny.json" \
    --batch 2 --seq 8 --cp 2 -o "$1/llama.cp2.plan"
  "$root/build/bin/trellis" compile "$root/examples/configs/mixtral-tiny.json" \
    --batch 2 --seq 4 --ep 2 --clip-grad 1.0 -o "$1/mixtral.ep2.plan"
}

if [[ $target == types ]]; then
  "$root/scripts/setup.sh" >/dev/null
  plans=$root/build/type-fuzz-plans
  mkdir -p "$plans"
  compile_plans "$plans"
  exec "$root/build/bin/trellis-plan-type-fuzz" --seconds="$seconds" \
    "$plans"/*.plan
fi

if [[ $target != plan ]]; then
  build=$root/build-fuzz-compiler
  clang=clang++-22
  command -v "$clang" >/dev/null || clang=clang++
  omp_include=$(dirname "$(ls /usr/lib/llvm-*/lib/clang/*/include/omp.h | head -1)")
  omp_library=$(ls /usr/lib/llvm-*/lib/libomp.so | head -1)
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${clang/++/}" -DCMAKE_CXX_COMPILER="$clang" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DOpenMP_C_FLAGS="-fopenmp -I$omp_include" \
    -DOpenMP_CXX_FLAGS="-fopenmp -I$omp_include" \
    -DOpenMP_C_LIB_NAMES=omp -DOpenMP_CXX_LIB_NAMES=omp \
    -DOpenMP_omp_LIBRARY="$omp_library" \
    -DTRELLIS_BUILD_FUZZERS=ON >/dev/null
  ninja -C "$build" "trellis-$target-fuzzer"
  corpus=$build/corpus-$target
  mkdir -p "$corpus"
  if [[ $target == mlir ]]; then
    # A leading byte picks the parallel options (tools/trellis-fuzz).
    i=0
    for file in "$root"/test/*/*.mlir "$root"/test/*/*/*.mlir \
        "$root"/test/tools/trellis/Inputs/*.mlir "$root"/examples/*.mlir; do
      [[ -f $file ]] || continue
      for options in '\x00' '\x03' '\x15'; do
        { printf "$options"; cat "$file"; } > "$corpus/seed-$i"
        i=$((i + 1))
      done
    done
  else
    i=0
    for file in "$root"/examples/configs/*.json \
        "$root"/test/tools/trellis/Inputs/*.json; do
      for options in '\x00' '\x03' '\x25'; do
        { printf "$options"; cat "$file"; } > "$corpus/seed-$i"
        i=$((i + 1))
      done
    done
  fi
  cd "$build"
  exec "$build/bin/trellis-$target-fuzzer" "$corpus" \
    -max_total_time="$seconds" -max_len=65536 -timeout=60 -rss_limit_mb=4096 \
    -print_final_stats=1
fi

build=$root/build-fuzz
corpus=$build/corpus
cmake -G Ninja -S "$root/runtime" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTRELLIS_BUILD_FUZZERS=ON >/dev/null
ninja -C "$build" trellis-plan-fuzzer
mkdir -p "$corpus"
if [[ -x $root/build/bin/trellis ]]; then
  compile_plans "$corpus"
fi
"$build/trellis-plan-fuzzer" "$corpus" -max_total_time="$seconds" \
  -max_len=200000 -print_final_stats=1
