#!/usr/bin/env bash
# One command: make .venv, install torch==2.13.0 first (the CPU wheel; unpinned torch pulls CUDA), then the
# requirements, then this package in editable mode. `bash setup.sh --ray` also installs the `ray` extras
# (ray[default], for --ray_address: workers as Ray actors on a cluster), after the pinned torch.
set -euo pipefail
cd "$(dirname "$0")"
RAY=0
for arg in "$@"; do
  case "$arg" in
    --ray) RAY=1 ;;
    -h|--help) echo "usage: bash setup.sh [--ray]"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (valid: --ray)" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -r requirements-dev.txt  # requirements.txt and the test tools
.venv/bin/python -m pip install --quiet --no-deps -e .
if [ "$RAY" = 1 ]; then
  # the extras' own requirements, with torch held at the pin installed above
  .venv/bin/python -m pip install --quiet -e ".[ray]" torch==2.13.0
fi
echo "rl is set up in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)')$(
  [ "$RAY" = 1 ] && .venv/bin/python -c 'import ray; print(", ray", ray.__version__)'))"
