//! The chart installed for real: `helm install` of `charts/konnector` into a consumer
//! apiserver, then the konnector run with exactly the arguments and environment of the
//! Deployment the chart created, authenticated as the chart's ServiceAccount. The whole happy
//! path then runs on nothing but the RBAC the chart grants, so a rule the chart lacks fails
//! here instead of in a user's cluster; and a permission the values leave out must show where
//! an operator looks (conditions and Warning Events), never as a silent stall.
//!
//! The test environment has no kubelet, so the Deployment's Pods never run: the konnector
//! runs as a local process whose command line is read back from the created Deployment (the
//! downward-API fields of its environment filled in as a Pod named [`POD`] in the release
//! namespace would get them) and whose consumer credentials are a TokenRequest token of the
//! chart's ServiceAccount, as a Pod's projected token would be. Each test has a pair of its
//! own: `installCRDs` installs the cluster-wide core CRDs, and the release's ClusterRole is
//! what is under test.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_tests::faults::process::KonnectorProcess;
use kbind_tests::faults::{Sides, create_binding, wait_binding_ready};
use kbind_tests::fixtures::{SECRET_NAMESPACE, connect_ready, ensure_namespace, free_port};
use kbind_tests::syncenv::related::{entry, put_secret, secret_value, wait_secret};
use kbind_tests::syncenv::remains::Left::{Gone, Kept, Released};
use kbind_tests::syncenv::remains::{delete_gone, expect_left, kind, wait_left};
use kbind_tests::syncenv::{TestApi, event_note, set_status, wait_for};
use kbind_tests::testenv::{ClusterPair, tail};
use konnector::api::RelatedDirection::FromProvider;
use konnector::api::RelatedResourceKind::Secrets;
use konnector::api::names::CLEANUP_FINALIZER;
use konnector::api::{ApiReference, Binding, BindingSpec, Connection, ConnectionReference};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::*;

/// The API group the tests bind.
const GROUP: &str = "installed.chart.kbind.io";
/// The namespace of the Binding, the instances and their copies.
const TEAM: &str = "team-a";
/// The Connection (and its credential Secret in `secretNamespace`).
const CONNECTION: &str = "provider";
/// The name the konnector's `POD_NAME` gets, as the Pod would.
const POD: &str = "kbind-konnector-0";
/// How long a test waits for one effect; a test's whole run stays well under a minute.
const WAIT: Duration = Duration::from_secs(45);

#[test]
fn chart_rbac_runs_the_whole_happy_path() -> Result<()> {
    installed("", happy_path)
}

#[test]
fn chart_rbac_narrowed_to_the_bound_group_and_one_related_kind_runs_the_whole_happy_path()
-> Result<()> {
    // The related grant is a Role in the Binding's namespace, which must exist first.
    let values = format!(
        "rbac: {{boundResourceGroups: [{GROUP}], \
         related: [{{resource: secrets, direction: FromProvider, namespaces: [{TEAM}]}}]}}"
    );
    installed_over(&[TEAM], &values, happy_path)
}

#[test]
fn a_bound_api_outside_the_granted_groups_is_reported_forbidden() -> Result<()> {
    // The credential namespace exists before the release: the chart leaves it alone (a
    // Namespace template would make the install fail on an object it does not own).
    let values = "rbac: {boundResourceGroups: [elsewhere.example.org]}";
    installed_over(&[SECRET_NAMESPACE], values, async |sides, pair| {
        let namespaces = Api::<Namespace>::all(sides.consumer.clone());
        let existing = namespaces.get(SECRET_NAMESPACE).await?;
        let owner = existing.annotations().get("meta.helm.sh/release-name");
        ensure!(
            owner.is_none(),
            "the release adopted namespace {SECRET_NAMESPACE}: {owner:?}"
        );
        sides.api.install_on_provider(&sides.provider).await?;
        connect_ready(&sides.consumer, &pair.provider, CONNECTION).await?;
        create_binding(&sides.consumer, TEAM, CONNECTION, &[&sides.api]).await?;
        // The consumer CRD is installed (CRDs are a fixed rule) and served a moment
        // later; its instances are not granted.
        kbind_tests::eventually(WAIT, || sides.create("w", json!({"size": 1}))).await?;
        // The binding says what is refused, naming the verb and the resource...
        let bindings = Api::<Binding>::namespaced(sides.consumer.clone(), TEAM);
        let denied = wait_condition(&bindings, "PermissionDenied", "True", "Forbidden").await?;
        let resource = sides.api.name();
        for said in ["list", &resource, "rbac.boundResourceGroups"] {
            ensure!(
                denied.message.contains(said),
                "not {said:?}: {}",
                denied.message
            );
        }
        // ...and so does a Warning Event about it.
        let at = (TEAM, "widgets");
        let note = event_note(&sides.consumer, at, "Forbidden", Some("Warning"), WAIT).await?;
        for said in ["list", &resource] {
            ensure!(note.contains(said), "not {said:?}: {note}");
        }
        // Nothing reached the provider.
        ensure!(
            sides.copies().get_opt("w").await?.is_none(),
            "copied anyway"
        );
        Ok(())
    })
}

