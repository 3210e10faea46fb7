//! `sharding`: active-active replicas instead of leader election, its timings as flags, and the
//! Lease RBAC it needs.

use std::time::Duration;

use clap::Parser as _;

use super::rbac::dry_run_install;
use super::*;

/// The flags `sharding.enabled` adds with the default timings, after the chart's own.
const SHARDING_ARGS: &str = "--sharding --shard-lease-duration=15s --shard-renew-deadline=10s --shard-retry-period=2s --leader-election-namespace=kbind-system";

/// The Lease Role of a sharded release: its replicas create, renew, take, release and may
/// delete their membership and shard Leases in the release namespace.
const SHARD_LEASE_RBAC: &str = r#"
Role/kbind-konnector-leader-election:
  metadata: {namespace: kbind-system}
  rules:
    - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list, watch, create, update, patch, delete]}
RoleBinding/kbind-konnector-leader-election:
  metadata: {namespace: kbind-system}
  roleRef: {kind: Role, name: kbind-konnector-leader-election}
  subjects: [{kind: ServiceAccount, name: kbind-konnector, namespace: kbind-system}]
"#;

#[test]
fn sharding_replaces_leader_election_whatever_the_replica_count() -> Result<()> {
    for (values, replicas) in [
        ("sharding: {enabled: true}", 1),
        (
            "{replicaCount: 3, leaderElect: true, sharding: {enabled: true}}",
            3,
        ),
    ] {
        // The whole argument list: --sharding and its timings, never --leader-elect.
        render(values)?.expect(&format!(
            "Deployment/kbind-konnector: {{spec: {{replicas: {replicas}}}}}\nargs: {CHART_ARGS} {SHARDING_ARGS}{SHARD_LEASE_RBAC}"
        ))?;
    }
    Ok(())
}

#[test]
fn sharding_timings_are_passed_as_flags() -> Result<()> {
    let values =
        "sharding: {enabled: true, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 5s}";
    let flags =
        "--sharding --shard-lease-duration=30s --shard-renew-deadline=20s --shard-retry-period=5s";
    let namespace = format!("--leader-election-namespace={NAMESPACE}");
    render(values)?.expect(&format!("args: {CHART_ARGS} {flags} {namespace}"))
}

#[test]
fn sharding_is_off_by_default_with_the_konnector_s_own_timings() -> Result<()> {
    let values = yaml(&std::fs::read_to_string(format!("{CHART}/values.yaml"))?)?;
    let defaults =
        "sharding: {enabled: false, leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}";
    assert_fields(&values, &yaml(defaults)?)?;
    // The same defaults as `konnector run`'s flags.
    #[derive(clap::Parser)]
    struct Run {
        #[command(flatten)]
        args: konnector::cli::run::RunArgs,
    }
    let run = Run::try_parse_from(["run"])?.args;
    let seconds = |key: &str| -> Result<Duration> {
        let text = values["sharding"][key].as_str().context(key.to_string())?;
        let secs = text.strip_suffix('s').context(text.to_string())?;
        Ok(Duration::from_secs(secs.parse()?))
    };
    assert!(!run.sharding);
    assert_eq!(seconds("leaseDuration")?, run.shard_lease_duration);
    assert_eq!(seconds("renewDeadline")?, run.shard_renew_deadline);
    assert_eq!(seconds("retryPeriod")?, run.shard_retry_period);
    // Off: no sharding flag, and one replica elects no leader.
    render("")?.expect(&format!("args: {CHART_ARGS}"))
}

#[test]
fn sharding_values_are_checked_by_the_schema() -> Result<()> {
    assert_schema_rejects(&[
        ("sharding: {enabeld: true}", "enabeld"),
        ("sharding: {enabled: 'yes'}", "enabled"),
        ("sharding: {leaseDuration: 15}", "leaseDuration"),
        ("sharding: {renewDeadline: ten seconds}", "renewDeadline"),
    ])
}

#[test]
fn a_sharded_release_lints_clean() -> Result<()> {
    let values = "{replicaCount: 3, sharding: {enabled: true}}";
    assert_lints_clean(values)?;
    let out = dry_run_install(values)?;
    let (_, notes) = out.split_once("NOTES:").context("helm printed no NOTES")?;
    for says in [
        "3 replica(s), sharding on: every replica works on its share",
        "taken over\nwithin 15s + 2s (leaseDuration + retryPeriod)",
        "kubectl kbind status --konnector-namespace kbind-system",
        "kubectl -n kbind-system get leases -l core.kbind.io/shard-kind",
    ] {
        assert!(notes.contains(says), "{says:?} not in {notes}");
    }
    assert!(!notes.contains("leader election"), "{notes}");
    Ok(())
}
