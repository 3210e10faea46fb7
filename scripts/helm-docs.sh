#!/usr/bin/env bash
# Builds helm-docs (the chart README generator) from the Go module pinned in tools/helm-docs,
# once per machine: the result is cached under
# ${KBIND_CACHE:-~/.cache/kbind}/helm-docs-<version>/helm-docs and reused. No release tarball
# is downloaded; only the Go module proxy is used. Prints the path of the binary on stdout;
# progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tools/helm-docs"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=github.com/norwoodj/helm-docs
version=$(awk -v m="$module" '$1==m{print $2}' "$src/go.mod")
if [ -z "$version" ]; then
  echo "helm-docs: $module is not required in $src/go.mod" >&2
  exit 1
fi
bin="$cache/helm-docs-$version/helm-docs"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "helm-docs: Go is required to build helm-docs (see README)" >&2; exit 1; }
echo "helm-docs: building helm-docs $version from $module (first build on a machine takes ~1 min on 2 cores)..." >&2
start=$(date +%s)
mkdir -p "$(dirname "$bin")"
( cd "$src" && go build -trimpath \
    -ldflags "-s -w -X main.version=$version" \
    -o "$bin.tmp.$$" "$module/cmd/helm-docs" )
mv "$bin.tmp.$$" "$bin"
echo "helm-docs: built in $(( $(date +%s) - start ))s: $bin" >&2
echo "$bin"
