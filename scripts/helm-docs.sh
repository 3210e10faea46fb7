#!/usr/bin/env bash
# Builds helm-docs (the chart README generator) from the Go module pinned in tools/helm-docs,
# once per machine: the result is cached under
# ${KBIND_CACHE:-~/.cache/kbind}/helm-docs-<version>/helm-docs and reused. Prints the path of
# the binary on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/helm-docs"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=github.com/norwoodj/helm-docs
version=$(go_module_version helm-docs "$src" "$module")
go_tool_build helm-docs "$cache/helm-docs-$version/helm-docs" "$src" "$module/cmd/helm-docs" \
  "-X main.version=$version" \
  "helm-docs $version from $module (first build on a machine takes ~1 min on 2 cores)"
