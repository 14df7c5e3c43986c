//! The engine behind every handle: the open shards of one store directory,
//! and the calls addressed by key hash that both [`crate::Store`] and
//! [`crate::Lease`] make. Input is checked here against the configured
//! limits. A call writes its record and returns the LSN its answer rests
//! on; the caller then waits for durability as the configuration asks,
//! blocking ([`Engine::wait_durable`]) or async
//! ([`Engine::wait_durable_async`], where only the fsync itself takes a
//! thread).

pub(crate) mod background;
pub(crate) mod compaction_policy;
pub(crate) mod compactor;
pub(crate) mod entry;
pub(crate) mod frame;
pub(crate) mod index;
pub(crate) mod ledger;
pub(crate) mod manifest;
pub(crate) mod migrate;
pub(crate) mod open;
pub(crate) mod recovery;
pub(crate) mod repair;
pub(crate) mod segment;
pub(crate) mod shard;
pub(crate) mod sync;
pub(crate) mod telemetry;
pub(crate) mod transition;
pub(crate) mod verify;
pub(crate) mod waiters;

use crate::checkpoint;
use crate::config::{Config, Durability};
use crate::engine::background::{Stop, Worker};
use crate::engine::entry::KeyHasher;
use crate::engine::ledger::Ledger;
use crate::engine::shard::{KeyRef, Outcome, Shard, Tally};
use crate::engine::transition::{ClaimParams, Finish, Held};
use crate::engine::waiters::{WaitLimits, Waiter};
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::keyspace::Keyspace;
use crate::record::RecordRef;
use crate::record::ReusePolicy;
use parking_lot::Mutex;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One open store directory.
#[derive(Debug)]
pub(crate) struct Engine {
    pub dir: PathBuf,
    pub config: Config,
    pub hasher: KeyHasher,
    pub shards: Box<[Shard]>,
    /// The directory lock; `None` once closed.
    pub lock_file: Mutex<Option<DirLock>>,
    /// Background threads (flusher, compactor); stopped before close, and
    /// when the last [`Store`](crate::Store) handle is dropped.
    pub workers: Mutex<Vec<Worker>>,
    /// Live [`Store`](crate::Store) handles (leases hold the engine, not a
    /// handle).
    pub handles: std::sync::atomic::AtomicUsize,
    /// Set by close and when the engine is dropped: wakes the background
    /// threads and cuts compaction's pacing sleeps short.
    pub stop: Arc<Stop>,
    /// One compaction step (one segment) at a time.
    pub compaction: Mutex<()>,
    /// Caps on callers waiting in `claim_wait`.
    pub wait_limits: WaitLimits,
    /// Opened with `Store::open_read_only`: every call that would write is
    /// refused, and nothing waits for durability.
    pub read_only: bool,
    /// Bytes of torn tail found at open (cut, or for a read-only open left
    /// on disk and ignored).
    pub torn_tail_bytes: u64,
    /// The per-scope quota ledger, `None` when no quota is configured.
    pub quota: Option<Arc<Ledger>>,
}

impl Engine {
    /// Stops the background threads and waits for each to end its step:
    /// a step holds the engine for its length, so after this the caller's
    /// reference is the last but for leases, and dropping it releases the
    /// directory at once.
    pub fn stop_workers(&self) {
        self.stop.stop();
        let workers = std::mem::take(&mut *self.workers.lock());
        drop(workers);
        self.stop_flushers();
    }

    /// Stops each shard's flusher (async waiters' fsyncs), after the
    /// batches its waiters wait for; a later async waiter runs its own.
    fn stop_flushers(&self) {
        for shard in &*self.shards {
            shard.stop_flusher();
        }
    }
}

impl Drop for Engine {
    /// The last handle dropped without `close`: each shard whose writes are
    /// all durable still gets the hint of its active segment (the lock is
    /// released after this, with the other fields).
    fn drop(&mut self) {
        // A flusher holds its shard's group commit, not the engine: one
        // still running would hold the shard's file open after this.
        self.stop_flushers();
        if !self.read_only && self.lock_file.get_mut().is_some() {
            for shard in &*self.shards {
                shard.write_active_hint();
            }
        }
    }
}

