#!/usr/bin/env bash
# Builds an OCI registry (distribution's `registry`, the reference implementation behind
# docker.io's) from the Go module pinned in tools/registry, once per machine: the result is
# cached under ${KBIND_CACHE:-~/.cache/kbind}/registry-<version>-<inputs>/registry and reused.
# tools/registry/main.go is distribution's own command with only the local storage drivers
# (filesystem, inmemory) and htpasswd authentication linked in. No release tarball is
# downloaded; only the Go module proxy is used. Prints the path of the binary on stdout;
# progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tools/registry"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=github.com/distribution/distribution/v3
version=$(awk -v m="$module" '($1==m){print $2} ($1=="require" && $2==m){print $3}' "$src/go.mod")
if [ -z "$version" ]; then
  echo "registry: $module is not required in $src/go.mod" >&2
  exit 1
fi
key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
bin="$cache/registry-$version-$key/registry"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "registry: Go is required to build the registry (see README)" >&2; exit 1; }
echo "registry: building distribution's registry $version (first build on a machine takes ~1 min on 2 cores)..." >&2
start=$(date +%s)
mkdir -p "$(dirname "$bin")"
( cd "$src" && go build -trimpath \
    -ldflags "-s -w -X $module/version.version=$version" \
    -o "$bin.tmp.$$" . )
mv "$bin.tmp.$$" "$bin"
echo "registry: built in $(( $(date +%s) - start ))s: $bin" >&2
echo "$bin"
