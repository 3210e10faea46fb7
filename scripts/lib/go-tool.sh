# Shared by the scripts that build a test or release tool from a Go module pinned under tools/
# (helm, helm-docs, the OCI registry, krew): read the pinned version, and build a command once
# per machine into the cache, reusing it while it is there. Only the Go module proxy is used;
# no release tarball is downloaded. Sourced, not run.

# The version of MODULE that SRC/go.mod requires (single-line or block form); exits when it
# is not required. Usage: go_module_version NAME SRC MODULE
go_module_version() {
  local name=$1 src=$2 module=$3 version
  version=$(awk -v m="$module" '($1==m){print $2} ($1=="require" && $2==m){print $3}' "$src/go.mod")
  if [ -z "$version" ]; then
    echo "$name: $module is not required in $src/go.mod" >&2
    exit 1
  fi
  echo "$version"
}

# Prints BIN, building PACKAGE from SRC's module into it first when it is not there yet.
# Usage: go_tool_build NAME BIN SRC PACKAGE LDFLAGS WHAT
#   LDFLAGS: added to "-s -w" (e.g. the -X that stamps the version)
#   WHAT:    what is built, for the progress line (e.g. "helm v4.0.0, ~5 min on 2 cores")
go_tool_build() {
  local name=$1 bin=$2 src=$3 package=$4 ldflags=$5 what=$6 start
  if [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  command -v go >/dev/null || { echo "$name: Go is required to build $name (see README)" >&2; exit 1; }
  echo "$name: building $what..." >&2
  start=$(date +%s)
  mkdir -p "$(dirname "$bin")"
  ( cd "$src" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin.tmp.$$" "$package" )
  mv "$bin.tmp.$$" "$bin"
  echo "$name: built in $(( $(date +%s) - start ))s: $bin" >&2
  echo "$bin"
}
