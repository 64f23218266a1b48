#!/usr/bin/env bash
# Trains MODEL (a config) for 3 AdamW steps on one rank and under each
# layout given (flags, then ':' and the ranks), and prints one line per
# layout: losses (and grad norms), then parameters and moments gathered
# after the run, against the one-rank run with the same micro-batches and
# precision (1e-5), or with the flags after a second ':'. EXTRA_FLAGS, when
# set, go to every compile. Usage:
#   layout_matrix.sh DIR MODEL "FLAGS:RANKS[:REFERENCE]" ...
# (PYTHON, TRELLIS from the environment)
set -euo pipefail
dir=$1 model=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
common=(--batch 8 --seq 16 --adam-eps 1e-4 ${EXTRA_FLAGS:-})
source "$here/layout_runs.sh"
mkdir -p "$dir"
for layout in "$@"; do
  IFS=: read -r flags ranks reference <<< "$layout"
  # The reference: one rank with the same micro-batches and precision.
  [[ -n $reference ]] ||
    reference=$(echo "$flags" | grep -o -- '--microbatches [0-9]*\|--precision [a-z0-9]*' | tr '\n' ' ' || true)
  ref="ref$(echo "$reference" | tr -dc 'a-z0-9')"
  [[ -f $dir/$ref.out ]] || run "$ref" "$reference" 1
  name="run$(echo "$flags" | tr -dc 'a-z0-9')"
  run "$name" "$flags" "$ranks"
  echo "$flags: $(compare "$ref" "$name")"
done
