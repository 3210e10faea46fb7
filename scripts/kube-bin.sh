#!/usr/bin/env bash
# Builds the real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager in
# one binary) from the Go module under tests/kube, once per machine: the result is cached
# under ${KBIND_CACHE:-~/.cache/kbind} keyed by the module's inputs, and reused while they
# are unchanged. Prints the path of the binary on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tests/kube"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
key=$(cat "$src/go.mod" "$src/go.sum" "$src/cmd/kube/main.go" | sha256sum | cut -c1-16)
bin="$cache/kube-$key/kube"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "kube-bin: Go is required to build kube-apiserver (see README)" >&2; exit 1; }
version=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$src/go.mod")
minor=$(echo "$version" | cut -d. -f2)
echo "kube-bin: building etcd + kube-apiserver + kube-controller-manager $version (first build on a machine takes ~10 min on 2 cores)..." >&2
start=$(date +%s)
mkdir -p "$cache/kube-$key"
( cd "$src" && go build -trimpath \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    -o "$bin.tmp" ./cmd/kube )
mv "$bin.tmp" "$bin"
echo "kube-bin: built in $(( $(date +%s) - start ))s: $bin" >&2
echo "$bin"
