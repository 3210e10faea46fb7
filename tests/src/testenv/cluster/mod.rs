//! One named test cluster: etcd, kube-apiserver and kube-controller-manager on loopback
//! ports, with its key material, identities, data and logs in one directory.
//!
//! ```text
//! <root>/<name>.kubeconfig          admin (system:masters, client certificate)
//! <root>/<name>/state.json          ports and static tokens, fixed for the cluster's life
//! <root>/<name>/pki/                CA, serving and client certificates, SA signing key
//! <root>/<name>/kubeconfigs/        one kubeconfig per other identity
//! <root>/<name>/etcd/               etcd data (kept across stop/start)
//! <root>/<name>/logs/<role>.log     each process's output, appended across restarts
//! <root>/<name>/pids                running processes, for `testenv down`
//! ```
//!
//! Process management is synchronous (`std::process`), so a cluster can be started and
//! stopped from any thread, inside or outside a tokio runtime; only the client helpers are
//! async. Readiness is probed with a real client on a private runtime in a scoped thread.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};

use super::identity::{Auth, Endpoint, Identity, write_kubeconfig};
use super::pki::Pki;
use super::process::{Process, Supervision};
use super::state::{State, load_or_create_state};
use super::{Error, Result, binary, fsutil};

mod processes;

/// The user of the static admin token.
pub const ADMIN_TOKEN_USER: &str = "admin-token";

/// Apiserver features off by default (they cost start-up time and most tests do not need
/// them), for the tests that exercise them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// API Priority and Fairness: the apiserver queues or rejects (429) requests per priority
    /// level. It exempts `system:masters`, so only other identities see it.
    pub priority_and_fairness: bool,
}

/// A named cluster. Dropping it kills its processes (unless detached); data stays on disk.
pub struct Cluster {
    name: String,
    dir: PathBuf,
    root: PathBuf,
    binary: PathBuf,
    supervision: Supervision,
    options: Options,
    state: State,
    pki: Pki,
    ca_pem: String,
    admin: Identity,
    admin_token: Identity,
    controller_manager: Identity,
    processes: Mutex<Vec<Process>>,
    startup: Mutex<Option<Duration>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("server", &self.server())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Prepares cluster `name` under `root` (key material, ports, kubeconfigs), reusing what
    /// an earlier run left there. Processes are supervised: they die with this process.
    /// Nothing runs until [`Cluster::start`].
    pub fn new(root: &Path, name: &str) -> Result<Self> {
        Self::with_supervision(root, name, Supervision::Watchdog)
    }

    /// Like [`Cluster::new`], choosing how the processes are tied to this process.
    pub fn with_supervision(root: &Path, name: &str, supervision: Supervision) -> Result<Self> {
        Self::with_options(root, name, supervision, Options::default())
    }

    /// Like [`Cluster::with_supervision`], with the apiserver features `options` turn on.
    pub fn with_options(
        root: &Path,
        name: &str,
        supervision: Supervision,
        options: Options,
    ) -> Result<Self> {
        let dir = root.join(name);
        for sub in ["kubeconfigs", "logs", "etcd"] {
            fsutil::create_dir(&dir.join(sub))?;
        }
        let binary = binary::kube_binary()?;
        let pki = Pki::load_or_create(&dir.join("pki"), name)?;
        let state = load_or_create_state(&dir.join("state.json"))?;
        fsutil::write_private(
            &dir.join("tokens.csv"),
            &format!(
                "{},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},\"system:masters\"\n",
                state.admin_token
            ),
        )?;
        let ca_pem = fsutil::read(&pki.ca_cert())?;
        let server = server_url(state.apiserver_port);
        let endpoint = Endpoint {
            cluster: name,
            server: &server,
            ca_pem: &ca_pem,
        };
        let cert_identity = |path: &Path, stem: &str, user: &str, groups: &[&str]| {
            let cert = pki.issue_client(stem, user, groups)?;
            let (cert_pem, key_pem) = (fsutil::read(&cert.cert)?, fsutil::read(&cert.key)?);
            let auth = Auth::Certificate {
                cert_pem: &cert_pem,
                key_pem: &key_pem,
            };
            write_kubeconfig(path, &endpoint, user, &auth)
        };
        let admin = cert_identity(
            &root.join(format!("{name}.kubeconfig")),
            "admin",
            "admin",
            &["system:masters"],
        )?;
        // With one client for all its controllers (no per-controller service accounts), the
        // controller manager needs to delete anything a namespace or an owner held.
        let controller_manager = cert_identity(
            &dir.join("kubeconfigs/kube-controller-manager.kubeconfig"),
            "kube-controller-manager",
            "system:kube-controller-manager",
            &["system:masters"],
        )?;
        let admin_token = write_kubeconfig(
            &dir.join(format!("kubeconfigs/{ADMIN_TOKEN_USER}.kubeconfig")),
            &endpoint,
            ADMIN_TOKEN_USER,
            &Auth::Token(&state.admin_token),
        )?;
        Ok(Self {
            name: name.to_string(),
            dir,
            root: root.to_path_buf(),
            binary,
            supervision,
            options,
            state,
            pki,
            ca_pem,
            admin,
            admin_token,
            controller_manager,
            processes: Mutex::new(Vec::new()),
            startup: Mutex::new(None),
        })
    }

