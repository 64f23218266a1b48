#!/usr/bin/env bash
# Checks the CUDA backend on a machine with an NVIDIA GPU, in two halves so
# that the GPU machine needs neither MLIR nor the Debian packages the build
# uses:
#
#   scripts/gpu-check.sh prepare DIR
#       Where the project is built (build/): gathers into DIR the runtime's
#       binaries (trellis-run and the runtime's test programs), the shared
#       libraries they link beside them, the plans the check runs (compiled
#       with build/bin/trellis) and each plan's CPU run: losses, gradient
#       norms and the parameters after the last step.
#
#   scripts/gpu-check.sh run DIR OUT
#       On the GPU machine: the CUDA unit tests, every every-backend test on
#       cuda (each test in its own process, so a crash names its test and
#       hides no other), each plan on cuda against its CPU run (a failing
#       one again without a CUDA graph), a bitwise checkpoint reload,
#       GPT-2 124M's step time (fused with and without a CUDA graph,
#       unfused, attention on CUDA cores) beside PyTorch eager's and
#       torch.compile's, Llama-3.2-1B's beside both, per-op profiles with
#       matmul's and attention's rates beside cuBLAS's and SDPA's, and a
#       memory checker pass over the kernel conformance test where
#       compute-sanitizer exists. Logs go to
#       OUT, and all of them to OUT.tar.gz; a summary line per check ends the
#       output. Plans of several ranks (data, tensor, ZeRO-3, pipelines) run
#       their ranks on the one GPU over NCCL, each rank its own NCCL host.
#       Exit status: the number of failed checks.
#
# The CUDA libraries are found as `trellis run --device cuda` finds them
# (runtime/cuda/README.md); PyTorch's wheels are enough.
set -uo pipefail

mode=${1:-}
dir=${2:-}
if [[ -z "$mode" || -z "$dir" ]]; then
  echo "usage: $0 prepare DIR | run DIR OUT" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)

