#!/usr/bin/env bash
# `make release`: every release artifact, built on this machine into $DIST (default dist/).
#
#   konnector_<v>_linux_<arch>.tar.gz       the konnector, static (musl, mimalloc), stripped
#   kubectl-kbind_<v>_linux_<arch>.tar.gz   the kubectl plugin, static, stripped
#   konnector-<v>.tgz                       the Helm chart, version and appVersion <v>
#   konnector-image_<v>.oci.tar             the image (scripts/oci-image.sh) as an OCI archive:
#                                           one image per architecture under one index
#   kbind.yaml                              krew plugin manifest (archives' sha256; URIs under
#                                           $RELEASE_URL)
#   konnector_<v>.cdx.json,
#   kubectl-kbind_<v>.cdx.json              CycloneDX SBOMs (cargo-cyclonedx)
#   README                                  what was built, from which commit, and what not
#   SHA256SUMS                              of everything above
#
# <arch> is amd64 and arm64, cross-built with cargo-zigbuild and zig (scripts/release-tools.sh
# installs both, and the rustup targets). A target that fails to build is left out and the
# README says so; the rest still ships. VERSION defaults to the workspace version; the commit
# (git HEAD, `-dirty` with uncommitted changes) is stamped into the binaries (KBIND_GIT_COMMIT)
# and the image's labels. `make release-check` (scripts/release-check.sh) verifies the result.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
workspace_version=$(awk -F'"' '/^\[workspace.package\]/{p=1} p && /^version *=/{print $2; exit}' Cargo.toml)
version=${VERSION:-$workspace_version}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] ||
  { echo "release: VERSION=$version is not a semantic version (the chart needs one)" >&2; exit 2; }
