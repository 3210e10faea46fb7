#!/usr/bin/env bash
# Builds the konnector image `$IMAGE` one of two ways (progress on stderr, the image on stdout):
#
#   dockerfile  Dockerfile: a Rust builder image compiles the konnector, distroless runs it.
#               Needs the registries that hold both base images (docker.io, gcr.io).
#   static      Dockerfile.static: the konnector is built here, statically for
#               x86_64-unknown-linux-musl (scripts/musl.sh installs the target and musl-gcc when
#               missing), and copied FROM scratch with this machine's CA bundle. Pulls nothing.
#   auto        (IMAGE_BUILD's default) dockerfile when the engine has both base images or can
#               pull them, else static: an offline machine still gets a real image, and a
#               machine that reaches the registries builds exactly what it built before.
#
# CONTAINER_ENGINE (scripts/engine.sh), PLATFORM (dockerfile only: static builds x86_64) and
# TARGET_DIR (cargo's target directory, default target) come from the Makefile.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
image=${IMAGE:?IMAGE names the image to build}
mode=${IMAGE_BUILD:-auto}
platform=${PLATFORM:-}
target_dir=$(mkdir -p "${TARGET_DIR:-target}" && cd "${TARGET_DIR:-target}" && pwd)
engine=$(scripts/engine.sh)

case "$mode" in
  auto | dockerfile | static) ;;
  *) echo "image: IMAGE_BUILD=$mode; use auto, dockerfile or static" >&2; exit 1 ;;
esac

if [ "$mode" = auto ]; then
  mode=dockerfile
  # The stages' base images, in order (the first word after FROM that is not a --flag).
  bases=$(awk 'toupper($1) == "FROM" { for (i = 2; i <= NF; i++) if ($i !~ /^--/) { print $i; break } }' Dockerfile)
  for base in $bases; do
    if "$engine" image inspect "$base" >/dev/null 2>&1; then continue; fi
    echo "image: pulling $base..." >&2
    if ! timeout 300 "$engine" pull ${platform:+--platform "$platform"} "$base" >/dev/null 2>&1; then
      echo "image: $base cannot be pulled; building the static image (Dockerfile.static) instead" >&2
      mode=static
      break
    fi
  done
fi

if [ "$mode" = dockerfile ]; then
  echo "image: $engine build (Dockerfile) -> $image" >&2
  "$engine" build ${platform:+--platform "$platform"} -t "$image" . >&2
  echo "$image"
  exit 0
fi

if [ -n "$platform" ] && [ "$platform" != linux/amd64 ]; then
  echo "image: the static image is built for linux/amd64 only, not PLATFORM=$platform;" >&2
  echo "  build that platform with IMAGE_BUILD=dockerfile on a machine that reaches the registries" >&2
  exit 1
fi
ca=/etc/ssl/certs/ca-certificates.crt
if ! grep -q 'BEGIN CERTIFICATE' "$ca" 2>/dev/null; then
  echo "image: $ca holds no certificates; install the ca-certificates package first" >&2
  exit 1
fi
triple=$(scripts/musl.sh)
echo "image: building the konnector for $triple (a cold release build takes ~15 min on 2 cores)..." >&2
# musl-gcc compiles the C parts (ring, mimalloc) against musl rather than glibc's headers. The
# binary is stripped: the image carries no debugger, and panics keep their messages.
CC_x86_64_unknown_linux_musl=musl-gcc \
  CARGO_PROFILE_RELEASE_STRIP=symbols \
  CARGO_TARGET_DIR="$target_dir" \
  cargo build --release --locked -p konnector --target "$triple" >&2
bin="$target_dir/$triple/release/konnector"
if readelf -l "$bin" 2>/dev/null | grep -q 'program interpreter'; then
  echo "image: $bin is dynamically linked; a scratch image cannot run it" >&2
  exit 1
fi
# The build context holds exactly what the image gets, so nothing else of the repository is sent.
context="$target_dir/image-static"
rm -rf "$context"
mkdir -p "$context"
cp "$bin" "$context/konnector"
cp "$ca" "$context/ca-certificates.crt"
echo "image: $engine build (Dockerfile.static) -> $image" >&2
"$engine" build -f Dockerfile.static -t "$image" "$context" >&2
echo "$image"