# Each plan: name, then `trellis compile` options. tiny_lm is the hand-written
# MLP language model (no attention); gpt2-tiny has attention.
plans=(
  "lm-fp32|$root/examples/tiny_lm.mlir --batch 16 --adam-eps 1e-5 --fuse=false"
  "lm-fp32-microbatches|$root/examples/tiny_lm.mlir --batch 16 --microbatches 4 --adam-eps 1e-5 --fuse=false"
  "lm-fp32-clip-cosine|$root/examples/tiny_lm.mlir --batch 16 --adam-eps 1e-5 --fuse=false --clip-grad 0.5 --lr-schedule cosine --warmup-steps 2 --decay-steps 6 --weight-decay 0.1"
  "lm-sgd|$root/examples/tiny_lm.mlir --batch 16 --optimizer sgd --lr 0.1 --fuse=false"
  "lm-bf16|$root/examples/tiny_lm.mlir --batch 16 --adam-eps 1e-5 --fuse=false --precision bf16"
  "lm-fp16|$root/examples/tiny_lm.mlir --batch 16 --adam-eps 1e-5 --fuse=false --precision fp16"
  "gpt2-fp32|$root/examples/configs/gpt2-tiny.json --batch 4 --seq 96 --adam-eps 1e-5 --fuse=false"
  "gpt2-bf16|$root/examples/configs/gpt2-tiny.json --batch 4 --seq 96 --adam-eps 1e-5 --fuse=false --precision bf16"
  "gpt2-fused|$root/examples/configs/gpt2-tiny.json --batch 4 --seq 96 --adam-eps 1e-5"
  "llama-fp32|$root/examples/configs/llama-tiny.json --batch 4 --seq 80 --adam-eps 1e-5 --fuse=false"
  "llama-bf16|$root/examples/configs/llama-tiny.json --batch 4 --seq 80 --adam-eps 1e-5 --fuse=false --precision bf16"
  "gemma2-fp32|$root/examples/configs/gemma2-tiny.json --batch 2 --seq 64 --adam-eps 1e-5 --fuse=false"
  "gemma3-fp32|$root/examples/configs/gemma3-tiny.json --batch 2 --seq 64 --adam-eps 1e-5"
  "gemma3-bf16|$root/examples/configs/gemma3-tiny.json --batch 2 --seq 64 --adam-eps 1e-5 --precision bf16"
  "mixtral-fp32|$root/examples/configs/mixtral-tiny.json --batch 4 --seq 32 --adam-eps 1e-5"
  "mixtral-bf16|$root/examples/configs/mixtral-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --precision bf16"
  "deepseek-v3-fp32|$root/examples/configs/deepseek-v3-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --expert-bias-update 0.001"
)
steps=6
# Several ranks on the machine's one GPU, each started as torchrun would
# start it (RANK, WORLD_SIZE, LOCAL_RANK=0, so all take GPU 0) with an
# NCCL_HOSTID of its own: NCCL refuses two ranks of one host on one GPU,
# and ranks of different "hosts" talk over sockets on the loopback device.
# Each: name, ranks, then `trellis compile` options; the CPU runs the same
# plan with as many ranks.
multi_plans=(
  "gpt2-dp2|2|$root/examples/configs/gpt2-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --fuse=false --dp 2"
  "gpt2-tp2-sp|2|$root/examples/configs/gpt2-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --fuse=false --tp 2 --sp"
  "gpt2-zero3|2|$root/examples/configs/gpt2-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --fuse=false --dp 2 --zero 3"
  "gpt2-pp2-1f1b|2|$root/test/tools/trellis/Inputs/gpt2-tiny-4layers.json --batch 8 --seq 16 --adam-eps 1e-5 --fuse=false --pp 2 --microbatches 4 --schedule 1f1b"
  "llama-pp2-interleaved|2|$root/test/tools/trellis/Inputs/llama-tiny-4layers.json --batch 8 --seq 16 --adam-eps 1e-5 --fuse=false --pp 2 --chunks 2 --microbatches 4 --schedule interleaved"
  "llama-pp2-zb-h1|2|$root/test/tools/trellis/Inputs/llama-tiny-4layers.json --batch 8 --seq 16 --adam-eps 1e-5 --fuse=false --pp 2 --microbatches 4 --schedule zb-h1"
  "llama-pp2-dp2|4|$root/test/tools/trellis/Inputs/llama-tiny-4layers.json --batch 8 --seq 16 --adam-eps 1e-5 --fuse=false --pp 2 --dp 2 --microbatches 2"
  "mixtral-ep2-gather|2|$root/examples/configs/mixtral-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --ep 2"
  "mixtral-ep2-all-to-all|2|$root/examples/configs/mixtral-tiny.json --batch 4 --seq 32 --adam-eps 1e-5 --ep 2 --ep-dispatch all-to-all"
)
# Timed only (no CPU run): GPT-2 124M, bf16, 16 x 1024 tokens (llm.c's
# shape), as compiled
# by default (fused) and unfused, beside PyTorch eager on the same GPU
# (benchmarks/pytorch_step.py).
timed_config=$root/examples/configs/gpt2-124m.json
timed_options="--batch 16 --seq 1024 --precision bf16"
# Timed too: a Llama-3.2-1B step (bf16, 4 x 2048 tokens) beside PyTorch
# eager and torch.compile; MFU against the H100/H200's 989 TFLOP/s of dense
# bf16, with the plan's own count of a step's FLOPs (`--report`).
llama_config=$root/examples/configs/llama-3.2-1b.json
llama_options="--batch 4 --seq 2048 --precision bf16"
peak_flops=989e12

