#!/usr/bin/env bash
# Builds helm from the Go module pinned in tools/helm (go.mod + go.sum), once per machine: the
# result is cached under ${KBIND_CACHE:-~/.cache/kbind}/helm-<version>/helm and reused. Prints
# the path of the binary on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/helm"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=helm.sh/helm/v4
version=$(go_module_version helm "$src" "$module")
# -X stamps the exact version: the module's own default is only "vMAJOR.MINOR".
go_tool_build helm "$cache/helm-$version/helm" "$src" "$module/cmd/helm" \
  "-X $module/internal/version.version=$version" \
  "helm $version from $module (first build on a machine takes ~5 min on 2 cores)"
