//! [`NearCache`]: `Completed` answers replayed from process memory, over
//! any [`IdempotencyBackend`] (feature `near-cache`), so that a fleet's
//! replay costs no round trip to Redis or PostgreSQL.
//!
//! ```
//! use idemkv::backend::near::{NearCache, NearCacheConfig};
//! use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
//! use idemkv::{Config, Fingerprint, Store};
//! # fn main() -> Result<(), idemkv::Error> {
//! # let runtime = tokio::runtime::Runtime::new().unwrap();
//! # runtime.block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! // Redis or PostgreSQL in a fleet; the embedded store here.
//! let backend = Store::open(dir.path(), Config::new())?;
//! let near = NearCache::new(backend, NearCacheConfig::new().entries_max(50_000));
//! let fingerprint = Fingerprint::of(b"POST /charges amount=10");
//! let BackendClaim::Acquired { token, .. } = near.claim(b"acct-7", b"k-1", fingerprint, ClaimOptions::new()).await?
//! else { unreachable!() };
//! near.complete(&token, b"201 charged").await?; // kept in memory too
//!
//! // The retry: answered from memory, the backend not asked.
//! let again = near.claim(b"acct-7", b"k-1", fingerprint, ClaimOptions::new()).await?;
//! assert!(matches!(again, BackendClaim::Replay(answer) if answer == b"201 charged"));
//! assert_eq!(near.stats().hits, 1);
//! // Another request under the same key is the backend's to judge: 422.
//! let other = near.claim(b"acct-7", b"k-1", Fingerprint::of(b"other"), ClaimOptions::new()).await?;
//! assert!(matches!(other, BackendClaim::Mismatch));
//! # Ok(()) })
//! # }
//! ```
//!
//! # What it keeps, and until when
//!
//! An entry is a `Completed` record of the caller's keyspace: its
//! fingerprint, its answer, and the moment, on the process's monotonic
//! clock, until which it may be replayed. It is made when a completion
//! through the cache succeeds (the claim's fingerprint and TTL, which the
//! cache noted when the claim was acquired through it), and when a claim
//! the cache could not answer was a replay (one `get` of the record, and
//! at most every ten seconds one [`now_ms`](IdempotencyBackend::now_ms)).
//!
//! The moment is never past the record's expiry as the backend sees it,
//! whatever the offset between the process's clock and the server's: a
//! completion sent at local time `s` with a TTL `t` expires on the server
//! at its time of the write plus `t`, which is no earlier than `s + t`; a
//! record read with expiry `d` on the server's clock, against a server
//! time `v` answered to a call sent at local time `s`, expires no earlier
//! than `s + (d - v)`. Both only assume that the two clocks run at the same
//! rate; a server clock that jumps ahead (a step, a failover to a server
//! whose clock is ahead) ends its records early, and the cache keeps
//! replaying them for what is left of the entry. Every entry ends at
//! [`NearCacheConfig::age_max`] after it was made whatever the record's
//! TTL, which bounds that and everything else another process may change.
//!
//! # Consistency
//!
//! A claim is answered from memory only when an entry of its `(scope,
//! key)` is live and carries the claim's own fingerprint: the answer that
//! the same request got before. Every other claim goes to the backend,
//! whose answer stands: a different fingerprint is the backend's
//! [`Mismatch`](BackendClaim::Mismatch) (HTTP 422), never the cache's, and
//! a cache never answers one request with another's answer. What this
//! process changes through the cache it reads from then on: `replace`,
//! `remove`, `release`, `fail` and a claim the backend answers `Acquired`
//! or `InProgress` drop the entry, a completion replaces it, a `get` that
//! reads another state drops it. What another process changes is seen here
//! once the entry ends:
//!
//! | another process… | a claim of the same request here gets, until the entry ends | why that is safe, or not |
//! |---|---|---|
//! | replaces the answer (`replace`; the outbox's relay dropping delivered messages) | the answer before | the relay's replace keeps the response a caller sees (`Outbox` strips the envelope); a service that replaces answers for its own reasons and needs every instance to see it at once should not use the cache, or keep `age_max` short |
//! | removes the key (an operator) | the first answer | the request is not run again until the entry ends: the promise (never twice) holds, the operator's "run it again" waits up to `age_max` here |
//! | removes the key and runs another request under it | the first answer for the first request; the other request goes to the backend and gets the new answer (the entry is replaced) | a replay is only ever of the answer stored for the same fingerprint |
//! | — (the record expires on the server) | nothing: the entry ends first | see above: only a server clock that jumps ahead ends a record before its entry |
//!
//! A replay from memory is ready at once; it takes from the task's
//! budget as tokio's own resources do, so that a task that loops over
//! replays gives its thread back now and then.
//!
//! Only the caller's keyspace is cached: idemkv's own records (versions,
//! holds, inbox entries, relay progress, long operations) are changed by
//! `replace` from every process by design and their features decide from
//! what a claim answers, so every call on them goes to the backend. Nor
//! is a `Failed` record cached: a claim with
//! [`ReusePolicy::RetryFailed`](crate::ReusePolicy::RetryFailed) runs it
//! again.

