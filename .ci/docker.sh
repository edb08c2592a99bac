#!/usr/bin/env bash
# For the container test (tests/container, marker `container`): Debian's docker.io and mmdebstrap where missing, and a
# docker daemon. Prints `RL_REQUIRE_CONTAINER=1` when a daemon answers (the test must then pass), nothing otherwise
# (the test skips, saying why): a machine where dockerd cannot run does not fail CI for it.
set -uo pipefail
if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io \
      mmdebstrap; } >/tmp/rl-ci-apt.log 2>&1 || { echo "docker.io not installed (see /tmp/rl-ci-apt.log)" >&2; exit 0; }
fi
if ! docker info >/dev/null 2>&1; then
  nohup dockerd >/tmp/rl-ci-dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
if docker info >/dev/null 2>&1; then
  echo RL_REQUIRE_CONTAINER=1
else
  echo "dockerd did not start: $(tail -n 3 /tmp/rl-ci-dockerd.log 2>/dev/null | tr '\n' ' ')" >&2
fi