/// A directory's advisory lock, held for as long as this lives. This
/// process's held locks are also listed, so that an open can tell a lock
/// held by one of them from one a starting child process still shares.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: std::fs::File,
    path: PathBuf,
}

/// Lock files this process holds through a live [`DirLock`].
static HELD_HERE: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

impl DirLock {
    pub(crate) fn new(file: std::fs::File, path: PathBuf) -> DirLock {
        HELD_HERE.lock().push(path.clone());
        DirLock { _file: file, path }
    }
}

impl DirLock {
    /// Whether a live `DirLock` of this process holds `path`.
    pub(crate) fn held_here(path: &std::path::Path) -> bool {
        HELD_HERE.lock().iter().any(|held| held == path)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let mut held = HELD_HERE.lock();
        if let Some(at) = held.iter().position(|path| *path == self.path) {
            held.swap_remove(at);
        }
    }
}

/// A borrowed `(scope, key, token)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenRef<'a> {
    pub keyspace: Keyspace,
    pub scope: &'a [u8],
    pub key: &'a [u8],
    pub token: u64,
    /// What the lease holder knows of its record; `None` for a token from
    /// elsewhere, whose record is then read back and checked.
    pub held: Option<Held>,
}

/// A claim as the engine answers it.
#[derive(Debug)]
pub(crate) struct Claimed<R> {
    pub outcome: Outcome<R>,
    pub hash: u128,
    /// LSN of the record the answer rests on.
    pub lsn: u64,
}

impl Engine {
    /// The shard that holds keys of index hash `hash`.
    pub(crate) fn shard_of_hash(&self, hash: u128) -> &Shard {
        // The top bits choose the shard; the index table uses the low 32,
        // so the two stay independent.
        let top = usize::try_from(hash >> 96).expect("32 bits fit in usize");
        &self.shards[top & (self.shards.len() - 1)]
    }