#[test]
fn a_related_copy_outside_the_granted_namespaces_is_reported_forbidden() -> Result<()> {
    // Secrets may be copied from the provider into team-a only; the Binding is in team-b.
    let values = format!(
        "rbac: {{boundResourceGroups: [{GROUP}], \
         related: [{{resource: secrets, direction: FromProvider, namespaces: [{TEAM}]}}]}}"
    );
    let elsewhere = "team-b";
    installed_over(&[TEAM], &values, async |sides, pair| {
        sides.api.install_on_provider(&sides.provider).await?;
        put_secret(
            &sides.provider,
            elsewhere,
            "creds",
            &[],
            &[("k", "v")],
            None,
        )
        .await?;
        connect_ready(&sides.consumer, &pair.provider, CONNECTION).await?;
        ensure_namespace(&sides.consumer, elsewhere).await?;
        let bindings = create_related_binding(sides, elsewhere).await?;
        let refused =
            wait_condition(&bindings, "RelatedResourcesSynced", "False", "Forbidden").await?;
        for said in ["secrets", elsewhere, "rbac.related"] {
            ensure!(
                refused.message.contains(said),
                "not {said:?}: {}",
                refused.message
            );
        }
        let copies = Api::<Secret>::namespaced(sides.consumer.clone(), elsewhere);
        ensure!(copies.get_opt("creds").await?.is_none(), "copied anyway");
        Ok(())
    })
}

/// Waits until Binding `widgets` of `bindings` has condition `type_` with `status` and
/// `reason`, and returns it.
async fn wait_condition(
    bindings: &Api<Binding>,
    type_: &str,
    status: &str,
    reason: &str,
) -> Result<Condition> {
    let what = format!("{type_}={status} {reason} on the binding");
    wait_for(&what, WAIT, || async {
        let stored = bindings.get("widgets").await?.status.unwrap_or_default();
        let found = stored.conditions.into_iter().find(|c| c.type_ == type_);
        Ok(found.filter(|c| c.status == status && c.reason == reason))
    })
    .await
}

/// Creates Binding `widgets` in `namespace` for the test API through [`CONNECTION`], with the
/// provider's Secret `creds` as a related resource copied from the provider.
async fn create_related_binding(sides: &Sides, namespace: &str) -> Result<Api<Binding>> {
    let mut binding = Binding::new(
        "widgets",
        BindingSpec {
            connection_ref: ConnectionReference {
                name: CONNECTION.to_string(),
            },
            apis: vec![ApiReference {
                name: sides.api.name(),
            }],
            conflict_policy: Default::default(),
            related_resources: vec![entry(Secrets, FromProvider, &["creds"], &[])],
        },
    );
    binding.metadata.namespace = Some(namespace.to_string());
    let bindings = Api::<Binding>::namespaced(sides.consumer.clone(), namespace);
    bindings.create(&PostParams::default(), &binding).await?;
    Ok(bindings)
}

