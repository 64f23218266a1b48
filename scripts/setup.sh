#!/usr/bin/env bash
# Installs the Debian packages Trellis needs (only those missing), then
# configures and builds into $TRELLIS_BUILD_DIR (default: build/).
# Idempotent: quiet and fast when everything is present and built.
# Arguments are CMake cache settings (-DNAME=VALUE) for the one configure:
# the tree is configured when it has none yet or when they differ from the
# settings it was last configured with (cached settings otherwise stay), so
# scripts/test.sh configures and builds once with the options its tests need.
# --packages-only installs the packages and stops.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TRELLIS_BUILD_DIR:-$root/build}
jobs=${TRELLIS_JOBS:-$(nproc)}

packages=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools lld-22
  libgloo-dev libopenblas-dev libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libzstd-dev zlib1g-dev libssl-dev
  libgtest-dev libbenchmark-dev libcli11-dev cmake ninja-build python3
  # mpirun.test starts ranks with Open MPI's mpirun.
  openmpi-bin
  python3-venv python3-dev
  # oneDNN's CMake package looks for OpenCL (Debian builds it with its
  # OpenCL engine) and does not depend on the headers itself.
  ocl-icd-opencl-dev opencl-headers
)
missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "trellis setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ${1:-} == --packages-only ]]; then
  exit 0
fi

settings=$build/trellis-configure-settings
if [[ ! -f $build/build.ninja ]] ||
   { (($#)) && [[ "$*" != "$(cat "$settings" 2>/dev/null)" ]]; }; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DMLIR_LINK_MLIR_DYLIB=ON \
    -DLLVM_USE_LINKER=lld "$@" >/dev/null
  (($#)) && printf '%s' "$*" >"$settings"
fi
ninja -C "$build" -j "$jobs" all
