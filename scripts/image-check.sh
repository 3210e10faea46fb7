#!/usr/bin/env bash
# Checks the built image `$IMAGE` as shipped: its configuration (user, entrypoint, command,
# ports, labels), then its filesystem, exported with `create` + `export` (nothing is run by the
# engine), with the konnector run from that root by chroot (as root, so that this works where
# containers cannot start): `--version`; `policy test` on the built-in policies' fixtures, fresh
# and reused; and a TLS connection to a server trusted only through the image's CA bundle
# path, which a kubeconfig without certificate-authority-data relies on. Any difference exits
# non-zero with what was off.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
image=${IMAGE:?IMAGE names the image to check}
target_dir=$(mkdir -p "${TARGET_DIR:-target}" && cd "${TARGET_DIR:-target}" && pwd)
engine=$(scripts/engine.sh)
[ "$(id -u)" -eq 0 ] || { echo "image-check: chroot needs root" >&2; exit 1; }
for tool in openssl python3 timeout; do
  command -v "$tool" >/dev/null || { echo "image-check: $tool is required" >&2; exit 1; }
done

failures=0
fail() { echo "image-check: FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "image-check: ok: $*" >&2; }
expect() { # what, got, want
  if [ "$2" = "$3" ]; then ok "$1 = $2"; else fail "$1 is '$2', want '$3'"; fi
}

work=$(mktemp -d "$target_dir/image-check.XXXXXX")
cid=
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -z "$cid" ] || "$engine" rm "$cid" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

inspect() { "$engine" image inspect --format "$1" "$image"; }
expect "user" "$(inspect '{{.Config.User}}')" "65532:65532"
expect "entrypoint" "$(inspect '{{json .Config.Entrypoint}}')" '["/konnector"]'
expect "cmd" "$(inspect '{{json .Config.Cmd}}')" '["run"]'
ports=$(inspect '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}' | xargs -n1 | sort | xargs)
expect "exposed ports" "$ports" "8081/tcp 8085/tcp"
for label in title description licenses; do
  value=$(inspect "{{index .Config.Labels \"org.opencontainers.image.$label\"}}")
  if [ -n "$value" ] && [ "$value" != "<no value>" ]; then ok "label $label = $value"; else fail "label org.opencontainers.image.$label is missing"; fi
done
# The image's environment, as a container would get it.
mapfile -t image_env < <(inspect '{{range .Config.Env}}{{println .}}{{end}}' | sed '/^$/d')

rootfs="$work/root"
mkdir -p "$rootfs"
cid=$("$engine" create "$image")
"$engine" export "$cid" | tar -x -C "$rootfs"
"$engine" rm "$cid" >/dev/null
cid=
size=$(inspect '{{.Size}}')
echo "image-check: $image: $((size / 1000000)) MB; files:" >&2
(cd "$rootfs" && find . -type f -printf '  %P (%s bytes)\n' | sort) >&2

bundle=etc/ssl/certs/ca-certificates.crt
if [ -x "$rootfs/konnector" ]; then ok "/konnector is executable"; else fail "/konnector is missing or not executable"; fi
certs=$(grep -c 'BEGIN CERTIFICATE' "$rootfs/$bundle" 2>/dev/null || true)
if [ "${certs:-0}" -gt 0 ]; then ok "/$bundle holds $certs certificates"; else fail "/$bundle is missing or empty"; fi
[ "$failures" -eq 0 ] || { echo "image-check: $failures check(s) failed before running anything" >&2; exit 1; }

# The konnector as the image runs it: its user, only the image's environment, its root.
# A command, not a function: backgrounded, its pid is the konnector's (env and chroot exec).
as_image=(env -i "${image_env[@]}" chroot --userspec=65532:65532 "$rootfs")
konnector() { "${as_image[@]}" /konnector "$@"; }

if version=$(konnector --version 2>&1); then
  ok "/konnector --version: $version"
else
  fail "/konnector --version failed: $version"
fi