/// Connect, bind (with a related Secret from the provider), spec consumer → provider, status
/// back and the related copy, then teardown: the binding's copies gone and finalizers
/// released, then the Connection's credential finalizer.
async fn happy_path(sides: &Sides, pair: &ClusterPair) -> Result<()> {
    // The Secret goes into the namespace the chart created (createSecretNamespace), which an
    // uninstall keeps.
    let namespaces = Api::<Namespace>::all(sides.consumer.clone());
    let created = namespaces.get(SECRET_NAMESPACE).await?;
    let kept = created.annotations().get("helm.sh/resource-policy");
    ensure!(kept.is_some_and(|p| p == "keep"), "{:?}", created.metadata);
    // An upgrade looks it up, finds it is this release's, and keeps it in the release.
    let kubeconfig = pair.consumer.admin().kubeconfig_path();
    let kubeconfig = kubeconfig
        .to_str()
        .context("kubeconfig path is not UTF-8")?;
    let on = ["-n", NAMESPACE, "--kubeconfig", kubeconfig];
    let upgrade = [
        &["upgrade", RELEASE, CHART, "--reuse-values", "-f", "-"],
        &on[..],
    ]
    .concat();
    tokio::task::block_in_place(|| run_helm(&upgrade, ""))?;
    let get = [&["get", "manifest", RELEASE], &on[..]].concat();
    let manifest = tokio::task::block_in_place(|| run_helm(&get, ""))?;
    let namespace = format!("kind: Namespace\nmetadata:\n  name: {SECRET_NAMESPACE}\n");
    ensure!(
        manifest.contains(&namespace),
        "upgraded without it:\n{manifest}"
    );
    // A Binding with a related Secret copied from the provider.
    sides.api.install_on_provider(&sides.provider).await?;
    put_secret(
        &sides.provider,
        TEAM,
        "creds",
        &[],
        &[("password", "s3cret")],
        None,
    )
    .await?;
    connect_ready(&sides.consumer, &pair.provider, CONNECTION).await?;
    ensure_namespace(&sides.consumer, TEAM).await?;
    let bindings = create_related_binding(sides, TEAM).await?;
    wait_binding_ready(&sides.consumer, TEAM, WAIT).await?;
    let spec = json!({"size": 3, "color": "blue"});
    sides.create("w", spec.clone()).await?;
    wait_for(
        "the provider copy with the instance's spec",
        WAIT,
        || async {
            let copy = sides.copies().get_opt("w").await?;
            Ok(copy.filter(|c| c.data["spec"] == spec))
        },
    )
    .await?;
    set_status(&sides.copies(), "w", json!({"phase": "Running"})).await?;
    wait_for("the status back on the consumer", WAIT, || async {
        let w = sides.instances().get("w").await?;
        Ok((w.data["status"]["phase"] == "Running").then_some(()))
    })
    .await?;

    // The credential Secret carries the cleanup finalizer (written through the Role in
    // secretNamespace), and nothing was refused along the way.
    let secrets = Api::<Secret>::namespaced(sides.consumer.clone(), SECRET_NAMESPACE);
    let finalized = |s: &Secret| s.finalizers().iter().any(|f| f == CLEANUP_FINALIZER);
    ensure!(
        finalized(&secrets.get(CONNECTION).await?),
        "no cleanup finalizer"
    );
    let copied = wait_secret(&sides.consumer, TEAM, "creds").await?;
    let password = secret_value(&copied, "password");
    ensure!(password.as_deref() == Some("s3cret"), "{copied:?}");
    let status = bindings.get("widgets").await?.status.unwrap_or_default();
    let denied = status
        .conditions
        .iter()
        .find(|c| c.type_ == "PermissionDenied");
    ensure!(denied.is_none_or(|c| c.status == "False"), "{denied:?}");

    // Teardown: the copy goes, the instance stays without the syncer's finalizer.
    let instance = format!("{TEAM}/w");
    delete_gone(
        &sides.consumer,
        kind::<Binding>(),
        &format!("{TEAM}/widgets"),
    )
    .await?;
    let creds = format!("{TEAM}/creds");
    wait_left(&[
        (&sides.provider, sides.api.resource(), &instance, Gone),
        (&sides.consumer, sides.api.resource(), &instance, Released),
        (&sides.consumer, kind::<Secret>(), &creds, Gone),
        (&sides.provider, kind::<Secret>(), &creds, Kept),
    ])
    .await?;
    delete_gone(&sides.consumer, kind::<Connection>(), CONNECTION).await?;
    wait_for("the credential finalizer released", WAIT, || async {
        Ok((!finalized(&secrets.get(CONNECTION).await?)).then_some(()))
    })
    .await?;
    expect_left(&[(&sides.provider, sides.api.resource(), &instance, Gone)]).await
}

/// Installs the chart with `values` (a values file's YAML; the metrics and probe ports are
/// set to free ones) on a private pair, runs the konnector as its Deployment would, and runs
/// `body` on the test API in [`TEAM`]; a failure carries the konnector's log tail.
fn installed(
    values: &str,
    body: impl AsyncFnOnce(&Sides, &ClusterPair) -> Result<()>,
) -> Result<()> {
    installed_over(&[], values, body)
}

/// [`installed`] on a consumer where the namespaces `existing` were created before the
/// release, as an operator (or `kubectl kbind connect`) would have.
fn installed_over(
    existing: &[&str],
    values: &str,
    body: impl AsyncFnOnce(&Sides, &ClusterPair) -> Result<()>,
) -> Result<()> {
    let pair = ClusterPair::start_private()?;
    let values = format!("{}{values}", free_ports_values()?);
    let log = pair.root().join("konnector.log");
    let result = kbind_tests::runtime()?.block_on(pair.diagnose(async {
        let consumer = pair.consumer.client().await?;
        for namespace in existing {
            ensure_namespace(&consumer, namespace).await?;
        }
        helm_install(&pair, &consumer, &[CHART], &values).await?;
        let binary = kbind_tests::konnector_binary!();
        let konnector = run_as_deployment(&pair, &consumer, &log, &binary).await?;
        konnector.wait_ready(WAIT).await?;
        let sides = Sides::on(&pair, TestApi::namespaced(GROUP), TEAM).await?;
        body(&sides, &pair).await
    }));
    result.map_err(|e| anyhow!("{e:?}\n--- konnector log (tail)\n{}", tail(&log, 60)))
}

