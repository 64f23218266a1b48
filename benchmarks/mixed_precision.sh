#!/usr/bin/env bash
# Step time and memory of fp32 against bf16 mixed precision, one process,
# 1 and 2 threads (taskset to that many cores): GPT-2 mini (B8 S128) and
# GPT-2 124M (B4 S256), AdamW. Prints the mean step (the first step left
# out), the buffers and the peak resident memory, and the kernel profile's
# matmul time. With PYTORCH_PYTHON set to a Python that has torch and
# transformers (a venv), PyTorch eager runs the same step in the same run,
# pinned to the same cores (benchmarks/pytorch_step.py); with
# TORCH_COMPILE=1 also torch.compile (its first three steps left out: give
# at least 5 steps). With JAX_PYTHON set to a Python that has jax and
# optax, JAX jit runs the same step too (benchmarks/jax_step.py). Each
# that is not set is skipped with a line saying so. MODELS picks the
# configurations (CONFIG:BATCH:SEQ).
# Usage: [PYTORCH_PYTHON=venv/bin/python] [TORCH_COMPILE=1]
#        [JAX_PYTHON=jaxvenv/bin/python] [MODELS="gpt2-124m:4:256"]
#        benchmarks/mixed_precision.sh [steps]   (default 4)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
steps=${1:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -n ${PYTORCH_PYTHON:-} ]] ||
  echo "PyTorch skipped: set PYTORCH_PYTHON to a Python with torch and transformers"
[[ -n ${JAX_PYTHON:-} ]] ||
  echo "JAX skipped: set JAX_PYTHON to a Python with jax and optax"

for entry in ${MODELS:-gpt2-mini:8:128 gpt2-124m:4:256}; do
  IFS=: read -r config batch seq <<< "$entry"
  for precision in fp32 bf16; do
    plan=$work/$config.$precision.plan
    "$trellis" compile "$root/examples/configs/$config.json" --batch "$batch" \
      --seq "$seq" --precision "$precision" -o "$plan"
    for threads in 1 2; do
      cores=$(seq -s, 0 $((threads - 1)))
      out=$(taskset -c "$cores" "$trellis" run "$plan" --steps "$steps" \
        --threads "$threads" --profile)
      summary=$(grep '^summary' <<< "$out")
      matmul=$(awk '$1 == "matmul" {print $2}' <<< "$out")
      printf '%-10s %-5s threads %d | %s | matmul %s ms over %d steps\n' \
        "$config" "$precision" "$threads" \
        "$(sed -e 's/^summary: steps [0-9-]* | //' <<< "$summary")" \
        "$matmul" "$steps"
      if [[ -n ${PYTORCH_PYTHON:-} ]]; then
        taskset -c "$cores" "$PYTORCH_PYTHON" "$root/benchmarks/pytorch_step.py" \
          "$root/examples/configs/$config.json" "$batch" "$seq" "$steps" \
          "$threads" "$precision" | sed -e "s/^/$config /"
        if [[ -n ${TORCH_COMPILE:-} ]]; then
          taskset -c "$cores" "$PYTORCH_PYTHON" \
            "$root/benchmarks/pytorch_step.py" \
            "$root/examples/configs/$config.json" "$batch" "$seq" "$steps" \
            "$threads" "$precision" compile | sed -e "s/^/$config /"
        fi
      fi
      if [[ -n ${JAX_PYTHON:-} ]]; then
        taskset -c "$cores" "$JAX_PYTHON" "$root/benchmarks/jax_step.py" \
          "$root/examples/configs/$config.json" "$batch" "$seq" "$steps" \
          "$threads" "$precision" | sed -e "s/^/$config /"
      fi
    done
  done
done
