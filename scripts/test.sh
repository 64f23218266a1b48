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

# The runtime builds and tests without MLIR: its project configured alone
# (MLIR and LLVM made unfindable), and trellis-run linking neither.
echo "== runtime alone (no MLIR) =="
runtime_build=$build/runtime-alone
if [[ ! -f $runtime_build/build.ninja ]]; then
  cmake -G Ninja -S "$root/runtime" -B "$runtime_build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON >/dev/null
fi
ninja -C "$runtime_build" -j "$(nproc)" all
if ldd "$runtime_build/bin/trellis-run" | grep -E 'lib(MLIR|LLVM)'; then
  echo "trellis-run links MLIR or LLVM" >&2
  exit 1
fi
ctest --test-dir "$runtime_build" --output-on-failure -j "$(nproc)"
