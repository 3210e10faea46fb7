#!/usr/bin/env bash
# Generates the CRD corpus the corpus e2e test binds (tests/tests/crd_corpus): the small Go
# program in tests/corpus runs controller-gen's CRD generator (sigs.k8s.io/controller-tools, as a
# library) on the API packages of the projects its go.mod pins. Built and run once per machine
# and inputs: the CRDs are cached under ${KBIND_CACHE:-~/.cache/kbind}/crd-corpus-<inputs>/crds/
# (one folder per project) and reused. Only the Go module proxy is used; no CRD is copied out
# of a module archive. Prints the path of the crds folder on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tests/corpus"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" "$src/pins.go" | sha256sum | cut -c1-12)
dir="$cache/crd-corpus-$key"
if [ -f "$dir/crds/.complete" ]; then
  echo "$dir/crds"
  exit 0
fi
bin=$(go_tool_build crd-corpus "$dir/corpus" "$src" . "" \
  "the CRD corpus generator (first build on a machine takes ~2 min on 2 cores)")
start=$(date +%s)
rm -rf "$dir/crds.tmp.$$"
# controller-gen loads the packages through `go list`, in the module that pins them.
( cd "$src" && "$bin" "$dir/crds.tmp.$$" )
touch "$dir/crds.tmp.$$/.complete"
rm -rf "$dir/crds"
mv "$dir/crds.tmp.$$" "$dir/crds"
echo "crd-corpus: generated $(find "$dir/crds" -name '*.yaml' | wc -l) CRDs in $(( $(date +%s) - start ))s: $dir/crds" >&2
echo "$dir/crds"
