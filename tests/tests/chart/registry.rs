//! The chart installed as users install it: packaged, pushed to a real OCI registry
//! (distribution's, started by the harness) together with a konnector image made from this
//! build, and installed with `helm install oci://...`. The konnector then runs from that
//! image: its manifest, config and layer are pulled from the registry by the reference the
//! installed Deployment names, and the binary in the layer runs with the image's entrypoint
//! and the Deployment's arguments, as a kubelet would run it (there is none here).

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use kbind_tests::faults::{Sides, create_binding, wait_binding_ready};
use kbind_tests::fixtures::connect_ready;
use kbind_tests::registry::Registry;
use kbind_tests::syncenv::{TestApi, wait_for};
use kbind_tests::testenv::{ClusterPair, tail};
use kube::Api;
use serde_json::json;

use super::installed::{free_ports_values, helm_install, helm_on, run_as_deployment};
use super::monitoring::helm_test_lines;
use super::*;

/// The API group this test binds.
const GROUP: &str = "registry.chart.kbind.io";
/// The namespace of the binding and its instances.
const TEAM: &str = "team-r";
/// The image's repository in the registry.
const IMAGE_REPOSITORY: &str = "kbind/konnector";
/// The image's tag.
const IMAGE_TAG: &str = "e2e";
/// How long one effect may take.
const WAIT: std::time::Duration = std::time::Duration::from_secs(45);

/// The chart's version (Chart.yaml), the one `helm package` gives the archive.
fn chart_version() -> Result<String> {
    let chart = yaml(&std::fs::read_to_string(format!("{CHART}/Chart.yaml"))?)?;
    let version = chart["version"]
        .as_str()
        .context("Chart.yaml has no version")?;
    Ok(version.to_string())
}

/// This machine's architecture as OCI names it.
fn oci_arch() -> Result<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Ok("amd64"),
        "aarch64" => Ok("arm64"),
        other => bail!("no OCI architecture for {other}"),
    }
}

/// Pushes an image holding `binary` (and the CA bundle) as `<registry>/kbind/konnector:e2e`,
/// assembled by `scripts/oci-image.sh` as `make release` assembles the released one.
async fn push_image(registry: &Registry, binary: &Path, work: &Path) -> Result<()> {
    let layout = work.join("image-layout");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/oci-image.sh");
    let layout_arg = layout.to_str().context("not UTF-8")?;
    let binary_arg = format!("{}={}", oci_arch()?, binary.display());
    let mut command = Command::new(script);
    // An uncompressed layer: compressing a debug build costs more than pushing it on loopback.
    command
        .args([layout_arg, &binary_arg])
        .env("LAYER_COMPRESSION", "none");
    tokio::task::block_in_place(|| output(&mut command, ""))?;
    registry
        .push_layout(&layout, IMAGE_REPOSITORY, IMAGE_TAG)
        .await?;
    Ok(())
}

/// Pulls `image` (`<host>/<repository>:<tag>`) from `registry` as a runtime would for this
/// machine: the manifest, its config (which must run `/konnector`) and its one layer, whose
/// `konnector` is written into `into`. Returns that file.
async fn pull_konnector(registry: &Registry, image: &str, into: &Path) -> Result<PathBuf> {
    let rest = image
        .strip_prefix(&format!("{}/", registry.host()))
        .with_context(|| format!("{image} is not in the test registry"))?;
    let (repository, tag) = rest.rsplit_once(':').context("no tag")?;
    let (manifest, media_type) = registry.manifest(repository, tag).await?;
    ensure!(
        media_type == kbind_tests::registry::MANIFEST_MEDIA_TYPE,
        "{media_type}"
    );
    let config_digest = manifest["config"]["digest"].as_str().context("no config")?;
    let config: serde_json::Value =
        serde_json::from_slice(&registry.blob(repository, config_digest).await?)?;
    ensure!(
        config["architecture"] == oci_arch()? && config["os"] == "linux",
        "{config}"
    );
    // The image runs as documented: /konnector as entrypoint, `run` by default, non-root.
    let expected = json!({"Entrypoint": ["/konnector"], "Cmd": ["run"], "User": "65532:65532"});
    for (field, want) in expected.as_object().into_iter().flatten() {
        ensure!(&config["config"][field] == want, "{field}: {config}");
    }
    let layers = manifest["layers"].as_array().context("no layers")?;
    let [layer] = layers.as_slice() else {
        bail!("expected one layer: {manifest}");
    };
    let layer_digest = layer["digest"].as_str().context("no layer digest")?;
    let tarball = into.join("layer.tar");
    std::fs::write(&tarball, registry.blob(repository, layer_digest).await?)?;
    let mut untar = Command::new("tar");
    untar
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(into)
        .arg("konnector");
    tokio::task::block_in_place(|| output(&mut untar, ""))?;
    Ok(into.join("konnector"))
}

