//! Every client the konnector builds, and what keeps a replica that lost its work from
//! writing. One builder sets the layer order for every client, consumer or provider:
//!
//! ```text
//! request ─▶ metrics ─▶ retry ─▶ hold check ─▶ write bound ─▶ kube's layers ─▶ transport
//!            counted    429/503/504,  refused when   a write gives up  (base URI,     requests on
//!            and timed  no answer;    the Lease that  before the margin  auth,         4 HTTP/2
//!            as waited  Retry-After   covers it       between renew      headers)      connections,
//!                       honoured      lapsed          deadline and expiry              a watch on its own
//! ```
//!
//! The retry layer sits above the hold check, so every attempt, retries included, is checked;
//! kube's own retry (up to 15 attempts outside any bound) is turned off. With leader election
//! or sharding (`konnector run --leader-elect | --sharding`), [`configure`] is called once
//! before any client is built; without either, one replica does everything and nothing is
//! held back.
//!
//! The Lease client ([`lease_client`]) has no hold check: the coordinator must reach its
//! Leases to renew a hold that lapsed.

mod bound;
pub mod hold;
mod retry;
mod shared_service;
mod transport;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use bound::{WriteTimedOut, WriteTimeout};
pub use hold::{HoldLapsed, Holds, Mode};
pub use retry::RetryPolicy;

use crate::telemetry::RequestMetrics;

/// The fence of a process with replicas: the hold registry the coordinator renews and the
/// longest a write may take.
#[derive(Clone, Debug)]
pub struct Fence {
    /// Whose Leases cover which writes, until when.
    pub holds: Arc<Holds>,
    /// The margin between the renew deadline and the Lease's expiry.
    pub write_timeout: Duration,
}

static FENCE: OnceLock<Fence> = OnceLock::new();

/// Fences every client built from now on; the first call wins.
pub fn configure(fence: Fence) {
    let _ = FENCE.set(fence);
}

/// The process's hold registry: the configured one, or one that holds nothing back.
pub fn holds() -> Arc<Holds> {
    static UNFENCED: OnceLock<Arc<Holds>> = OnceLock::new();
    FENCE.get().map_or_else(
        || {
            UNFENCED
                .get_or_init(|| Arc::new(Holds::new(Mode::Unfenced)))
                .clone()
        },
        |fence| fence.holds.clone(),
    )
}

/// A client for `config` to the `cluster` side (`consumer` or `provider`), with the layers in
/// the module's order.
pub fn client(config: kube::Config, cluster: &'static str) -> Result<kube::Client, kube::Error> {
    build(config, cluster, FENCE.get())
}

/// A consumer client for the Lease requests of the coordinator: counted, no retry layer (the
/// coordinator bounds and repeats its own requests) and no hold check.
pub fn lease_client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&RequestMetrics {
            cluster: "consumer",
        })
        .build())
}

fn build(
    mut config: kube::Config,
    cluster: &'static str,
    fence: Option<&Fence>,
) -> Result<kube::Client, kube::Error> {
    // Ours replaces it, inside the hold check's reach.
    config.default_retry = false;
    let builder = transport::builder(config)?;
    let measured = RequestMetrics { cluster };
    let retry = tower::retry::RetryLayer::new(RetryPolicy::new(cluster));
    Ok(match fence {
        Some(fence) => builder
            .with_layer(&WriteTimeout(fence.write_timeout))
            .with_layer(&hold::HoldCheck::new(fence.holds.clone()))
            .with_layer(&shared_service::SharedLayer)
            .with_layer(&retry)
            .with_layer(&measured)
            .build(),
        None => builder
            .with_layer(&shared_service::SharedLayer)
            .with_layer(&retry)
            .with_layer(&measured)
            .build(),
    })
}

/// Whether `method` changes something on the server: what the hold check and the write bound
/// apply to. Reads and watches change nothing, and a watch is meant to stay open.
fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}
