//! The handler's side of checkpoints: a request extension that shows
//! the point an earlier, unfinished run stored and stores new ones under
//! the request's lease.

use crate::backend::IdempotencyBackend;
use crate::{Checkpoint, Error, LeaseToken};
use parking_lot::Mutex;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type StoreFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// Where a run's checkpoints go: its backend, under its lease, and the
/// last one stored.
trait Points: Send + Sync {
    fn last(&self) -> &Mutex<Option<Checkpoint>>;
    fn store<'a>(&'a self, step: &'a str, payload: &'a [u8]) -> StoreFuture<'a>;
}

struct Lease<K> {
    backend: Arc<K>,
    token: Arc<LeaseToken>,
    last: Mutex<Option<Checkpoint>>,
}

impl<K: IdempotencyBackend> Points for Lease<K> {
    fn last(&self) -> &Mutex<Option<Checkpoint>> {
        &self.last
    }

    fn store<'a>(&'a self, step: &'a str, payload: &'a [u8]) -> StoreFuture<'a> {
        Box::pin(self.backend.checkpoint(&self.token, step, payload))
    }
}

/// The checkpoints of a guarded request's key, as a request extension
/// (beside [`Attempt`](super::Attempt)): which run this is
/// ([`attempt`](Checkpoints::attempt),
/// [`recovered`](Checkpoints::recovered)), where an earlier run that
/// died half-way stopped ([`last`](Checkpoints::last)), and
/// [`checkpoint`](Checkpoints::checkpoint), which stores a new point,
/// fenced by this run's lease, after each step with an outside effect.
///
/// # Examples
///
/// ```no_run
/// use axum::{http::StatusCode, Extension};
/// use idemkv::http::Checkpoints;
///
/// async fn order(Extension(points): Extension<Checkpoints>) -> (StatusCode, String) {
///     let charge = match points.last() {
///         // An earlier run charged and then died: do not charge again.
///         Some(point) if point.step == "charged" => String::from_utf8_lossy(&point.payload).into_owned(),
///         _ => {
///             let charge = "ch_1".to_string(); // the payment provider's call
///             if let Err(error) = points.checkpoint("charged", charge.as_bytes()).await {
///                 tracing::warn!(%error, "checkpoint not stored");
///             }
///             charge
///         }
///     };
///     (StatusCode::CREATED, format!("order paid by {charge}"))
/// }
/// ```
#[derive(Clone)]
pub struct Checkpoints {
    attempt: u32,
    recovered: bool,
    points: Arc<dyn Points>,
}

impl fmt::Debug for Checkpoints {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Checkpoints")
            .field("attempt", &self.attempt)
            .field("recovered", &self.recovered)
            .field("last", &*self.points.last().lock())
            .finish_non_exhaustive()
    }
}

impl Checkpoints {
    /// The points of the key `token` holds, the last one being `last`, for
    /// run `attempt` (`recovered` if it took over an ended lease).
    pub(super) fn new<K: IdempotencyBackend>(
        backend: Arc<K>,
        token: Arc<LeaseToken>,
        (attempt, recovered): (u32, bool),
        last: Option<Checkpoint>,
    ) -> Self {
        Checkpoints { attempt, recovered, points: Arc::new(Lease { backend, token, last: Mutex::new(last) }) }
    }

    /// 1 for the first run of the key, one more for each takeover.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether this run took over from one whose lease ended unfinished:
    /// it may have half-run; [`last`](Checkpoints::last) says how far.
    #[must_use]
    pub fn recovered(&self) -> bool {
        self.recovered
    }

    /// The last point stored for this key: at first the one an earlier run
    /// stored (`None` on a first run, or if it stored none), then each this
    /// run stores.
    #[must_use]
    pub fn last(&self) -> Option<Checkpoint> {
        self.points.last().lock().clone()
    }

    /// Stores a point durably under this run's lease (see
    /// [`Lease::checkpoint`](crate::Lease::checkpoint)).
    ///
    /// # Errors
    /// As [`IdempotencyBackend::checkpoint`]: [`Error::LeaseLost`] if
    /// another run took the key over, the size and step errors, and the
    /// backend's.
    pub async fn checkpoint(&self, step: &str, payload: &[u8]) -> Result<(), Error> {
        self.points.store(step, payload).await?;
        *self.points.last().lock() = Some(Checkpoint::new(step, payload));
        Ok(())
    }
}
