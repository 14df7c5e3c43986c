//! The store: a directory of shards behind one cheap, cloneable handle.

use crate::background::Worker;
use crate::claim::{Claim, ClaimRequest, LeaseToken, Record};
use crate::compaction::{choose, Action, CompactionReport, Policy};
use crate::config::{Config, Durability};
use crate::error::{Error, Result};
use crate::index::KeyHasher;
use crate::lease::Lease;
use crate::manifest::{self, Manifest};
use crate::recovery::recover_shard;
use crate::segment;
use crate::shard::{ClaimParams, Finish, Held, KeyRef, Outcome, Shard};
use crate::stats::Stats;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Indexed records by state, from [`Store::census`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Census {
    /// Processing (leases valid or not).
    pub processing: u64,
    /// Completed and not expired.
    pub completed: u64,
    /// Failed and not expired.
    pub failed: u64,
    /// Completed or Failed past their TTL, still on disk until compaction.
    pub expired: u64,
}

/// Shards of a new store when [`Config::shards`] is not set.
pub const DEFAULT_SHARDS: u32 = 4;

/// Name of the advisory lock file in a store directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// The longest a `claim_wait` sleeps between looks at the key, so that a
/// lease that ends by the clock (not by a finish) is noticed promptly.
const WAIT_POLL: Duration = Duration::from_millis(50);

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
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    config: Config,
    hasher: KeyHasher,
    shards: Box<[Shard]>,
    lock_file: Mutex<Option<File>>,
    /// Background threads (the interval flusher); stopped before close.
    workers: Mutex<Vec<Worker>>,
    /// One compaction pass at a time.
    compaction: Mutex<()>,
}

/// A borrowed `(scope, key, token)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenRef<'a> {
    pub scope: &'a [u8],
    pub key: &'a [u8],
    pub token: u64,
    /// What the lease holder knows of its record; `None` for a token from
    /// elsewhere, whose record is then read back and checked.
    pub held: Option<Held>,
}

