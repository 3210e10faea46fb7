//! The status tree as text, from report values only (no cluster), so its shape is
//! unit-tested:
//!
//! ```text
//! Connection provider  Ready=True  source=CRD
//! └── widgets.example.org
//!     └── Binding team-a/widgets  Ready=True  Synced=True
//!         instances: 2 synced, 1 conflicting, 0 failing, 0 pending
//!         ✗ team-a/w3  OwnedByAnother: owned by another consumer
//! ```
//!
//! Under isolation the Connection line names the strategy and each in-sync instance where its
//! copy lives (`→ team-a/w1  on the provider at east-team-a/w1`). With a sharded konnector the
//! Connection line and each bound API's line name the replica running it (`runs on
//! konnector-7c9f-x2`), or say `no holder` while nobody does.

use std::fmt::Write as _;

use super::model::{BindingNode, ConnectionNode, Report, Shard, State};

/// At most this many failing instances are named per binding and API.
pub const MAX_NAMED: usize = 10;

/// Renders the whole report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    if report.connections.is_empty() && report.orphans.is_empty() {
        out.push_str("No Connections found: start with `kubectl kbind connect NAME --provider-kubeconfig FILE`.\n");
        return out;
    }
    for connection in &report.connections {
        render_connection(&mut out, connection);
    }
    if !report.orphans.is_empty() {
        out.push_str("Bindings whose Connection does not exist\n");
        let last = report.orphans.len() - 1;
        for (i, binding) in report.orphans.iter().enumerate() {
            render_binding(&mut out, "", i == last, binding);
        }
    }
    out
}

fn state(name: &str, s: &State) -> String {
    if s.reason.is_empty() || s.status == "True" {
        format!("{name}={}", s.status)
    } else {
        format!("{name}={} ({})", s.status, s.reason)
    }
}

fn render_connection(out: &mut String, c: &ConnectionNode) {
    let _ = write!(out, "Connection {}  {}", c.name, state("Ready", &c.ready));
    if let Some(source) = &c.source {
        let _ = write!(out, "  source={source}");
    }
    if let Some(isolation) = &c.isolation {
        let _ = write!(out, "  isolation={isolation}");
    }
    if !c.policies.is_empty() {
        let _ = write!(out, "  policies: {}", c.policies.join(", "));
    }
    if c.deleting {
        out.push_str("  (deleting)");
    }
    render_shard(out, c.shard.as_ref());
    out.push('\n');
    if !c.ready.is_true() && !c.ready.message.is_empty() {
        let _ = writeln!(out, "│   {}", c.ready.message);
        let _ = writeln!(
            out,
            "│   what to do: {}",
            crate::hints::what_to_do(&c.ready.reason)
        );
    }
    for (type_, problem) in &c.problems {
        let _ = writeln!(out, "│   {}: {}", state(type_, problem), problem.message);
        let _ = writeln!(
            out,
            "│   what to do: {}",
            crate::hints::what_to_do(&problem.reason)
        );
    }
    if c.apis.is_empty() {
        out.push_str("└── (no exported APIs yet)\n");
    }
    let last_api = c.apis.len().saturating_sub(1);
    for (i, api) in c.apis.iter().enumerate() {
        let last = i == last_api;
        let (branch, indent) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        let _ = write!(out, "{branch}{}", api.name);
        if !api.exported {
            out.push_str("  (not exported)");
        }
        if api.bindings.is_empty() {
            out.push_str("  (not bound)");
        }
        render_shard(out, api.shard.as_ref());
        out.push('\n');
        let last_binding = api.bindings.len().saturating_sub(1);
        for (j, binding) in api.bindings.iter().enumerate() {
            render_binding(out, indent, j == last_binding, binding);
        }
    }
}

/// Where a sharded konnector runs a Connection's work or an API's syncer.
fn render_shard(out: &mut String, shard: Option<&Shard>) {
    match shard.map(|s| s.holder.as_deref()) {
        Some(Some(holder)) => {
            let _ = write!(out, "  runs on {holder}");
        }
        Some(None) => out.push_str("  no holder"),
        None => {}
    }
}

