#!/usr/bin/env bash
# Assembles the konnector image as an OCI image layout (a directory with oci-layout, index.json
# and blobs/sha256/) from konnector binaries built on this machine, without a container engine:
# the same image Dockerfile.static describes (FROM scratch: /konnector, this machine's CA
# bundle, SSL_CERT_FILE, user 65532:65532, ports 8085 and 8081, entrypoint /konnector, cmd run).
# One architecture: index.json names that image. More: index.json names one image index
# listing an image per architecture (linux/<arch>), which is what `docker pull` resolves.
#
# Usage: scripts/oci-image.sh OUT_DIR ARCH=BINARY [ARCH=BINARY...]    (ARCH: amd64, arm64)
# Environment: VERSION and COMMIT (the image's version and revision labels; default the
# workspace version and git HEAD), LAYER_COMPRESSION=gzip (default) or none (an uncompressed
# layer: quicker for a test's throwaway image), SOURCE_DATE_EPOCH (file and creation times;
# default the commit time). The same inputs give the same digests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: $0 OUT_DIR ARCH=BINARY...}
shift
(($# > 0)) || { echo "oci-image: name at least one ARCH=BINARY" >&2; exit 2; }
command -v jq >/dev/null || { echo "oci-image: jq is required" >&2; exit 1; }
version=${VERSION:-$(awk -F'"' '/^\[workspace.package\]/{p=1} p && /^version *=/{print $2; exit}' "$root/Cargo.toml")}
commit=${COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
compression=${LAYER_COMPRESSION:-gzip}
ca=/etc/ssl/certs/ca-certificates.crt
grep -q 'BEGIN CERTIFICATE' "$ca" 2>/dev/null ||
  { echo "oci-image: $ca holds no certificates; install the ca-certificates package" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/blobs/sha256"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Stores stdin as a blob; prints its digest and size.
put_blob() {
  local tmp="$work/blob.$$" digest
  cat >"$tmp"
  digest=$(sha256sum "$tmp" | cut -d' ' -f1)
  mv "$tmp" "$out/blobs/sha256/$digest"
  echo "sha256:$digest $(stat -c %s "$out/blobs/sha256/$digest")"
}

labels=$(jq -cn --arg v "$version" --arg c "$commit" --arg t "$created" '{
  "org.opencontainers.image.title": "kbind konnector",
  "org.opencontainers.image.description": "Binds provider cluster APIs into a consumer Kubernetes cluster",
  "org.opencontainers.image.licenses": "Apache-2.0",
  "org.opencontainers.image.version": $v,
  "org.opencontainers.image.revision": $c,
  "org.opencontainers.image.created": $t}')

manifests=()
for pair in "$@"; do
  arch=${pair%%=*} binary=${pair#*=}
  case "$arch" in amd64 | arm64) ;; *) echo "oci-image: unknown architecture $arch" >&2; exit 2 ;; esac
  [ -f "$binary" ] || { echo "oci-image: $binary is not a file" >&2; exit 1; }
  rootfs="$work/rootfs-$arch"
  mkdir -p "$rootfs/etc/ssl/certs"
  install -m 0755 "$binary" "$rootfs/konnector"
  install -m 0644 "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$rootfs" -cf "$work/layer-$arch.tar" konnector etc
  diff_id="sha256:$(sha256sum "$work/layer-$arch.tar" | cut -d' ' -f1)"
  if [ "$compression" = gzip ]; then
    layer_type=application/vnd.oci.image.layer.v1.tar+gzip
    read -r layer layer_size < <(gzip -n -6 <"$work/layer-$arch.tar" | put_blob)
  else
    layer_type=application/vnd.oci.image.layer.v1.tar
    read -r layer layer_size < <(put_blob <"$work/layer-$arch.tar")
  fi
  config=$(jq -cn --arg arch "$arch" --arg created "$created" --arg diff "$diff_id" --argjson labels "$labels" '{
    created: $created, architecture: $arch, os: "linux",
    config: {
      User: "65532:65532",
      Env: ["SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
      Entrypoint: ["/konnector"], Cmd: ["run"],
      ExposedPorts: {"8085/tcp": {}, "8081/tcp": {}},
      Labels: $labels},
    rootfs: {type: "layers", diff_ids: [$diff]},
    history: [{created: $created, created_by: "scripts/oci-image.sh: /konnector and the CA bundle"}]}')
  read -r config_digest config_size < <(printf '%s' "$config" | put_blob)
  manifest=$(jq -cn --arg cd "$config_digest" --argjson cs "$config_size" \
    --arg lt "$layer_type" --arg ld "$layer" --argjson ls "$layer_size" --argjson labels "$labels" '{
    schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
    layers: [{mediaType: $lt, digest: $ld, size: $ls}],
    annotations: $labels}')
  read -r manifest_digest manifest_size < <(printf '%s' "$manifest" | put_blob)
  manifests+=("$(jq -cn --arg d "$manifest_digest" --argjson s "$manifest_size" --arg arch "$arch" '{
    mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $d, size: $s,
    platform: {architecture: $arch, os: "linux"}}')")
done

printf '{"imageLayoutVersion":"1.0.0"}' >"$out/oci-layout"
if ((${#manifests[@]} == 1)); then
  top=${manifests[0]}
else
  nested=$(printf '%s\n' "${manifests[@]}" | jq -cs --argjson labels "$labels" '{
    schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: ., annotations: $labels}')
  read -r index_digest index_size < <(printf '%s' "$nested" | put_blob)
  top=$(jq -cn --arg d "$index_digest" --argjson s "$index_size" '{
    mediaType: "application/vnd.oci.image.index.v1+json", digest: $d, size: $s}')
fi
jq -cn --argjson top "$top" --arg v "$version" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [$top + {annotations: {"org.opencontainers.image.ref.name": $v}}]}' >"$out/index.json"
echo "$out"
