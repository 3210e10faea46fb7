# kbind: the konnector. `make test` is what CI runs; `make demo` shows it working.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: test lint unit e2e tools kube-bin helm helm-docs registry tinyproxy toxiproxy operators chart-docs wasm-target testenv-up testenv-down demo bench crds image image-check release release-check docs docs-tools

# The test binaries run KBIND_TEST_JOBS at a time (default 3); see scripts/test.sh.
test: tools lint
	CARGO='$(CARGO)' scripts/test.sh

lint: tools
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

tools: wasm-target kube-bin helm helm-docs registry tinyproxy toxiproxy operators docs-tools

# The policy modules are built for wasm32-wasip2; install the target when it is missing.
wasm-target:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# Real etcd + kube-apiserver + kube-controller-manager, built from Go once per machine.
kube-bin:
	@scripts/kube-bin.sh >/dev/null

# helm, built from the Go module pinned in tools/helm once per machine (the chart tests use it).
helm:
	@scripts/helm.sh >/dev/null

# helm-docs, built from the Go module pinned in tools/helm-docs once per machine: it generates
# the chart README and the docs' values page (make chart-docs; the chart tests check for drift).
helm-docs:
	@scripts/helm-docs.sh >/dev/null

# An OCI registry (distribution's), built from the Go module pinned in tools/registry once per
# machine: the chart tests push the chart and an image to it and install from it.
registry:
	@scripts/registry.sh >/dev/null

# toxiproxy, built from the Go module pinned in tools/toxiproxy once per machine: the HA fault
# tests hang, slow and reset the link between one replica and one apiserver through it.
toxiproxy:
	@scripts/toxiproxy.sh >/dev/null

# The real operators the e2e tests run against the provider (trust-manager, kro) and
# controller-gen, built from the Go modules pinned in tools/operators once per machine, with
# each operator's CRDs generated from its API types.
operators:
	@scripts/operators.sh >/dev/null

# tinyproxy, from the distribution's packages when missing: the proxy test's HTTP proxy.
tinyproxy:
	@scripts/tinyproxy.sh >/dev/null

# Regenerate charts/konnector/README.md and docs/src/reference/helm-values.md from the comments
# in charts/konnector/values.yaml.
chart-docs:
	@scripts/chart-docs.sh

# The konnector container image, built by scripts/image.sh one of two ways:
#   IMAGE_BUILD=dockerfile  the Dockerfile: a Rust builder image, then distroless. Needs the
#                           registries holding both base images (docker.io, gcr.io).
#   IMAGE_BUILD=static      Dockerfile.static: the konnector built here, statically (musl, with
#                           mimalloc), FROM scratch with this machine's CA bundle. Pulls nothing;
#                           the musl target and musl-gcc are installed when missing.
#   IMAGE_BUILD=auto        (default) the Dockerfile when both base images are present or can be
#                           pulled, else the static build: offline machines still get an image.
# CONTAINER_ENGINE: docker when its daemon answers, else podman (installed from the
# distribution's packages when missing). PLATFORM: e.g. linux/arm64, Dockerfile builds only.
CONTAINER_ENGINE ?=
IMAGE ?= kbind-local/konnector:git-$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo dev)
PLATFORM ?=
IMAGE_BUILD ?= auto
IMAGE_ENV = CONTAINER_ENGINE='$(CONTAINER_ENGINE)' IMAGE='$(IMAGE)' PLATFORM='$(PLATFORM)' \
	IMAGE_BUILD='$(IMAGE_BUILD)' TARGET_DIR='$(TARGET_DIR)'
image: wasm-target
	@$(IMAGE_ENV) scripts/image.sh >/dev/null

# Builds the image, then tests the shipped artifact: its configuration, and the konnector run
# by chroot from the exported filesystem (--version, policy test on the built-in fixtures, TLS
# verified through the image's CA bundle). Not part of `make test`: it costs a release build.
image-check: image
	@$(IMAGE_ENV) scripts/image-check.sh

TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

