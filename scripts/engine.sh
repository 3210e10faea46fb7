#!/usr/bin/env bash
# Picks the container engine for `make image` and `make image-check`; prints its name on stdout.
# CONTAINER_ENGINE wins when set (podman is installed first if it is the one asked for and is
# missing). Otherwise docker when its daemon answers, else podman, installed from the
# distribution's packages when missing (scripts/podman.sh): podman needs no daemon, so a
# machine without docker running still builds the image.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=podman
  fi
fi
if [ "$engine" = podman ]; then
  "$root/scripts/podman.sh" >/dev/null
fi
if ! "$engine" info >/dev/null 2>&1; then
  echo "engine: '$engine info' failed: $engine is not usable here." >&2
  echo "  Start its daemon, or leave CONTAINER_ENGINE unset to use podman (installed when missing)." >&2
  exit 1
fi
echo "$engine"
