#!/usr/bin/env bash
# Builds an OCI registry (distribution's `registry`, the reference implementation behind
# docker.io's) from the Go module pinned in tools/registry, once per machine: the result is
# cached under ${KBIND_CACHE:-~/.cache/kbind}/registry-<version>-<inputs>/registry and reused.
# tools/registry/main.go is distribution's own command with only the local storage drivers
# (filesystem, inmemory) and htpasswd authentication linked in. No release tarball is
# downloaded. Prints the path of the binary on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/registry"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=github.com/distribution/distribution/v3
version=$(go_module_version registry "$src" "$module")
key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
go_tool_build registry "$cache/registry-$version-$key/registry" "$src" . \
  "-X $module/version.version=$version" \
  "distribution's registry $version (first build on a machine takes ~1 min on 2 cores)"
