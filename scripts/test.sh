#!/usr/bin/env bash
# Sets up and builds Trellis, then runs every test: the lit suite (MLIR and
# CLI tests) and the GoogleTest suites through ctest.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TRELLIS_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"

echo "== lit =="
/usr/lib/llvm-22/bin/lit -sv "$build/test"
echo "== gtest (ctest) =="
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
