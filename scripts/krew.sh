#!/usr/bin/env bash
# Builds krew (the kubectl plugin manager) and its manifest validator, validate-krew-manifest,
# from the Go module pinned in tools/krew, once per machine: cached under
# ${KBIND_CACHE:-~/.cache/kbind}/krew-<version>/. `make release-check` validates the release's
# plugin manifest with them and installs the plugin from its archive. Prints the directory
# holding both binaries on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/krew"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=sigs.k8s.io/krew
version=$(go_module_version krew "$src" "$module")
dir="$cache/krew-$version"
for cmd in krew validate-krew-manifest; do
  go_tool_build krew "$dir/$cmd" "$src" "$module/cmd/$cmd" \
    "-X $module/internal/version.gitTag=$version" "$cmd $version" >/dev/null
done
echo "$dir"
