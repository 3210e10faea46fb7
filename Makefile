# kbind: the konnector. `make test` is what CI runs; `make demo` shows it working.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: test lint unit e2e tools kube-bin wasm-target testenv-up testenv-down demo bench crds

test: tools lint
	$(CARGO) test --workspace --all-targets

lint: tools
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

tools: wasm-target kube-bin

# The policy modules are built for wasm32-wasip2; install the target when it is missing.
wasm-target:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

# Real etcd + kube-apiserver + kube-controller-manager, built from Go once per machine.
kube-bin:
	@scripts/kube-bin.sh >/dev/null

# Per-call latency (median, p99) and first-call vs warm cost of the built-in policies.
bench: wasm-target
	$(CARGO) bench -p konnector --bench policy

# Regenerate the committed core CRDs from the Rust types.
crds:
	$(CARGO) run -q -p konnector -- crds --out charts/konnector/files/crds
