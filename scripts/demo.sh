#!/usr/bin/env bash
# Sets up and builds Trellis, then runs the main job on its embedded default:
# the process groups of the default mesh, and the compiler on a sample
# annotated module.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TRELLIS_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh" >/dev/null

echo "== trellis groups --mesh dp=2,pp=2,tp=4 =="
"$build/bin/trellis" groups --mesh dp=2,pp=2,tp=4
echo
echo "== trellis-opt examples/mlp_tp.mlir =="
"$build/bin/trellis-opt" "$root/examples/mlp_tp.mlir"
