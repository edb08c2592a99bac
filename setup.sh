#!/usr/bin/env bash
# One command: make .venv, install torch==2.13.0 first (the CPU wheel; unpinned torch pulls CUDA), then the
# requirements, then this package in editable mode.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -r requirements.txt
.venv/bin/python -m pip install --quiet --no-deps -e .
echo "rl is set up in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
