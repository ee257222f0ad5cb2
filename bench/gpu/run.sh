#!/usr/bin/env bash
# The GPU calibration kit's one command on a GPU machine without network (bench/gpu/kit.py says what it does):
# installs the wheels `python bench/gpu/kit.py prepare` put in .whl/ (carried with the working tree) into /tmp/site,
# as the device documentation says, then runs the grid and writes the rows under $OUT (or runs/gpu-kit).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-runs/gpu-kit}"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHONUNBUFFERED=1 python3 bench/gpu/kit.py run --out "$out" "$@"
