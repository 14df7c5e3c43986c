//! The contract any idempotency backend implements — the embedded [`Store`],
//! Redis / Valkey (`redis`) and PostgreSQL (`postgres`) — for the HTTP
//! layer and the tools built on it, and what runs over any backend:
//! `RunOnce` (a closure once per key) and `Versions` (a version per
//! resource), with the `tokio` feature, and [`near::NearCache`] (completed
//! answers replayed from process memory), with `near-cache`.
//!
//! ```
//! use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
//! use idemkv::{Config, Fingerprint, Store};
//! # fn main() -> Result<(), idemkv::Error> {
//! # let runtime = tokio::runtime::Runtime::new().unwrap();
//! # runtime.block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! // Any backend: the embedded store here, Redis or PostgreSQL the same way.
//! async fn charge<B: IdempotencyBackend>(backend: &B, key: &[u8]) -> Result<Vec<u8>, idemkv::Error> {
//!     let fingerprint = Fingerprint::of(b"POST /charges amount=10");
//!     match backend.claim(b"acct-7", key, fingerprint, ClaimOptions::new()).await? {
//!         BackendClaim::Acquired { token, .. } => {
//!             backend.complete(&token, b"201 charged").await?; // the side effect ran once
//!             Ok(b"201 charged".to_vec())
//!         }
//!         BackendClaim::Replay(response) => Ok(response),
//!         other => Ok(format!("409 {other:?}").into_bytes()),
//!     }
//! }
//! let store = Store::open(dir.path(), Config::new())?;
//! assert_eq!(charge(&store, b"k-1").await?, b"201 charged");
//! assert_eq!(charge(&store, b"k-1").await?, b"201 charged"); // replayed
//! # Ok(()) })
//! # }
//! ```
//!
//! The networked backends keep only their transport (Lua scripts, SQL
//! functions) and how their wake-ups arrive; the contract's edges they
//! share are written once in `remote` (settings, the claim prologue, the
//! finish dispatch, the `IdempotencyBackend` impl, the claim-and-park loop,
//! their counters, TLS).
//!
//! Every call is a future that never blocks its runtime. It speaks in owned
//! parts ([`BackendClaim`], [`LeaseToken`]) so that a backend need not hand
//! out borrows of its own state, and it knows nothing of HTTP or tower.

#[cfg(feature = "tokio")]
use crate::engine::transition::Finish;
use crate::{Checkpoint, Error, Fingerprint, Keyspace, LeaseToken, Record, ReusePolicy};
#[cfg(feature = "tokio")]
use crate::{Claim, ClaimRequest, Store};
use std::future::Future;
use std::time::Duration;

#[cfg(feature = "tokio")]
mod any;
#[cfg(feature = "tokio")]
pub(crate) mod finish;
#[cfg(feature = "tokio")]
pub(crate) mod keeper;
#[cfg(feature = "near-cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "near-cache")))]
pub mod near;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) mod remote;
#[cfg(feature = "tokio")]
pub(crate) mod run_once;
#[cfg(feature = "tokio")]
pub(crate) mod versions;

#[cfg(feature = "tokio")]
pub use any::AnyBackend;
#[cfg(all(feature = "tls", any(feature = "redis", feature = "postgres")))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "tls", any(feature = "redis", feature = "postgres")))))]
pub use remote::tls::Tls;
#[cfg(feature = "tokio")]
pub use run_once::{Attempt, RunOnce, RUN_ONCE_LEASE_DEFAULT};
#[cfg(feature = "tokio")]
pub use versions::{Step, Versions, VERSIONS_TTL_DEFAULT};

pub use crate::error::BackendFailure;

/// The records a page of [`IdempotencyBackend::scan_staged`]'s provided
/// form reads at a time.
const SCAN_PAGE: usize = 256;

/// Whether `record` is a completion whose answer carries staged messages.
pub(crate) fn is_staged_completion(record: &Record) -> bool {
    record.state == crate::State::Completed && crate::record::is_staged(&record.response)
}