commit=$(git rev-parse --short=12 HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
dist=${DIST:-$root/dist}
release_url=${RELEASE_URL:-https://github.com/kbind/kbind/releases/download/v$version}
target_dir=$(mkdir -p "${TARGET_DIR:-target}" && cd "${TARGET_DIR:-target}" && pwd)
epoch=$(git log -1 --format=%ct)
helm=$(scripts/helm.sh)
PATH="$(scripts/release-tools.sh):$PATH"
export PATH
start=$SECONDS

rm -rf "$dist"
mkdir -p "$dist"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Deterministic archives: sorted, owned by root, mtime of the commit.
archive() { # archive OUT DIR FILE...
  local out=$1 dir=$2
  shift 2
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$dir" -cf - "$@" |
    gzip -n -9 >"$out"
}

declare -A triple=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
built=() missing=()
for arch in amd64 arm64; do
  t=${triple[$arch]}
  echo "release: building konnector and kubectl-kbind for $t ($arch)" >&2
  if KBIND_GIT_COMMIT=$commit CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_TARGET_DIR="$target_dir" \
      cargo zigbuild --release --locked -p konnector -p kubectl-kbind --target "$t" >&2; then
    built+=("$arch")
  else
    echo "release: the $t build failed; $arch is left out" >&2
    missing+=("$arch")
    continue
  fi
  for bin in konnector kubectl-kbind; do
    mkdir -p "$work/$bin-$arch"
    install -m 0755 "$target_dir/$t/release/$bin" "$work/$bin-$arch/$bin"
    cp README.md "$work/$bin-$arch/README.md"
    archive "$dist/${bin}_${version}_linux_$arch.tar.gz" "$work/$bin-$arch" "$bin" README.md
  done
done
((${#built[@]} > 0)) || { echo "release: no target could be built" >&2; exit 1; }

echo "release: packaging the chart" >&2
"$helm" package charts/konnector --version "$version" --app-version "$version" -d "$dist" >&2

echo "release: assembling the image (${built[*]})" >&2
pairs=()
for arch in "${built[@]}"; do pairs+=("$arch=$work/konnector-$arch/konnector"); done
VERSION=$version COMMIT=$commit SOURCE_DATE_EPOCH=$epoch scripts/oci-image.sh "$work/image" "${pairs[@]}" >/dev/null
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$work/image" \
  -cf "$dist/konnector-image_${version}.oci.tar" oci-layout index.json blobs

echo "release: writing the krew manifest" >&2
{
  cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: kbind
spec:
  version: v$version
  homepage: https://github.com/kbind/kbind
  shortDescription: Bind APIs of provider clusters into this cluster
  description: |
    kubectl kbind connects a consumer cluster to provider clusters through the kbind
    konnector: connect a provider, bind its exported APIs, read the status of Connections and
    bindings, unbind and disconnect, and print the RBAC a provider needs.
  platforms:
YAML
  for arch in "${built[@]}"; do
    file="kubectl-kbind_${version}_linux_$arch.tar.gz"
    sum=$(sha256sum "$dist/$file" | cut -d' ' -f1)
    cat <<YAML
    - selector:
        matchLabels:
          os: linux
          arch: $arch
      uri: $release_url/$file
      sha256: $sum
      bin: kubectl-kbind
      files:
        - from: kubectl-kbind
          to: .
        - from: README.md
          to: .
YAML
  done
} >"$dist/kbind.yaml"

echo "release: writing the SBOMs" >&2
# cargo-cyclonedx writes <package>.cdx.json beside each workspace member's Cargo.toml: the
# konnector's and the plugin's go to $dist, the others' are removed.
sbom_target=${triple[${built[0]}]}
cargo cyclonedx --format json --spec-version 1.5 --target "$sbom_target" >&2
mv host/konnector.cdx.json "$dist/konnector_${version}.cdx.json"
mv kubectl-kbind/kubectl-kbind.cdx.json "$dist/kubectl-kbind_${version}.cdx.json"
cargo metadata --no-deps --format-version 1 | jq -r '.packages[].manifest_path' |
  while read -r manifest; do rm -f "$(dirname "$manifest")"/*.cdx.json; done

{
  echo "kbind $version"
  echo
  echo "version: $version"
  echo "commit: $commit"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) by scripts/release.sh (make release)"
  echo "architectures: ${built[*]}"
  if ((${#missing[@]} > 0)); then
    echo "not built: ${missing[*]} (the cross build failed on the release machine; see its log)"
  fi
  cat <<TEXT

Files
  konnector_${version}_linux_<arch>.tar.gz
      the konnector, static (musl), for linux/<arch>
  kubectl-kbind_${version}_linux_<arch>.tar.gz
      the kubectl plugin (kubectl kbind), static
  konnector-${version}.tgz
      the Helm chart: helm install kbind ./konnector-${version}.tgz, or helm push it to an OCI
      registry and helm install kbind oci://<registry>/<path>/konnector --version ${version}
  konnector-image_${version}.oci.tar
      the konnector image, an OCI archive with one image per architecture:
      skopeo copy oci-archive:konnector-image_${version}.oci.tar docker://<registry>/konnector:${version}
      (or docker load / podman load -i konnector-image_${version}.oci.tar)
  kbind.yaml
      krew manifest: kubectl krew install --manifest=kbind.yaml
      (offline: add --archive=kubectl-kbind_${version}_linux_<arch>.tar.gz)
  konnector_${version}.cdx.json, kubectl-kbind_${version}.cdx.json
      CycloneDX SBOMs of the konnector and the plugin
  SHA256SUMS
      sha256sum -c SHA256SUMS

The image: FROM scratch, /konnector (entrypoint; default command "run"), this machine's CA
bundle at /etc/ssl/certs/ca-certificates.crt (SSL_CERT_FILE), user 65532:65532, ports 8085
(metrics) and 8081 (probes); labels org.opencontainers.image.version=${version} and
org.opencontainers.image.revision=${commit}.
TEXT
} >"$dist/README"

( cd "$dist" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort |
    xargs sha256sum >SHA256SUMS )
echo "release: done in $((SECONDS - start)) s: $dist" >&2
ls -l "$dist" >&2
cat "$dist/SHA256SUMS"
