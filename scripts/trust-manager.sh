#!/usr/bin/env bash
# Builds trust-manager (cert-manager's trust bundle operator) and controller-gen from the Go
# modules pinned in tools/trust-manager, once per machine, and writes trust-manager's CRDs with
# controller-gen from trust-manager's own API package: the real-operator e2e tests run it against
# the provider apiserver as a process. Everything is cached under
# ${KBIND_CACHE:-~/.cache/kbind}/trust-manager-<version>-<inputs>/ (trust-manager, controller-gen,
# crds/) and reused. No release binary or CRD file is downloaded or copied. Prints the cache
# directory on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/trust-manager"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=github.com/cert-manager/trust-manager
version=$(go_module_version trust-manager "$src" "$module")
key=$(cat "$src/go.mod" "$src/go.sum" "$0" | sha256sum | cut -c1-12)
dir="$cache/trust-manager-$version-$key"
go_tool_build trust-manager "$dir/trust-manager" "$src" "$module/cmd/trust-manager" \
  "" \
  "trust-manager $version (first build on a machine takes ~1 min on 2 cores)" >/dev/null
go_tool_build controller-gen "$dir/controller-gen" "$src" sigs.k8s.io/controller-tools/cmd/controller-gen "" \
  "controller-gen (first build on a machine takes ~1 min on 2 cores)" >/dev/null
if [ ! -f "$dir/crds/trust-manager.io_clusterbundles.yaml" ]; then
  # The CRDs of the API trust-manager reconciles, generated from its Go types as its own
  # Makefile does.
  rm -rf "$dir/crds.tmp.$$"
  ( cd "$src" && "$dir/controller-gen" crd "paths=$module/pkg/apis/..." \
      "output:crd:dir=$dir/crds.tmp.$$" )
  rm -rf "$dir/crds"
  mv "$dir/crds.tmp.$$" "$dir/crds"
fi
echo "$dir"
