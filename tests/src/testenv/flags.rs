//! Command lines of the three components, in one place so the choices are visible together.
//!
//! The aim is a cluster that behaves like a user's (RBAC, admission, CEL, watch cache,
//! garbage collection, namespace finalization) and starts in seconds on two cores: etcd skips
//! fsync (test data need not survive a power cut, only a process restart) and elects itself
//! sooner; the apiserver leaves out API priority-and-fairness unless a test asks for it (its
//! bootstrap objects and queueing cost start-up time) and the endpoint reconciler (no
//! pods reach it); the controller manager runs only the two controllers the konnector's
//! behaviour leans on. Every built-in API group stays served, as in a real cluster.

use std::path::Path;

use super::cluster::Options;
use super::pki::Pki;
use super::state::State;

/// Controllers kube-controller-manager runs: namespace deletion empties namespaces, and
/// ownerReference garbage collection removes dependents, as in a real cluster.
pub const CONTROLLERS: &str = "namespace-controller,garbage-collector-controller";

/// Service CIDR handed to the apiserver (the `kubernetes` Service takes its first address).
const SERVICE_CIDR: &str = "10.96.0.0/16";

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `kube etcd` arguments: one member on loopback, data under `<dir>/etcd`.
pub(crate) fn etcd(name: &str, dir: &Path, state: &State) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", state.etcd_client_port);
    let peer = format!("http://127.0.0.1:{}", state.etcd_peer_port);
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", path(&dir.join("etcd"))),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={name}={peer}"),
        "--unsafe-no-fsync".into(),
        // Room for the 100 000-instance bench on both sides (etcd's default is 2 GiB).
        "--quota-backend-bytes=8589934592".into(),
        // One member and no peers: short raft timers only make the first election quicker
        // (~0.3 s of start-up).
        "--heartbeat-interval=10".into(),
        "--election-timeout=100".into(),
        "--log-level=warn".into(),
    ]
}

/// `kube kube-apiserver` arguments: loopback only, client-certificate and token
/// authentication, RBAC authorization, service-account tokens signed with the cluster's key.
pub(crate) fn apiserver(dir: &Path, pki: &Pki, state: &State, options: Options) -> Vec<String> {
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", state.etcd_client_port),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", state.apiserver_port),
        format!("--cert-dir={}", path(&dir.join("pki"))),
        format!("--tls-cert-file={}", path(&pki.serving_cert())),
        format!("--tls-private-key-file={}", path(&pki.serving_key())),
        format!("--client-ca-file={}", path(&pki.ca_cert())),
        format!("--token-auth-file={}", path(&dir.join("tokens.csv"))),
        "--authorization-mode=RBAC".into(),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        format!(
            "--service-account-key-file={}",
            path(&pki.service_account_public_key())
        ),
        format!(
            "--service-account-signing-key-file={}",
            path(&pki.service_account_key())
        ),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--endpoint-reconciler-type=none".into(),
        "--profiling=false".into(),
        "--delete-collection-workers=4".into(),
        "--event-ttl=15m".into(),
    ];
    args.push(format!(
        "--enable-priority-and-fairness={}",
        options.priority_and_fairness
    ));
    args
}

/// `kube kube-controller-manager` arguments: the two controllers, no leader election, no
/// serving port.
pub(crate) fn controller_manager(kubeconfig: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", path(kubeconfig)),
        format!("--controllers={CONTROLLERS}"),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--use-service-account-credentials=false".into(),
    ]
}
