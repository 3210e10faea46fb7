#!/usr/bin/env bash
# `make release-check`: verifies every artifact `make release` left in $DIST (default dist/),
# printing one line per check and failing at the end when any failed:
#   - SHA256SUMS matches every file;
#   - each binary is static and runs: `--version` names the release's version and commit
#     (arm64 through qemu-user, installed by scripts/release-tools.sh);
#   - the krew manifest passes krew's own validator (validate-krew-manifest, built from its Go
#     module by scripts/krew.sh), its sha256s match the archives, and krew installs the plugin
#     from each archive (KREW_OS/KREW_ARCH per platform) into a scratch KREW_ROOT, where the
#     installed plugin runs;
#   - the chart passes `helm lint --strict` and carries the release's version and appVersion;
#   - the image archive is an OCI layout with one linux image per built architecture, each
#     configured as README describes (entrypoint, command, user, environment, ports, labels),
#     its layer holding the CA bundle and the same konnector as the release archive;
#   - each SBOM is CycloneDX naming its package and its dependencies.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dist=${DIST:-$root/dist}
[ -f "$dist/README" ] || { echo "release-check: no release in $dist; run make release" >&2; exit 1; }
version=$(sed -n 's/^version: //p' "$dist/README")
commit=$(sed -n 's/^commit: //p' "$dist/README")
read -r -a archs <<<"$(sed -n 's/^architectures: //p' "$dist/README")"
helm=$(scripts/helm.sh)
PATH="$(scripts/release-tools.sh):$PATH"
krew_dir=$(scripts/krew.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

ok() { echo "ok      $*"; }
fail() { echo "FAILED  $*"; failures=$((failures + 1)); }
check() { # check DESCRIPTION COMMAND...: runs COMMAND, ok when it succeeds
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then ok "$what"; else fail "$what"; echo "$out" | sed 's/^/        /' | tail -20; fi
}

# Runs a linux/<arch> binary here: natively, or through qemu-user for the other architecture.
run_arch() { # run_arch ARCH BINARY ARGS...
  local arch=$1
  shift
  local native
  case "$(uname -m)" in x86_64) native=amd64 ;; aarch64) native=arm64 ;; *) native=none ;; esac
  if [ "$arch" = "$native" ]; then "$@"; return; fi
  local qemu
  case "$arch" in amd64) qemu=x86_64 ;; arm64) qemu=aarch64 ;; esac
  if command -v "qemu-$qemu-static" >/dev/null; then "qemu-$qemu-static" "$@"
  elif command -v "qemu-$qemu" >/dev/null; then "qemu-$qemu" "$@"
  else echo "no qemu-$qemu to run $arch binaries"; return 1; fi
}