    /// Refuses `operation` on a read-only engine with [`Error::ReadOnly`].
    pub(crate) fn refuse_if_read_only(&self, operation: &'static str) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly { operation });
        }
        Ok(())
    }

    /// `(scope, key)` of `keyspace` checked against the limits, with its
    /// index hash.
    pub(crate) fn key_ref<'a>(&self, keyspace: Keyspace, scope: &'a [u8], key: &'a [u8]) -> Result<KeyRef<'a>> {
        self.config.check_key(scope, key)?;
        Ok(KeyRef { hash: self.hasher.hash(keyspace, scope, key), keyspace, scope, key })
    }

    /// Claims `(scope, key)`, counted as `tally` says. The answer is not
    /// yet durable.
    pub(crate) fn claim<R>(
        &self,
        (keyspace, scope, key): (Keyspace, &[u8], &[u8]),
        fingerprint: Fingerprint,
        (lease, ttl): (Option<Duration>, Option<Duration>),
        reuse: ReusePolicy,
        tally: Tally,
        replay: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<Claimed<R>> {
        self.refuse_if_read_only("claim")?;
        let key = self.key_ref(keyspace, scope, key)?;
        if keyspace == Keyspace::Caller {
            self.make_room(scope, key.key);
        }
        let params = ClaimParams {
            fingerprint,
            lease_ms: self.config.check_duration("lease", lease, self.config.lease_ms)?,
            ttl_ms: self.config.check_duration("ttl", ttl, self.config.ttl_ms)?,
            reuse,
        };
        let (outcome, lsn) = self.shard_of_hash(key.hash).claim(&key, &params, tally, replay)?;
        Ok(Claimed { outcome, hash: key.hash, lsn })
    }

    /// Before a claim of `key` in `scope`: if the scope is at its quota,
    /// drops every expired record of the store first (when a sweep is due),
    /// so that a record whose time is up never holds a slot; the claim
    /// itself then decides, exactly (see [`crate::quota::Quota`]). While no scope
    /// is near its limit this is one atomic load. A shard that cannot be
    /// swept (closed, poisoned) is skipped: its expired records keep their
    /// slots until found otherwise, which refuses early, never late.
    fn make_room(&self, scope: &[u8], key: &[u8]) {
        let Some(ledger) = &self.quota else { return };
        if !ledger.would_refuse(scope, crate::format::frame_bytes(scope.len(), key.len(), 0)) {
            return;
        }
        let now_ms = self.config.clock.monotonic_ms();
        if ledger.take_sweep(now_ms) {
            let records = self.shards.iter().filter_map(|shard| shard.sweep_expired().ok()).sum();
            ledger.swept(now_ms, records);
        }
    }

    /// Finishes the lease `token` on the key of hash `hash`; returns the
    /// LSN of the record written.
    pub(crate) fn finish(&self, hash: u128, token: &TokenRef<'_>, finish: Finish<'_>) -> Result<u64> {
        self.refuse_if_read_only(match finish {
            Finish::Complete(_) => "complete",
            Finish::Fail(_) => "fail",
            Finish::Release => "release",
        })?;
        if let Finish::Complete(response) | Finish::Fail(response) = finish {
            self.config.check_response(response)?;
        }
        let key = KeyRef { hash, keyspace: token.keyspace, scope: token.scope, key: token.key };
        self.shard_of_hash(hash).finish(&key, token.token, finish, token.held.as_ref())
    }

    /// Renews the lease `token` on the key of hash `hash`; returns its new
    /// end and the LSN of the record written.
    pub(crate) fn renew(&self, hash: u128, token: &TokenRef<'_>, extend: Duration) -> Result<(u64, u64)> {
        self.refuse_if_read_only("renew")?;
        let extend_ms = self.config.check_duration("renewal", Some(extend), 0)?;
        let key = KeyRef { hash, keyspace: token.keyspace, scope: token.scope, key: token.key };
        self.shard_of_hash(hash).renew(&key, token.token, extend_ms, token.held.as_ref())
    }

    /// Stores the checkpoint `step`, `payload` for the lease `token` on
    /// the key of hash `hash`; returns the LSN of the record written.
    pub(crate) fn checkpoint(&self, hash: u128, token: &TokenRef<'_>, step: &str, payload: &[u8]) -> Result<u64> {
        self.refuse_if_read_only("checkpoint")?;
        let bytes = checkpoint::encode(step, payload, self.config.response_bytes_max)?;
        let key = KeyRef { hash, keyspace: token.keyspace, scope: token.scope, key: token.key };
        self.shard_of_hash(hash).checkpoint(&key, token.token, &bytes, token.held.as_ref())
    }

    /// Registers a caller waiting for key `hash` to leave Processing, or
    /// `None` past the caps.
    pub(crate) fn listen(&self, hash: u128) -> Option<Waiter<'_>> {
        self.shard_of_hash(hash).waiters.listen(hash, &self.wait_limits)
    }

    /// Under `Sync`, blocks until the record at `lsn` in the shard of
    /// `hash` is durable.
    pub(crate) fn wait_durable(&self, hash: u128, lsn: u64) -> Result<()> {
        if self.read_only {
            // What a read-only handle reads was found on disk at open.
            return Ok(());
        }
        match self.config.durability {
            Durability::Sync => self.shard_of_hash(hash).sync_to(lsn),
            Durability::Buffered | Durability::Interval(_) => Ok(()),
        }
    }

    /// Under `Sync`, waits until the record at `lsn` in the shard of `hash`
    /// is durable, without blocking the runtime: the caller awaits the end
    /// of the batch that covers its record, which the shard's flusher runs
    /// where no other caller does. Where there is no flusher (it could not
    /// start, or the store is closing), a caller that is to run a batch
    /// itself waits on tokio's blocking pool instead, whole: a caller
    /// dropped while it runs cannot leave a batch begun and never ended.
    #[cfg(feature = "tokio")]
    pub(crate) async fn wait_durable_async(self: &std::sync::Arc<Self>, hash: u128, lsn: u64) -> Result<()> {
        use crate::engine::segment::commit::AsyncTurn;
        if self.read_only || !matches!(self.config.durability, Durability::Sync) {
            return Ok(());
        }
        loop {
            match self.shard_of_hash(hash).commit_turn(lsn)? {
                AsyncTurn::Durable => return Ok(()),
                AsyncTurn::Listen(listener) => listener.await,
                AsyncTurn::Block => {
                    let commit = self.shard_of_hash(hash).commit();
                    let waited = tokio::task::spawn_blocking(move || commit.sync_to(lsn)).await;
                    return waited.map_err(|join| Error::io("fsync task", &self.dir, std::io::Error::other(join)))?;
                }
            }
        }
    }
}