fn render_binding(out: &mut String, indent: &str, last: bool, b: &BindingNode) {
    let (branch, inner) = if last {
        ("└── ", "    ")
    } else {
        ("├── ", "│   ")
    };
    let name = match &b.namespace {
        Some(ns) => format!("{ns}/{}", b.name),
        None => b.name.clone(),
    };
    let _ = write!(
        out,
        "{indent}{branch}{} {name}  {}  {}",
        b.kind,
        state("Ready", &b.ready),
        state("Synced", &b.synced)
    );
    if b.deleting {
        out.push_str("  (deleting)");
    }
    out.push('\n');
    let pad = format!("{indent}{inner}");
    if !b.ready.is_true() && !b.ready.message.is_empty() {
        let _ = writeln!(out, "{pad}{}", b.ready.message);
        let _ = writeln!(
            out,
            "{pad}what to do: {}",
            crate::hints::what_to_do(&b.ready.reason)
        );
    }
    if let Some(note) = &b.note {
        let _ = writeln!(out, "{pad}instances: {note}");
        return;
    }
    let c = b.counts;
    let _ = writeln!(
        out,
        "{pad}instances: {} synced, {} conflicting, {} failing, {} pending",
        c.synced, c.conflicting, c.failing, c.pending
    );
    for f in b.failing.iter().take(MAX_NAMED) {
        let name = match &f.namespace {
            Some(ns) => format!("{ns}/{}", f.name),
            None => f.name.clone(),
        };
        let _ = writeln!(out, "{pad}✗ {name}  {}: {}", f.reason, f.message);
    }
    if b.failing.len() > MAX_NAMED {
        let _ = writeln!(
            out,
            "{pad}… and {} more (-o yaml lists all)",
            b.failing.len() - MAX_NAMED
        );
    }
    for p in b.placed.iter().take(MAX_NAMED) {
        let name = match &p.namespace {
            Some(ns) => format!("{ns}/{}", p.name),
            None => p.name.clone(),
        };
        let _ = writeln!(out, "{pad}→ {name}  on the provider at {}", p.at);
    }
    if b.placed.len() > MAX_NAMED {
        let _ = writeln!(
            out,
            "{pad}→ … and {} more placed (-o yaml lists all)",
            b.placed.len() - MAX_NAMED
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::status::model::{ApiNode, Instance, Placed};

    fn ready(status: &str, reason: &str) -> State {
        State {
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
        }
    }

    fn report() -> Report {
        let mut binding = BindingNode {
            kind: "Binding".into(),
            namespace: Some("team-a".into()),
            name: "widgets".into(),
            ready: ready("True", "AsExpected"),
            synced: ready("False", "ConflictsFound"),
            ..BindingNode::default()
        };
        binding.count(Some("team-a".into()), "w1".into(), Instance::Synced);
        binding.count(
            Some("team-a".into()),
            "w2".into(),
            Instance::Conflicting {
                reason: "OwnedByAnother".into(),
                message: "someone else's".into(),
            },
        );
        Report {
            connections: vec![ConnectionNode {
                name: "provider".into(),
                ready: ready("True", "AsExpected"),
                source: Some("CRD".into()),
                deleting: false,
                isolation: None,
                policies: vec![],
                problems: Default::default(),
                apis: vec![
                    ApiNode {
                        name: "gadgets.example.org".into(),
                        exported: true,
                        ..ApiNode::default()
                    },
                    ApiNode {
                        name: "widgets.example.org".into(),
                        exported: true,
                        bindings: vec![binding],
                        ..ApiNode::default()
                    },
                ],
                shard: None,
            }],
            orphans: vec![],
        }
    }

    #[test]
    fn the_tree_goes_from_connection_to_api_to_binding_to_instances() {
        let text = render(&report());
        let expected = "\
Connection provider  Ready=True  source=CRD
├── gadgets.example.org  (not bound)
└── widgets.example.org
    └── Binding team-a/widgets  Ready=True  Synced=False (ConflictsFound)
        instances: 1 synced, 1 conflicting, 0 failing, 0 pending
        ✗ team-a/w2  OwnedByAnother: someone else's
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_sharded_konnector_names_the_replica_running_each_bound_api() {
        let mut r = report();
        let bindings = r.connections[0].apis[1].bindings.clone();
        r.connections[0].apis.push(ApiNode {
            name: "things.example.org".into(),
            exported: true,
            bindings,
            ..ApiNode::default()
        });
        let leases = [
            ("provider", Some("konnector-0")),
            ("provider/widgets.example.org", Some("konnector-1")),
            ("provider/things.example.org", None),
        ];
        r.place(&crate::commands::status::shards::tests::holders(&leases));
        let text = render(&r);
        assert!(
            text.starts_with("Connection provider  Ready=True  source=CRD  runs on konnector-0\n"),
            "{text}"
        );
        assert!(
            text.contains("├── widgets.example.org  runs on konnector-1\n"),
            "{text}"
        );
        assert!(
            text.contains("└── things.example.org  no holder\n"),
            "{text}"
        );
        // An API no binding lists has no syncer to place.
        assert!(
            text.contains("├── gadgets.example.org  (not bound)\n"),
            "{text}"
        );
    }

    #[test]
    fn an_unsharded_konnector_names_no_replica() {
        let text = render(&report());
        assert!(
            !text.contains("runs on") && !text.contains("no holder"),
            "{text}"
        );
    }

    #[test]
    fn an_unready_connection_says_why_and_what_to_do() {
        let mut r = report();
        r.connections[0].ready = State {
            status: "False".into(),
            reason: "SecretNotFound".into(),
            message: "Secret kbind/p not found".into(),
        };
        let text = render(&r);
        assert!(text.starts_with("Connection provider  Ready=False (SecretNotFound)"));
        assert!(text.contains("│   Secret kbind/p not found\n"));
        assert!(text.contains(crate::hints::what_to_do("SecretNotFound")));
    }

    #[test]
    fn a_ready_connection_still_shows_a_condition_that_is_not_as_expected() {
        let mut r = report();
        let degraded = State {
            status: "True".into(),
            reason: "DiscoveryIncomplete".into(),
            message: "API groups not discovered: metrics.example.org".into(),
        };
        r.connections[0]
            .problems
            .insert("ProviderDegraded".into(), degraded);
        let text = render(&r);
        assert!(
            text.contains(
                "│   ProviderDegraded=True: API groups not discovered: metrics.example.org\n"
            ),
            "{text}"
        );
        assert!(text.contains(crate::hints::what_to_do("DiscoveryIncomplete")));
        assert!(!r.healthy(), "a problem condition makes status exit 1");
    }

    #[test]
    fn counts_the_konnector_published_win_over_instance_conditions() {
        let mut r = report();
        let binding = &mut r.connections[0].apis[1].bindings[0];
        // A status schema without conditions: every instance looks pending from outside.
        binding.count(None, "plain".into(), Instance::Pending);
        binding.counted_by_konnector(konnector::api::InstanceCounts {
            synced: 3,
            conflicting: 1,
            failing: 0,
            pending: 0,
        });
        let text = render(&r);
        assert!(
            text.contains("instances: 3 synced, 1 conflicting, 0 failing, 0 pending"),
            "{text}"
        );
    }

    #[test]
    fn under_isolation_each_placed_instance_shows_where_its_copy_lives() {
        let mut r = report();
        r.connections[0].isolation = Some("Namespaced (prefix east)".into());
        r.connections[0].apis[1].bindings[0].placed.push(Placed {
            namespace: Some("team-a".into()),
            name: "w1".into(),
            at: "east-team-a/w1".into(),
        });
        let text = render(&r);
        assert!(
            text.contains("isolation=Namespaced (prefix east)"),
            "{text}"
        );
        assert!(
            text.contains("→ team-a/w1  on the provider at east-team-a/w1"),
            "{text}"
        );
    }

    #[test]
    fn only_the_first_failing_instances_are_named() {
        let mut r = report();
        let binding = &mut r.connections[0].apis[1].bindings[0];
        for i in 0..(MAX_NAMED + 3) {
            binding.count(
                None,
                format!("x{i}"),
                Instance::Failing {
                    reason: "Forbidden".into(),
                    message: "m".into(),
                },
            );
        }
        let text = render(&r);
        assert_eq!(text.matches("✗ ").count(), MAX_NAMED);
        assert!(text.contains("… and 4 more"));
    }

    #[test]
    fn an_empty_cluster_points_at_connect() {
        assert!(render(&Report::default()).contains("kubectl kbind connect"));
    }

    #[test]
    fn a_connection_s_own_policy_modules_are_on_its_line() {
        let mut r = report();
        r.connections[0].policies = vec![
            "conflict=oci://r.example/acme/conflict:v1 (sha256:abc)".into(),
            "placement=built-in (unavailable)".into(),
        ];
        let text = render(&r);
        let first = text.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            "Connection provider  Ready=True  source=CRD  policies: \
             conflict=oci://r.example/acme/conflict:v1 (sha256:abc), placement=built-in (unavailable)"
        );
    }
}
