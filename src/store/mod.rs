//! The embedded store: a directory of shards behind one cheap, cloneable
//! [`Store`] handle, and what a user reads from it or does to its
//! directory — its records ([`Iter`]), its counters and census
//! ([`Stats`], [`Census`]), quotas ([`Quota`], [`ScopeUsage`]),
//! compaction ([`CompactionReport`]), and the offline tools, [`verify`]
//! and [`repair`].
//!
//! ```
//! use idemkv::store::{verify, Store};
//! use idemkv::{Claim, ClaimRequest, Config, Fingerprint};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path(), Config::new())?;
//! let Claim::Acquired(lease) = store.claim(&ClaimRequest::new("k-1", Fingerprint::of(b"POST /x")))? else {
//!     unreachable!()
//! };
//! lease.complete(b"201")?;
//! assert_eq!(store.stats().completions, 1);
//! store.close()?;
//! assert!(verify(dir.path())?.is_clean());
//! # Ok(()) }
//! ```
//!
//! Opening lives in `engine::open`, the engine the handles share in
//! `engine`, durability rounds in `engine::sync`, compaction passes in
//! `engine::compactor`. The rest of `Store` is in this folder: `iter` (its
//! records), `read_only` (read-only handles), `usage` (what a scope holds
//! of its quota), `wait` (its side of the claim-and-wait loop),
//! `asynchronous` (the async calls, feature `tokio`).

#[cfg(feature = "tokio")]
mod asynchronous;
pub(crate) mod iter;
mod once;
mod read_only;
mod usage;
mod wait;

use crate::claim::{Claim, ClaimRequest};
use crate::config::{Config, Durability};
use crate::engine::compactor;
use crate::engine::open;
use crate::engine::shard::{self, Tally};
use crate::engine::sync::{self, sync_dirty};
use crate::engine::telemetry::ClaimStart;
use crate::engine::transition::Finish;
use crate::engine::{Engine, TokenRef};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::lease::{Lease, LeaseToken};
use crate::record::{Record, RecordRef};
pub use crate::store::iter::Iter;
#[cfg(feature = "tokio")]
pub(crate) use crate::store::once::renewal_period;
pub use crate::store::once::{Once, Outcome};

pub use crate::checkpoint::STEP_BYTES_MAX;
pub use crate::config::DEFAULT_SHARDS;
pub use crate::engine::repair::{repair, DroppedRecord, Evidence, RepairReport};
pub use crate::engine::verify::{verify, Damage, IgnoredHint, VerifyReport};
pub use crate::error::QuotaLimit;
pub use crate::format::{FormatVersion, LOCK_FILE_NAME};
pub use crate::quota::{Quota, ScopeUsage};
pub use crate::stats::{Census, CompactionReport, Stats};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// An open idempotency store. Cheap to clone; all clones share the same
/// shards. `Send + Sync`: use it from as many threads as you like.
///
/// # Examples
///
/// ```
/// use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), Config::new())?;
/// let fingerprint = Fingerprint::builder().part(b"POST").part(b"/payments").part(b"amount=10").finish();
/// let request = ClaimRequest::new("key-1", fingerprint).scope("tenant-a");
///
/// match store.claim(&request)? {
///     Claim::Acquired(lease) => lease.complete(b"201 charged")?,
///     other => panic!("a new key is acquired, got {other:?}"),
/// }
/// // A retry gets the first answer back.
/// let Claim::Replay(record) = store.claim(&request)? else { panic!("not a replay") };
/// assert_eq!(record.response, b"201 charged");
/// // The same key with another request is refused.
/// let other = ClaimRequest::new("key-1", Fingerprint::of(b"something else")).scope("tenant-a");
/// assert!(matches!(store.claim(&other)?, Claim::Mismatch));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Store {
    engine: Arc<Engine>,
}

impl Clone for Store {
    fn clone(&self) -> Self {
        Store::handle(Arc::clone(&self.engine))
    }
}

