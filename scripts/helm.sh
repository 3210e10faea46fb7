#!/usr/bin/env bash
# Builds helm from the Go module pinned in tools/helm (go.mod + go.sum), once per machine: the
# result is cached under ${KBIND_CACHE:-~/.cache/kbind}/helm-<version>/helm and reused. No
# release tarball is downloaded; only the Go module proxy is used. Prints the path of the
# binary on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tools/helm"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=helm.sh/helm/v4
version=$(awk -v m="$module" '$1==m{print $2}' "$src/go.mod")
if [ -z "$version" ]; then
  echo "helm: $module is not required in $src/go.mod" >&2
  exit 1
fi
bin="$cache/helm-$version/helm"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "helm: Go is required to build helm (see README)" >&2; exit 1; }
echo "helm: building helm $version from $module (first build on a machine takes ~5 min on 2 cores)..." >&2
start=$(date +%s)
mkdir -p "$cache/helm-$version"
# -X stamps the exact version: the module's own default is only "vMAJOR.MINOR".
( cd "$src" && go build -trimpath \
    -ldflags "-s -w -X $module/internal/version.version=$version" \
    -o "$bin.tmp.$$" "$module/cmd/helm" )
mv "$bin.tmp.$$" "$bin"
echo "helm: built in $(( $(date +%s) - start ))s: $bin" >&2
echo "$bin"