impl Store {
    /// Opens the store in `dir`, creating it (and the directory) if new.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]; [`Error::NotAStore`] for a non-empty
    /// directory without a manifest; [`Error::Locked`] when another handle
    /// has it open; [`Error::ShardCountMismatch`];
    /// [`Error::UnsupportedFormatVersion`]; [`Error::Corruption`] naming
    /// file and offset of damage that is not a torn tail; I/O errors.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let storage = Arc::clone(&config.storage);
        storage.create_dir_all(&dir).map_err(|error| Error::io("create", &dir, error))?;
        refuse_foreign_directory(&*storage, &dir)?;
        let lock_file = lock_directory(&dir)?;
        let manifest = if let Some(manifest) = Manifest::load(&*storage, &dir)? {
            manifest
        } else {
            let manifest = Manifest::new(config.shards.unwrap_or(DEFAULT_SHARDS));
            manifest.store(&*storage, &dir)?;
            manifest
        };
        if let Some(configured) = config.shards.filter(|configured| *configured != manifest.shards) {
            return Err(Error::ShardCountMismatch { on_disk: manifest.shards, configured });
        }
        let hasher = KeyHasher::new(manifest.hash_key);
        let now_ms = config.clock.now_ms();
        let recovered = recover_shards(&*storage, &dir, manifest.shards, &hasher, now_ms)?;
        // One time floor for the whole store: the newest time any shard wrote.
        let floor_ms = recovered.iter().map(|shard| shard.max_updated_ms).fold(now_ms, u64::max);
        let mut shards = Vec::with_capacity(recovered.len());
        for (id, mut recovered) in (0..).zip(recovered) {
            let expired = recovered.settle_time(floor_ms);
            let shard_dir = segment::shard_dir(&dir, id);
            let shard = Shard::new(
                id,
                shard_dir,
                Arc::clone(&storage),
                Arc::clone(&config.clock),
                config.segment_bytes,
                recovered.state,
            );
            shard.counters.torn_tail_bytes_cut.store(recovered.torn_tail_bytes, Ordering::Relaxed);
            shard.counters.expirations.store(expired, Ordering::Relaxed);
            shards.push(shard);
        }
        storage.sync_dir(&dir).map_err(|error| Error::io("fsync", &dir, error))?;
        let store = Store {
            inner: Arc::new(Inner {
                dir,
                config,
                hasher,
                shards: shards.into_boxed_slice(),
                lock_file: Mutex::new(Some(lock_file)),
                workers: Mutex::new(Vec::new()),
                compaction: Mutex::new(()),
            }),
        };
        if let Durability::Interval(interval) = store.inner.config.durability {
            store.start_flusher(interval)?;
        }
        if let Some(interval) = store.inner.config.compaction_interval {
            store.start_compactor(interval)?;
        }
        Ok(store)
    }

    /// Starts the background compactor. Like the flusher it holds only a
    /// weak reference; an error of one pass (say a full disk) is retried at
    /// the next, and a failed fsync has already poisoned its shard.
    fn start_compactor(&self, interval: Duration) -> Result<()> {
        let weak = Arc::downgrade(&self.inner);
        let worker = Worker::spawn("idemkv-compact", interval, move || {
            let Some(inner) = weak.upgrade() else {
                return false;
            };
            let _retried_next_pass = Store { inner }.compact();
            true
        })
        .map_err(|error| Error::io("spawn compactor", &self.inner.dir, error))?;
        self.inner.workers.lock().push(worker);
        Ok(())
    }

    /// Starts the thread that fsyncs dirty shards every `interval`. It holds
    /// only a weak reference, so dropping the last handle ends it.
    fn start_flusher(&self, interval: Duration) -> Result<()> {
        let weak = Arc::downgrade(&self.inner);
        let worker = Worker::spawn("idemkv-flush", interval, move || {
            let Some(inner) = weak.upgrade() else {
                return false;
            };
            // A failed fsync poisons its shard, which then answers every
            // call with Error::Poisoned: the failure is not lost.
            let _latched = sync_dirty(&inner.shards);
            true
        })
        .map_err(|error| Error::io("spawn flusher", &self.inner.dir, error))?;
        self.inner.workers.lock().push(worker);
        Ok(())
    }

    /// Claims `(scope, key)` atomically: the answer is one row of the table
    /// in the crate docs.
    ///
    /// # Errors
    /// [`Error::KeyEmpty`], [`Error::KeyTooLong`], [`Error::ScopeTooLong`],
    /// [`Error::InvalidDuration`] for the request; [`Error::Closed`],
    /// [`Error::Poisoned`], [`Error::Corruption`] and I/O errors. An error
    /// changes nothing.
    pub fn claim(&self, request: &ClaimRequest<'_>) -> Result<Claim> {
        self.claim_traced(request).map(|(claim, _, _)| claim)
    }

    /// The claim answer, the index hash, and the LSN the answer rests on.
    fn claim_traced(&self, request: &ClaimRequest<'_>) -> Result<(Claim, u128, u64)> {
        self.check_key(request.scope, request.key)?;
        let params = ClaimParams {
            fingerprint: request.fingerprint,
            lease_ms: self.check_duration("lease", request.lease, self.inner.config.lease_ms)?,
            ttl_ms: self.check_duration("ttl", request.ttl, self.inner.config.ttl_ms)?,
        };
        let key = self.key_ref(request.scope, request.key);
        let shard = self.shard_of_hash(key.hash);
        let (outcome, lsn) = shard.claim(&key, &params)?;
        self.wait_durable(shard, lsn)?;
        let claim = match outcome {
            Outcome::Acquired { token, attempt, lease_deadline_ms, held } => Claim::Acquired(Lease {
                store: self.clone(),
                hash: key.hash,
                scope: request.scope.to_vec(),
                key: request.key.to_vec(),
                token,
                attempt,
                held,
                deadline_ms: lease_deadline_ms,
                finished: false,
            }),
            Outcome::Replay(record) => Claim::Replay(record),
            Outcome::InProgress { retry_after_ms, attempt } => {
                Claim::InProgress { retry_after: Duration::from_millis(retry_after_ms), attempt }
            }
            Outcome::Mismatch => Claim::Mismatch,
        };
        Ok((claim, key.hash, lsn))
    }

    /// Like [`claim`](Store::claim), but while the key is in progress it
    /// waits, up to `timeout`, for the holder to finish and then answers
    /// with the final state (HTTP `Prefer: wait`). After `timeout` it answers
    /// `InProgress`.
    ///
    /// # Errors
    /// As [`claim`](Store::claim).
    pub fn claim_wait(&self, request: &ClaimRequest<'_>, timeout: Duration) -> Result<Claim> {
        let start = Instant::now();
        loop {
            let (claim, hash, lsn) = self.claim_traced(request)?;
            let Claim::InProgress { retry_after, .. } = claim else {
                return Ok(claim);
            };
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Ok(claim);
            }
            let pause = timeout.saturating_sub(elapsed).min(retry_after).min(WAIT_POLL);
            self.shard_of_hash(hash).wait_finished(hash, lsn, pause);
        }
    }

    /// The live record of `(scope, key)`, `None` if absent or expired.
    ///
    /// # Errors
    /// [`Error::KeyEmpty`], [`Error::KeyTooLong`], [`Error::ScopeTooLong`];
    /// [`Error::Closed`], [`Error::Poisoned`], [`Error::Corruption`], I/O.
    pub fn get(&self, scope: &[u8], key: &[u8]) -> Result<Option<Record>> {
        self.check_key(scope, key)?;
        let key = self.key_ref(scope, key);
        let shard = self.shard_of_hash(key.hash);
        let Some((record, lsn)) = shard.get(key.hash, Some(&key))? else {
            return Ok(None);
        };
        self.wait_durable(shard, lsn)?;
        Ok(Some(record))
    }

    /// Removes `(scope, key)` whatever its state (an admin operation). A
    /// holder of the key then gets [`Error::LeaseLost`]. Returns whether a
    /// live record was removed.
    ///
    /// # Errors
    /// As [`get`](Store::get).
    pub fn remove(&self, scope: &[u8], key: &[u8]) -> Result<bool> {
        self.check_key(scope, key)?;
        let key = self.key_ref(scope, key);
        let shard = self.shard_of_hash(key.hash);
        let (removed, lsn) = shard.remove(&key)?;
        self.wait_durable(shard, lsn)?;
        Ok(removed)
    }

    /// Completes the lease `token` (see [`Lease::complete`]).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the token no longer holds the key;
    /// [`Error::ResponseTooLarge`]; the key errors of
    /// [`claim`](Store::claim); I/O errors.
    pub fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<()> {
        let token = Self::token_ref(token);
        self.check_key(token.scope, token.key)?;
        self.complete_hashed(self.inner.hasher.hash(token.scope, token.key), &token, response)
    }

    /// Fails the lease `token` with a replayed terminal response (see
    /// [`Lease::fail`]).
    ///
    /// # Errors
    /// As [`complete`](Store::complete).
    pub fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<()> {
        let token = Self::token_ref(token);
        self.check_key(token.scope, token.key)?;
        self.fail_hashed(self.inner.hasher.hash(token.scope, token.key), &token, response)
    }

    /// Releases the lease `token`: the key becomes absent (see
    /// [`Lease::release`]).
    ///
    /// # Errors
    /// As [`complete`](Store::complete).
    pub fn release(&self, token: &LeaseToken) -> Result<()> {
        let token = Self::token_ref(token);
        self.check_key(token.scope, token.key)?;
        self.release_hashed(self.inner.hasher.hash(token.scope, token.key), &token)
    }

    /// Renews the lease `token` so that it ends at least `extend` from now.
    /// Returns the new lease end in ms since the epoch.
    ///
    /// # Errors
    /// As [`complete`](Store::complete), and [`Error::InvalidDuration`].
    pub fn renew(&self, token: &LeaseToken, extend: Duration) -> Result<u64> {
        let token = Self::token_ref(token);
        self.check_key(token.scope, token.key)?;
        self.renew_hashed(self.inner.hasher.hash(token.scope, token.key), &token, extend)
    }

    /// Iterates over the live records of every shard (inspection; not a
    /// snapshot: records that change while it runs may or may not be seen).
    #[must_use]
    pub fn iter(&self) -> Iter<'_> {
        Iter { store: self, shard: 0, hashes: Vec::new().into_iter(), started: false }
    }

    /// Runs one compaction pass now: in every shard, sealed segments whose
    /// records have all expired or been superseded are deleted (oldest
    /// first), and those mostly dead are rewritten with only what must stay.
    /// Claims go on meanwhile; each shard's lock is held only for short
    /// batches. The background compactor (see
    /// [`Config::compaction_interval`]) calls the same.
    ///
    /// # Errors
    /// I/O errors (the pass stops; nothing is lost, a half-written file is
    /// deleted), [`Error::Corruption`] in a sealed segment, [`Error::Closed`],
    /// [`Error::Poisoned`].
    pub fn compact(&self) -> Result<CompactionReport> {
        let _one_at_a_time = self.inner.compaction.lock();
        let config = &self.inner.config;
        let policy = Policy { live_fraction_min: config.compaction_live_fraction, actions_max: 16 };
        let mut pacer = Pacer::new(config.compaction_bytes_per_second);
        let mut report = CompactionReport::default();
        for shard in &*self.inner.shards {
            let sealed = shard.sealed_views()?;
            for action in choose(&sealed, &policy) {
                let (Action::Drop(id) | Action::Rewrite(id)) = action;
                let bytes = shard.compact_segment(id, &self.inner.hasher, &mut report)?;
                pacer.pace(bytes);
            }
            shard.shrink_index();
        }
        let counters = &self.inner.shards[0].counters;
        counters.compaction_runs.fetch_add(1, Ordering::Relaxed);
        counters.compaction_bytes_reclaimed.fetch_add(report.bytes_reclaimed, Ordering::Relaxed);
        Ok(report)
    }

    /// Counts the indexed records by state, and those expired but not yet
    /// dropped. Walks the whole index (a shard at a time), so it is meant for
    /// inspection, not for every request; [`Store::stats`] is the cheap one.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::Poisoned`].
    pub fn census(&self) -> Result<Census> {
        let mut census = Census::default();
        for shard in &*self.inner.shards {
            shard.census(&mut census)?;
        }
        Ok(census)
    }

    /// Makes everything written so far durable (fsync of every shard).
    ///
    /// # Errors
    /// [`Error::Poisoned`] or the fsync's I/O error.
    pub fn sync(&self) -> Result<()> {
        sync_dirty(&self.inner.shards)
    }

    /// The counters since open.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for shard in &*self.inner.shards {
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
    /// everything durable and releases the directory lock. Dropping the last
    /// clone also releases the lock (without the final fsync).
    ///
    /// # Errors
    /// The first fsync error; the lock is released regardless.
    pub fn close(self) -> Result<()> {
        let workers = std::mem::take(&mut *self.inner.workers.lock());
        drop(workers);
        for shard in &*self.inner.shards {
            shard.close();
        }
        let synced = self.sync();
        self.inner.lock_file.lock().take();
        synced
    }

    /// The store directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The number of shards.
    #[must_use]
    pub fn shard_count(&self) -> u32 {
        u32::try_from(self.inner.shards.len()).unwrap_or(u32::MAX)
    }

    pub(crate) fn complete_hashed(&self, hash: u128, token: &TokenRef<'_>, response: &[u8]) -> Result<()> {
        self.check_response(response)?;
        self.finish(hash, token, Finish::Complete(response))
    }

    pub(crate) fn fail_hashed(&self, hash: u128, token: &TokenRef<'_>, response: &[u8]) -> Result<()> {
        self.check_response(response)?;
        self.finish(hash, token, Finish::Fail(response))
    }

    pub(crate) fn release_hashed(&self, hash: u128, token: &TokenRef<'_>) -> Result<()> {
        self.finish(hash, token, Finish::Release)
    }

    pub(crate) fn renew_hashed(&self, hash: u128, token: &TokenRef<'_>, extend: Duration) -> Result<u64> {
        let extend_ms = self.check_duration("renewal", Some(extend), 0)?;
        let key = KeyRef { hash, scope: token.scope, key: token.key };
        let shard = self.shard_of_hash(hash);
        let (deadline_ms, lsn) = shard.renew(&key, token.token, extend_ms, token.held.as_ref())?;
        self.wait_durable(shard, lsn)?;
        Ok(deadline_ms)
    }

    fn finish(&self, hash: u128, token: &TokenRef<'_>, finish: Finish<'_>) -> Result<()> {
        let key = KeyRef { hash, scope: token.scope, key: token.key };
        let shard = self.shard_of_hash(hash);
        let lsn = shard.finish(&key, token.token, finish, token.held.as_ref())?;
        self.wait_durable(shard, lsn)
    }

    pub(crate) fn shard_of_hash(&self, hash: u128) -> &Shard {
        // The top bits choose the shard; the index's hash map uses the low
        // 64, so the two stay independent.
        let top = usize::try_from(hash >> 96).expect("32 bits fit in usize");
        &self.inner.shards[top & (self.inner.shards.len() - 1)]
    }

    fn key_ref<'a>(&self, scope: &'a [u8], key: &'a [u8]) -> KeyRef<'a> {
        KeyRef { hash: self.inner.hasher.hash(scope, key), scope, key }
    }

    fn token_ref(token: &LeaseToken) -> TokenRef<'_> {
        TokenRef { scope: &token.scope, key: &token.key, token: token.token, held: None }
    }

    fn wait_durable(&self, shard: &Shard, lsn: u64) -> Result<()> {
        match self.inner.config.durability {
            Durability::Sync => shard.sync_to(lsn),
            Durability::Buffered | Durability::Interval(_) => Ok(()),
        }
    }

    fn check_key(&self, scope: &[u8], key: &[u8]) -> Result<()> {
        let config = &self.inner.config;
        if key.is_empty() {
            return Err(Error::KeyEmpty);
        }
        if key.len() > config.key_bytes_max {
            return Err(Error::KeyTooLong { len: key.len(), max: config.key_bytes_max });
        }
        if scope.len() > config.scope_bytes_max {
            return Err(Error::ScopeTooLong { len: scope.len(), max: config.scope_bytes_max });
        }
        Ok(())
    }

    fn check_response(&self, response: &[u8]) -> Result<()> {
        let max = self.inner.config.response_bytes_max;
        if response.len() > max {
            return Err(Error::ResponseTooLarge { len: response.len(), max });
        }
        Ok(())
    }

    fn check_duration(&self, what: &'static str, duration: Option<Duration>, default_ms: u64) -> Result<u64> {
        let Some(duration) = duration else {
            return Ok(default_ms);
        };
        if duration.is_zero() {
            return Err(Error::InvalidDuration { what, reason: "must not be zero" });
        }
        let ms = crate::clock::duration_ms(duration);
        if ms > self.inner.config.duration_ms_max {
            return Err(Error::InvalidDuration { what, reason: "longer than the configured duration_max" });
        }
        Ok(ms)
    }
}

