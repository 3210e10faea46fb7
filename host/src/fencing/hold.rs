//! Holds: until when this replica may do a piece of work, as its Leases say. The coordinator
//! records, per held shard, for its membership and for leadership, the monotonic instant its
//! last renewal is good until (the renewal's start plus the renew deadline); every write
//! checks it before each attempt and abandons an attempt still unanswered once it passes.
//!
//! Which hold covers a write:
//!
//! ```text
//! mode       │ write made within            │ covered by
//! ───────────┼──────────────────────────────┼──────────────────────────────
//! unfenced   │ anything                     │ nothing (one replica does everything)
//! leader     │ anything                     │ the leader Lease
//! sharded    │ a shard's work (`within`)    │ that shard's Lease
//! sharded    │ nothing in particular        │ the replica's membership Lease
//! ```
//!
//! The work a write belongs to travels as a task-local scope ([`within`]), set where a syncer
//! runs or a Connection shard's reconcile starts: kube builds the requests, so nothing else
//! could carry it. Instants are tokio's (the monotonic clock): a process paused by SIGSTOP
//! resumes with its holds lapsed, and writes nothing until the coordinator renewed them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::is_write;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the process shares its work, as far as holds go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One replica: every write goes out.
    Unfenced,
    /// Leader election: every write needs the leader Lease.
    Leader,
    /// Sharding: a write needs the Lease of the shard it works for (membership outside one).
    Sharded,
}

/// The hold key of leadership (Kubernetes names hold no `:`, so no shard key is the same).
pub const LEADER: &str = ":leader";
/// The hold key of this replica's membership.
pub const MEMBER: &str = ":member";

/// The hold key of a Connection shard: the Connection's name.
pub fn connection_key(connection: &str) -> String {
    connection.to_string()
}

/// The hold key of an API shard: `<connection>/<api>` (Connection names hold no `/`).
pub fn api_key(connection: &str, api: &str) -> String {
    format!("{connection}/{api}")
}

/// Why a write was not sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this replica's hold on {key} lapsed {ago:?} ago (its Lease was not renewed in \
     time); it writes again once it has renewed the Lease"
)]
pub struct HoldLapsed {
    key: Arc<str>,
    ago: Duration,
}

#[cfg(test)]
impl HoldLapsed {
    /// A refusal for tests of what handles one.
    pub(crate) fn for_test() -> Self {
        Self {
            key: Arc::from("test"),
            ago: Duration::ZERO,
        }
    }
}

/// Until when each hold of this process is good.
#[derive(Debug)]
pub struct Holds {
    mode: Mode,
    until: RwLock<HashMap<Arc<str>, Instant>>,
}

tokio::task_local! {
    static SCOPE: Arc<str>;
}

/// Runs `work` as the work of the shard keyed `key` (`<connection>` or `<connection>/<api>`):
/// its writes need that shard's hold.
pub async fn within<F: Future>(key: &str, work: F) -> F::Output {
    SCOPE.scope(Arc::from(key), work).await
}

/// The shard key of the work running now, if any.
fn current_scope() -> Option<Arc<str>> {
    SCOPE.try_with(Arc::clone).ok()
}

impl Holds {
    /// A registry for `mode` that holds nothing yet.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            until: RwLock::default(),
        }
    }

    /// How this process shares its work.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Records that hold `key` is good until `until` (a renewal's start plus the deadline).
    pub fn renewed(&self, key: &str, until: Instant) {
        self.until
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(Arc::from(key), until);
    }

    /// Records that hold `key` is gone (lost, released or lapsed).
    pub fn dropped(&self, key: &str) {
        self.until
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// The key of the hold a write made in `scope` needs, if any.
    fn needed(&self, scope: Option<&str>) -> Option<Arc<str>> {
        match self.mode {
            Mode::Unfenced => None,
            Mode::Leader => Some(Arc::from(LEADER)),
            Mode::Sharded => Some(Arc::from(scope.unwrap_or(MEMBER))),
        }
    }

    /// Whether hold `key` is good now, and until when.
    fn check_key(&self, key: &Arc<str>) -> Result<Instant, HoldLapsed> {
        let now = Instant::now();
        let until = self
            .until
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied();
        match until {
            Some(until) if until > now => Ok(until),
            Some(until) => Err(HoldLapsed {
                key: key.clone(),
                ago: now - until,
            }),
            None => Err(HoldLapsed {
                key: key.clone(),
                ago: Duration::ZERO,
            }),
        }
    }

    /// Whether the work running now may write: its hold (by [`within`] and the mode) is good.
    pub fn check_current(&self) -> Result<(), HoldLapsed> {
        match self.needed(current_scope().as_deref()) {
            Some(key) => self.check_key(&key).map(drop),
            None => Ok(()),
        }
    }
}

/// The layer that refuses writes whose hold lapsed.
#[derive(Clone, Debug)]
pub struct HoldCheck(Arc<Holds>);

impl HoldCheck {
    /// Checks writes against `holds`.
    pub fn new(holds: Arc<Holds>) -> Self {
        Self(holds)
    }
}

impl<S> Layer<S> for HoldCheck {
    type Service = Checked<S>;
    fn layer(&self, inner: S) -> Checked<S> {
        Checked {
            inner,
            holds: self.0.clone(),
        }
    }
}

/// A service whose writes need a good hold, checked before sending and while unanswered.
#[derive(Clone, Debug)]
pub struct Checked<S> {
    inner: S,
    holds: Arc<Holds>,
}

