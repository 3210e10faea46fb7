#!/usr/bin/env bash
# Builds the real operators the e2e tests run against the provider apiserver, and
# controller-gen, from the Go modules pinned in tools/operators, once per machine, and writes
# each operator's CRDs with controller-gen from the operator's own API packages:
#   trust-manager  cert-manager's trust bundle operator (Bundle → Secret, Synced condition)
#   kro            Kube Resource Orchestrator (a graph → a CRD it serves; its finalizer on
#                  each instance until it has deleted what the instance made)
# Everything is cached under ${KBIND_CACHE:-~/.cache/kbind}/operators-<inputs>/ (the three
# binaries, crds/trust-manager/, crds/kro/) and reused. No release binary or CRD file is
# downloaded or copied. Prints the cache directory on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/operators"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
trust_manager=github.com/cert-manager/trust-manager
kro=github.com/kubernetes-sigs/kro
tm_version=$(go_module_version operators "$src" "$trust_manager")
kro_version=$(go_module_version operators "$src" "$kro")
key=$(cat "$src/go.mod" "$src/go.sum" "$0" | sha256sum | cut -c1-12)
dir="$cache/operators-$key"
go_tool_build trust-manager "$dir/trust-manager" "$src" "$trust_manager/cmd/trust-manager" "" \
  "trust-manager $tm_version (first build on a machine takes ~2 min on 2 cores)" >/dev/null
go_tool_build kro "$dir/kro" "$src" "$kro/cmd/controller" "" \
  "kro $kro_version (~30 s more on 2 cores: most of its packages are trust-manager's)" >/dev/null
go_tool_build controller-gen "$dir/controller-gen" "$src" sigs.k8s.io/controller-tools/cmd/controller-gen "" \
  "controller-gen (~30 s more on 2 cores)" >/dev/null
# The CRDs of each operator's API packages, generated from its Go types as its own Makefile
# does.
for api in trust-manager=$trust_manager/pkg/apis/... kro=$kro/api/...; do
  name=${api%%=*} packages=${api#*=}
  [ -d "$dir/crds/$name" ] && continue
  rm -rf "$dir/crds/$name.tmp.$$"
  ( cd "$src" && "$dir/controller-gen" crd "paths=$packages" "output:crd:dir=$dir/crds/$name.tmp.$$" )
  mv "$dir/crds/$name.tmp.$$" "$dir/crds/$name"
done
echo "$dir"
