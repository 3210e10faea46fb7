#!/usr/bin/env bash
# Builds toxiproxy's server (Shopify's TCP fault proxy) from the Go module pinned in
# tools/toxiproxy, once per machine: cached under ${KBIND_CACHE:-~/.cache/kbind}/toxiproxy-<version>/
# and reused. The HA fault tests put it between one replica and one apiserver to hang a link
# (its `timeout` toxic), slow it (`latency`) or reset it (`reset_peer`). No release binary is
# downloaded. Prints the path of the binary on stdout; progress goes to stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/go-tool.sh"
src="$root/tools/toxiproxy"
cache="${KBIND_CACHE:-$HOME/.cache/kbind}"
module=github.com/Shopify/toxiproxy/v2
version=$(go_module_version toxiproxy "$src" "$module")
go_tool_build toxiproxy "$cache/toxiproxy-$version/toxiproxy-server" "$src" "$module/cmd/server" \
  "-X $module.Version=$version" \
  "toxiproxy $version (first build on a machine takes ~1 min on 2 cores)"