/// What a claim asks besides `(scope, key)` and the fingerprint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimOptions {
    /// The lease; `None` for the backend's default.
    pub lease: Option<Duration>,
    /// The TTL of the finished record; `None` for the backend's default.
    pub ttl: Option<Duration>,
    /// While the key is in progress, wait up to this long for its holder
    /// to finish (HTTP `Prefer: wait`); `None` answers at once.
    pub wait: Option<Duration>,
    /// What a claim of a Failed key with the same fingerprint gets (see
    /// [`ReusePolicy`]).
    pub reuse: ReusePolicy,
}

impl ClaimOptions {
    /// The backend's default lease and TTL, no waiting.
    #[must_use]
    pub fn new() -> Self {
        ClaimOptions::default()
    }

    /// Sets the lease.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets the TTL.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets what a claim of a Failed key gets.
    #[must_use]
    pub fn reuse(mut self, reuse: ReusePolicy) -> Self {
        self.reuse = reuse;
        self
    }

    /// Sets the longest wait while the key is in progress.
    #[must_use]
    pub fn wait(mut self, wait: Option<Duration>) -> Self {
        self.wait = wait;
        self
    }
}

/// The answer of a backend's claim, in owned parts.
#[derive(Debug)]
#[non_exhaustive]
pub enum BackendClaim {
    /// Run the request, then finish this token.
    Acquired {
        /// The lease, as a plain token.
        token: LeaseToken,
        /// 1 for the first holder, one more for each takeover.
        attempt: u32,
        /// Whether this lease took over from a holder whose lease ended:
        /// the old holder may have half-run.
        recovered: bool,
        /// The last checkpoint an earlier holder stored (see
        /// [`IdempotencyBackend::checkpoint`]), to resume from.
        checkpoint: Option<Checkpoint>,
    },
    /// The stored response of the first request.
    Replay(Vec<u8>),
    /// Another request with this key is running.
    InProgress {
        /// Until its lease ends.
        retry_after: Duration,
    },
    /// The key was used for a different request.
    Mismatch,
}

