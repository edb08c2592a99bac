#!/usr/bin/env bash
# What `docker build -f k8s/Dockerfile --target cpu` needs where no image registry can be reached:
#   - the base image rl-base:bookworm, made from Debian's own packages (mmdebstrap: python3, python3-venv, wget), once;
#   - the wheelhouse .wheels/ (pip wheel: requirements.txt, ray[default], torch), so that the build needs no index.
# Then:  docker build -f k8s/Dockerfile --target cpu --build-arg BASE=rl-base:bookworm -t rl:cpu .
# Needs docker (Debian's docker.io), mmdebstrap, and the Python of this repository's .venv (bash setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DOCKER=${DOCKER:-docker}
if ! "$DOCKER" image inspect rl-base:bookworm >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mmdebstrap --quiet --variant=apt --include=python3,python3-venv,wget,ca-certificates bookworm "$tmp/rootfs.tar"
  "$DOCKER" import "$tmp/rootfs.tar" rl-base:bookworm >/dev/null
  echo "rl-base:bookworm imported from a Debian bookworm rootfs"
fi
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check -w .wheels -r requirements.txt "ray[default]==2.60.0" \
  torch==2.13.0 2> >(grep -v "^WARNING: Location" >&2)
echo "wheelhouse .wheels: $(ls .wheels | wc -l) wheels"
