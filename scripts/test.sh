#!/usr/bin/env bash
# Sets up and builds Trellis, then runs every test: the lit suite (MLIR,
# CLI and C API tests), the GoogleTest suites through ctest, the Python
# tests (pytest) and `pip install .` with the README's Python example.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TRELLIS_BUILD_DIR:-$root/build}

# One configure and one build, with the Python package in the build tree and
# the tests' environment (made once outside the clone, scripts/python-env.sh).
# setup.sh installs the Debian packages first: the environment's venv needs
# python3-venv.
"$root/scripts/setup.sh" --packages-only
python=$("$root/scripts/python-env.sh")
"$root/scripts/setup.sh" -DTRELLIS_PYTHON=ON -DPython_EXECUTABLE="$python"

echo "== lit =="
/usr/lib/llvm-22/bin/lit -sv "$build/test"
echo "== gtest (ctest) =="
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"

# The runtime builds without MLIR: its project configured alone (MLIR and
# LLVM made unfindable), its tool and C library built there and linking
# neither. Its tests ran above: the main build compiles the runtime as this
# project, without MLIR's include paths.
echo "== runtime alone (no MLIR) =="
runtime_build=$build/runtime-alone
if [[ ! -f $runtime_build/build.ninja ]]; then
  cmake -G Ninja -S "$root/runtime" -B "$runtime_build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_DISABLE_FIND_PACKAGE_MLIR=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON >/dev/null
fi
ninja -C "$runtime_build" -j "$(nproc)" trellis-run TrellisRuntimeC
for binary in bin/trellis-run lib/libTrellisRuntimeC.so; do
  if ldd "$runtime_build/$binary" | grep -E 'lib(MLIR|LLVM)'; then
    echo "$binary links MLIR or LLVM" >&2
    exit 1
  fi
done

echo "== python (pytest) =="
TRELLIS_BIN="$build/bin/trellis" PYTHONPATH="$build/python" \
  "$python" -m pytest -q -p no:cacheprovider \
  "$root/test/python"

# The package as users install it, then the README's Python example, run
# as written from outside the source tree. The wheel packages the C API
# libraries built above (TRELLIS_PREBUILT_DIR) and compiles only the
# extension; its libraries must not point back into the build tree.
echo "== pip install . =="
"$python" -m pip install -q "$root" \
  -C cmake.define.TRELLIS_PREBUILT_DIR="$build"
installed=$("$python" -c 'import os, trellis; print(os.path.dirname(trellis.__file__))')
for library in "$installed"/*.so; do
  if readelf -d "$library" | grep -E 'R(UN)?PATH' | grep -F "$build"; then
    echo "$library points into the build tree $build" >&2
    exit 1
  fi
done
example=$(mktemp -d)
trap 'rm -rf "$example"' EXIT
sed -n '/^```python$/,/^```$/p' "$root/README.md" | sed '1d;$d' \
  > "$example/readme_example.py"
(cd "$example" && "$python" readme_example.py)