impl<S, B> Service<Request<B>> for Checked<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let needed = is_write(request.method())
            .then(|| self.holds.needed(current_scope().as_deref()))
            .flatten();
        let Some(key) = needed else {
            let response = self.inner.call(request);
            return Box::pin(async move { response.await.map_err(Into::into) });
        };
        let mut until = match self.holds.check_key(&key) {
            Ok(until) => until,
            Err(lapsed) => return Box::pin(async move { Err(Box::new(lapsed) as BoxError) }),
        };
        let holds = self.holds.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = std::pin::pin!(response);
            let mut lapse = std::pin::pin!(tokio::time::sleep_until(until));
            std::future::poll_fn(|cx| {
                // Checked on every wake-up, and woken when the hold would lapse: an answer
                // still awaited then is abandoned rather than trusted.
                match holds.check_key(&key) {
                    Err(lapsed) => return Poll::Ready(Err(Box::new(lapsed) as BoxError)),
                    Ok(renewed) if renewed != until => {
                        until = renewed;
                        lapse.as_mut().reset(until);
                    }
                    Ok(_) => {}
                }
                if let Poll::Ready(answered) = response.as_mut().poll(cx) {
                    return Poll::Ready(answered.map_err(Into::into));
                }
                while lapse.as_mut().poll(cx).is_ready() {
                    match holds.check_key(&key) {
                        Err(lapsed) => return Poll::Ready(Err(Box::new(lapsed) as BoxError)),
                        Ok(renewed) => {
                            until = renewed;
                            lapse.as_mut().reset(until);
                        }
                    }
                }
                Poll::Pending
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A service counting the requests that reached it.
    fn counting(
        sent: Arc<AtomicUsize>,
    ) -> impl Service<Request<()>, Response = (), Error = Infallible, Future: Send> + Clone {
        tower::service_fn(move |_: Request<()>| {
            sent.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(()) }
        })
    }

    fn request(method: Method) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = method;
        request
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_writes_only_while_its_hold_is_good() {
        let holds = Arc::new(Holds::new(Mode::Leader));
        let sent = Arc::new(AtomicUsize::new(0));
        let mut service = HoldCheck::new(holds.clone()).layer(counting(sent.clone()));
        assert!(
            service.call(request(Method::PATCH)).await.is_err(),
            "never held"
        );
        holds.renewed(LEADER, Instant::now() + Duration::from_secs(4));
        assert!(service.call(request(Method::PATCH)).await.is_ok());
        // Paused past the deadline: nothing goes out until the next renewal.
        tokio::time::advance(Duration::from_secs(5)).await;
        let refused = service.call(request(Method::DELETE)).await;
        assert!(
            refused
                .map(drop)
                .err()
                .is_some_and(|e| e.to_string().contains("hold on :leader lapsed")),
        );
        assert!(
            service.call(request(Method::GET)).await.is_ok(),
            "reads go out"
        );
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sharded_write_needs_the_hold_of_the_shard_it_works_for() {
        let holds = Arc::new(Holds::new(Mode::Sharded));
        let sent = Arc::new(AtomicUsize::new(0));
        let mut service = HoldCheck::new(holds.clone()).layer(counting(sent.clone()));
        let until = Instant::now() + Duration::from_secs(4);
        holds.renewed("c1/widgets.example.org", until);
        holds.renewed(MEMBER, until);
        let held = within("c1/widgets.example.org", async {
            service.call(request(Method::PUT)).await
        })
        .await;
        assert!(held.is_ok());
        let other = within("c1/gadgets.example.org", async {
            service.call(request(Method::PUT)).await
        })
        .await;
        assert!(other.is_err(), "another shard's work");
        assert!(
            service.call(request(Method::PUT)).await.is_ok(),
            "membership covers the rest"
        );
        holds.dropped("c1/widgets.example.org");
        let lost = within("c1/widgets.example.org", async {
            service.call(request(Method::PUT)).await
        })
        .await;
        assert!(lost.is_err(), "a shard given up");
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_write_is_abandoned_when_its_hold_lapses() {
        let holds = Arc::new(Holds::new(Mode::Leader));
        let started = Instant::now();
        holds.renewed(LEADER, started + Duration::from_secs(2));
        let slow = tower::service_fn(|_: Request<()>| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, Infallible>(())
        });
        let mut service = HoldCheck::new(holds.clone()).layer(slow);
        let answered = service.call(request(Method::POST)).await;
        assert!(answered.is_err());
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_while_a_write_waits_keeps_it() {
        let holds = Arc::new(Holds::new(Mode::Leader));
        let started = Instant::now();
        holds.renewed(LEADER, started + Duration::from_secs(2));
        let slow = tower::service_fn(|_: Request<()>| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok::<_, Infallible>(())
        });
        let mut service = HoldCheck::new(holds.clone()).layer(slow);
        let renewing = holds.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            renewing.renewed(LEADER, Instant::now() + Duration::from_secs(4));
        });
        assert!(service.call(request(Method::POST)).await.is_ok());
    }

    #[tokio::test]
    async fn without_replicas_nothing_is_held_back() {
        let holds = Arc::new(Holds::new(Mode::Unfenced));
        let sent = Arc::new(AtomicUsize::new(0));
        let mut service = HoldCheck::new(holds).layer(counting(sent.clone()));
        assert!(service.call(request(Method::PATCH)).await.is_ok());
        assert_eq!(sent.load(Ordering::SeqCst), 1);
    }
}
