#!/usr/bin/env bash
# Builds krew (the kubectl plugin manager) and its manifest validator, validate-krew-manifest,
# from the Go module pinned in tools/krew, once per machine: cached under
# ${KBIND_CACHE:-~/.cache/kbind}/krew-<version>/. `make release-check` validates the release's
# plugin manifest with them and installs the plugin from its archive. Prints the directory
# holding both binaries on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tools/krew"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=sigs.k8s.io/krew
version=$(awk -v m="$module" '$1==m{print $2}' "$src/go.mod")
if [ -z "$version" ]; then
  echo "krew: $module is not required in $src/go.mod" >&2
  exit 1
fi
dir="$cache/krew-$version"
if [ -x "$dir/krew" ] && [ -x "$dir/validate-krew-manifest" ]; then
  echo "$dir"
  exit 0
fi
command -v go >/dev/null || { echo "krew: Go is required to build krew (see README)" >&2; exit 1; }
echo "krew: building krew and validate-krew-manifest $version..." >&2
mkdir -p "$dir"
for cmd in krew validate-krew-manifest; do
  ( cd "$src" && go build -trimpath -ldflags "-s -w -X $module/internal/version.gitTag=$version" \
      -o "$dir/$cmd.tmp.$$" "$module/cmd/$cmd" )
  mv "$dir/$cmd.tmp.$$" "$dir/$cmd"
done
echo "$dir"