use super::{BackendClaim, BackendLimits, ClaimOptions, IdempotencyBackend};
use crate::clock::{duration_ms, Clock, SystemClock};
use crate::{Error, Fingerprint, Keyspace, LeaseToken, Record, State};
use parking_lot::Mutex;
use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The answers a [`NearCache`] keeps unless told otherwise.
pub const NEAR_ENTRIES_DEFAULT: usize = 10_000;

/// The bytes of answers a [`NearCache`] keeps unless told otherwise.
pub const NEAR_BYTES_DEFAULT: u64 = 16 * 1024 * 1024;

/// How long an entry lives at most unless told otherwise.
pub const NEAR_AGE_DEFAULT: Duration = Duration::from_secs(60);

/// What an entry costs besides its scope, key and answer (its map slot,
/// fingerprint, moment and pointers), counted against
/// [`NearCacheConfig::bytes_max`].
const ENTRY_OVERHEAD_BYTES: u64 = 96;

/// How old a reading of the server's clock may be before the next fill
/// takes another: two clocks drift apart by a few ms over that at most.
const SERVER_TIME_REFRESH_MS: u64 = 10_000;

/// Locks that order a fill after the writes of the same key (the
/// generations of `STRIPES` groups of keys).
const STRIPES: usize = 64;

/// The settings of a [`NearCache`]: its bounds, how long an entry lives
/// at most, and its clock.
///
/// ```
/// use idemkv::backend::near::NearCacheConfig;
/// use std::time::Duration;
///
/// let config = NearCacheConfig::new().entries_max(100_000).bytes_max(64 << 20).age_max(Duration::from_secs(30));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
pub struct NearCacheConfig {
    entries_max: usize,
    bytes_max: u64,
    age_max: Duration,
    clock: Arc<dyn Clock>,
}

impl Default for NearCacheConfig {
    fn default() -> Self {
        NearCacheConfig::new()
    }
}

impl NearCacheConfig {
    /// [`NEAR_ENTRIES_DEFAULT`] answers in [`NEAR_BYTES_DEFAULT`] bytes,
    /// each kept [`NEAR_AGE_DEFAULT`] at most, on the system clock.
    #[must_use]
    pub fn new() -> Self {
        NearCacheConfig {
            entries_max: NEAR_ENTRIES_DEFAULT,
            bytes_max: NEAR_BYTES_DEFAULT,
            age_max: NEAR_AGE_DEFAULT,
            clock: Arc::new(SystemClock),
        }
    }

    /// The most answers kept (default [`NEAR_ENTRIES_DEFAULT`]); 0 keeps
    /// none. The claims acquired through the cache and not finished yet
    /// are kept apart, as many again (a completion makes its entry from
    /// them).
    #[must_use]
    pub fn entries_max(mut self, entries: usize) -> Self {
        self.entries_max = entries;
        self
    }