/// Binds the test API through a Connection to the pair's provider and waits until instance
/// `name` created with `spec` has its provider copy.
pub(crate) async fn bind_and_sync(
    sides: &Sides,
    pair: &ClusterPair,
    name: &str,
    spec: serde_json::Value,
) -> Result<()> {
    sides.api.install_on_provider(&sides.provider).await?;
    connect_ready(&sides.consumer, &pair.provider, "provider").await?;
    create_binding(&sides.consumer, &sides.namespace, "provider", &[&sides.api]).await?;
    wait_binding_ready(&sides.consumer, &sides.namespace, WAIT).await?;
    sides.create(name, spec.clone()).await?;
    wait_copy(sides, name, &spec).await
}

/// Waits until the provider copy of instance `name` has `spec`.
pub(crate) async fn wait_copy(sides: &Sides, name: &str, spec: &serde_json::Value) -> Result<()> {
    wait_for(
        "the provider copy with the instance's spec",
        WAIT,
        || async {
            let copy = sides.copies().get_opt(name).await?;
            Ok(copy.filter(|c| &c.data["spec"] == spec).map(|_| ()))
        },
    )
    .await
}

#[test]
fn chart_and_image_pushed_to_a_registry_install_with_helm_from_oci_and_sync() -> Result<()> {
    let pair = ClusterPair::start_private()?;
    let work = pair.root().join("registry-test");
    std::fs::create_dir_all(&work)?;
    let log = pair.root().join("konnector.log");
    let result = kbind_tests::runtime()?.block_on(pair.diagnose(async {
        let registry = Registry::start(&work.join("registry")).await?;
        let host = registry.host().to_string();
        let result = async {
            // The chart, packaged and pushed as a release would publish it.
            let packaged = work.join("packaged");
            let packaged_arg = packaged.to_str().context("not UTF-8")?;
            tokio::task::block_in_place(|| run_helm(&["package", CHART, "-d", packaged_arg], ""))?;
            let version = chart_version()?;
            let archive = packaged.join(format!("konnector-{version}.tgz"));
            let archive = archive.to_str().context("not UTF-8")?;
            let charts = format!("oci://{host}/charts");
            let push = ["push", archive, &charts, "--plain-http"];
            tokio::task::block_in_place(|| run_helm(&push, ""))?;
            push_image(&registry, &kbind_tests::konnector_binary!(), &work).await?;

            // Installed from the registry, pointing at the pushed image.
            let consumer = pair.consumer.client().await?;
            let values = format!(
                "{}image: {{repository: {host}/{IMAGE_REPOSITORY}, tag: {IMAGE_TAG}}}\n",
                free_ports_values()?
            );
            let chart = format!("{charts}/konnector");
            let from = [chart.as_str(), "--version", &version, "--plain-http"];
            helm_install(&pair, &consumer, &from, &values).await?;
            let listed = helm_on(&pair, &["list", "-o", "json"], "")?;
            ensure!(
                listed.contains(&format!("\"chart\":\"konnector-{version}\"")),
                "{listed}"
            );

            // The Deployment's image, pulled and run as its Pod would be.
            let deployments = Api::<Deployment>::namespaced(consumer.clone(), NAMESPACE);
            let deployment = deployments.get(FULLNAME).await?;
            let pod = deployment.spec.template.spec;
            let image = pod
                .and_then(|p| p.containers.into_iter().next())
                .and_then(|c| c.image)
                .context("the Deployment names no image")?;
            ensure!(
                image == format!("{host}/{IMAGE_REPOSITORY}:{IMAGE_TAG}"),
                "{image}"
            );
            let binary = pull_konnector(&registry, &image, &work).await?;
            let konnector = run_as_deployment(&pair, &consumer, &log, &binary).await?;
            konnector.wait_ready(WAIT).await?;
            // The release's `helm test` Pod would pass against it: every line it looks for is
            // in this konnector's /metrics, before it has any Connection.
            let hooks = Rendered::parse(&helm_on(&pair, &["get", "hooks", RELEASE], "")?)?;
            let test_pod = hooks.get("Pod", &format!("{FULLNAME}-test-metrics"))?;
            let exposition = konnector.metrics().await?;
            for line in helm_test_lines(test_pod)? {
                let served = exposition.lines().any(|l| l.starts_with(&line));
                ensure!(
                    served,
                    "helm test looks for {line:?}; /metrics has:\n{exposition}"
                );
            }

            let sides = Sides::on(&pair, TestApi::namespaced(GROUP), TEAM).await?;
            bind_and_sync(&sides, &pair, "w", json!({"size": 2})).await
        }
        .await;
        result.map_err(|e| anyhow!("{e:?}\n{}", tail(registry.log(), 30)))
    }));
    result.map_err(|e| anyhow!("{e:?}\n--- konnector log (tail)\n{}", tail(&log, 60)))
}