prepare() {
  local build=$root/build
  mkdir -p "$dir/bin" "$dir/lib" "$dir/plans"
  cp "$build/bin/trellis-run" "$build/runtime/unittests/TrellisRuntimeTests" \
    "$build/runtime/unittests/TrellisCudaTests" "$dir/bin/" || return 1
  cp "$root"/test/tools/trellis/Inputs/compare_losses.py \
    "$root"/test/tools/trellis/Inputs/compare_safetensors.py \
    "$root"/test/tools/trellis/Inputs/compare_safetensors_io.py "$dir/bin/"
  # Every shared library the binaries link but the C and C++ runtimes
  # (glibc, libstdc++, libgcc_s: the GPU machine's own are newer).
  ldd "$dir"/bin/trellis-run "$dir"/bin/Trellis*Tests | awk '/=> \// {print $3}' |
    sort -u |
    grep -v -E '/(libc|libm|libmvec|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libz|ld-linux[^/]*)\.so' |
    while read -r library; do cp -L "$library" "$dir/lib/"; done
  cp "$root/benchmarks/pytorch_step.py" "$root/benchmarks/pytorch_kernels.py" \
    "$timed_config" "$llama_config" "$dir/bin/"
  # shellcheck disable=SC2086
  "$build/bin/trellis" compile "$llama_config" $llama_options --report \
    --report-json "$dir/plans/timed-llama.json" \
    -o "$dir/plans/timed-llama.plan" >"$dir/plans/timed-llama.report" 2>&1 ||
    return 1
  # shellcheck disable=SC2086
  "$build/bin/trellis" compile "$timed_config" $timed_options --report \
    --report-json "$dir/plans/timed-fused.json" \
    -o "$dir/plans/timed-fused.plan" >"$dir/plans/timed-fused.report" 2>&1 ||
    return 1
  # shellcheck disable=SC2086
  "$build/bin/trellis" compile "$timed_config" $timed_options --fuse=false \
    -o "$dir/plans/timed-unfused.plan" || return 1
  local entry name options ranks
  for entry in "${plans[@]}"; do
    name=${entry%%|*}
    options=${entry#*|}
    # shellcheck disable=SC2086
    "$build/bin/trellis" compile $options -o "$dir/plans/$name.plan" || return 1
    rm -rf "$dir/plans/$name.cpu"
    "$build/bin/trellis" run "$dir/plans/$name.plan" --steps $steps \
      --save "$dir/plans/$name.cpu" >"$dir/plans/$name.cpu.out" || return 1
  done
  for entry in "${multi_plans[@]}"; do
    IFS='|' read -r name ranks options <<<"$entry"
    # shellcheck disable=SC2086
    "$build/bin/trellis" compile $options -o "$dir/plans/$name.plan" || return 1
    rm -rf "$dir/plans/$name.cpu"
    "$build/bin/trellis" run "$dir/plans/$name.plan" --nproc "$ranks" \
      --steps $steps --save "$dir/plans/$name.cpu" \
      >"$dir/plans/$name.cpu.out" || return 1
  done
}

failures=0
summary=()
record() { # record NAME STATUS [DETAIL]
  summary+=("$(printf '%-58s %s %s' "$1" "$2" "${3:-}")")
  [[ "$2" == ok || "$2" == skipped ]] || failures=$((failures + 1))
}

# Compares a cuda run's losses and parameters with the CPU's.
compare_run() { # compare_run NAME CPU_PREFIX CUDA_PREFIX TOLERANCE
  local detail status
  detail=$(python3 "$dir/bin/compare_losses.py" "$2.out" "$3.out" "$4" 2>&1) &&
    detail+="; "$(python3 "$dir/bin/compare_safetensors.py" \
      "$2/model.safetensors" "$3/model.safetensors" "$4" 2>&1)
  status=$?
  [[ $status -eq 0 ]] && record "$1" ok "$detail" || record "$1" "DIFFERS" "$detail"
}

# Runs the ranks of a plan on GPU 0, each as its own "host" (see
# multi_plans); rank 0's output is the run's.
run_ranks() { # run_ranks PLAN RANKS PORT SAVE OUT
  local rank pids=() status=0
  for ((rank = 1; rank < $2; ++rank)); do
    env RANK=$rank WORLD_SIZE="$2" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$3" TRELLIS_JOB_TOKEN=trellis-gpu-check-token \
      NCCL_HOSTID="trellis-gpu-check-$rank" NCCL_SOCKET_IFNAME=lo \
      NCCL_IB_DISABLE=1 timeout 120 "$dir/bin/trellis-run" "$1" --device cuda \
      --steps $steps --save "$4" --timeout 45 \
      ${TRELLIS_GPU_CHECK_RUN_OPTIONS:-} >"$5.rank$rank" 2>&1 &
    pids+=($!)
  done
  env RANK=0 WORLD_SIZE="$2" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT="$3" TRELLIS_JOB_TOKEN=trellis-gpu-check-token \
    NCCL_HOSTID=trellis-gpu-check-0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
    NCCL_DEBUG=WARN timeout 120 "$dir/bin/trellis-run" "$1" --device cuda \
    --steps $steps --save "$4" --timeout 45 ${TRELLIS_GPU_CHECK_RUN_OPTIONS:-} \
    >"$5" 2>&1 || status=$?
  for pid in "${pids[@]}"; do
    wait "$pid" || { local failed=$?; [[ $status -ne 0 ]] || status=$failed; }
  done
  return "$status"
}

# Runs every test of a gtest program matching a filter, each alone.
run_tests() { # run_tests PROGRAM FILTER LOG
  local program=$1 filter=$2 log=$3 test status reason
  for test in $("$program" --gtest_filter="$filter" --gtest_list_tests |
    awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}'); do
    timeout 120 "$program" --gtest_filter="$test" >"$log.one" 2>&1
    status=$?
    cat "$log.one" >>"$log"
    if [[ $status -ne 0 ]]; then
      reason=$(grep -m1 -E 'Failure|error|Segmentation|Aborted|CUDA' "$log.one" | cut -c1-160)
      record "$test" "FAILED($status)" "$reason"
    elif grep -q '\[  SKIPPED \]' "$log.one"; then
      record "$test" skipped "$(grep -m1 -A0 'skipped' "$log.one" | cut -c1-120)"
    else
      record "$test" ok
    fi
  done
  rm -f "$log.one"
}

run() {
  local out=${3:-}
  [[ -n "$out" ]] || { echo "usage: $0 run DIR OUT" >&2; exit 2; }
  mkdir -p "$out"
  # Seconds after which the optional measurements (torch.compile) are
  # skipped: the machine's time is short (TRELLIS_GPU_CHECK_SECONDS).
  local budget=${TRELLIS_GPU_CHECK_SECONDS:-420}
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free \
    --format=csv 2>&1 | tee "$out/gpu.txt"
  # The libraries the backend finds there (PyTorch's wheels), by version.
  python3 -c "import torch; print('torch', torch.__version__, '| CUDA',
    torch.version.cuda, '| cuDNN', torch.backends.cudnn.version(), '| NCCL',
    '.'.join(map(str, torch.cuda.nccl.version())))" 2>&1 |
    tee -a "$out/gpu.txt" || true
  run_tests "$dir/bin/TrellisCudaTests" '*' "$out/cuda-tests.log"
  run_tests "$dir/bin/TrellisRuntimeTests" '*/cuda:CudaLibraries*:CudaBackend*' \
    "$out/backend-tests.log"

  local entry name run_dir status detail
  for entry in "${plans[@]}"; do
    name=${entry%%|*}
    run_dir=$out/$name
    rm -rf "$run_dir.cuda"
    timeout 120 "$dir/bin/trellis-run" "$dir/plans/$name.plan" --device cuda \
      --steps $steps --save "$run_dir.cuda" >"$run_dir.cuda.out" 2>&1
    status=$?
    local tolerance=1e-5
    [[ "$name" == *bf16* || "$name" == *fp16* ]] && tolerance=2e-2
    if [[ $status -ne 0 ]]; then
      record "plan $name" "FAILED($status)" "$(grep -m1 -i error "$run_dir.cuda.out" | cut -c1-160)"
      # Without a CUDA graph: whether the recording is what failed.
      rm -rf "$run_dir.eager"
      timeout 120 "$dir/bin/trellis-run" "$dir/plans/$name.plan" --device cuda \
        --steps $steps --save "$run_dir.eager" --cuda-graph=false \
        >"$run_dir.eager.out" 2>&1 &&
        compare_run "plan $name (no CUDA graph)" "$dir/plans/$name.cpu" \
          "$run_dir.eager" $tolerance
      continue
    fi
    compare_run "plan $name" "$dir/plans/$name.cpu" "$run_dir.cuda" $tolerance
  done
  # A checkpoint reload continues bit for bit: 3 steps, saved, reloaded,
  # 3 more, against the 6 steps of gpt2-fp32 above (losses of steps 4-6
  # and the parameters, exactly).
  local resumed=$out/gpt2-fp32-resumed
  rm -rf "$resumed".*
  if timeout 60 "$dir/bin/trellis-run" "$dir/plans/gpt2-fp32.plan" \
    --device cuda --steps 3 --save "$resumed.half" >"$resumed.half.out" 2>&1 &&
    timeout 60 "$dir/bin/trellis-run" "$dir/plans/gpt2-fp32.plan" \
      --device cuda --steps 3 --load "$resumed.half" --save "$resumed.cuda" \
      >"$resumed.cuda.out" 2>&1; then
    grep -E '^step [4-6] ' "$out/gpt2-fp32.cuda.out" >"$resumed.whole.out"
    mkdir -p "$resumed.whole"
    cp "$out/gpt2-fp32.cuda/model.safetensors" "$resumed.whole/" 2>/dev/null
    compare_run "resume gpt2-fp32 (bitwise)" "$resumed.whole" "$resumed.cuda" 0
  else
    record "resume gpt2-fp32 (bitwise)" "FAILED" \
      "$(cat "$resumed".*.out | grep -m1 -i error | cut -c1-160)"
  fi
  # Several ranks on the one GPU over NCCL: data, tensor and sequence
  # parallelism, ZeRO-3, pipelines (transfers on their links) and expert
  # parallelism (both dispatches).
  local ranks options port=29700 first=1
  for entry in "${multi_plans[@]}"; do
    IFS='|' read -r name ranks options <<<"$entry"
    run_dir=$out/$name
    # The first plan failing both ways most likely means NCCL refused the
    # ranks on one GPU: the others would only wait out their timeouts.
    if [[ $first == failed ]]; then
      record "ranks $name" skipped "the first several-rank plan failed"
      continue
    fi
    rm -rf "$run_dir.cuda"
    port=$((port + 1))
    if ! run_ranks "$dir/plans/$name.plan" "$ranks" $port "$run_dir.cuda" \
      "$run_dir.cuda.out"; then
      record "ranks $name" "FAILED" "$(cat "$run_dir".cuda.out* |
        grep -m1 -i -E 'error|refus|abort' | cut -c1-160)"
      # Without a CUDA graph: whether the recording is what failed.
      rm -rf "$run_dir.eager"
      port=$((port + 1))
      if TRELLIS_GPU_CHECK_RUN_OPTIONS=--cuda-graph=false run_ranks \
        "$dir/plans/$name.plan" "$ranks" $port "$run_dir.eager" \
        "$run_dir.eager.out"; then
        compare_run "ranks $name (no CUDA graph)" "$dir/plans/$name.cpu" \
          "$run_dir.eager" 1e-5
      elif [[ $first == 1 ]]; then
        first=failed
        continue
      fi
      first=0
      continue
    fi
    first=0
    compare_run "ranks $name" "$dir/plans/$name.cpu" "$run_dir.cuda" 1e-5
  done
  # Step times, interleaved, two rounds: Trellis's fused plan with and
  # without a CUDA graph ("eager"), the unfused plan, the unfused one with
  # attention on the backend's own kernels (TRELLIS_CUDNN_ATTENTION=0),
  # and PyTorch eager.
  local round variant
  for round in 1 2; do
    for variant in fused eager unfused cores; do
      local plan=$dir/plans/timed-fused.plan
      [[ $variant == unfused || $variant == cores ]] &&
        plan=$dir/plans/timed-unfused.plan
      TRELLIS_CUDNN_ATTENTION=$([[ $variant == cores ]] && echo 0 || echo 1) \
        timeout 60 "$dir/bin/trellis-run" "$plan" --device cuda --steps 12 \
        --cuda-graph=$([[ $variant == eager ]] && echo false || echo true) \
        >"$out/timed-$variant-$round.out" 2>&1 ||
        record "timed $variant round $round" "FAILED($?)" \
          "$(grep -m1 -i error "$out/timed-$variant-$round.out" | cut -c1-160)"
    done
    timeout 60 python3 "$dir/bin/pytorch_step.py" \
      "$dir/bin/$(basename "$timed_config")" 16 1024 12 8 bf16 cuda \
      >"$out/timed-pytorch-$round.out" 2>&1
  done
  # The Llama-3.2-1B step: Trellis and PyTorch eager (torch.compile's at the
  # end, time allowing).
  timeout 120 "$dir/bin/trellis-run" "$dir/plans/timed-llama.plan" \
    --device cuda --steps 12 >"$out/timed-llama.out" 2>&1 ||
    record "timed llama" "FAILED($?)" \
      "$(grep -m1 -i error "$out/timed-llama.out" | cut -c1-160)"
  timeout 120 python3 "$dir/bin/pytorch_step.py" \
    "$dir/bin/$(basename "$llama_config")" 4 2048 12 8 bf16 cuda \
    >"$out/timed-llama-pytorch.out" 2>&1
  # Where the time goes: every launch synchronous, the host's timing per op;
  # then each product's and attention's achieved rate (the plan's flops by
  # op over the profiled time; attention counted over the causal half of
  # the scores, as beside it cuBLAS's and PyTorch SDPA's rates are).
  CUDA_LAUNCH_BLOCKING=1 timeout 60 "$dir/bin/trellis-run" \
    "$dir/plans/timed-fused.plan" --device cuda --steps 3 --profile \
    >"$out/timed-profile.out" 2>&1
  CUDA_LAUNCH_BLOCKING=1 timeout 90 "$dir/bin/trellis-run" \
    "$dir/plans/timed-llama.plan" --device cuda --steps 3 --profile \
    >"$out/timed-llama-profile.out" 2>&1
  timeout 120 python3 "$dir/bin/pytorch_kernels.py" >"$out/kernels-pytorch.out" 2>&1
  kernel_rates() { # kernel_rates NAME REPORT_JSON PROFILE_OUT
    python3 - "$@" <<'RATES'
import json, os, re, sys
name, report, profile = sys.argv[1:4]
if not os.path.exists(profile):
    sys.exit(0)
flops = json.load(open(report))["per_rank"][0]["flops_by_op"]
steps, times = 3, {}
for line in open(profile):
    match = re.match(r"\s+(\S+)\s+([0-9.]+) ms", line)
    if match:
        times[match.group(1)] = float(match.group(2)) / 1e3 / steps
products = [op for op in times if op.startswith("matmul") and op in flops]
if products:
    seconds = sum(times[op] for op in products)
    print(f"trellis {name} matmul: {sum(flops[op] for op in products) / seconds / 1e12:.1f} TFLOP/s ({seconds * 1e3:.2f} ms a step)")
attention = [op for op in ("attention", "attention_grad") if op in times and op in flops]
if attention:
    seconds = sum(times[op] for op in attention)
    print(f"trellis {name} attention forward+backward: {sum(flops[op] for op in attention) / 2 / seconds / 1e12:.1f} TFLOP/s ({seconds * 1e3:.2f} ms a step)")
RATES
  }
  if command -v compute-sanitizer >/dev/null; then
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$dir/bin/TrellisRuntimeTests" \
      --gtest_filter='Backends/Conformance.*/cuda:Backends/OptimizerTest.*/cuda' \
      >"$out/memcheck.log" 2>&1
    status=$?
    # The tests' own failures are reported above; memcheck's verdict is
    # its error summary.
    grep -q "ERROR SUMMARY: 0 errors" "$out/memcheck.log" &&
      record "memcheck conformance" ok "(tests exit $status)" ||
      record "memcheck conformance" "FAILED($status)" \
        "$(grep -m1 -E 'Invalid|ERROR SUMMARY' "$out/memcheck.log" | cut -c1-160)"
  else
    record "memcheck conformance" skipped "no compute-sanitizer"
  fi

  # torch.compile (its compilation in the first steps, left out of the
  # mean), time allowing: the slowest to start, so last.
  compiled_step() { # compiled_step NAME CONFIG BATCH SEQ SECONDS OUT
    if ((SECONDS >= budget)); then
      record "torch.compile $1" skipped "past the ${budget} s budget"
      return
    fi
    timeout "$5" python3 "$dir/bin/pytorch_step.py" \
      "$dir/bin/$(basename "$2")" "$3" "$4" 12 8 bf16 compile cuda >"$6" 2>&1
  }
  compiled_step gpt2 "$timed_config" 16 1024 240 "$out/timed-pytorch-compile.out"
  compiled_step llama "$llama_config" 4 2048 300 \
    "$out/timed-llama-pytorch-compile.out"
  # Mean of steps 3-12 of a Trellis run, and of PyTorch's runs, each with
  # its tokens per second and MFU (a step's FLOPs as the plan counts them,
  # over the time, against $peak_flops).
  trellis_time() { # trellis_time NAME GFLOP TOKENS OUT
    awk -F'|' -v name="$1" -v gflop="$2" -v tokens="$3" -v peak="$peak_flops" '/^step/ {n++;
      if (n > 2) {split($NF, t, " "); s += t[1]; k++}}
      END {if (k) {ms = s / k; printf "trellis %s | %.2f ms | %.0f tokens/s | MFU %.3f\n",
        name, ms, tokens / ms * 1e3, gflop * 1e9 / (ms / 1e3) / peak}}' "$4"
  }
  pytorch_time() { # pytorch_time GFLOP TOKENS OUT (a run skipped: nothing)
    [[ -f "$3" ]] || return 0
    awk -v gflop="$1" -v tokens="$2" -v peak="$peak_flops" '/mean step/ {
      ms = $(NF - 1); printf "%s | %.0f tokens/s | MFU %.3f\n",
      $0, tokens / ms * 1e3, gflop * 1e9 / (ms / 1e3) / peak}' "$3"
  }
  local gpt2_gflop llama_gflop
  gpt2_gflop=$(awk '/^compute per step:/ {print $4}' "$dir/plans/timed-fused.report")
  llama_gflop=$(awk '/^compute per step:/ {print $4}' "$dir/plans/timed-llama.report")
  {
    echo "GPT-2 124M bf16, 16 x 1024 tokens per step:"
    for round in 1 2; do
      for variant in fused eager unfused cores; do
        trellis_time "$variant" "$gpt2_gflop" 16384 \
          "$out/timed-$variant-$round.out"
      done
      pytorch_time "$gpt2_gflop" 16384 "$out/timed-pytorch-$round.out"
    done
    pytorch_time "$gpt2_gflop" 16384 "$out/timed-pytorch-compile.out"
    echo "Llama-3.2-1B bf16, 4 x 2048 tokens per step:"
    trellis_time fused "$llama_gflop" 8192 "$out/timed-llama.out"
    pytorch_time "$llama_gflop" 8192 "$out/timed-llama-pytorch.out"
    pytorch_time "$llama_gflop" 8192 "$out/timed-llama-pytorch-compile.out"
    echo "Kernels (Trellis profiled, every launch synchronous; cuBLAS and SDPA"
    echo "timed by CUDA events):"
    kernel_rates gpt2 "$dir/plans/timed-fused.json" "$out/timed-profile.out"
    kernel_rates llama "$dir/plans/timed-llama.json" "$out/timed-llama-profile.out"
    cat "$out/kernels-pytorch.out"
  } | tee "$out/timed.txt"
  # Attention the backend could not hand to cuDNN, and why.
  cat "$out"/*.out | grep -h "on CUDA cores:" | sort -u

  printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
  echo "$failures failed"
  # Everything in one file (a machine may give back few files).
  tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
  exit "$failures"
}

case "$mode" in
prepare) prepare || { echo "gpu-check: prepare failed" >&2; exit 1; } ;;
run) run "$@" ;;
*) echo "usage: $0 prepare DIR | run DIR OUT" >&2; exit 2 ;;
esac