/// Values setting the metrics and probe ports to free ones (the konnector runs as a local
/// process, beside others), as the first lines of a values file.
pub(crate) fn free_ports_values() -> Result<String> {
    let (metrics, health) = (free_port()?, free_port()?);
    Ok(format!(
        "metrics: {{port: {metrics}}}\nhealthProbe: {{port: {health}}}\n"
    ))
}

/// Runs helm against the pair's consumer (`--kubeconfig`, `-n` [`NAMESPACE`]) with `values`
/// on its stdin, off the async workers.
pub(crate) fn helm_on(pair: &ClusterPair, args: &[&str], values: &str) -> Result<String> {
    let kubeconfig = pair.consumer.admin().kubeconfig_path();
    let kubeconfig = kubeconfig
        .to_str()
        .context("kubeconfig path is not UTF-8")?;
    let on = ["-n", NAMESPACE, "--kubeconfig", kubeconfig];
    let args = [args, &on[..]].concat();
    tokio::task::block_in_place(|| run_helm(&args, values))
}

/// `helm install` of release [`RELEASE`] from `chart` (a chart directory or an `oci://`
/// reference, followed by any flags it needs) with `values`, into [`NAMESPACE`] (created);
/// returns once the core CRDs are established.
pub(crate) async fn helm_install(
    pair: &ClusterPair,
    consumer: &Client,
    chart: &[&str],
    values: &str,
) -> Result<()> {
    let install = [
        &["install", RELEASE],
        chart,
        &["--create-namespace", "-f", "-"],
    ]
    .concat();
    helm_on(pair, &install, values)?;
    for (_, crd) in konnector::api::core_crds() {
        konnector::schema::established(consumer, &crd.name_any(), WAIT).await?;
    }
    Ok(())
}

/// Starts `binary` (the konnector) with the installed Deployment's container arguments and
/// environment, as the Deployment's ServiceAccount (a TokenRequest token in `KUBECONFIG`,
/// where a Pod has its projected token).
pub(crate) async fn run_as_deployment(
    pair: &ClusterPair,
    consumer: &Client,
    log: &Path,
    binary: &Path,
) -> Result<KonnectorProcess> {
    let deployment = Api::<Deployment>::namespaced(consumer.clone(), NAMESPACE);
    let deployment = deployment.get(FULLNAME).await?;
    let pod = deployment.spec.template.spec;
    let pod = pod.context("the Deployment has no pod spec")?;
    let [container] = pod.containers.as_slice() else {
        bail!("expected one container, got {:?}", pod.containers);
    };
    // The image's entrypoint is the konnector binary: the arguments are its whole command line.
    ensure!(container.command.is_none(), "{:?}", container.command);
    let args = container.args.clone().unwrap_or_default();
    let mut env = Vec::new();
    for var in container.env.iter().flatten() {
        let field = var
            .value_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref());
        let value = match (&var.value, field.map(|f| f.field_path.as_str())) {
            (Some(value), None) => value.clone(),
            (None, Some("metadata.name")) => POD.to_string(),
            (None, Some("metadata.namespace")) => NAMESPACE.to_string(),
            _ => bail!(
                "env {} is neither a value nor a Pod name or namespace",
                var.name
            ),
        };
        env.push((var.name.clone(), value));
    }
    let port = |name: &str| -> Result<u16> {
        let ports = container.ports.iter().flatten();
        let found = ports.into_iter().find(|p| p.name.as_deref() == Some(name));
        let port = found.with_context(|| format!("no container port {name}"))?;
        Ok(u16::try_from(port.container_port)?)
    };
    let account = pod.service_account_name.as_deref();
    let account = account.context("the pod spec names no ServiceAccount")?;
    let identity = pair
        .consumer
        .mint_service_account(NAMESPACE, account)
        .await?;
    let kubeconfig = identity.kubeconfig_path().to_str().context("not UTF-8")?;
    env.push(("KUBECONFIG".to_string(), kubeconfig.to_string()));
    KonnectorProcess::exec(
        binary,
        &args,
        &env,
        log,
        (port("metrics")?, port("health")?),
    )
}
