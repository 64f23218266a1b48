#!/usr/bin/env bash
# Trains MODEL (a config) for 3 AdamW steps with the gradients clipped by
# their global norm (--clip-grad CLIP, small enough to clip every step) on
# one rank and under each layout given, as layout_matrix.sh does (which
# prints what it compares). Usage:
#   clip_matrix.sh DIR MODEL CLIP "FLAGS:RANKS[:REFERENCE]" ...
# (PYTHON, TRELLIS from the environment)
set -euo pipefail
dir=$1 model=$2 clip=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
EXTRA_FLAGS="--clip-grad $clip" exec "$here/layout_matrix.sh" "$dir" "$model" "$@"
