#!/usr/bin/env bash
# Installs what `make release` and `make release-check` need and prints a PATH prefix holding
# them (progress on stderr). Each tool comes from its own registry, at a pinned version, and is
# cached under ${KBIND_CACHE:-~/.cache/kbind} so a machine installs it once:
#   - the rustup targets x86_64- and aarch64-unknown-linux-musl (static binaries);
#   - zig, the cross C compiler and linker, from PyPI's `ziglang` package (pip --target);
#   - cargo-zigbuild (cargo build with zig as linker) and cargo-cyclonedx (the SBOM), from
#     crates.io (cargo install --locked --root);
#   - qemu-user-static from the distribution's packages (release-check runs the arm64 binaries
#     through it), installed only when qemu-aarch64 is missing.
set -euo pipefail
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
ZIGLANG_VERSION=0.15.2
ZIGBUILD_VERSION=0.24.1
CYCLONEDX_VERSION=0.5.9
TARGETS="x86_64-unknown-linux-musl aarch64-unknown-linux-musl"

installed=$(rustup target list --installed)
for target in $TARGETS; do
  grep -qx "$target" <<<"$installed" || { echo "release-tools: rustup target add $target" >&2; rustup target add "$target" >&2; }
done

zig_dir="$cache/ziglang-$ZIGLANG_VERSION"
if [ ! -x "$zig_dir/bin/zig" ]; then
  echo "release-tools: installing zig $ZIGLANG_VERSION from PyPI (ziglang)" >&2
  rm -rf "$zig_dir.tmp"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$zig_dir.tmp/lib" "ziglang==$ZIGLANG_VERSION" >&2
  mkdir -p "$zig_dir.tmp/bin"
  # cargo-zigbuild looks for `zig` on PATH: the package's own binary, through a link.
  ln -s "$zig_dir/lib/ziglang/zig" "$zig_dir.tmp/bin/zig"
  rm -rf "$zig_dir"
  mv "$zig_dir.tmp" "$zig_dir"
fi

for tool in "cargo-zigbuild $ZIGBUILD_VERSION" "cargo-cyclonedx $CYCLONEDX_VERSION"; do
  read -r name version <<<"$tool"
  dir="$cache/$name-$version"
  if [ ! -x "$dir/bin/$name" ]; then
    echo "release-tools: cargo install $name $version" >&2
    cargo install --quiet --locked --root "$dir" "$name" --version "=$version" >&2
  fi
done

if ! command -v qemu-aarch64-static >/dev/null && ! command -v qemu-aarch64 >/dev/null; then
  echo "release-tools: installing qemu-user-static" >&2
  apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null ||
    echo "release-tools: qemu-user-static could not be installed; release-check cannot run the arm64 binaries" >&2
fi

echo "$zig_dir/bin:$cache/cargo-zigbuild-$ZIGBUILD_VERSION/bin:$cache/cargo-cyclonedx-$CYCLONEDX_VERSION/bin"