    /// The most bytes kept (default [`NEAR_BYTES_DEFAULT`]): each entry
    /// counts its scope, key and answer and 96 bytes more. An answer
    /// larger than the cache's share for it is not kept.
    #[must_use]
    pub fn bytes_max(mut self, bytes: u64) -> Self {
        self.bytes_max = bytes;
        self
    }

    /// How long an entry lives at most, however long its record's TTL
    /// (default [`NEAR_AGE_DEFAULT`]): the longest that a change another
    /// process makes goes unseen here (see the module's docs).
    #[must_use]
    pub fn age_max(mut self, age: Duration) -> Self {
        self.age_max = age;
        self
    }

    /// The clock whose monotonic time entries end on (default the
    /// system's): a [`ManualClock`](crate::ManualClock) in tests.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// What a [`NearCache`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NearCacheStats {
    /// Claims answered from memory.
    pub hits: u64,
    /// Claims of the caller's keyspace the cache passed on to the backend.
    pub misses: u64,
    /// Entries made (by a completion or a replay).
    pub fills: u64,
    /// Answers kept now.
    pub entries: usize,
}

/// A replayed answer kept in memory.
#[derive(Debug)]
struct Answer {
    fingerprint: Fingerprint,
    response: Vec<u8>,
    /// Replayed while the cache's monotonic time is below this.
    until_ms: u64,
}

/// A claim acquired through the cache: what its completion's entry needs.
#[derive(Debug, Clone, Copy)]
struct Claimed {
    fingerprint: Fingerprint,
    ttl_ms: u64,
}

/// Weighs an entry in units of the cache's share of bytes an entry, so
/// that one capacity bounds both the entries and the bytes: each entry
/// weighs at least one unit, and its bytes at most its units' worth.
#[derive(Debug, Clone, Copy)]
struct Weigh {
    unit_bytes: u64,
}

impl Weigh {
    fn units(self, bytes: usize) -> u64 {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX).saturating_add(ENTRY_OVERHEAD_BYTES);
        bytes.div_ceil(self.unit_bytes)
    }
}

impl Weighter<Vec<u8>, Arc<Answer>> for Weigh {
    fn weight(&self, name: &Vec<u8>, answer: &Arc<Answer>) -> u64 {
        self.units(name.len().saturating_add(answer.response.len()))
    }
}

impl Weighter<Vec<u8>, Claimed> for Weigh {
    fn weight(&self, name: &Vec<u8>, _claimed: &Claimed) -> u64 {
        self.units(name.len())
    }
}

type Bounded<V> = Cache<Vec<u8>, V, Weigh, DefaultHashBuilder, DefaultLifecycle<Vec<u8>, V>>;

/// A map of at most `entries_max` entries in `bytes_max` bytes, exactly:
/// the capacity is split among shards in whole units.
fn bounded<V: Clone>(entries_max: usize, bytes_max: u64) -> Bounded<V>
where
    Weigh: Weighter<Vec<u8>, V>,
{
    let entries = u64::try_from(entries_max).unwrap_or(u64::MAX);
    let unit_bytes = (bytes_max / entries.max(1)).max(1);
    let capacity = entries.min(bytes_max / unit_bytes);
    // Shards of 32 units at least, as the map itself would have them.
    let mut shards = 1_u64;
    while shards < 16 && capacity / (shards * 2) >= 32 {
        shards *= 2;
    }
    let options = OptionsBuilder::new()
        .shards(usize::try_from(shards).unwrap_or(1))
        .estimated_items_capacity(usize::try_from(capacity).unwrap_or(usize::MAX))
        .weight_capacity(capacity / shards * shards)
        .build()
        .expect("both capacities are set");
    Cache::with_options(options, Weigh { unit_bytes }, DefaultHashBuilder::default(), DefaultLifecycle::default())
}

