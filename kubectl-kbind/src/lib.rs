//! `kubectl kbind`: the operator's command line for kbind, as a kubectl plugin (the binary is
//! named `kubectl-kbind`, so kubectl finds it on `PATH`) and standalone.
//!
//! ```text
//! connect ──▶ Secret (designated namespace) + Connection ──wait Ready──┐
//! bind ─────▶ Binding / ClusterBinding ──────────────────wait Ready──┤
//! status ───▶ Connections → exported APIs → bindings → instance counts ┤ exit 0 / 1
//! unbind ───▶ delete binding, watch its drain ───────────────────────┤
//! disconnect ▶ (bindings first) → Connection → credential Secret ────┘
//! provider-rbac ▶ provider ClusterRole/Role + bindings as YAML (no cluster needed)
//! ```
//!
//! Every command follows kubectl's conventions: `--kubeconfig`/`KUBECONFIG`, `--context`,
//! `-n/--namespace`, `-o json|yaml|name`, `--wait`/`--timeout`, and exit codes scripts can use:
//! 0 done, 1 failed or not ready, 2 usage error. Pure decisions (reason hints, the status
//! tree, teardown plans, RBAC rules) live apart from the cluster calls and are unit-tested.

#![forbid(unsafe_code)]

// Bottom-up: what every command shares, then the pure plans, then the commands, then the
// dispatcher that calls them.
pub mod args;
pub mod exit;
pub mod marks;

pub mod binding;
pub mod client;
pub mod hints;
pub mod kubeconfig;
pub mod output;
pub mod wait;

pub mod admin_check;
pub mod plan;

pub mod commands;

pub mod cli;
