#!/usr/bin/env bash
# Trains MODEL (a config) for 3 AdamW steps on one rank and under every
# ZeRO stage of each layout given (--mesh or flags, then ':' and the ranks),
# and prints one line per run: losses and parameters and moments gathered
# after the run against the one-rank run (1e-5). Usage:
#   zero_matrix.sh DIR MODEL "FLAGS:RANKS" ...   (PYTHON, TRELLIS from env)
set -euo pipefail
dir=$1 model=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
common=(--batch 8 --seq 16 --adam-eps 1e-4)
source "$here/layout_runs.sh"
mkdir -p "$dir"
for layout in "$@"; do
  flags=${layout%:*} ranks=${layout##*:}
  # The reference: one rank with the same micro-batches.
  reference=$(echo "$flags" | grep -o -- '--microbatches [0-9]*' || true)
  ref="ref$(echo "$reference" | tr -dc 0-9)"
  [[ -f $dir/$ref.out ]] || run "$ref" "$reference" 1
  for zero in 1 2 3; do
    name="z$zero$(echo "$flags" | tr -dc 'a-z0-9')"
    run "$name" "$flags --zero $zero" "$ranks"
    echo "zero $zero $flags: $(compare "$ref" "$name")"
  done
done
