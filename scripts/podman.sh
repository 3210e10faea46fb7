#!/usr/bin/env bash
# Makes podman available for building the image without a docker daemon: Debian's package,
# installed only when podman is missing. Prints the path of podman on stdout; progress goes
# to stderr. Podman needs no daemon, and building FROM scratch runs no container, so it builds
# the static image even in sandboxes where containers cannot start. Storage is podman's own
# choice (overlay here; storage.conf's `driver = "vfs"` where overlay is unavailable).
set -euo pipefail
if ! command -v podman >/dev/null; then
  command -v apt-get >/dev/null || { echo "podman: podman is missing and there is no apt-get to install it; install podman (or start docker) by hand" >&2; exit 1; }
  echo "podman: installing podman from the distribution's packages..." >&2
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends podman >&2 \
    || { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends podman >&2; }
fi
command -v podman