# Release artifacts in $(DIST) for VERSION (default: the workspace version; the commit comes
# from git): static konnector and kubectl-kbind for linux amd64 and arm64 (cargo-zigbuild with
# zig), the packaged chart, the image as an OCI archive, a krew manifest, CycloneDX SBOMs and
# SHA256SUMS; scripts/release.sh says what each is. Heavy (two cross release builds) and not part
# of `make test`; the tools it needs are installed and cached by scripts/release-tools.sh.
# RELEASE_URL: where the archives will be downloadable (the krew manifest's URIs).
VERSION ?=
DIST ?= dist
RELEASE_URL ?=
RELEASE_ENV = VERSION='$(VERSION)' DIST='$(abspath $(DIST))' RELEASE_URL='$(RELEASE_URL)' TARGET_DIR='$(TARGET_DIR)'
release: wasm-target helm
	@$(RELEASE_ENV) scripts/release.sh

# Verifies what `make release` built: checksums, the binaries (--version, arm64 through
# qemu-user), the krew manifest (krew's validator, and krew installing each archive), helm lint,
# the image's configuration and content, the SBOMs.
release-check: helm
	@$(RELEASE_ENV) scripts/release-check.sh

# Per-call latency (median, p99) and first-call vs warm cost of the built-in policies; then
# the konnector (release, run as a process) against plain server-side apply on a private
# loopback cluster pair: table on stdout, every figure in $(TARGET_DIR)/bench/sync.json.
# BENCH_INSTANCES=10000 for the large run. Every invocation selects the whole workspace, so
# cargo resolves one feature set and builds the policy runtime once; the sync bench runs the
# konnector binary built beside it (KONNECTOR=path measures another binary the same way).
BENCH_INSTANCES ?= 1000
BENCH_APIS ?= 5
# None, or Namespaced: copies placed in `bench-bench` (each first sync asks the placement policy).
BENCH_ISOLATION ?= None
# More than 1: after the run, that many replicas with --sharding take the instances over; one
# is killed with SIGKILL (per-replica RSS and CPU, takeover time).
BENCH_REPLICAS ?= 1
KONNECTOR ?=
bench: wasm-target kube-bin
	$(CARGO) bench --workspace --bench policy
	$(CARGO) bench --workspace --bench decode
	$(CARGO) bench --workspace --bench sync -- --instances $(BENCH_INSTANCES) --apis $(BENCH_APIS) --isolation $(BENCH_ISOLATION) --replicas $(BENCH_REPLICAS) $(if $(KONNECTOR),--konnector $(KONNECTOR))

# The quick start on two local kube-apiservers: the chart installed, the konnector run as its
# Deployment would, each kubectl / kubectl kbind / helm command printed as typed; Ctrl-C tears down.
demo: tools
	$(CARGO) build -q --workspace --bin konnector --bin kubectl-kbind --bin demo
	$(TARGET_DIR)/debug/demo --konnector $(TARGET_DIR)/debug/konnector --kubectl-kbind $(TARGET_DIR)/debug/kubectl-kbind

# Regenerate the reference pages (CLI, CRDs, metrics, conditions) and build the book into
# $(TARGET_DIR)/book. `make test` fails when a page is stale, the book does not build or an
# internal link or anchor is broken (tools/docgen's tests).
docs: docs-tools helm-docs
	$(CARGO) run -q -p kbind-docgen -- write
	@scripts/chart-docs.sh
	CARGO_TARGET_DIR='$(TARGET_DIR)' scripts/docs.sh build

# mdBook and lychee, built from crates.io once per machine (cached in ~/.cache/kbind), both
# at once.
docs-tools:
	@scripts/docs-tools.sh mdbook >/dev/null & m=$$!; scripts/docs-tools.sh lychee >/dev/null; l=$$?; wait $$m && exit $$l

# Regenerate the committed core CRDs from the Rust types.
crds:
	$(CARGO) run -q -p konnector -- crds --out charts/konnector/files/crds

# The e2e tests' provider and consumer clusters, for a developer's shell: admin kubeconfigs in
# $(TESTENV_DIR)/provider.kubeconfig and $(TESTENV_DIR)/consumer.kubeconfig.
TESTENV_DIR ?= .testenv

testenv-up: kube-bin
	$(CARGO) run -q -p kbind-tests --bin testenv -- up $(TESTENV_DIR)

testenv-down:
	$(CARGO) run -q -p kbind-tests --bin testenv -- down $(TESTENV_DIR)