/// Rebuilds every shard, on as many threads as there are cores (shards are
/// independent), and returns them in shard order.
fn recover_shards(
    storage: &dyn crate::io::Storage,
    dir: &Path,
    shards: u32,
    hasher: &KeyHasher,
    now_ms: u64,
) -> Result<Vec<crate::recovery::Recovered>> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(shards as usize);
    let next = std::sync::atomic::AtomicU32::new(0);
    let mut results: Vec<(u32, Result<crate::recovery::Recovered>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        if id >= shards {
                            return done;
                        }
                        done.push((id, recover_shard(storage, &segment::shard_dir(dir, id), id, hasher, now_ms)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    results.sort_by_key(|(id, _)| *id);
    results.into_iter().map(|(_, recovered)| recovered).collect()
}

/// Keeps compaction I/O under a byte rate by sleeping when ahead of it.
struct Pacer {
    bytes_per_second: u64,
    started: Instant,
    bytes: u64,
}

impl Pacer {
    fn new(bytes_per_second: u64) -> Self {
        Pacer { bytes_per_second, started: Instant::now(), bytes: 0 }
    }

    fn pace(&mut self, bytes: u64) {
        if self.bytes_per_second == 0 {
            return;
        }
        self.bytes += bytes;
        #[expect(clippy::cast_precision_loss, reason = "a pacing delay needs no exact byte count")]
        let due = Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_second as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

/// Syncs every shard with unsynced records, all in one round: the fsyncs of
/// different shard files run at the same time, not one after another.
fn sync_dirty(shards: &[Shard]) -> Result<()> {
    let dirty: Vec<&Shard> = shards.iter().filter(|shard| shard.is_dirty()).collect();
    match dirty.as_slice() {
        [] => Ok(()),
        [only] => only.sync_all(),
        _ => std::thread::scope(|scope| {
            let running: Vec<_> = dirty.iter().map(|shard| scope.spawn(|| shard.sync_all())).collect();
            running
                .into_iter()
                .try_for_each(|handle| handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        }),
    }
}

/// A directory that holds files but no manifest belongs to something else:
/// never write into it. A crash during creation can leave only the lock file
/// and a temporary manifest, which count as empty.
fn refuse_foreign_directory(storage: &dyn crate::io::Storage, dir: &Path) -> Result<()> {
    if storage.open(&dir.join(manifest::FILE_NAME), false).is_ok() {
        return Ok(());
    }
    let entries = storage.read_dir(dir).map_err(|error| Error::io("list", dir, error))?;
    let foreign = entries.iter().any(|path| {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
        name != LOCK_FILE_NAME && name != manifest::TEMP_NAME
    });
    if foreign {
        return Err(Error::NotAStore { path: dir.to_path_buf() });
    }
    Ok(())
}

/// Takes the advisory lock that keeps a second open (in this process or
/// another) out of the directory.
fn lock_directory(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE_NAME);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|error| Error::io("open", &path, error))?;
    match file.try_lock() {
        Ok(()) => {
            // The holder's process id, for the message of a refused open.
            let pid = std::process::id().to_string();
            file.set_len(0)
                .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0))
                .map_err(|error| Error::io("write", &path, error))?;
            Ok(file)
        }
        Err(TryLockError::WouldBlock) => {
            let holder_pid = std::fs::read_to_string(&path).ok().and_then(|text| text.trim().parse().ok());
            Err(Error::Locked { path, holder_pid })
        }
        Err(TryLockError::Error(error)) => Err(Error::io("lock", path, error)),
    }
}

impl<'a> IntoIterator for &'a Store {
    type Item = Result<Record>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over live records, from [`Store::iter`].
#[derive(Debug)]
pub struct Iter<'a> {
    store: &'a Store,
    shard: usize,
    hashes: std::vec::IntoIter<u128>,
    started: bool,
}

impl Iterator for Iter<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        let shards = &self.store.inner.shards;
        loop {
            if let Some(hash) = self.hashes.next() {
                match shards[self.shard].get(hash, None) {
                    Ok(Some((record, _))) => return Some(Ok(record)),
                    Ok(None) => continue,
                    Err(error) => return Some(Err(error)),
                }
            }
            if self.started {
                self.shard += 1;
            }
            self.started = true;
            let shard = shards.get(self.shard)?;
            match shard.hashes() {
                Ok(hashes) => self.hashes = hashes.into_iter(),
                Err(error) => {
                    self.shard = shards.len();
                    return Some(Err(error));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_holds_compaction_to_its_byte_rate() {
        // 1 MiB/s: 64 KiB is due after 62.5 ms at the earliest. Only the
        // lower bound is checked: sleeping is never shorter than asked.
        let mut pacer = Pacer::new(1 << 20);
        let started = Instant::now();
        pacer.pace(64 << 10);
        assert!(started.elapsed() >= Duration::from_millis(62));
        let mut unlimited = Pacer::new(0);
        let started = Instant::now();
        unlimited.pace(u64::MAX);
        assert!(started.elapsed() < Duration::from_secs(1), "0 means no limit");
    }
}