# The built-in policies' fixture folders, copied in readable by the image's user.
mkdir -p "$rootfs/check"
for fixtures in policies/*/fixtures; do
  role=$(basename "$(dirname "$fixtures")")
  cp -r "$fixtures" "$rootfs/check/$role"
done
chmod -R a+rX "$rootfs/check"
for fixtures in policies/*/fixtures; do
  role=$(basename "$(dirname "$fixtures")")
  for flag in "" --reused; do
    mode=${flag:-fresh}
    # $flag unquoted: no argument at all for a fresh run.
    # shellcheck disable=SC2086
    if out=$(konnector policy test --role "$role" $flag "/check/$role" 2>&1); then
      ok "policy test --role $role ($mode): $(tail -n1 <<<"$out")"
    else
      fail "policy test --role $role ($mode):"$'\n'"$out"
    fi
  done
done

# TLS roots: a throwaway CA signs a certificate for 127.0.0.1, and a server records whether
# each client finished the handshake (and then sent an HTTP request) or rejected the
# certificate. The konnector runs against it with a kubeconfig that has no
# certificate-authority-data, first with the image's bundle untouched (it must refuse the
# server), then with the throwaway CA appended to the bundle in this copy of the root (it must
# trust it): so the bundle at that path is what decides.
tls="$work/tls"
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj /CN=kbind-image-check-ca -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj /CN=127.0.0.1 -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$tls/ext"
openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
  -days 1 -extfile "$tls/ext" -out "$tls/server.crt" 2>/dev/null
cat > "$tls/server.py" <<'PY'
import socket, ssl, sys, threading
cert, key, port_file, log_file = sys.argv[1:5]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
listener = socket.create_server(("127.0.0.1", 0))
with open(port_file, "w") as f:
    f.write(str(listener.getsockname()[1]))
log = open(log_file, "a", buffering=1)
def serve(conn):
    try:
        with ctx.wrap_socket(conn, server_side=True) as tls:
            line = tls.makefile("rb").readline().decode(errors="replace").strip()
            log.write(f"request {line}\n")
            body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}'
            tls.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    except Exception as e:
        log.write(f"rejected {e}\n")
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
PY
python3 "$tls/server.py" "$tls/server.crt" "$tls/server.key" "$tls/port" "$tls/server.log" &
pids+=($!)
for _ in $(seq 50); do [ -s "$tls/port" ] && break; sleep 0.1; done
[ -s "$tls/port" ] || { fail "the TLS test server did not start"; exit 1; }
cat > "$rootfs/check/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: check
  cluster:
    server: https://127.0.0.1:$(cat "$tls/port")
users:
- name: check
  user:
    token: image-check
contexts:
- name: check
  context: {cluster: check, user: check}
current-context: check
KC
chmod a+r "$rootfs/check/kubeconfig"

# Runs `konnector run` against the server until it logs a line of the wanted kind (or 30s),
# then stops it; prints the server's log of that run.
tls_run() {
  local want=$1 pid
  : > "$tls/server.log"
  "${as_image[@]}" /konnector run --kubeconfig /check/kubeconfig \
    --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
    > "$tls/konnector.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do
    grep -q "^$want" "$tls/server.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  cat "$tls/server.log"
}

seen=$(tls_run rejected)
if grep -q '^rejected' <<<"$seen" && ! grep -q '^request' <<<"$seen"; then
  ok "with the image's bundle the konnector refuses an unknown CA ($(grep -m1 '^rejected' <<<"$seen"))"
else
  fail "with the image's bundle the konnector did not refuse the unknown CA; server saw:"$'\n'"${seen:-nothing}"$'\n'"konnector log:"$'\n'"$(tail -n 20 "$tls/konnector.log")"
fi
cat "$tls/ca.crt" >> "$rootfs/$bundle"
seen=$(tls_run request)
if grep -q '^request' <<<"$seen"; then
  ok "with the CA in /$bundle the konnector verified the server and sent: $(grep -m1 '^request' <<<"$seen" | cut -d' ' -f2-)"
else
  fail "with the CA in /$bundle the konnector did not complete a TLS handshake; server saw:"$'\n'"${seen:-nothing}"$'\n'"konnector log:"$'\n'"$(tail -n 20 "$tls/konnector.log")"
fi

if [ "$failures" -ne 0 ]; then
  echo "image-check: $image: $failures check(s) FAILED" >&2
  exit 1
fi
echo "image-check: $image: all checks passed" >&2
