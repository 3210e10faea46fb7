# kbind: the konnector. `make test` is what CI runs; `make demo` shows it working.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: test lint unit e2e tools kube-bin helm wasm-target testenv-up testenv-down demo bench crds image

test: tools lint
	$(CARGO) test --workspace --all-targets

lint: tools
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

tools: wasm-target kube-bin helm

# The policy modules are built for wasm32-wasip2; install the target when it is missing.
wasm-target:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# Real etcd + kube-apiserver + kube-controller-manager, built from Go once per machine.
kube-bin:
	@scripts/kube-bin.sh >/dev/null

# helm, built from the Go module pinned in tools/helm once per machine (the chart tests use it).
helm:
	@scripts/helm.sh >/dev/null

# The konnector container image (Dockerfile). Needs a reachable container engine (docker or
# podman): machines without one (like CI) check the Dockerfile in tests/tests/dockerfile.rs.
CONTAINER_ENGINE ?= docker
IMAGE ?= kbind-local/konnector:git-$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo dev)
PLATFORM ?=
image:
	@if ! $(CONTAINER_ENGINE) info >/dev/null 2>&1; then \
	  echo "make image: no container engine is reachable ('$(CONTAINER_ENGINE) info' failed)." >&2; \
	  echo "  Start docker (or set CONTAINER_ENGINE=podman) and retry; this target cannot build the image without one." >&2; \
	  exit 1; \
	fi
	$(CONTAINER_ENGINE) build $(if $(PLATFORM),--platform $(PLATFORM)) -t $(IMAGE) .

TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

# Per-call latency (median, p99) and first-call vs warm cost of the built-in policies; then
# the konnector (release, run as a process) against plain server-side apply on a private
# loopback cluster pair: table on stdout, every figure in $(TARGET_DIR)/bench/sync.json.
# BENCH_INSTANCES=10000 for the large run. Every invocation selects the whole workspace, so
# cargo resolves one feature set and builds the policy runtime once; the sync bench runs the
# konnector binary built beside it (KONNECTOR=path measures another binary the same way).
BENCH_INSTANCES ?= 1000
KONNECTOR ?=
bench: wasm-target kube-bin
	$(CARGO) bench --workspace --bench policy
	$(CARGO) bench --workspace --bench sync -- --instances $(BENCH_INSTANCES) $(if $(KONNECTOR),--konnector $(KONNECTOR))

# The whole data path on two local kube-apiservers; Ctrl-C tears down.
demo: tools
	$(CARGO) build -q --workspace --bin konnector --bin demo
	$(TARGET_DIR)/debug/demo --konnector $(TARGET_DIR)/debug/konnector

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
