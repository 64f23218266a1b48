# Sourced by zero_matrix.sh and clip_matrix.sh: 3 AdamW steps of $model on
# $dir's runs, and their comparison with a reference run (1e-5). Expects
# $TRELLIS, $PYTHON, $model, $dir, $here and the compile flags `common`.
# AdamW's epsilon is 1e-4 in `common` (see zero.test): its division turns
# the roundoff of near-zero gradients into parameter differences.

run() { # name flags ranks
  "$TRELLIS" compile "$model" "${common[@]}" $2 -o "$dir/$1.plan" 2>/dev/null
  "$TRELLIS" run "$dir/$1.plan" --nproc "$3" --steps 3 --seed 3 \
    --save "$dir/$1" > "$dir/$1.out"
}

compare() { # reference name: losses (and grad norms); parameters; moments
  local losses params states
  losses=$("$PYTHON" "$here/compare_losses.py" "$dir/$1.out" "$dir/$2.out")
  params=$("$PYTHON" "$here/compare_safetensors.py" "$dir/$1/model.safetensors" "$dir/$2/model.safetensors")
  states=$("$PYTHON" "$here/compare_safetensors.py" "$dir/$1/optimizer.safetensors" "$dir/$2/optimizer.safetensors")
  echo "$losses; $params; $states"
}
