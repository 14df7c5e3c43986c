//! [`RunOnce`]: the one-call claim-run-finish over any
//! [`IdempotencyBackend`] (feature `tokio`): a closure runs once per key,
//! its lease renewed while it runs, and every later call gets its answer.

use crate::backend::finish;
use crate::backend::keeper::Keeper;
use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::lease::retry::worth_retrying;
use crate::store::{Once, Outcome};
use crate::{Checkpoint, Error, Fingerprint, Keyspace, LeaseToken};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The lease a [`RunOnce`] claims with unless told otherwise.
pub const RUN_ONCE_LEASE_DEFAULT: Duration = Duration::from_secs(30);

/// What a [`RunOnce`] closure is told of its run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Attempt {
    /// The lease, for [`IdempotencyBackend::checkpoint`] between steps.
    pub token: LeaseToken,
    /// 1 for the first holder, one more for each takeover and each rerun
    /// of a failure under [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed).
    pub attempt: u32,
    /// Whether an earlier holder stopped half-way (its lease ended): its
    /// side effects may have happened.
    pub recovered: bool,
    /// The last checkpoint an earlier holder stored, to resume after.
    pub checkpoint: Option<Checkpoint>,
}

/// Claims, runs a closure with its lease kept alive, and stores what the
/// closure decided — complete, fail or release — or answers the replay
/// without running it: the one-call form of the contract over any backend
/// (the embedded [`Store`](crate::Store), Redis, PostgreSQL), as
/// [`Store::run_once`](crate::Store::run_once) is for the store alone.
///
/// The lease is renewed every third of it from a thread of its own (the
/// keeper the HTTP layer uses), so a closure that blocks its thread or
/// awaits for longer than its lease keeps the key. A closure whose future
/// is dropped, or that panics, leaves the key in progress until its lease
/// ends; the next claim takes it over with [`Attempt::recovered`] set, as
/// after a crash.
///
/// Cheap to clone: clones share the backend and the keeper.
///
/// # Examples
///
/// ```
/// use idemkv::{backend::{ClaimOptions, RunOnce}, Config, Fingerprint, Once, Outcome, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let runtime = tokio::runtime::Runtime::new().unwrap();
/// # runtime.block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), Config::new())?;
/// let once = RunOnce::new(store);
/// let fingerprint = Fingerprint::of(b"ship order 7");
///
/// let answer = once
///     .run(b"shipping", b"order-7", fingerprint, ClaimOptions::new(), |attempt| async move {
///         assert_eq!(attempt.attempt, 1);
///         Outcome::Complete(b"label 1Z999".to_vec()) // the side effect ran here
///     })
///     .await?;
/// assert_eq!(answer, Once::Ran(Outcome::Complete(b"label 1Z999".to_vec())));
///
/// // A redelivery of the same job: the first answer, and nothing runs.
/// let again = once
///     .run(b"shipping", b"order-7", fingerprint, ClaimOptions::new(), |_| async { unreachable!() })
///     .await?;
/// assert_eq!(again, Once::Replayed(b"label 1Z999".to_vec()));
/// # Ok(()) })
/// # }
/// ```
pub struct RunOnce<B> {
    backend: Arc<B>,
    lease: Duration,
    keeper: Arc<Keeper>,
}

impl<B> Clone for RunOnce<B> {
    fn clone(&self) -> Self {
        RunOnce { backend: Arc::clone(&self.backend), lease: self.lease, keeper: Arc::clone(&self.keeper) }
    }
}

impl<B> std::fmt::Debug for RunOnce<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunOnce")
            .field("lease", &self.lease)
            .field("keeper", &self.keeper)
            .finish_non_exhaustive()
    }
}

impl<B: IdempotencyBackend> RunOnce<B> {
    /// Runs closures once over `backend`, with leases of
    /// [`RUN_ONCE_LEASE_DEFAULT`].
    #[must_use]
    pub fn new(backend: B) -> Self {
        RunOnce::shared(Arc::new(backend))
    }

    /// As [`new`](RunOnce::new), for a backend shared with others.
    #[must_use]
    pub fn shared(backend: Arc<B>) -> Self {
        RunOnce { backend, lease: RUN_ONCE_LEASE_DEFAULT, keeper: Arc::new(Keeper::new()) }
    }

    /// The lease claims take when their [`ClaimOptions::lease`] is unset:
    /// how long a holder that stopped keeps the key from the next.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The backend.
    #[must_use]
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// Claims `(scope, key)` with `fingerprint`; if it is acquired, runs
    /// `f` with its lease kept alive and stores its [`Outcome`]; otherwise
    /// answers the replay, the key in progress (after waiting up to
    /// [`ClaimOptions::wait`]) or the mismatch without running `f`.
    ///
    /// A finishing write that fails for a moment (an I/O error, a full
    /// disk, the network) is tried again at once a few times while the
    /// lease is held; an answer (`Complete`, `Fail`) those tries did not
    /// store is then tried again in the background while the lease is
    /// held, for at most one lease, the key in progress meanwhile: a
    /// retry is told to wait and then replays it, where giving up would
    /// have let the lease lapse and the retry run `f` again.
    ///
    /// # Errors
    /// The claim's errors (nothing ran); after `f` ran, the finishing
    /// write's, once its quick tries are spent: [`Error::LeaseLost`] if
    /// another holder took the key over (the renewals failed for a whole
    /// lease), the backend's errors (the answer may still be stored by
    /// the background tries), [`Error::ResponseTooLarge`] — a key not
    /// stored stays in progress until its lease ends and the next claim
    /// recovers it, as after a crash: a key `f` ran for is never freed
    /// for a silent second run.
    pub async fn run<F, Fut>(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
        f: F,
    ) -> Result<Once, Error>
    where
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Outcome>,
    {
        self.run_in(Keyspace::Caller, scope, key, fingerprint, options, f).await
    }

    /// [`run`](RunOnce::run) on a record of `keyspace`: how idemkv's own
    /// features (the inbox, its dead letters) run once.
    pub(crate) async fn run_in<F, Fut>(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
        f: F,
    ) -> Result<Once, Error>
    where
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Outcome>,
    {
        let lease = options.lease.unwrap_or(self.lease);
        let claimed = self.backend.claim_in(keyspace, scope, key, fingerprint, options.lease(lease)).await?;
        let (token, attempt, recovered, checkpoint) = match claimed {
            BackendClaim::Acquired { token, attempt, recovered, checkpoint } => (token, attempt, recovered, checkpoint),
            BackendClaim::Replay(response) => return Ok(Once::Replayed(response)),
            BackendClaim::InProgress { retry_after } => return Ok(Once::InProgress { retry_after }),
            BackendClaim::Mismatch => return Ok(Once::Mismatch),
        };
        let kept = self.keeper.keep(Arc::clone(&self.backend), token.clone(), lease);
        let outcome = f(Attempt { token: token.clone(), attempt, recovered, checkpoint }).await;
        // The lease stays kept while the answer is written: a slow write
        // must not let it lapse.
        match finish::quickly(&*self.backend, &token, &outcome, &kept).await {
            Ok(()) => Ok(Once::Ran(outcome)),
            Err(error) if matches!(outcome, Outcome::Release) || !worth_retrying(&error) => Err(error),
            Err(error) => {
                // An answer not stored yet: tried again while the lease is
                // held, on the keeper's runtime (the caller's may end).
                let backend = Arc::clone(&self.backend);
                let _runs_on =
                    self.keeper.spawn(async move { finish::later(&*backend, kept, &token, &outcome, lease).await });
                Err(error)
            }
        }
    }
}