/// How an entry is named: the scope's length, the scope, the key.
fn entry_name(scope: &[u8], key: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(4 + scope.len() + key.len());
    name.extend_from_slice(&u32::try_from(scope.len()).unwrap_or(u32::MAX).to_le_bytes());
    name.extend_from_slice(scope);
    name.extend_from_slice(key);
    name
}

/// How a claim acquired through the cache is named: its entry's name and
/// its fencing token.
fn claim_name(token: &LeaseToken) -> Vec<u8> {
    let mut name = entry_name(&token.scope, &token.key);
    name.extend_from_slice(&token.token.to_le_bytes());
    name
}

/// The checks of a claim's lease and TTL, as every backend makes them, so
/// that a claim answered from memory refuses what the backend would.
fn check_durations(limits: &BackendLimits, options: ClaimOptions) -> Result<(), Error> {
    for (what, duration) in [("lease", options.lease), ("ttl", options.ttl)] {
        let Some(duration) = duration else { continue };
        if duration.is_zero() {
            return Err(Error::InvalidDuration { what, reason: "must not be zero" });
        }
        if duration_ms(duration) > duration_ms(limits.duration_max) {
            return Err(Error::InvalidDuration { what, reason: "longer than the configured duration_max" });
        }
    }
    Ok(())
}

/// What the clones of a [`NearCache`] share.
struct Shared<B> {
    backend: B,
    answers: Bounded<Arc<Answer>>,
    claims: Bounded<Claimed>,
    /// Per group of keys, how many writes through the cache dropped an
    /// entry: a fill that saw another number than the one before its call
    /// keeps nothing.
    generations: Box<[Mutex<u64>]>,
    /// The last reading of the server's clock: its answer, and the
    /// cache's monotonic time when the call was sent.
    server_time: Mutex<Option<(u64, u64)>>,
    clock: Arc<dyn Clock>,
    age_ms: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    fills: AtomicU64,
}

/// `Completed` answers of the caller's keyspace replayed from process
/// memory, in front of any [`IdempotencyBackend`]: a replay then costs
/// no call to the backend. Bounded in entries and bytes (S3-FIFO
/// eviction), each entry ending before its record's expiry as the backend
/// sees it and at [`NearCacheConfig::age_max`] at the latest; what it may
/// replay that another process changed meanwhile is in the
/// [module's docs](self).
///
/// Off unless a service wraps its backend in it; it is an
/// `IdempotencyBackend` itself, so [`RunOnce`](crate::backend::RunOnce),
/// the HTTP layer and [`AnyBackend`](crate::backend::AnyBackend) take it
/// unchanged. Everything but a claim the cache answers goes to the
/// backend. Cheap to clone: clones share the backend and the entries.
pub struct NearCache<B> {
    shared: Arc<Shared<B>>,
}

impl<B> Clone for NearCache<B> {
    fn clone(&self) -> Self {
        NearCache { shared: Arc::clone(&self.shared) }
    }
}

impl<B> std::fmt::Debug for NearCache<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("NearCache")
            .field("entries", &self.shared.answers.len())
            .field("age_ms", &self.shared.age_ms)
            .finish_non_exhaustive()
    }
}

impl<B: IdempotencyBackend> NearCache<B> {
    /// Replays `backend`'s completed answers from memory, as `config` says.
    #[must_use]
    pub fn new(backend: B, config: NearCacheConfig) -> Self {
        let shared = Shared {
            backend,
            answers: bounded(config.entries_max, config.bytes_max),
            claims: bounded(config.entries_max, config.bytes_max),
            generations: (0..STRIPES).map(|_| Mutex::new(0)).collect(),
            server_time: Mutex::new(None),
            clock: config.clock,
            age_ms: duration_ms(config.age_max),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fills: AtomicU64::new(0),
        };
        NearCache { shared: Arc::new(shared) }
    }

    /// The backend.
    #[must_use]
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// What the cache did so far, and how many answers it keeps.
    #[must_use]
    pub fn stats(&self) -> NearCacheStats {
        NearCacheStats {
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
            fills: self.shared.fills.load(Ordering::Relaxed),
            entries: self.shared.answers.len(),
        }
    }

