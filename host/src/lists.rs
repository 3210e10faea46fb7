//! How the instance watches list: streamed through the watch itself (`sendInitialEvents`,
//! one object at a time) where the apiserver streams lists, in pages of 500 otherwise.
//!
//! ```text
//! first watch of a cluster ── GET /version ── 1.27 or later? ──yes──▶ streamed list
//!                                                 │ no                  │ 400/422 at watch start
//!                                                 ▼                     ▼ (gate off)
//!                                            paged lists ◀──────── paged lists, for every
//!                                                                  later watch of the cluster
//! ```
//!
//! A streamed list never holds a page: a restart or a `410 Gone` at 100 000 instances costs
//! the cache being rebuilt beside the old one, not 500 full objects per watch on top. An
//! apiserver older than 1.27 does not know the parameter and would ignore it, sending the
//! objects without ever marking the list's end, so it is never asked; one that knows it but
//! has the `WatchList` gate off refuses the watch (422), and the cluster is listed in pages
//! from then on. The provider's watches always list in pages: a provider API may be served by
//! an aggregated apiserver whose support cannot be told from the kube-apiserver's version.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{debug, info};

/// Not asked yet.
const UNKNOWN: u8 = 0;
/// Lists stream.
const STREAMING: u8 = 1;
/// Lists come in pages.
const PAGED: u8 = 2;

/// Whether one cluster's apiserver streams initial lists: learnt by its first watch and kept
/// for the others, so the version is asked and a refusal met once per cluster.
#[derive(Clone, Debug, Default)]
pub struct ListMode(Arc<AtomicU8>);

impl ListMode {
    /// A cluster whose watches always list in pages.
    pub fn paged() -> Self {
        Self(Arc::new(AtomicU8::new(PAGED)))
    }

    /// Whether lists stream: asks `client`'s apiserver the first time. A cluster that cannot
    /// say its version is listed in pages and asked again by the next watch.
    async fn streams(&self, client: &Client) -> bool {
        match self.0.load(Ordering::Relaxed) {
            STREAMING => true,
            PAGED => false,
            _ => match client.apiserver_version().await {
                Ok(info) => {
                    let streams = knows_streamed_lists(&info);
                    let mode = if streams { STREAMING } else { PAGED };
                    let _ = self.0.compare_exchange(
                        UNKNOWN,
                        mode,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    debug!(version = %info.git_version, streams, "watch list mode");
                    streams
                }
                Err(e) => {
                    debug!(error = %e, "apiserver version unknown; listing in pages");
                    false
                }
            },
        }
    }

    /// Lists in pages from now on; true for the call that made the change.
    fn fall_back(&self) -> bool {
        self.0.swap(PAGED, Ordering::Relaxed) != PAGED
    }
}

/// Whether an apiserver of this version knows `sendInitialEvents` (Kubernetes 1.27 and later):
/// it then either streams the list or refuses the watch, never ignores the parameter.
fn knows_streamed_lists(info: &Info) -> bool {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    match (number(&info.major), number(&info.minor)) {
        (Some(major), Some(minor)) => major > 1 || (major == 1 && minor >= 27),
        _ => false,
    }
}

/// Whether a watch that failed to start was refused for asking a streamed list (the
/// `WatchList` gate off answers 422; a server that cannot parse the options, 400). Any other
/// failure is the watcher's to retry as it is.
fn refuses_streaming(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(kube::Error::Api(status))
        if status.code == 400 || status.code == 422)
}

/// A watch of `api` that lists as `mode` allows: streamed while the cluster streams, in pages
/// once it refused a streamed list (this watch and every later one of the cluster).
pub fn watch<K>(
    client: Client,
    api: Api<K>,
    config: watcher::Config,
    mode: ListMode,
) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    enum State<K: 'static> {
        Start(Client, Api<K>, watcher::Config, ListMode),
        Streaming(
            BoxStream<'static, watcher::Result<watcher::Event<K>>>,
            Api<K>,
            watcher::Config,
            ListMode,
        ),
        Paged(BoxStream<'static, watcher::Result<watcher::Event<K>>>),
    }
    stream::unfold(State::Start(client, api, config, mode), |mut state| async move {
        loop {
            state = match state {
                State::Start(client, api, config, mode) => {
                    if mode.streams(&client).await {
                        let streamed = watcher(api.clone(), config.clone().streaming_lists());
                        State::Streaming(streamed.boxed(), api, config, mode)
                    } else {
                        State::Paged(watcher(api, config).boxed())
                    }
                }
                State::Streaming(mut events, api, config, mode) => match events.next().await {
                    Some(Err(error)) if refuses_streaming(&error) => {
                        if mode.fall_back() {
                            info!(%error, "the apiserver refuses streamed lists; listing in pages");
                        }
                        State::Paged(watcher(api, config).boxed())
                    }
                    Some(event) => return Some((event, State::Streaming(events, api, config, mode))),
                    None => return None,
                },
                State::Paged(mut events) => {
                    let event = events.next().await?;
                    return Some((event, State::Paged(events)));
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(major: &str, minor: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            ..Info::default()
        }
    }

    fn refusal(code: u16) -> watcher::Error {
        let status = kube::core::Status::failure("sendInitialEvents is forbidden", "Invalid")
            .with_code(code);
        watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn apiservers_from_1_27_are_asked_to_stream() {
        assert!(knows_streamed_lists(&version("1", "27")));
        assert!(knows_streamed_lists(&version("1", "37")));
        // Managed offerings report a `+` after the minor version.
        assert!(knows_streamed_lists(&version("1", "30+")));
    }

    #[test]
    fn older_or_unreadable_versions_list_in_pages() {
        assert!(!knows_streamed_lists(&version("1", "26")));
        assert!(!knows_streamed_lists(&version("", "")));
        assert!(!knows_streamed_lists(&version("one", "x")));
    }

    #[test]
    fn a_refused_streamed_list_is_told_from_other_watch_failures() {
        assert!(refuses_streaming(&refusal(422)));
        assert!(refuses_streaming(&refusal(400)));
        assert!(
            !refuses_streaming(&refusal(403)),
            "a denial is reported, not worked around"
        );
        assert!(
            !refuses_streaming(&refusal(500)),
            "a server error is retried as it is"
        );
        assert!(!refuses_streaming(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn the_first_fall_back_of_a_cluster_is_the_one_reported() {
        let mode = ListMode::default();
        assert!(mode.fall_back());
        assert!(!mode.fall_back());
        assert!(!ListMode::paged().fall_back());
    }
}