impl crate::claim::wait::Answer for BackendClaim {
    fn in_progress(&self) -> Option<Duration> {
        match self {
            BackendClaim::InProgress { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}

/// The sizes and durations a backend accepts, so that callers check input
/// before it runs, and the TTL it gives a claim that names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendLimits {
    /// Longest key.
    pub key_bytes_max: usize,
    /// Longest scope.
    pub scope_bytes_max: usize,
    /// Largest stored response.
    pub response_bytes_max: usize,
    /// Longest lease or TTL a claim may ask for ([`Config::duration_max`](crate::Config::duration_max)).
    pub duration_max: Duration,
    /// The TTL of a record whose claim set no [`ClaimOptions::ttl`]
    /// ([`Config::default_ttl`](crate::Config::default_ttl)).
    pub ttl_default: Duration,
}

/// What the HTTP layer and the tools need of an idempotency store.
///
/// Every record a call names by `(scope, key)` lives in a [`Keyspace`]:
/// the caller's for the calls without a keyspace ([`claim`], [`get`],
/// [`remove`], [`replace`], [`scan`]), one of idemkv's own for the `_in`
/// calls its features make. A backend implements the `_in` calls and keeps
/// every keyspace apart, so that no scope of a caller's reaches a record of
/// idemkv's own; a [`LeaseToken`] names its keyspace.
///
/// [`claim`]: IdempotencyBackend::claim
/// [`get`]: IdempotencyBackend::get
/// [`remove`]: IdempotencyBackend::remove
/// [`replace`]: IdempotencyBackend::replace
/// [`scan`]: IdempotencyBackend::scan
pub trait IdempotencyBackend: Send + Sync + 'static {
    /// Claims `(scope, key)` of `keyspace` (see
    /// [`Store::claim`](crate::Store::claim)); with
    /// [`ClaimOptions::wait`], waits while the key is in progress.
    ///
    /// # Errors
    /// The backend's error; an error changes nothing.
    fn claim_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> impl Future<Output = Result<BackendClaim, Error>> + Send;

    /// Claims the caller's `(scope, key)`: [`claim_in`] of
    /// [`Keyspace::Caller`].
    ///
    /// [`claim_in`]: IdempotencyBackend::claim_in
    ///
    /// # Errors
    /// As [`claim_in`](IdempotencyBackend::claim_in).
    fn claim(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> impl Future<Output = Result<BackendClaim, Error>> + Send {
        self.claim_in(Keyspace::Caller, scope, key, fingerprint, options)
    }

    /// Stores `response` as the replayed answer.
    ///
    /// # Errors
    /// The backend's error ([`Error::LeaseLost`] for a stale token,
    /// [`Error::ResponseTooLarge`]).
    fn complete(&self, token: &LeaseToken, response: &[u8]) -> impl Future<Output = Result<(), Error>> + Send;

    /// Stores `response` as a replayed terminal failure.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`].
    fn fail(&self, token: &LeaseToken, response: &[u8]) -> impl Future<Output = Result<(), Error>> + Send;

    /// Frees the key so that a retry may run.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`].
    fn release(&self, token: &LeaseToken) -> impl Future<Output = Result<(), Error>> + Send;

    /// Stores a checkpoint for the lease `token` (see
    /// [`crate::Lease::checkpoint`]): a later holder that takes the key
    /// over gets it in [`BackendClaim::Acquired`]. The lease end stays.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`], and
    /// [`Error::InvalidCheckpoint`], [`Error::CheckpointTooLarge`].
    fn checkpoint(
        &self,
        token: &LeaseToken,
        step: &str,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Extends the lease so that it ends at least `extend` from now.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`], and
    /// [`Error::InvalidDuration`].
    fn renew(&self, token: &LeaseToken, extend: Duration) -> impl Future<Output = Result<(), Error>> + Send;

    /// The live record of `(scope, key)` of `keyspace` (state, attempt,
    /// token, times, response), `None` if absent or expired.
    ///
    /// # Errors
    /// The backend's error; the key errors.
    fn get_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Record>, Error>> + Send;

    /// [`get_in`](IdempotencyBackend::get_in) of the caller's keyspace.
    ///
    /// # Errors
    /// As [`get_in`](IdempotencyBackend::get_in).
    fn get(&self, scope: &[u8], key: &[u8]) -> impl Future<Output = Result<Option<Record>, Error>> + Send {
        self.get_in(Keyspace::Caller, scope, key)
    }

    /// Removes `(scope, key)` of `keyspace` whatever its state (an admin
    /// operation); its holder, if any, then gets [`Error::LeaseLost`].
    /// Returns whether a live record was removed.
    ///
    /// # Errors
    /// The backend's error; the key errors.
    fn remove_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// [`remove_in`](IdempotencyBackend::remove_in) of the caller's
    /// keyspace.
    ///
    /// # Errors
    /// As [`remove_in`](IdempotencyBackend::remove_in).
    fn remove(&self, scope: &[u8], key: &[u8]) -> impl Future<Output = Result<bool, Error>> + Send {
        self.remove_in(Keyspace::Caller, scope, key)
    }

    /// Replaces the answer of `(scope, key)`'s Completed record of
    /// `keyspace` with `answer` if it is `expected` — a compare-and-set,
    /// one atomic step on every backend. State, token, fingerprint and
    /// attempt stay; the record lives at least its TTL from now (as a
    /// completion written now would: a record replaced often never
    /// expires); a replay answers the new answer from then on. Returns
    /// whether it replaced: `false` for an absent, Processing or Failed
    /// key, or another answer (someone replaced it first).
    ///
    /// The outbox's relay drops delivered messages from their completion
    /// this way, and a resource's version steps this way.
    ///
    /// # Errors
    /// The backend's error; the key errors; [`Error::ResponseTooLarge`].
    fn replace_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// [`replace_in`](IdempotencyBackend::replace_in) of the caller's
    /// keyspace.
    ///
    /// # Errors
    /// As [`replace_in`](IdempotencyBackend::replace_in).
    fn replace(
        &self,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        self.replace_in(Keyspace::Caller, scope, key, expected, answer)
    }

    /// The live records of `scope` of `keyspace` whose key sorts after
    /// `after` (from the first, for `None`), in key order (bytewise), at
    /// most `limit`: a page of an operator's listing (the inbox's dead
    /// letters). Not a snapshot: records that change meanwhile may or may
    /// not be seen.
    ///
    /// What a page costs: what it returns. PostgreSQL reads a range of
    /// its primary key, Redis a range of the scope's index (a sorted set;
    /// on a Cluster one in each of the scope's 16 slots, merged), the
    /// embedded store the scope's keys of each shard, kept from the first
    /// scan of the scope on (see [`Store::scan`](crate::Store::scan));
    /// each then reads the records.
    ///
    /// # Errors
    /// The backend's error; [`Error::ScopeTooLong`] for a scope over the
    /// limit.
    fn scan_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>, Error>> + Send;

    /// [`scan_in`](IdempotencyBackend::scan_in) of the caller's keyspace.
    ///
    /// # Errors
    /// As [`scan_in`](IdempotencyBackend::scan_in).
    fn scan(
        &self,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>, Error>> + Send {
        self.scan_in(Keyspace::Caller, scope, after, limit)
    }

    /// The caller's Completed records of `scope` whose answer carries
    /// staged messages (an outbox's envelope), in key order after `after`
    /// (from the first, for `None`), at most `limit`: what a relay's sweep
    /// delivers. Not a snapshot, as [`scan`](IdempotencyBackend::scan).
    ///
    /// What a page costs: what it returns. The embedded store, Redis and
    /// PostgreSQL keep those keys apart (a set per shard, a sorted set per
    /// scope, a partial index), so a sweep reads what is pending, not what
    /// is kept. Provided: [`scan`](IdempotencyBackend::scan)'s pages,
    /// filtered, for a backend that keeps nothing apart.
    ///
    /// # Errors
    /// As [`scan`](IdempotencyBackend::scan).
    fn scan_staged(
        &self,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Record>, Error>> + Send {
        async move {
            let mut staged = Vec::new();
            let mut after = after.map(<[u8]>::to_vec);
            while staged.len() < limit {
                let page = self.scan(scope, after.as_deref(), SCAN_PAGE).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.key.clone());
                let left = limit - staged.len();
                staged.extend(page.into_iter().filter(is_staged_completion).take(left));
            }
            Ok(staged)
        }
    }

    /// The sizes this backend accepts.
    fn limits(&self) -> BackendLimits;

    /// The time now, in ms since the epoch, on the clock the backend's
    /// record times are in ([`Record::deadline_ms`], [`Record::updated_ms`]):
    /// to tell from a record read with [`get`](IdempotencyBackend::get)
    /// whether its lease has ended (the HTTP layer's status resources say
    /// so). It decides nothing: a takeover is decided by the claim alone.
    ///
    /// Provided: the system clock. The embedded store reads its
    /// [`Clock`](crate::Clock); Redis answers its `TIME` and PostgreSQL its
    /// `clock_timestamp()`, the clocks their records' times are in, so
    /// that a service whose clock is off still tells a running lease from
    /// an ended one.
    ///
    /// # Errors
    /// The backend's error, for one that asks a server.
    fn now_ms(&self) -> impl Future<Output = Result<u64, Error>> + Send {
        std::future::ready(Ok(crate::Clock::now_ms(&crate::SystemClock)))
    }
}

#[cfg(feature = "tokio")]
impl Store {
    /// Runs `page` (a scan's page, which reads records) on a thread of
    /// tokio's blocking pool, not on the runtime's.
    async fn page_off_runtime<F>(&self, scope: &[u8], after: Option<&[u8]>, page: F) -> Result<Vec<Record>, Error>
    where
        F: FnOnce(Store, &[u8], Option<&[u8]>) -> Result<Vec<Record>, Error> + Send + 'static,
    {
        let (store, scope, after) = (self.clone(), scope.to_vec(), after.map(<[u8]>::to_vec));
        tokio::task::spawn_blocking(move || page(store, &scope, after.as_deref()))
            .await
            .map_err(|join| Error::io("scan task", self.path(), std::io::Error::other(join)))?
    }
}

/// The backend's form of the store's `claim`, whose replay is `answer` of
/// what the claim replayed.
#[cfg(feature = "tokio")]
fn backend_claim<R>(claim: Claim<R>, answer: impl FnOnce(R) -> Vec<u8>) -> BackendClaim {
    match claim {
        Claim::Acquired(lease) => {
            let (attempt, recovered) = (lease.attempt(), lease.recovered());
            let checkpoint = lease.last_checkpoint().cloned();
            BackendClaim::Acquired { token: lease.into_token(), attempt, recovered, checkpoint }
        }
        Claim::Replay(replayed) => BackendClaim::Replay(answer(replayed)),
        Claim::InProgress { retry_after, .. } => BackendClaim::InProgress { retry_after },
        Claim::Mismatch => BackendClaim::Mismatch,
    }
}

#[cfg(feature = "tokio")]
impl IdempotencyBackend for Store {
    async fn claim_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Result<BackendClaim, Error> {
        let mut request = ClaimRequest::new(key, fingerprint).scope(scope).keyspace(keyspace);
        if let Some(lease) = options.lease {
            request = request.lease(lease);
        }
        if let Some(ttl) = options.ttl {
            request = request.ttl(ttl);
        }
        request = request.reuse(options.reuse);
        Ok(match options.wait {
            // Boxed: a wait's state stays out of every claim's future.
            Some(timeout) => {
                backend_claim(Box::pin(self.claim_wait_async(&request, timeout)).await?, |record| record.response)
            }
            // A replay copies the answer alone out of the store.
            None => {
                backend_claim(self.claim_async_with(&request, |record| record.response().to_vec()).await?, |answer| {
                    answer
                })
            }
        })
    }

    async fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        self.write_finish(token, Finish::Complete(response))?.wait_async(self.engine()).await
    }

    async fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        self.write_finish(token, Finish::Fail(response))?.wait_async(self.engine()).await
    }

    async fn release(&self, token: &LeaseToken) -> Result<(), Error> {
        self.write_finish(token, Finish::Release)?.wait_async(self.engine()).await
    }

    async fn checkpoint(&self, token: &LeaseToken, step: &str, payload: &[u8]) -> Result<(), Error> {
        self.write_checkpoint(token, step, payload)?.wait_async(self.engine()).await
    }

    async fn renew(&self, token: &LeaseToken, extend: Duration) -> Result<(), Error> {
        self.write_renew(token, extend)?.wait_async(self.engine()).await.map(|_deadline_ms| ())
    }

    async fn get_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Option<Record>, Error> {
        self.write_get(keyspace, scope, key)?.wait_async(self.engine()).await
    }

    async fn remove_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<bool, Error> {
        self.write_remove(keyspace, scope, key)?.wait_async(self.engine()).await
    }

    async fn replace_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> Result<bool, Error> {
        self.write_replace(keyspace, scope, key, expected, answer)?.wait_async(self.engine()).await
    }

    async fn now_ms(&self) -> Result<u64, Error> {
        Ok(self.engine().config.clock.now_ms())
    }

    async fn scan_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Record>, Error> {
        let page = move |store: Store, scope: &[u8], after: Option<&[u8]>| store.scan_in(keyspace, scope, after, limit);
        self.page_off_runtime(scope, after, page).await
    }

    async fn scan_staged(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>, Error> {
        let page = move |store: Store, scope: &[u8], after: Option<&[u8]>| store.scan_staged(scope, after, limit);
        self.page_off_runtime(scope, after, page).await
    }

    fn limits(&self) -> BackendLimits {
        let config = self.config();
        BackendLimits {
            key_bytes_max: config.key_bytes_max,
            scope_bytes_max: config.scope_bytes_max,
            response_bytes_max: config.response_bytes_max,
            duration_max: Duration::from_millis(config.duration_ms_max),
            ttl_default: Duration::from_millis(config.ttl_ms),
        }
    }
}