expect_version() { # expect_version ARCH BINARY NAME
  local out
  out=$(run_arch "$1" "$2" --version 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  grep -q "^$3 $version\b" <<<"$out" || { echo "does not print \"$3 $version\""; return 1; }
  grep -q -- "$commit" <<<"$out" || { echo "does not print the commit $commit"; return 1; }
}

static() { ! readelf -l "$1" 2>/dev/null | grep -q 'program interpreter' && readelf -h "$1" >/dev/null; }

echo "release-check: $dist (version $version, commit $commit, ${archs[*]})"
check "SHA256SUMS matches every file" bash -c "cd '$dist' && sha256sum --quiet -c SHA256SUMS && [ \$(wc -l <SHA256SUMS) -eq \$(find . -maxdepth 1 -type f ! -name SHA256SUMS | wc -l) ]"

for arch in "${archs[@]}"; do
  for bin in konnector kubectl-kbind; do
    file="${bin}_${version}_linux_$arch.tar.gz"
    mkdir -p "$work/$bin-$arch"
    if ! tar -xzf "$dist/$file" -C "$work/$bin-$arch"; then fail "$file extracts"; continue; fi
    check "$file: $bin is static" static "$work/$bin-$arch/$bin"
    check "$file: $bin --version prints $version and $commit ($arch)" expect_version "$arch" "$work/$bin-$arch/$bin" "$bin"
  done
done

manifest="$dist/kbind.yaml"
check "kbind.yaml passes validate-krew-manifest" "$krew_dir/validate-krew-manifest" -manifest "$manifest" -skip-install
for arch in "${archs[@]}"; do
  file="kubectl-kbind_${version}_linux_$arch.tar.gz"
  sum=$(sha256sum "$dist/$file" | cut -d' ' -f1)
  check "kbind.yaml: linux/$arch names $file with its sha256" \
    grep -q "sha256: $sum" "$manifest"
  krew_root="$work/krew-$arch"
  check "krew installs kbind from $file (KREW_ARCH=$arch)" \
    env KREW_ROOT="$krew_root" KREW_OS=linux KREW_ARCH="$arch" "$krew_dir/krew" install --manifest="$manifest" --archive="$dist/$file"
  check "the krew-installed kubectl-kbind runs ($arch)" expect_version "$arch" "$krew_root/bin/kubectl-kbind" kubectl-kbind
done

chart="$dist/konnector-$version.tgz"
check "helm lint --strict konnector-$version.tgz" "$helm" lint --strict "$chart"
check "the chart's version and appVersion are $version" bash -c \
  "'$helm' show chart '$chart' | grep -qx 'version: $version' && '$helm' show chart '$chart' | grep -qx 'appVersion: $version'"

image="$dist/konnector-image_${version}.oci.tar"
mkdir -p "$work/image"
if tar -xf "$image" -C "$work/image"; then
  blob() { cat "$work/image/blobs/sha256/${1#sha256:}"; }
  top=$(jq -r '.manifests[0].digest' "$work/image/index.json")
  top_type=$(jq -r '.manifests[0].mediaType' "$work/image/index.json")
  check "the image archive is an OCI layout" test "$(jq -r .imageLayoutVersion "$work/image/oci-layout")" = 1.0.0
  check "every blob matches its digest" bash -c "cd '$work/image/blobs/sha256' && for f in *; do echo \"\$f  \$f\"; done | sha256sum --quiet -c"
  if [ "$top_type" = application/vnd.oci.image.index.v1+json ]; then
    images=$(blob "$top" | jq -c '.manifests[]')
  else
    images=$(jq -c '.manifests[0] + {platform: {architecture: "'"${archs[0]}"'", os: "linux"}}' "$work/image/index.json")
  fi
  image_archs=$(jq -r '.platform.architecture' <<<"$images" | sort | xargs)
  check "the image has linux/{${archs[*]}}" test "$image_archs" = "$(printf '%s\n' "${archs[@]}" | sort | xargs)"
  while read -r descriptor; do
    arch=$(jq -r .platform.architecture <<<"$descriptor")
    manifest_json=$(blob "$(jq -r .digest <<<"$descriptor")")
    config=$(blob "$(jq -r .config.digest <<<"$manifest_json")")
    expected=$(jq -cn --arg v "$version" --arg c "$commit" --arg a "$arch" '{
      architecture: $a, os: "linux", user: "65532:65532", entrypoint: ["/konnector"], cmd: ["run"],
      env: ["SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"], ports: ["8081/tcp", "8085/tcp"],
      version: $v, revision: $c}')
    actual=$(jq -c '{architecture, os, user: .config.User, entrypoint: .config.Entrypoint,
      cmd: .config.Cmd, env: .config.Env, ports: (.config.ExposedPorts | keys),
      version: .config.Labels["org.opencontainers.image.version"],
      revision: .config.Labels["org.opencontainers.image.revision"]}' <<<"$config")
    check "image linux/$arch: configuration as documented" test "$actual" = "$expected"
    layer=$(jq -r '.layers[0].digest' <<<"$manifest_json")
    mkdir -p "$work/rootfs-$arch"
    blob "$layer" | tar -xzf - -C "$work/rootfs-$arch"
    check "image linux/$arch: holds the CA bundle" grep -q 'BEGIN CERTIFICATE' "$work/rootfs-$arch/etc/ssl/certs/ca-certificates.crt"
    check "image linux/$arch: /konnector is the released konnector" \
      cmp "$work/rootfs-$arch/konnector" "$work/konnector-$arch/konnector"
    check "image linux/$arch: /konnector --version prints $version and $commit" \
      expect_version "$arch" "$work/rootfs-$arch/konnector" konnector
  done <<<"$images"
else
  fail "konnector-image_${version}.oci.tar extracts"
fi

for name in konnector kubectl-kbind; do
  sbom="$dist/${name}_${version}.cdx.json"
  check "${name}_${version}.cdx.json is a CycloneDX SBOM of $name with its dependencies" \
    jq -e --arg n "$name" '.bomFormat == "CycloneDX" and .metadata.component.name == $n
      and ([.components[]? | select(.name == "kube-client" or .name == "clap")] | length) > 0' "$sbom"
done

if ((failures > 0)); then
  echo "release-check: $failures check(s) failed"
  exit 1
fi
echo "release-check: every check passed"
