#!/usr/bin/env bash
# Makes, once, the virtual environment of the Python tests and of the
# package's build: outside the clone ($TRELLIS_VENV, default
# ~/.cache/trellis/venv), from Debian's python3 and PyPI, with
# python/requirements-test.txt and, without their dependencies,
# python/requirements-headers.txt (remade when either changes). Prints the
# environment's python on stdout.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${TRELLIS_VENV:-$HOME/.cache/trellis/venv}
requirements=$root/python/requirements-test.txt
headers=$root/python/requirements-headers.txt
stamp=$venv/trellis-requirements.txt

if ! cat "$requirements" "$headers" | cmp -s - "$stamp" 2>/dev/null; then
  echo "trellis python-env: filling $venv from PyPI (once)" >&2
  start=$(date +%s)
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -r "$requirements" >&2
  "$venv/bin/python" -m pip install -q --no-deps -r "$headers" >&2
  cat "$requirements" "$headers" >"$stamp"
  echo "trellis python-env: done in $(( $(date +%s) - start )) s," \
       "$(du -sh "$venv" | cut -f1) on disk" >&2
fi
echo "$venv/bin/python"
