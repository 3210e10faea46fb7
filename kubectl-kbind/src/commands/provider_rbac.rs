//! `kubectl kbind provider-rbac`: the provider-side RBAC a konnector identity needs, derived
//! row by row from the spec's provider permissions table, as YAML for `kubectl apply -f -` on
//! the provider. Nothing more: provider RBAC and network boundaries are what control access.
//!
//! | operation | rule |
//! |---|---|
//! | identify plain Kubernetes | get Namespace `kube-system` |
//! | identify a kcp logical cluster (`--kcp`) | get `logicalclusters.core.kcp.io/cluster` |
//! | discover CRD exports (source CRD or Auto) | list + get CRDs |
//! | discover OpenAPI exports (source OpenAPI or Auto) | get `/api*`, `/apis*`, `/openapi/v3*` |
//! | sync instances (`--api`) | get/list/watch + create/patch/update/delete, cluster-wide |
//! | materialize a namespace | create Namespaces |
//! | sync related objects (`--related`) | sources: get/list; targets: get/list/create/patch/update/delete |
//! | heartbeat | get/create/update Leases in the Lease namespace (a Role there) |
//!
//! With `--isolation` and the consumer namespaces (`--consumer-namespace`), writes are granted
//! only where the konnector places copies: RBAC has no prefix match, so the instance and
//! related write verbs go into a Role in each placed namespace (placed by the built-in
//! placement policy, the one the konnector runs), while the cluster-wide reads the watches
//! need stay in the ClusterRole. Without consumer namespaces the cluster-wide rules stand.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use konnector::api::names::DEFAULT_HEARTBEAT_NAMESPACE;
use konnector::api::{
    IsolationInForce, IsolationStrategy, RelatedDirection, RelatedResource, RelatedResourceKind,
};
use konnector::policy::PlacementInput;

use crate::args::{IsolationArg, Source};
use crate::exit::UsageError;
use crate::marks::FIELD_MANAGER;

/// Flags of `provider-rbac`.
#[derive(clap::Args, Debug)]
pub struct RbacArgs {
    /// Kind of the provider identity the konnector's kubeconfig uses.
    #[arg(long, value_enum)]
    pub subject_kind: SubjectKind,
    /// Its name (for a ServiceAccount, give its namespace with -n).
    #[arg(long, value_name = "NAME")]
    pub subject: String,
    /// An exported API the konnector syncs, `<plural>.<group>`; repeatable.
    #[arg(long = "api", required = true, value_name = "API")]
    pub apis: Vec<String>,
    /// A related kind and direction, as for `bind --related`; repeatable.
    #[arg(long, value_parser = crate::args::parse_related, value_name = "SPEC")]
    pub related: Vec<RelatedResource>,
    /// The Connection's schema source (decides CRD and OpenAPI discovery access).
    #[arg(long, value_enum, default_value_t = Source::Auto)]
    pub schema_source: Source,
    /// Namespace of the heartbeat Lease: the provider kubeconfig context's namespace, else kbind.
    #[arg(long, default_value = DEFAULT_HEARTBEAT_NAMESPACE, value_name = "NS")]
    pub lease_namespace: String,
    /// The provider is kcp: allow reading the logical cluster identity.
    #[arg(long)]
    pub kcp: bool,
    /// Name of the ClusterRole, Role and their bindings.
    #[arg(long, default_value = "kbind-konnector", value_name = "NAME")]
    pub name: String,
    /// The Connection's isolation strategy (with --consumer-namespace: writes only where it
    /// places copies).
    #[arg(long, value_enum, default_value_t = IsolationArg::None)]
    pub isolation: IsolationArg,
    /// The Connection's consumer prefix (`kubectl get connection NAME -o
    /// jsonpath='{.status.isolation.prefix}'`); needed with --isolation Namespaced.
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// A consumer namespace whose instances (and related objects) the konnector syncs;
    /// repeatable. Absent: writes are granted cluster-wide.
    #[arg(long = "consumer-namespace", value_name = "NS")]
    pub consumer_namespaces: Vec<String>,
}

/// `--subject-kind` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    /// A provider ServiceAccount (token kubeconfig).
    #[value(name = "ServiceAccount")]
    ServiceAccount,
    /// A user (client certificate or static token).
    #[value(name = "User")]
    User,
    /// A group.
    #[value(name = "Group")]
    Group,
}

/// Prints the RBAC the flags describe; `namespace` is `-n`, the ServiceAccount's namespace.
pub async fn run(args: &RbacArgs, namespace: Option<&str>) -> anyhow::Result<()> {
    for api in &args.apis {
        if api
            .split_once('.')
            .is_none_or(|(plural, group)| plural.is_empty() || group.is_empty())
        {
            return Err(UsageError(format!("--api {api:?} is not <plural>.<group>")).into());
        }
    }
    let subject = subject(args.subject_kind, &args.subject, namespace)?;
    let placed = placed_namespaces(args).await?;
    for doc in generate(args, subject, placed.as_deref()) {
        print!("---\n{}", serde_saphyr::to_string(&doc)?);
    }
    Ok(())
}

