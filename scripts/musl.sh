#!/usr/bin/env bash
# Makes this machine able to build the konnector statically (x86_64-unknown-linux-musl), for
# the registry-free image (Dockerfile.static): the Rust target from rustup and musl-gcc
# (Debian's musl-tools), which the C parts of the build (ring, mimalloc) are compiled with.
# Each is installed only when missing, so a second run changes nothing. Prints the target
# triple on stdout; progress goes to stderr.
set -euo pipefail
target=x86_64-unknown-linux-musl
if [ "$(uname -m)" != x86_64 ]; then
  echo "musl: the static image is built for x86_64 only (this machine is $(uname -m))" >&2
  exit 1
fi
if ! rustup target list --installed | grep -qx "$target"; then
  echo "musl: installing the Rust target $target with rustup..." >&2
  rustup target add "$target" >&2
fi
if ! command -v musl-gcc >/dev/null; then
  command -v apt-get >/dev/null || { echo "musl: musl-gcc is missing and there is no apt-get to install musl-tools; install musl's gcc wrapper by hand" >&2; exit 1; }
  echo "musl: installing musl-tools (musl-gcc) from the distribution's packages..." >&2
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends musl-tools >&2 \
    || { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends musl-tools >&2; }
fi
echo "$target"