    /// Drops every entry: after an operator changed records from
    /// elsewhere, say, for this process to see them at once.
    pub fn clear(&self) {
        for generation in &*self.shared.generations {
            *generation.lock() += 1;
        }
        self.shared.answers.clear();
    }
}

impl<B: IdempotencyBackend> Shared<B> {
    fn generation_of(&self, name: &[u8]) -> &Mutex<u64> {
        let mut hasher = DefaultHasher::new();
        name.hash(&mut hasher);
        let stripe = usize::try_from(hasher.finish() % STRIPES as u64).unwrap_or(0);
        &self.generations[stripe]
    }

    fn generation(&self, name: &[u8]) -> u64 {
        *self.generation_of(name).lock()
    }

    /// The kept answer of `name` for a claim with `fingerprint`, if live.
    fn replayed(&self, name: &[u8], fingerprint: Fingerprint) -> Option<Vec<u8>> {
        let answer = self.answers.get(name)?;
        if answer.until_ms <= self.clock.monotonic_ms() {
            self.answers.remove_if(name, |kept| Arc::ptr_eq(kept, &answer));
            return None;
        }
        (answer.fingerprint == fingerprint).then(|| answer.response.clone())
    }

    /// Drops the entry of `name`, and any fill that started before.
    fn forget(&self, name: &[u8]) {
        let mut generation = self.generation_of(name).lock();
        *generation += 1;
        self.answers.remove(name);
    }