/// The provider namespaces copies of the `--consumer-namespace`s go to under `--isolation`,
/// as the built-in placement policy places them; `None` without consumer namespaces (writes
/// stay cluster-wide).
async fn placed_namespaces(args: &RbacArgs) -> anyhow::Result<Option<Vec<String>>> {
    if args.consumer_namespaces.is_empty() {
        return Ok(None);
    }
    let strategy = IsolationStrategy::from(args.isolation);
    let prefix = match (&args.prefix, strategy) {
        (Some(prefix), _) => prefix.clone(),
        (None, IsolationStrategy::Namespaced) => {
            return Err(UsageError(
                "--isolation Namespaced with --consumer-namespace needs the Connection's --prefix \
                 (kubectl get connection NAME -o jsonpath='{.status.isolation.prefix}')"
                    .into(),
            )
            .into());
        }
        (None, _) => String::new(),
    };
    let policies = konnector::policy::Policies::builtin()?;
    let mut placed = Vec::new();
    for namespace in &args.consumer_namespaces {
        let isolation = IsolationInForce {
            strategy,
            prefix: prefix.clone(),
        };
        let input = PlacementInput::namespace_of(namespace, "", "", isolation);
        let place = policies.place(&input).await?;
        if let Some(ns) = place.namespace
            && !placed.contains(&ns)
        {
            placed.push(ns);
        }
    }
    Ok(Some(placed))
}

