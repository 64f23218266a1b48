#!/usr/bin/env bash
# What a second core gives: per round, the step time of 1 and 2 threads
# (taskset to that many cores) of Trellis and, with PYTORCH_PYTHON set, of
# PyTorch eager (pytorch_step.py), next to the machine's own figure for the
# same moment: a matrix product of the model's precision
# (trellis-gemm-benchmark's mlp_up: oneDNN sgemm for fp32, oneDNN's AMX
# matmul for bf16) on 1 and 2 cores. A virtual machine's second core is not
# always a whole core (its host shares it): rounds where the product itself
# gains less than PROBE_FLOOR (1.9x) show it, and the summary gives the
# medians over all rounds and over the others.
#
# Usage: thread_scaling.sh [rounds] [steps]; MODELS as in
# mixed_precision.sh (default gpt2-mini:8:128), PRECISIONS (default
# "fp32 bf16").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
gemm=${GEMM_BENCHMARK:-$root/build/benchmarks/trellis-gemm-benchmark}
rounds=${1:-5}
steps=${2:-8}
floor=${PROBE_FLOOR:-1.9}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -n ${PYTORCH_PYTHON:-} ]] ||
  echo "PyTorch skipped: set PYTORCH_PYTHON to a Python with torch and transformers"

cores() { seq -s, 0 $(($1 - 1)); }

# GFLOP/s of the probe product on $2 threads.
probe() {
  TRELLIS_THREADS=$2 taskset -c "$(cores "$2")" "$gemm" \
    --benchmark_filter="^trellis-$1/mlp_up\$" --benchmark_min_time=0.3 2>/dev/null |
    grep -o 'GFLOP/s=[0-9.]*[k]*' | sed -e 's/GFLOP\/s=//' |
    awk '/k$/ {sub("k", ""); print $1 * 1000; next} {print}'
}

trellisStep() {
  taskset -c "$(cores "$2")" "$trellis" run "$1" --steps "$steps" \
    --threads "$2" | sed -n -e 's/.*mean step \([0-9.]*\) ms.*/\1/p'
}

eagerStep() {
  taskset -c "$(cores "$4")" "$PYTORCH_PYTHON" "$root/benchmarks/pytorch_step.py" \
    "$root/examples/configs/$1.json" "$2" "$3" "$steps" "$4" "$5" |
    sed -n -e 's/.*mean step \([0-9.]*\) ms.*/\1/p'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

median() {
  sort -n | awk '{v[NR] = $1} END {
    if (NR == 0) print "-"; else if (NR % 2) printf "%.2f", v[(NR + 1) / 2];
    else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

for entry in ${MODELS:-gpt2-mini:8:128}; do
  IFS=: read -r config batch seq <<< "$entry"
  for precision in ${PRECISIONS:-fp32 bf16}; do
    plan=$work/$config.$precision.plan
    "$trellis" compile "$root/examples/configs/$config.json" --batch "$batch" \
      --seq "$seq" --precision "$precision" -o "$plan"
    kind=$([[ $precision == bf16 ]] && echo bf16 || echo f32)
    : > "$work/rounds"
    for round in $(seq "$rounds"); do
      p1=$(probe "$kind" 1); p2=$(probe "$kind" 2)
      t1=$(trellisStep "$plan" 1); t2=$(trellisStep "$plan" 2)
      machine=$(ratio "$p2" "$p1") ours=$(ratio "$t1" "$t2") theirs=-
      line=$(printf '%s %s round %d | %s matmul 2 cores / 1: %s | Trellis %s / %s ms: %sx' \
        "$config" "$precision" "$round" "$kind" "$machine" "$t1" "$t2" "$ours")
      if [[ -n ${PYTORCH_PYTHON:-} ]]; then
        e1=$(eagerStep "$config" "$batch" "$seq" 1 "$precision")
        e2=$(eagerStep "$config" "$batch" "$seq" 2 "$precision")
        theirs=$(ratio "$e1" "$e2")
        line="$line | eager $e1 / $e2 ms: ${theirs}x"
      fi
      echo "$line"
      echo "$machine $ours $theirs" >> "$work/rounds"
    done
    quiet=$(awk -v f="$floor" '$1 >= f' "$work/rounds")
    # "Trellis 1.70x, eager 1.60x" (eager left out where it did not run).
    figures() {
      local ours theirs
      ours=$(awk 'NF {print $2}' <<< "$1" | median)
      theirs=$(awk 'NF && $3 != "-" {print $3}' <<< "$1" | median)
      printf 'Trellis %sx' "$ours"
      [[ $theirs == - ]] || printf ', eager %sx' "$theirs"
    }
    printf '%s %s scaling, median of %d rounds: %s, matmul %sx | of the %d rounds where the matmul gained >= %sx: %s\n' \
      "$config" "$precision" "$rounds" "$(figures "$(cat "$work/rounds")")" \
      "$(awk '{print $1}' "$work/rounds" | median)" \
      "$(grep -c . <<< "$quiet" || true)" "$floor" \
      "$([[ -n $quiet ]] && figures "$quiet" || echo none)"
  done
done
