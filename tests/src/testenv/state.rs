//! What stays fixed for a cluster's life (ports and static tokens), stored as
//! `<cluster dir>/state.json` so that a restarted cluster, or `testenv up` on an existing
//! directory, comes back at the same address with the same credentials.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::pki::random_token;
use super::{Error, Result, fsutil, ports};

/// What stays fixed for a cluster's life, so a restart looks like the same cluster.
#[derive(Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) etcd_client_port: u16,
    pub(crate) etcd_peer_port: u16,
    pub(crate) apiserver_port: u16,
    pub(crate) admin_token: String,
}

/// Loads the state at `path`, or picks free ports and a token and stores them there.
pub(crate) fn load_or_create_state(path: &Path) -> Result<State> {
    if path.exists() {
        let text = fsutil::read(path)?;
        return serde_json::from_str(&text).map_err(|source| Error::ParseState {
            path: path.to_path_buf(),
            source,
        });
    }
    let ports = ports::free_ports(3)?;
    let state = State {
        etcd_client_port: ports[0],
        etcd_peer_port: ports[1],
        apiserver_port: ports[2],
        admin_token: random_token()?,
    };
    let text = serde_json::to_string_pretty(&state).map_err(|source| Error::ParseState {
        path: path.to_path_buf(),
        source,
    })?;
    fsutil::write_private(path, &text)?;
    Ok(state)
}