/// The RBAC subject; a ServiceAccount needs its namespace.
pub fn subject(
    kind: SubjectKind,
    name: &str,
    namespace: Option<&str>,
) -> Result<Value, UsageError> {
    Ok(match kind {
        SubjectKind::ServiceAccount => {
            let ns = namespace.ok_or_else(|| {
                UsageError("a ServiceAccount subject needs its namespace: -n NS".into())
            })?;
            json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
        }
        SubjectKind::User => {
            json!({"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
        }
        SubjectKind::Group => {
            json!({"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
        }
    })
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// The instance and related write verbs.
const WRITES: [&str; 4] = ["create", "patch", "update", "delete"];

/// The ClusterRole rules, one or more per row of the permissions table; with `placed`
/// namespaces, only the reads of the instance and related rows (see [`placed_rules`]).
pub fn cluster_rules(args: &RbacArgs, placed: Option<&[String]>) -> Vec<Value> {
    let keep = |verbs: &[&str]| -> Vec<String> {
        verbs
            .iter()
            .filter(|v| placed.is_none() || !WRITES.contains(v))
            .map(|v| v.to_string())
            .collect()
    };
    let scoped: Vec<Value> = sync_rules(args)
        .into_iter()
        .map(|(groups, resources, verbs)| {
            json!({"apiGroups": groups, "resources": resources, "verbs": keep(&verbs)})
        })
        .collect();
    let mut rules = fixed_rules(args);
    rules.extend(scoped);
    rules
}

/// The rules of the write verbs a Role grants in each placed namespace.
pub fn placed_rules(args: &RbacArgs) -> Vec<Value> {
    sync_rules(args)
        .into_iter()
        .filter_map(|(groups, resources, verbs)| {
            let writes: Vec<&str> = verbs.into_iter().filter(|v| WRITES.contains(v)).collect();
            (!writes.is_empty()).then(|| rule(&groups, &resources, &writes))
        })
        .collect()
}

/// The rules that do not depend on where copies go: identity, namespaces, discovery.
fn fixed_rules(args: &RbacArgs) -> Vec<Value> {
    let mut rules = vec![
        // Identify plain Kubernetes: read Namespace kube-system.
        json!({"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]}),
        // Materialize a namespace: the engine attempts a create even if it may exist.
        rule(&[""], &["namespaces"], &["create"]),
    ];
    if args.kcp {
        rules.push(json!({"apiGroups": ["core.kcp.io"], "resources": ["logicalclusters"], "resourceNames": ["cluster"], "verbs": ["get"]}));
    }
    if matches!(args.schema_source, Source::Auto | Source::Crd) {
        rules.push(rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            &["get", "list"],
        ));
    }
    let mut urls = vec!["/api", "/api/*", "/apis", "/apis/*"];
    if matches!(args.schema_source, Source::Auto | Source::OpenApi) {
        urls.extend(["/openapi/v3", "/openapi/v3/*"]);
    }
    rules.push(json!({"nonResourceURLs": urls, "verbs": ["get"]}));
    rules
}

/// The instance and related rows as (groups, resources, verbs).
fn sync_rules(args: &RbacArgs) -> Vec<(Vec<&str>, Vec<&str>, Vec<&'static str>)> {
    let mut rules = Vec::new();
    // Sync instances: cluster-wide reads, target writes; one rule per API group.
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for api in &args.apis {
        if let Some((plural, group)) = api.split_once('.') {
            let list = by_group.entry(group).or_default();
            if !list.contains(&plural) {
                list.push(plural);
            }
        }
    }
    for (group, plurals) in by_group {
        let verbs = vec![
            "get", "list", "watch", "create", "patch", "update", "delete",
        ];
        rules.push((vec![group], plurals, verbs));
    }
    // Sync related objects: read sources on the provider, write targets there.
    let mut related: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in &args.related {
        let resource = match r.resource {
            RelatedResourceKind::Secrets => "secrets",
            RelatedResourceKind::Configmaps => "configmaps",
        };
        let verbs: &[&'static str] = match r.direction {
            RelatedDirection::FromProvider => &["get", "list"],
            RelatedDirection::FromConsumer => {
                &["get", "list", "create", "patch", "update", "delete"]
            }
        };
        let entry = related.entry(resource).or_default();
        for v in verbs {
            if !entry.contains(v) {
                entry.push(v);
            }
        }
    }
    for (resource, verbs) in related {
        rules.push((vec![""], vec![resource], verbs));
    }
    rules
}

/// Every object to apply on the provider: the Lease namespace, the ClusterRole and Role with
/// their bindings to `subject`; with `placed` namespaces, each with a Role of the write verbs
/// (and the namespace itself, so the Role has somewhere to live).
pub fn generate(args: &RbacArgs, subject: Value, placed: Option<&[String]>) -> Vec<Value> {
    let labels = json!({"app.kubernetes.io/managed-by": FIELD_MANAGER, "app.kubernetes.io/part-of": "kbind"});
    let name = &args.name;
    let mut docs = common(args, &subject, &labels, placed);
    for placed_ns in placed.unwrap_or_default() {
        docs.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": placed_ns, "labels": labels}}));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": placed_ns, "labels": labels},
            "rules": placed_rules(args),
        }));
        docs.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": placed_ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        }));
    }
    docs
}

/// The Lease namespace, the ClusterRole and the heartbeat Role with their bindings.
fn common(
    args: &RbacArgs,
    subject: &Value,
    labels: &Value,
    placed: Option<&[String]>,
) -> Vec<Value> {
    let name = &args.name;
    let ns = &args.lease_namespace;
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": cluster_rules(args, placed),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [subject],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            // Heartbeat: get/create/update Leases in the kubeconfig context namespace.
            "rules": [rule(&["coordination.k8s.io"], &["leases"], &["get", "create", "update"])],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_related;

    fn args(source: Source, related: &[&str]) -> RbacArgs {
        RbacArgs {
            subject_kind: SubjectKind::User,
            subject: "konnector".into(),
            apis: vec![
                "widgets.example.org".into(),
                "gadgets.example.org".into(),
                "things.other.io".into(),
            ],
            related: related
                .iter()
                .filter_map(|r| parse_related(r).ok())
                .collect(),
            schema_source: source,
            lease_namespace: "kbind".into(),
            kcp: false,
            name: "kbind-konnector".into(),
            isolation: IsolationArg::None,
            prefix: None,
            consumer_namespaces: vec![],
        }
    }

    fn find<'a>(rules: &'a [Value], group: &str, resource: &str) -> Vec<&'a Value> {
        rules
            .iter()
            .filter(|r| {
                r["apiGroups"]
                    .as_array()
                    .is_some_and(|g| g.iter().any(|x| x == group))
                    && r["resources"]
                        .as_array()
                        .is_some_and(|g| g.iter().any(|x| x == resource))
            })
            .collect()
    }

    #[test]
    fn instance_sync_is_granted_per_api_and_nothing_wider() {
        let rules = cluster_rules(&args(Source::Crd, &[]), None);
        let widgets = find(&rules, "example.org", "widgets");
        assert_eq!(widgets.len(), 1);
        assert_eq!(
            widgets[0]["resources"],
            json!(["widgets", "gadgets"]),
            "grouped by API group"
        );
        assert_eq!(find(&rules, "other.io", "things").len(), 1);
        let wildcards = rules
            .iter()
            .filter(|r| r.to_string().contains("\"*\""))
            .count();
        assert_eq!(wildcards, 0, "no wildcard groups, resources or verbs");
        assert!(
            find(&rules, "", "secrets").is_empty(),
            "no Secrets without --related"
        );
    }

    #[test]
    fn identity_reads_only_kube_system_and_namespaces_may_only_be_created() {
        let rules = cluster_rules(&args(Source::Crd, &[]), None);
        let ns = find(&rules, "", "namespaces");
        assert_eq!(ns[0]["resourceNames"], json!(["kube-system"]));
        assert_eq!(ns[0]["verbs"], json!(["get"]));
        assert_eq!(ns[1]["verbs"], json!(["create"]));
    }

    #[test]
    fn the_schema_source_decides_crd_and_openapi_access() {
        let crd = cluster_rules(&args(Source::Crd, &[]), None);
        let openapi = cluster_rules(&args(Source::OpenApi, &[]), None);
        let auto = cluster_rules(&args(Source::Auto, &[]), None);
        let has_openapi =
            |rules: &[Value]| rules.iter().any(|r| r.to_string().contains("/openapi/v3"));
        assert!(!find(&crd, "apiextensions.k8s.io", "customresourcedefinitions").is_empty());
        assert!(!has_openapi(&crd));
        assert!(
            find(
                &openapi,
                "apiextensions.k8s.io",
                "customresourcedefinitions"
            )
            .is_empty()
        );
        assert!(has_openapi(&openapi));
        assert!(
            has_openapi(&auto)
                && !find(&auto, "apiextensions.k8s.io", "customresourcedefinitions").is_empty()
        );
    }

    #[test]
    fn related_directions_grant_reads_for_sources_and_writes_for_targets() {
        let rules = cluster_rules(
            &args(
                Source::Crd,
                &["secrets:FromProvider", "configmaps:FromConsumer"],
            ),
            None,
        );
        assert_eq!(
            find(&rules, "", "secrets")[0]["verbs"],
            json!(["get", "list"])
        );
        assert_eq!(
            find(&rules, "", "configmaps")[0]["verbs"],
            json!(["get", "list", "create", "patch", "update", "delete"])
        );
    }

    #[test]
    fn heartbeat_leases_are_granted_in_their_namespace_only() -> Result<(), UsageError> {
        let docs = generate(
            &args(Source::Crd, &[]),
            subject(SubjectKind::ServiceAccount, "k", Some("kbind"))?,
            None,
        );
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding"
            ]
        );
        assert_eq!(docs[3]["metadata"]["namespace"], "kbind");
        assert_eq!(
            docs[3]["rules"][0]["verbs"],
            json!(["get", "create", "update"])
        );
        assert_eq!(
            docs[2]["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "k", "namespace": "kbind"})
        );
        assert!(
            find(
                &cluster_rules(&args(Source::Crd, &[]), None),
                "coordination.k8s.io",
                "leases"
            )
            .is_empty()
        );
        Ok(())
    }

    #[tokio::test]
    async fn isolation_grants_writes_only_in_the_placed_namespaces() -> anyhow::Result<()> {
        let mut isolated = args(Source::Crd, &["configmaps:FromConsumer"]);
        isolated.isolation = IsolationArg::Namespaced;
        isolated.prefix = Some("east".into());
        isolated.consumer_namespaces = vec!["team-a".into(), "team-b".into()];
        let placed = placed_namespaces(&isolated).await?;
        assert_eq!(
            placed.as_deref(),
            Some(&["east-team-a".to_string(), "east-team-b".to_string()][..])
        );
        let rules = cluster_rules(&isolated, placed.as_deref());
        assert_eq!(
            find(&rules, "example.org", "widgets")[0]["verbs"],
            json!(["get", "list", "watch"]),
            "cluster-wide reads only"
        );
        let docs = generate(
            &isolated,
            json!({"kind": "User", "name": "k"}),
            placed.as_deref(),
        );
        let roles: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"] == "Role" && d["metadata"]["namespace"] != "kbind")
            .collect();
        assert_eq!(roles.len(), 2);
        assert_eq!(roles[0]["metadata"]["namespace"], "east-team-a");
        assert_eq!(
            find(
                roles[0]["rules"].as_array().map_or(&[][..], |r| r),
                "example.org",
                "widgets"
            )[0]["verbs"],
            json!(["create", "patch", "update", "delete"])
        );
        Ok(())
    }

    #[tokio::test]
    async fn namespaced_isolation_without_a_prefix_is_a_usage_error() {
        let mut isolated = args(Source::Crd, &[]);
        isolated.isolation = IsolationArg::Namespaced;
        isolated.consumer_namespaces = vec!["team-a".into()];
        assert!(placed_namespaces(&isolated).await.is_err());
    }

    #[test]
    fn a_service_account_subject_needs_a_namespace() {
        assert!(subject(SubjectKind::ServiceAccount, "k", None).is_err());
        assert_eq!(
            subject(SubjectKind::Group, "g", None).ok(),
            Some(json!({"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"}))
        );
    }
}
