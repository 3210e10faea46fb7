#!/usr/bin/env bash
# Prints the path of tinyproxy (a small HTTP/HTTPS proxy, the proxy tests' stand-in for a
# corporate egress proxy), installing the distribution's package when it is missing. Progress
# goes to stderr.
set -euo pipefail
if bin=$(command -v tinyproxy) || { [ -x /usr/bin/tinyproxy ] && bin=/usr/bin/tinyproxy; }; then
  echo "$bin"
  exit 0
fi
echo "tinyproxy: installing the tinyproxy package" >&2
if ! { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tinyproxy >/dev/null; }; then
  echo "tinyproxy: tinyproxy is required by the proxy tests (apt-get install tinyproxy)" >&2
  exit 1
fi
# The package starts a system-wide instance; the tests start their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet tinyproxy 2>/dev/null; then
  systemctl stop tinyproxy >/dev/null 2>&1 || true
fi
command -v tinyproxy
