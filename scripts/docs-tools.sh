#!/usr/bin/env bash
# Builds the docs tools from crates.io, once per machine, with `cargo install --locked` into
# ${KBIND_CACHE:-~/.cache/kbind}/<tool>-<version> (cached and reused):
#   mdbook   builds the book in docs/ (only the search feature: no server, no file watcher);
#   hyperlink  checks the built book's internal links and anchors (it reads files only and
#              has no HTTP client: no request leaves the machine, and it builds in seconds).
# Usage: scripts/docs-tools.sh mdbook|hyperlink   prints the binary's path on stdout; progress and
# build times go to stderr. The two build in parallel when `make docs-tools` asks for both.
set -euo pipefail
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
MDBOOK_VERSION=0.5.4
HYPERLINK_VERSION=0.3.2
tool=${1:?usage: scripts/docs-tools.sh mdbook|hyperlink}
case $tool in
mdbook) version=$MDBOOK_VERSION features=(--no-default-features --features search) ;;
hyperlink) version=$HYPERLINK_VERSION features=() ;;
*) echo "docs-tools: unknown tool $tool" >&2; exit 2 ;;
esac
root="$cache/$tool-$version"
bin="$root/bin/$tool"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
echo "docs-tools: building $tool $version from crates.io (once per machine)..." >&2
start=$(date +%s)
tmp="$root.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
# A private target directory: the workspace's stays untouched, and a failed build leaves no
# half-installed tool behind (the cache entry appears only when complete). Built without
# optimisation: both tools run for under a second on this book, so optimising them would
# only add build time.
CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_INCREMENTAL=false \
  nice -n 10 cargo install --quiet --locked "$tool" --version "=$version" "${features[@]}" \
  --root "$tmp" --target-dir "$cache/cargo-target-docs-tools/$tool" >&2
mkdir -p "$root/bin"
mv "$tmp/bin/$tool" "$bin"
rm -rf "$cache/cargo-target-docs-tools/$tool"
echo "docs-tools: built $tool $version in $(( $(date +%s) - start ))s: $bin" >&2
echo "$bin"