impl Drop for Store {
    /// The last handle stops the background threads before it lets go of
    /// the engine: a compaction step in flight holds the engine, and would
    /// otherwise keep the directory locked after this drop returned, so an
    /// open right after it would be refused.
    fn drop(&mut self) {
        if self.engine.handles.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.engine.stop_workers();
        }
    }
}

impl Store {
    /// Opens the store in `dir`, creating it (and the directory) if new.
    ///
    /// Each shard's index is rebuilt segment by segment: from the segment's
    /// hint file where one matches it (see `docs/format.md`), and from the
    /// log after what the hint covers, or all of it; a hint that is missing,
    /// damaged or stale only costs that replay ([`Stats::hints_ignored`]),
    /// and this open writes it again.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]; [`Error::NotAStore`] for a non-empty
    /// directory without a manifest; [`Error::Locked`] when another handle
    /// has it open (a writer, or read-only handles from
    /// [`Store::open_read_only`]); [`Error::ShardCountMismatch`];
    /// [`Error::UnsupportedFormatVersion`]; [`Error::Corruption`] naming
    /// file and offset of damage that is not a torn tail, in the frames
    /// this open reads (those a hint covers are checked when read, and by
    /// [`crate::store::verify`]); I/O errors.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        let dir = dir.as_ref();
        // A refusal says what `idemkv repair` would do about it.
        let engine = Arc::new(open::open(dir, config).map_err(|error| crate::engine::repair::advise(error, dir))?);
        if let Durability::Interval(interval) = engine.config.durability {
            sync::start_flusher(&engine, interval)?;
        }
        if let Some(interval) = engine.config.compaction_interval {
            compactor::start_compactor(&engine, interval)?;
        }
        Ok(Store::handle(engine))
    }

    /// Claims `(scope, key)` atomically: the answer is one row of the table
    /// in the crate docs.
    ///
    /// # Errors
    /// [`Error::KeyEmpty`], [`Error::KeyTooLong`], [`Error::ScopeTooLong`],
    /// [`Error::InvalidDuration`] for the request; [`Error::ReadOnly`],
    /// [`Error::Closed`], [`Error::Poisoned`], [`Error::Corruption`] and I/O
    /// errors. An error changes nothing.
    pub fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim> {
        self.claim_with(request, |record| record.to_record())
    }

    /// [`Store::claim`], with a replay answered by `replay` run on the
    /// stored record where it lies ([`RecordRef`]: borrowed from the
    /// segment's map, under the shard's shared lock), so that a caller who
    /// needs only the response, or only its length, copies nothing else.
    /// `replay` runs at most once, before the answer waits for durability
    /// (under [`Durability::Sync`]): the claim returns only after that, as
    /// [`Store::claim`] does. Keep it short: writers of the key's shard
    /// wait for it.
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
    ///
    /// # fn main() -> idemkv::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new())?;
    /// let request = ClaimRequest::new(b"order-7", Fingerprint::of(b"POST /orders"));
    /// let Claim::Acquired(lease) = store.claim(&request)? else { unreachable!() };
    /// lease.complete(b"201 created")?;
    ///
    /// let mut reply = Vec::new();
    /// let Claim::Replay(len) = store.claim_with(&request, |record| {
    ///     reply.extend_from_slice(record.response());
    ///     record.response().len()
    /// })?
    /// else {
    ///     unreachable!()
    /// };
    /// assert_eq!((len, &reply[..]), (11, &b"201 created"[..]));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Store::claim`].
    pub fn claim_with<R>(
        &self,
        request: &ClaimRequest<'_>,
        replay: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Claim<R>> {
        let started = ClaimStart::now();
        let (claim, hash, lsn) = self.claim_unsynced_with(request, Tally::Answer, replay)?;
        self.engine.wait_durable(hash, lsn)?;
        self.claim_timed(&claim, hash, started);
        Ok(claim)
    }

    /// One look at the key for a claim, counted as `tally` says, durable
    /// as the configuration asks; with the key's index hash.
    fn look(&self, request: &ClaimRequest<'_>, tally: Tally) -> Result<(Claim, u128)> {
        let (claim, hash, lsn) = self.claim_unsynced(request, tally)?;
        self.engine.wait_durable(hash, lsn)?;
        Ok((claim, hash))
    }

    /// Counts the answer a waiting claim ends on, once: an in-progress one
    /// (its looks in progress were not counted), and its latency from the
    /// call, the wait included.
    pub(crate) fn wait_answered(&self, claim: &Claim, hash: u128, started: Option<ClaimStart>) {
        if matches!(claim, Claim::InProgress { .. }) {
            self.engine.shard_of_hash(hash).count_in_progress();
        }
        self.claim_timed(claim, hash, started);
    }

    /// Records how long a claim took, by outcome, when claims are timed.
    pub(crate) fn claim_timed<R>(&self, claim: &Claim<R>, hash: u128, started: Option<ClaimStart>) {
        if let Some(started) = started {
            let outcome = match claim {
                Claim::Acquired(lease) => usize::from(lease.recovered()),
                Claim::Replay(_) => 2,
                Claim::InProgress { .. } => 3,
                Claim::Mismatch => 4,
            };
            self.engine.shard_of_hash(hash).counters.claim_times.record(outcome, started);
        }
    }

    /// The claim answer, the index hash, and the LSN the answer rests on,
    /// which the caller must wait to be durable before answering. An
    /// acquired lease is built at once, so that a caller that gives up
    /// before that (an error, a dropped future) counts it as abandoned.
    pub(crate) fn claim_unsynced(&self, request: &ClaimRequest<'_>, tally: Tally) -> Result<(Claim, u128, u64)> {
        self.claim_unsynced_with(request, tally, |record| record.to_record())
    }

    /// [`Store::claim_unsynced`] with a replay answered by `replay`.
    pub(super) fn claim_unsynced_with<R>(
        &self,
        request: &ClaimRequest<'_>,
        tally: Tally,
        replay: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<(Claim<R>, u128, u64)> {
        let claimed = self.engine.claim(
            (request.keyspace, request.scope, request.key),
            request.fingerprint,
            (request.lease, request.ttl),
            request.reuse,
            tally,
            replay,
        )?;
        let claim = match claimed.outcome {
            shard::Outcome::Acquired { token, lease_deadline_ms, held, checkpoint } => Claim::Acquired(Lease::new(
                Arc::clone(&self.engine),
                claimed.hash,
                (request.keyspace, request.scope, request.key),
                token,
                held,
                lease_deadline_ms,
                checkpoint,
            )),
            shard::Outcome::Replay(record) => Claim::Replay(record),
            shard::Outcome::InProgress { retry_after_ms, attempt } => {
                Claim::InProgress { retry_after: Duration::from_millis(retry_after_ms), attempt }
            }
            shard::Outcome::Mismatch => Claim::Mismatch,
        };
        Ok((claim, claimed.hash, claimed.lsn))
    }

    /// The live record of `(scope, key)`, `None` if absent or expired.
    /// Under [`Durability::Sync`] the answer, `None` included, waits until
    /// what it rests on is durable (for `None`, everything the shard has
    /// written: the tombstone that made the key absent may be that new).
    ///
    /// # Errors
    /// [`Error::KeyEmpty`], [`Error::KeyTooLong`], [`Error::ScopeTooLong`];
    /// [`Error::Closed`], [`Error::Poisoned`], [`Error::Corruption`], I/O.
    pub fn get(&self, scope: &[u8], key: &[u8]) -> Result<Option<Record>> {
        self.get_in(Keyspace::Caller, scope, key)
    }

    /// [`get`](Store::get) of a record of `keyspace` (see
    /// [`Keyspace`]): the tools' view of idemkv's own records.
    ///
    /// # Errors
    /// As [`get`](Store::get).
    pub fn get_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Option<Record>> {
        self.write_get(keyspace, scope, key)?.wait(&self.engine)
    }

    /// Removes `(scope, key)` whatever its state (an admin operation). A
    /// holder of the key then gets [`Error::LeaseLost`]. Returns whether a
    /// live record was removed; under [`Durability::Sync`] either answer
    /// waits for durability, as [`get`](Store::get) does.
    ///
    /// # Errors
    /// As [`get`](Store::get), and [`Error::ReadOnly`].
    pub fn remove(&self, scope: &[u8], key: &[u8]) -> Result<bool> {
        self.remove_in(Keyspace::Caller, scope, key)
    }

    /// [`remove`](Store::remove) of a record of `keyspace`.
    ///
    /// # Errors
    /// As [`remove`](Store::remove).
    pub fn remove_in(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<bool> {
        self.write_remove(keyspace, scope, key)?.wait(&self.engine)
    }

    /// Replaces the answer of `(scope, key)`'s Completed record with
    /// `answer` if it is `expected` (see
    /// `IdempotencyBackend::replace`):
    /// one record, as durable as any other under the store's
    /// [`Durability`]. Returns whether it replaced.
    ///
    /// # Errors
    /// The key errors of [`claim`](Store::claim);
    /// [`Error::ResponseTooLarge`]; [`Error::ReadOnly`]; I/O errors.
    pub fn replace(&self, scope: &[u8], key: &[u8], expected: &[u8], answer: &[u8]) -> Result<bool> {
        self.replace_in(Keyspace::Caller, scope, key, expected, answer)
    }

    /// [`replace`](Store::replace) of a record of `keyspace`.
    ///
    /// # Errors
    /// As [`replace`](Store::replace).
    pub fn replace_in(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> Result<bool> {
        self.write_replace(keyspace, scope, key, expected, answer)?.wait(&self.engine)
    }

    /// Completes the lease `token` (see [`Lease::complete`]).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the token no longer holds the key;
    /// [`Error::ResponseTooLarge`]; the key errors of
    /// [`claim`](Store::claim); [`Error::ReadOnly`]; I/O errors.
    pub fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<()> {
        self.write_finish(token, Finish::Complete(response))?.wait(&self.engine)
    }

    /// Fails the lease `token` with a replayed terminal response (see
    /// [`Lease::fail`]).
    ///
    /// # Errors
    /// As [`complete`](Store::complete).
    pub fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<()> {
        self.write_finish(token, Finish::Fail(response))?.wait(&self.engine)
    }

    /// Releases the lease `token`: the key becomes absent (see
    /// [`Lease::release`]).
    ///
    /// # Errors
    /// As [`complete`](Store::complete).
    pub fn release(&self, token: &LeaseToken) -> Result<()> {
        self.write_finish(token, Finish::Release)?.wait(&self.engine)
    }

    /// Renews the lease `token` so that it ends at least `extend` of elapsed
    /// time from now. Returns the new lease end in wall-clock ms since the
    /// epoch (see [`Lease::deadline_ms`]).
    ///
    /// # Errors
    /// As [`complete`](Store::complete), and [`Error::InvalidDuration`].
    pub fn renew(&self, token: &LeaseToken, extend: Duration) -> Result<u64> {
        self.write_renew(token, extend)?.wait(&self.engine)
    }

    /// Stores a checkpoint for the lease `token` (see
    /// [`Lease::checkpoint`]).
    ///
    /// # Errors
    /// As [`Lease::checkpoint`].
    pub fn checkpoint(&self, token: &LeaseToken, step: &str, payload: &[u8]) -> Result<()> {
        self.write_checkpoint(token, step, payload)?.wait(&self.engine)
    }

    /// Iterates over the live records of every shard (inspection; not a
    /// snapshot: records that change while it runs may or may not be seen).
    /// Each shard's scopes and keys are read from its records in one pass
    /// under the shard's shared lock, which its writers wait for.
    #[must_use]
    pub fn iter(&self) -> Iter<'_> {
        Iter::new(&self.engine.shards, self.engine.hasher)
    }

    /// Runs one compaction pass now: in every shard, Processing records
    /// abandoned past their lease end + TTL leave the index, then sealed
    /// segments whose records have all expired or been superseded are
    /// deleted (oldest first), and those mostly dead are rewritten with only
    /// what must stay. Claims go on meanwhile; each shard's lock is held
    /// only for short batches. The background compactor (see
    /// [`Config::compaction_interval`]) calls the same.
    ///
    /// # Errors
    /// I/O errors (the pass stops; nothing is lost, a half-written file is
    /// deleted), [`Error::Corruption`] in a sealed segment, [`Error::Closed`]
    /// (also when [`close`](Store::close) cuts the pass short),
    /// [`Error::Poisoned`], [`Error::ReadOnly`].
    pub fn compact(&self) -> Result<CompactionReport> {
        self.engine.refuse_if_read_only("compact")?;
        compactor::compact(&self.engine)
    }

    /// Counts the indexed records by state, and those expired but not yet
    /// dropped. Reads every record's header (a shard at a time, under its
    /// shared lock), so it is meant for inspection, not for every request;
    /// [`Store::stats`] is the cheap one.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::Poisoned`].
    pub fn census(&self) -> Result<Census> {
        let mut census = Census::default();
        for shard in &*self.engine.shards {
            shard.census(&mut census)?;
        }
        Ok(census)
    }

    /// Makes everything written so far durable (fsync of every shard).
    ///
    /// # Errors
    /// [`Error::Poisoned`] or the fsync's I/O error.
    pub fn sync(&self) -> Result<()> {
        sync_dirty(&self.engine.shards)
    }

    /// The counters since open.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for shard in &*self.engine.shards {
            shard.counters.add_to(&mut stats);
            let footprint = shard.footprint();
            stats.live_records += footprint.records;
            stats.live_bytes += footprint.live_bytes;
            stats.disk_bytes += footprint.disk_bytes;
            stats.segments += footprint.segments;
        }
        stats
    }

    /// Closes the store: refuses further calls on every clone, makes
    /// everything durable, writes the hint file of each shard's active
    /// segment (so that the next open reads only what is written after it)
    /// and releases the directory lock. Dropping the last clone also
    /// releases the lock, without the final fsync (and writes the hint of a
    /// shard only if all its writes were already durable); both first wait
    /// for the fsyncs that async callers under
    /// [`Durability::Sync`] already wait for. A compaction
    /// pass in progress is cut short (it waits for the segment being
    /// rewritten, never for the pacer of
    /// [`Config::compaction_bytes_per_second`]), and answers
    /// [`Error::Closed`]; so does every call waiting in
    /// [`claim_wait`](Store::claim_wait), woken by the close.
    ///
    /// # Errors
    /// The first fsync error; the lock is released regardless.
    pub fn close(self) -> Result<()> {
        self.engine.stop_workers();
        for shard in &*self.engine.shards {
            shard.close(!self.engine.read_only);
            // Callers parked in `claim_wait` look again and get `Closed`.
            shard.waiters.wake_all();
        }
        let synced = self.sync();
        if synced.is_ok() && !self.engine.read_only {
            for shard in &*self.engine.shards {
                shard.write_active_hint();
            }
        }
        self.engine.lock_file.lock().take();
        synced
    }

    /// The store directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.engine.dir
    }

    /// The number of shards.
    #[must_use]
    pub fn shard_count(&self) -> u32 {
        u32::try_from(self.engine.shards.len()).unwrap_or(u32::MAX)
    }

    /// The configuration the store was opened with.
    #[cfg(feature = "tokio")]
    pub(crate) fn config(&self) -> &Config {
        &self.engine.config
    }

    /// The engine this handle shares.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// A handle on an engine just opened.
    pub(crate) fn from_engine(engine: Engine) -> Store {
        Store::handle(Arc::new(engine))
    }

    /// One more handle on `engine`.
    fn handle(engine: Arc<Engine>) -> Store {
        engine.handles.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Store { engine }
    }

    /// A lease token's key, checked against the limits, and its hash.
    pub(crate) fn token_ref<'a>(&self, token: &'a LeaseToken) -> Result<(u128, TokenRef<'a>)> {
        let key = self.engine.key_ref(token.keyspace, &token.scope, &token.key)?;
        let token = TokenRef { keyspace: key.keyspace, scope: key.scope, key: key.key, token: token.token, held: None };
        Ok((key.hash, token))
    }

    // The writes of the calls by key and by token, before the durability
    // wait that each face (blocking, async) adds.

    pub(crate) fn write_get(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Unsynced<Option<Record>>> {
        let key = self.engine.key_ref(keyspace, scope, key)?;
        // Under `Sync` an absent answer waits too: the tombstone that made
        // the key absent may not be durable yet.
        let (record, lsn) = self.engine.shard_of_hash(key.hash).get(&key)?;
        Ok(Unsynced { hash: key.hash, lsn, answer: record })
    }

    pub(crate) fn write_remove(&self, keyspace: Keyspace, scope: &[u8], key: &[u8]) -> Result<Unsynced<bool>> {
        self.engine.refuse_if_read_only("remove")?;
        let key = self.engine.key_ref(keyspace, scope, key)?;
        let (removed, lsn) = self.engine.shard_of_hash(key.hash).remove(&key)?;
        Ok(Unsynced { hash: key.hash, lsn, answer: removed })
    }

    pub(crate) fn write_replace(
        &self,
        keyspace: Keyspace,
        scope: &[u8],
        key: &[u8],
        expected: &[u8],
        answer: &[u8],
    ) -> Result<Unsynced<bool>> {
        self.engine.refuse_if_read_only("replace")?;
        let key = self.engine.key_ref(keyspace, scope, key)?;
        self.engine.config.check_response(answer)?;
        let (replaced, lsn) = self.engine.shard_of_hash(key.hash).replace(&key, expected, answer)?;
        Ok(Unsynced { hash: key.hash, lsn, answer: replaced })
    }

    pub(crate) fn write_finish(&self, token: &LeaseToken, finish: Finish<'_>) -> Result<Unsynced<()>> {
        let (hash, token) = self.token_ref(token)?;
        let lsn = self.engine.finish(hash, &token, finish)?;
        Ok(Unsynced { hash, lsn, answer: () })
    }

    pub(crate) fn write_renew(&self, token: &LeaseToken, extend: Duration) -> Result<Unsynced<u64>> {
        let (hash, token) = self.token_ref(token)?;
        let (deadline_ms, lsn) = self.engine.renew(hash, &token, extend)?;
        Ok(Unsynced { hash, lsn, answer: deadline_ms })
    }

    pub(crate) fn write_checkpoint(&self, token: &LeaseToken, step: &str, payload: &[u8]) -> Result<Unsynced<()>> {
        let (hash, token) = self.token_ref(token)?;
        let lsn = self.engine.checkpoint(hash, &token, step, payload)?;
        Ok(Unsynced { hash, lsn, answer: () })
    }
}

/// The answer of a call whose record is written, and the LSN it rests on:
/// under [`Durability::Sync`] it is answered once that is durable.
#[must_use = "the answer is given once its record is durable"]
pub(crate) struct Unsynced<T> {
    hash: u128,
    lsn: u64,
    answer: T,
}

impl<T> Unsynced<T> {
    /// The answer, once durable, blocking the thread.
    pub(crate) fn wait(self, engine: &Engine) -> Result<T> {
        engine.wait_durable(self.hash, self.lsn)?;
        Ok(self.answer)
    }

    /// The answer, once durable, awaited (no thread is blocked).
    #[cfg(feature = "tokio")]
    pub(crate) async fn wait_async(self, engine: &Arc<Engine>) -> Result<T> {
        engine.wait_durable_async(self.hash, self.lsn).await?;
        Ok(self.answer)
    }
}

impl<'a> IntoIterator for &'a Store {
    type Item = Result<Record>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}