    /// Keeps `answer` as `name`'s entry unless a write through the cache
    /// dropped it since `seen`; until `until_ms`, or the cache's longest.
    fn fill(&self, name: Vec<u8>, seen: u64, fingerprint: Fingerprint, response: &[u8], until_ms: u64) {
        let now_ms = self.clock.monotonic_ms();
        let until_ms = until_ms.min(now_ms.saturating_add(self.age_ms));
        if until_ms <= now_ms {
            return;
        }
        let generation = self.generation_of(&name).lock();
        if *generation == seen {
            self.answers.insert(name, Arc::new(Answer { fingerprint, response: response.to_vec(), until_ms }));
            self.fills.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A reading of the server's clock: its answer `v`, and the cache's
    /// monotonic time `s` when the call was sent (the server read its
    /// clock no earlier). A fresh one when the last is older than
    /// [`SERVER_TIME_REFRESH_MS`].
    async fn server_time(&self) -> Option<(u64, u64)> {
        let last = *self.server_time.lock();
        if let Some((server_ms, sent_ms)) = last {
            if self.clock.monotonic_ms().saturating_sub(sent_ms) < SERVER_TIME_REFRESH_MS {
                return Some((server_ms, sent_ms));
            }
        }
        let sent_ms = self.clock.monotonic_ms();
        let server_ms = self.backend.now_ms().await.ok()?;
        *self.server_time.lock() = Some((server_ms, sent_ms));
        Some((server_ms, sent_ms))
    }

    /// After a claim with `fingerprint` that the backend answered with the
    /// replay `response`: reads the record, and keeps it if it is that
    /// completion, until its expiry on the server's clock. A read that
    /// fails keeps nothing; the claim's answer stands.
    async fn fill_from_record(&self, scope: &[u8], key: &[u8], seen: u64, fingerprint: Fingerprint, response: &[u8]) {
        let Ok(Some(record)) = self.backend.get_in(Keyspace::Caller, scope, key).await else { return };
        let same = record.state == State::Completed && record.fingerprint == fingerprint && record.response == response;
        if !same {
            return;
        }
        let Some((server_ms, sent_ms)) = self.server_time().await else { return };
        let Some(left_ms) = record.deadline_ms.checked_sub(server_ms) else { return };
        self.fill(entry_name(scope, key), seen, fingerprint, response, sent_ms.saturating_add(left_ms));
    }

    /// Drops `name`'s entry when `record` (as just read) says another
    /// answer, state or nothing.
    fn check_read(&self, name: &[u8], record: Option<&Record>) {
        let Some(kept) = self.answers.peek(name) else { return };
        let agrees = record.is_some_and(|record| {
            record.state == State::Completed
                && record.fingerprint == kept.fingerprint
                && record.response == kept.response
        });
        if !agrees {
            self.forget(name);
        }
    }
}

/// A claim answered from memory, under the names the backends count a
/// replay by, labelled `backend = "near_cache"` (the backend behind never
/// saw it).
fn count_hit() {
    #[cfg(feature = "metrics")]
    for name in ["idempo_claims_total", "idempo_replay_total", "duplicate_detected_total"] {
        metrics::counter!(name, "backend" => "near_cache").increment(1);
    }
}

impl<B: IdempotencyBackend> NearCache<B> {
    /// A claim of the caller's keyspace: from memory if it can, else the
    /// backend's answer, which fills or drops the entry.
    async fn claim_caller(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Result<BackendClaim, Error> {
        let shared = &*self.shared;
        let limits = shared.backend.limits();
        check_durations(&limits, options)?;
        let name = entry_name(scope, key);
        if let Some(response) = shared.replayed(&name, fingerprint) {
            shared.hits.fetch_add(1, Ordering::Relaxed);
            count_hit();
            // An answer from memory is ready at once: a task that loops
            // over them would never give its thread back to the others
            // (the connections' own tasks among them). Take from the
            // task's budget as tokio's own resources do, yielding when it
            // is spent.
            tokio::task::coop::consume_budget().await;
            return Ok(BackendClaim::Replay(response));
        }
        shared.misses.fetch_add(1, Ordering::Relaxed);
        let seen = shared.generation(&name);
        let claimed = shared.backend.claim_in(Keyspace::Caller, scope, key, fingerprint, options).await?;
        match &claimed {
            BackendClaim::Acquired { token, .. } => {
                shared.forget(&name);
                let ttl_ms = options.ttl.map_or(duration_ms(limits.ttl_default), duration_ms);
                shared.claims.insert(claim_name(token), Claimed { fingerprint, ttl_ms });
            }
            BackendClaim::Replay(response) => shared.fill_from_record(scope, key, seen, fingerprint, response).await,
            BackendClaim::InProgress { .. } => shared.forget(&name),
            BackendClaim::Mismatch => {}
        }
        Ok(claimed)
    }

    /// A finishing call of a claim of the caller's keyspace: the entry
    /// dropped (a completion makes it anew when the claim was acquired
    /// here), the noted claim forgotten once the call is settled.
    async fn finish_caller<F, Fut>(&self, token: &LeaseToken, completion: Option<&[u8]>, call: F) -> Result<(), Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(), Error>>,
    {
        let shared = &*self.shared;
        let name = entry_name(&token.scope, &token.key);
        let claim = claim_name(token);
        let claimed = shared.claims.get(&claim);
        // Read before the call is made: the server writes the expiry later.
        let (seen, sent_ms) = (shared.generation(&name), shared.clock.monotonic_ms());
        let answer = call().await;
        match (&answer, completion, claimed) {
            (Ok(()), Some(response), Some(claimed)) => {
                let until_ms = sent_ms.saturating_add(claimed.ttl_ms);
                shared.fill(name, seen, claimed.fingerprint, response, until_ms);
            }
            _ => shared.forget(&name),
        }
        if matches!(answer, Ok(()) | Err(Error::LeaseLost { .. })) {
            shared.claims.remove(&claim);
        }
        answer
    }
}

impl<B: IdempotencyBackend> IdempotencyBackend for NearCache<B> {
    async fn claim_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        options: ClaimOptions,
    ) -> Result<BackendClaim, Error> {
        match keyspace {
            Keyspace::Caller => self.claim_caller(scope, key, fingerprint, options).await,
            _ => self.shared.backend.claim_in(keyspace, scope, key, fingerprint, options).await,
        }
    }

    async fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        let call = || self.shared.backend.complete(token, response);
        match token.keyspace {
            Keyspace::Caller => self.finish_caller(token, Some(response), call).await,
            _ => call().await,
        }
    }

    async fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        let call = || self.shared.backend.fail(token, response);
        match token.keyspace {
            Keyspace::Caller => self.finish_caller(token, None, call).await,
            _ => call().await,
        }
    }