    /// The cluster's name (`provider`, `consumer`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster's own directory, `<root>/<name>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The apiserver URL, `https://127.0.0.1:<port>`; the same across restarts.
    pub fn server(&self) -> String {
        server_url(self.state.apiserver_port)
    }

    /// The admin identity (client certificate, `system:masters`); its kubeconfig is
    /// `<root>/<name>.kubeconfig`.
    pub fn admin(&self) -> &Identity {
        &self.admin
    }

    /// An admin identity that authenticates with a static bearer token (`--token-auth-file`).
    pub fn admin_token(&self) -> &Identity {
        &self.admin_token
    }

    /// A client acting as the admin.
    pub async fn client(&self) -> Result<kube::Client> {
        self.admin.client().await
    }

    /// Mints a user with a client certificate: user `user`, in `groups` (at most
    /// [`MAX_CERT_GROUPS`](super::MAX_CERT_GROUPS)). It starts with no permissions beyond
    /// what every authenticated user has; the test grants it RBAC. Works while stopped.
    pub fn mint_user(&self, user: &str, groups: &[&str]) -> Result<Identity> {
        let stem = format!("user-{}", file_safe(user));
        let cert = self.pki.issue_client(&stem, user, groups)?;
        let (cert_pem, key_pem) = (fsutil::read(&cert.cert)?, fsutil::read(&cert.key)?);
        let path = self.dir.join(format!("kubeconfigs/{stem}.kubeconfig"));
        let auth = Auth::Certificate {
            cert_pem: &cert_pem,
            key_pem: &key_pem,
        };
        write_kubeconfig(&path, &self.endpoint(&self.server()), user, &auth)
    }

    /// Creates service account `namespace/name` (if missing; the namespace must exist) and
    /// returns a token identity for it. Unlike certificates, this credential can be revoked:
    /// deleting the service account invalidates the token (within about 10 s, the apiserver's
    /// token authentication cache).
    pub async fn mint_service_account(&self, namespace: &str, name: &str) -> Result<Identity> {
        let error = |source| Error::ServiceAccountToken {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        };
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client().await?, namespace);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => return Err(error(source)),
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(24 * 3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let issued = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(error)?;
        let token =
            issued
                .status
                .and_then(|s| s.token)
                .ok_or_else(|| Error::EmptyTokenRequest {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let path = self.dir.join(format!(
            "kubeconfigs/sa-{}-{}.kubeconfig",
            file_safe(namespace),
            file_safe(name)
        ));
        write_kubeconfig(
            &path,
            &self.endpoint(&self.server()),
            &user,
            &Auth::Token(&token),
        )
    }

    /// The directory holding this cluster's directory and admin kubeconfig.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn endpoint<'a>(&'a self, server: &'a str) -> Endpoint<'a> {
        Endpoint {
            cluster: &self.name,
            server,
            ca_pem: &self.ca_pem,
        }
    }
}

fn server_url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// A user or namespace name as a file-name fragment.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '.' | '_' => c,
            _ => '_',
        })
        .collect()
}
