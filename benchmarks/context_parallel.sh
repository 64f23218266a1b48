#!/usr/bin/env bash
# Sequence and context parallelism on 4 ranks at a long sequence: a tiny
# Llama with 4 kv heads (so Ulysses can split them 4 ways), batch 1, AdamW,
# fp32. For tp = 4 without and with --sp, and cp = 4 with Ulysses, with
# all-gather attention and with ring attention: the report's memory plan
# (arena: the activations) beside the buffers trellis run measured, the
# bytes each rank sends per step by collective kind (report, ring
# accounting), and the mean step time (first step left out). For the ring,
# a trace of one more run says how much of the key/value transfers ran
# while the rank computed.
# Usage: benchmarks/context_parallel.sh [seq] [steps]   (default 8192, 3)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
trellis=${TRELLIS:-$root/build/bin/trellis}
seq=${1:-8192}
steps=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$root/examples/configs/llama-tiny.json" "$work/model.json" "$seq" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["num_key_value_heads"] = config["num_attention_heads"]
config["max_position_embeddings"] = int(sys.argv[3])
json.dump(config, open(sys.argv[2], "w"))
PY
for layout in "--tp 4" "--tp 4 --sp" "--cp 4 --cp-kind ulysses" "--cp 4 --cp-kind allgather" "--cp 4 --cp-kind ring"; do
  plan=$work/plan
  "$trellis" compile "$work/model.json" --batch 1 --seq "$seq" $layout \
    --report-json "$plan.json" -o "$plan"
  out=$("$trellis" run "$plan" --nproc 4 --steps "$steps")
  summary=$(grep '^summary' <<< "$out")
  python3 - "$plan.json" "$layout" "$summary" <<'PY'
import json, re, sys
rank = json.load(open(sys.argv[1]))["per_rank"][0]
b, sent = rank["bytes"], rank["comm_bytes"]
mib = lambda x: x / 2**20
measured = re.search(r"buffers ([0-9.]+) MiB \(arena ([0-9.]+) MiB\)", sys.argv[3])
step = re.search(r"mean step ([0-9.]+) ms", sys.argv[3]).group(1)
kinds = ", ".join(f"{k} {mib(v):.1f}" for k, v in sorted(sent.items()) if v > 1024)
print(f"{sys.argv[2]:<26} | arena {mib(b['activations_peak']):7.1f} MiB, plan "
      f"{mib(b['total_peak']):7.1f} MiB, measured {measured.group(1)} MiB | "
      f"sent MiB: {kinds} | step {step} ms")
PY
done
"$trellis" compile "$work/model.json" --batch 1 --seq "$seq" --cp 4 --cp-kind ring -o "$work/ring.plan"
"$trellis" run "$work/ring.plan" --nproc 4 --steps 2 --trace "$work/ring.trace.json" > /dev/null
echo "ring attention (trace of 2 steps): key/value permutes while computing"
python3 "$root/benchmarks/collective_overlap.py" "$work/ring.trace.json" collective_permute