    async fn release(&self, token: &LeaseToken) -> Result<(), Error> {
        let call = || self.shared.backend.release(token);
        match token.keyspace {
            Keyspace::Caller => self.finish_caller(token, None, call).await,
            _ => call().await,
        }
    }

    async fn checkpoint(&self, token: &LeaseToken, step: &str, payload: &[u8]) -> Result<(), Error> {
        self.shared.backend.checkpoint(token, step, payload).await
    }

    async fn renew(&self, token: &LeaseToken, extend: Duration) -> Result<(), Error> {
        self.shared.backend.renew(token, extend).await
    }

    async fn get_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Option<Record>, Error> {
        let record = self.shared.backend.get_in(keyspace, scope, key).await?;
        if keyspace == Keyspace::Caller {
            self.shared.check_read(&entry_name(scope, key), record.as_ref());
        }
        Ok(record)
    }

    async fn remove_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<bool, Error> {
        let removed = self.shared.backend.remove_in(keyspace, scope, key).await;
        if keyspace == Keyspace::Caller {
            self.shared.forget(&entry_name(scope, key));
        }
        removed
    }

    async fn replace_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> Result<bool, Error> {
        let replaced = self.shared.backend.replace_in(keyspace, scope, key, expected, answer).await;
        if keyspace == Keyspace::Caller {
            self.shared.forget(&entry_name(scope, key));
        }
        replaced
    }

    async fn scan_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Record>, Error> {
        self.shared.backend.scan_in(keyspace, scope, after, limit).await
    }

    async fn scan_staged(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>, Error> {
        self.shared.backend.scan_staged(scope, after, limit).await
    }

    fn limits(&self) -> BackendLimits {
        self.shared.backend.limits()
    }

    async fn now_ms(&self) -> Result<u64, Error> {
        self.shared.backend.now_ms().await
    }
}

#[cfg(test)]
mod tests {
    use super::{bounded, Answer, Arc, Fingerprint};

    fn answer(bytes: usize) -> Arc<Answer> {
        Arc::new(Answer { fingerprint: Fingerprint::of(b"r"), response: vec![0; bytes], until_ms: u64::MAX })
    }

    #[test]
    fn the_bounds_hold_in_entries_and_in_bytes() {
        for (entries_max, bytes_max) in [(4, 1 << 20), (1000, 1 << 30), (1000, 20_000), (0, 1 << 20), (7, 0)] {
            let cache = bounded::<Arc<Answer>>(entries_max, bytes_max);
            for n in 0..5000_u32 {
                cache.insert(n.to_le_bytes().to_vec(), answer(100));
            }
            let bytes: u64 = cache.iter().map(|(name, kept)| (name.len() + kept.response.len()) as u64 + 96).sum();
            assert!(cache.len() <= entries_max, "{} entries of {entries_max}", cache.len());
            assert!(bytes <= bytes_max, "{bytes} bytes of {bytes_max}");
        }
    }

    #[test]
    fn a_small_cache_keeps_what_it_may() {
        let cache = bounded::<Arc<Answer>>(4, 1 << 20);
        for n in 0..16_u32 {
            cache.insert(n.to_le_bytes().to_vec(), answer(100));
        }
        assert!((1..=4).contains(&cache.len()), "{} of 4 kept", cache.len());
    }

    #[test]
    fn a_large_cache_keeps_what_it_may() {
        let cache = bounded::<Arc<Answer>>(1000, 1 << 30);
        for n in 0..1000_u32 {
            cache.insert(n.to_le_bytes().to_vec(), answer(100));
        }
        assert!(cache.len() >= 900, "{} of 1000 kept", cache.len());
    }
}
