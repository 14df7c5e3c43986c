//! One shard: its index, its log and its lock. Every state transition of a
//! key happens here, under the shard's lock, as one appended record: the
//! shard looks the key up, asks [`crate::engine::transition`] what to do, and
//! executes the answer.
//!
//! `state` holds what is behind the lock (index upkeep, writes and reads of
//! records); `hold` what a lease holder does (finish, renew, checkpoint);
//! `compact` executes a compaction plan on the shard.

mod compact;
mod hold;
pub(crate) mod listing;
mod migrate;
mod quota;
mod state;

use crate::checkpoint::Checkpoint;
use crate::clock::{Clock, Now};
use crate::config::{Config, Durability};
use crate::engine::entry::KeyHasher;
use crate::engine::recovery::Recovered;
#[cfg(feature = "tokio")]
use crate::engine::segment::commit::AsyncTurn;
use crate::engine::segment::commit::{GroupCommit, Tail};
use crate::engine::segment::writer::Writer;
use crate::engine::telemetry::{bump, Counters};
use crate::engine::transition::{self, ClaimParams, ClaimStep, Held, Stored};
use crate::engine::waiters::Waiters;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::keyspace::{Keyspace, Name};
use crate::record::{is_staged, Header, Kind, Record, RecordRef, State};
use crate::stats::Census;
use listing::{Made, Which};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(test)]
pub(crate) use state::RECORDS_READ;
use state::{Lookup, ShardState};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How much a shard holds, for [`crate::stats::Stats`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Footprint {
    pub records: u64,
    pub live_bytes: u64,
    pub disk_bytes: u64,
    pub segments: u64,
}

/// A `(scope, key)` of a keyspace, with its index hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyRef<'a> {
    pub hash: u128,
    pub keyspace: Keyspace,
    pub scope: &'a [u8],
    pub key: &'a [u8],
}

/// The shard-level answer to a claim. `lease_deadline_ms` is the lease end
/// as written (wall clock).
#[derive(Debug)]
pub(crate) enum Outcome<R = Record> {
    Acquired {
        token: u64,
        lease_deadline_ms: u64,
        held: Held,
        checkpoint: Option<Checkpoint>,
    },
    /// What `replay` made of the stored record.
    Replay(R),
    InProgress {
        retry_after_ms: u64,
        attempt: u32,
    },
    Mismatch,
}

/// What one look at a key adds to the counters. The counters count
/// answers: a waiting claim (`claim_wait`) is one call and one answer
/// however many times it looks at its key, so only its first look counts
/// the call, and an in-progress look counts nothing until the wait ends on
/// it ([`Shard::count_in_progress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// A claim answered by this look: the call and its outcome.
    Answer,
    /// The first look of a waiting claim: the call, and its outcome unless
    /// in progress.
    WaitFirst,
    /// A later look of a waiting claim: a wait look, and its outcome unless
    /// in progress.
    WaitAgain,
}

/// One shard of a store.
#[derive(Debug)]
pub(crate) struct Shard {
    pub id: u32,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    /// Writers take it exclusively; a claim answered from the stored record
    /// (replay, in progress, mismatch) and `get` share it, so they never
    /// queue behind one another, only behind a write.
    state: RwLock<ShardState>,
    /// Callers waiting for a key to leave Processing (`claim_wait`).
    pub waiters: Waiters,
    commit: Arc<GroupCommit>,
    /// Set under the state lock by `close`; checked under it by every call.
    closed: AtomicBool,
    pub counters: Arc<Counters>,
}

impl Shard {
    /// The shard recovered at open, at `now` (its TTL floor; records
    /// expired by then are dropped and counted). Reads each Processing
    /// record once (see [`ShardState::new`]).
    pub(crate) fn new(id: u32, config: &Config, recovered: Recovered, now: Now) -> Result<Self> {
        let storage = Arc::clone(&config.storage);
        let (hints_loaded, hints_ignored) = (recovered.hints_loaded, recovered.hints_ignored);
        let Recovered { dir, frames, active, sealed, next_lsn, torn_tail_bytes, lengths, catalog, next_round, .. } =
            recovered;
        // Under Sync every record is synced as it is written: records are
        // staged or written with `pwrite` there, never through the map
        // (see `segment::writer`).
        let map_writes = !matches!(config.durability, Durability::Sync);
        let mut log = Writer::new(
            dir.clone(),
            id,
            Arc::clone(&storage),
            config.segment_bytes,
            active,
            sealed,
            next_lsn,
            catalog,
            map_writes,
        )?;
        let counters = Arc::new(Counters::new(id));
        counters.torn_tail_bytes_cut.add(torn_tail_bytes);
        counters.hints_loaded.add(hints_loaded);
        counters.hints_ignored.add(hints_ignored);
        // Everything recovered at open was synced by recovery.
        let tail = Tail {
            file: Arc::clone(&log.active.file),
            path: log.path(log.active.id),
            written_lsn: next_lsn.saturating_sub(1),
            end: log.active.end,
        };
        let commit = Arc::new(GroupCommit::new(id, tail, next_round, Arc::clone(&counters)));
        // Under Sync, where an overwrite cannot meet a full disk, records
        // are staged for their batch's one write (see `segment::writer`).
        if !map_writes && log.active.file.overwrites_in_place() {
            log.stage_into(Arc::clone(&commit));
        }
        let state = ShardState::new(frames, log, now, &lengths, &counters)?;
        Ok(Shard {
            id,
            dir,
            storage,
            clock: Arc::clone(&config.clock),
            state: RwLock::new(state),
            waiters: Waiters::default(),
            commit,
            closed: AtomicBool::new(false),
            counters,
        })
    }

    /// The state for writing, unless the shard is closed or poisoned.
    fn lock(&self) -> Result<RwLockWriteGuard<'_, ShardState>> {
        let state = self.state.write();
        self.check_open()?;
        Ok(state)
    }

    /// The state for reading, shared with other readers, unless the shard
    /// is closed or poisoned.
    fn read(&self) -> Result<RwLockReadGuard<'_, ShardState>> {
        let state = self.state.read();
        self.check_open()?;
        Ok(state)
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.commit.is_poisoned() {
            return Err(Error::Poisoned { shard: self.id });
        }
        Ok(())
    }

    /// Refuses every later call. Taking the lock waits for the call in
    /// flight, so nothing is written after this returns; with `trim`
    /// (a writable store), the zeros ahead of the active segment's last
    /// record are cut off.
    pub(crate) fn close(&self, trim: bool) {
        let mut state = self.state.write();
        self.closed.store(true, Ordering::Release);
        if trim {
            state.log.trim();
        }
    }

    /// Writes the hint of the active segment, if everything written to it
    /// is durable and the shard is not poisoned (at close, and when the
    /// last handle is dropped): the next open then replays only what is
    /// written after it.
    /// A durable mark a caller's fsync left behind is written first (no
    /// fsync: the records are durable), since open takes a hint only as far
    /// as the mark.
    pub(crate) fn write_active_hint(&self) {
        if !self.commit.is_poisoned() {
            // Records staged for a batch that nobody waited for reach the
            // file (not its disk), as they would have been written at once
            // where nothing is staged; a failure poisons the shard.
            let _poisoned = self.commit.write_staged();
        }
        if !self.commit.is_dirty() && self.commit.is_unmarked() {
            // A failure poisons the shard, and the hint is then not written.
            let _poisoned = self.commit.sync_marked(self.commit.written_lsn());
        }
        let mut state = self.state.write();
        if !self.commit.is_poisoned() && !self.commit.is_dirty() {
            state.log.write_active_hint();
        }
    }

    fn segment_path(&self, segment: u32) -> PathBuf {
        crate::engine::segment::segment_path(&self.dir, segment)
    }

    /// Decides a claim and writes its record. Returns the answer and the LSN
    /// of the record it rests on (for the durability wait). A key whose
    /// stored record answers the claim (replay, in progress, mismatch) is
    /// answered under the shared lock; only a claim that writes takes it
    /// exclusively. `tally` says what the look adds to the counters.
    /// Every acquire wakes the key's waiters: a takeover (or a fresh start
    /// over an expired record) gives them a new holder and lease end to
    /// wait for.
    pub(crate) fn claim<R>(
        &self,
        key: &KeyRef<'_>,
        params: &ClaimParams,
        tally: Tally,
        replay: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<(Outcome<R>, u64)> {
        {
            let state = self.read()?;
            match tally {
                Tally::Answer | Tally::WaitFirst => bump(&self.counters.claims),
                Tally::WaitAgain => bump(&self.counters.wait_looks),
            }
            if let Some(found) = state.find(key)? {
                // A replay reads only the wall clock: a finished record's
                // answer depends on its TTL alone, and an answer that would
                // write (a Failed key run again) is decided again below.
                let now = if found.entry.state == State::Processing {
                    state.now(&*self.clock)
                } else {
                    state.now_for_finished(&*self.clock)
                };
                if !transition::is_gone(&found.entry, found.lease_end_ms, now) {
                    let stored = Stored { record: &found.header, lease_end_ms: found.lease_end_ms };
                    match transition::claim(Some(stored), params, state.log.next_lsn, now) {
                        ClaimStep::Acquire(_) => {}
                        step => return self.answer(step, found.entry.lsn, &found.header, &found.frame, tally, replay),
                    }
                }
            }
        }
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let next_lsn = state.log.next_lsn;
        let current = state.live(key, now, &self.counters)?;
        let stored = current.as_ref().map(|found| Stored { record: &found.header, lease_end_ms: found.lease_end_ms });
        match transition::claim(stored, params, next_lsn, now) {
            ClaimStep::Acquire(header) => {
                // A takeover carries the last checkpoint over into the
                // record it writes, so that it outlives this holder too.
                let carried = match (&current, header.recovered) {
                    (Some(found), true) => found.header.body(&found.frame).2.to_vec(),
                    _ => Vec::new(),
                };
                let old = current.map(|found| found.entry);
                // The lease table knows keys by their 128-bit hash: another
                // key in flight under the same hash cannot have a second.
                if old.is_none() && state.leases.get(key.hash).is_some() {
                    return Err(Error::KeyHashCollision);
                }
                let checkpoint = self.checkpoint_of(&carried)?;
                state.write(key, old.as_ref(), &header, &carried, &self.commit, &self.counters, now)?;
                drop(state);
                Ok(self.acquired(key, &header, checkpoint))
            }
            step => {
                let found =
                    current.ok_or_else(|| Error::corruption(&self.dir, 0, "a claim answered from no record"))?;
                self.answer(step, found.entry.lsn, &found.header, &found.frame, tally, replay)
            }
        }
    }

    /// The answer to a claim whose record (`header`) is written, the lock
    /// released: counted, and the key's waiters woken, since a takeover (or
    /// a fresh start over an expired record) gives them a new holder and
    /// lease end to wait for.
    #[inline]
    fn acquired<R>(&self, key: &KeyRef<'_>, header: &Header, checkpoint: Option<Checkpoint>) -> (Outcome<R>, u64) {
        bump(&self.counters.acquired);
        if header.recovered {
            bump(&self.counters.recovered);
        }
        self.waiters.wake(key.hash);
        let outcome = Outcome::Acquired {
            token: header.token,
            lease_deadline_ms: header.deadline_ms,
            held: Held::of(header),
            checkpoint,
        };
        (outcome, header.lsn)
    }

    /// The answer to a claim that the stored record (`header`, `frame`, at
    /// LSN `lsn`) decides without a write: mismatch, in progress or replay.
    /// An in-progress look of a waiting claim is not counted here.
    fn answer<R>(
        &self,
        step: ClaimStep,
        lsn: u64,
        header: &Header,
        frame: &[u8],
        tally: Tally,
        replay: impl FnOnce(RecordRef<'_>) -> R,
    ) -> Result<(Outcome<R>, u64)> {
        let outcome = match step {
            ClaimStep::Acquire(_) => {
                return Err(Error::corruption(&self.dir, 0, "an acquired claim has no stored answer"))
            }
            ClaimStep::Mismatch => {
                bump(&self.counters.mismatches);
                Outcome::Mismatch
            }
            ClaimStep::InProgress { retry_after_ms, attempt } => {
                if tally != Tally::Answer {
                    return Ok((Outcome::InProgress { retry_after_ms, attempt }, lsn));
                }
                bump(&self.counters.in_progress);
                Outcome::InProgress { retry_after_ms, attempt }
            }
            ClaimStep::Replay => {
                bump(&self.counters.replays);
                // `load` checked that the record is the put the index points at.
                let record = RecordRef::new(header, frame)
                    .ok_or_else(|| Error::corruption(&self.dir, 0, "index points at a tombstone"))?;
                Outcome::Replay(replay(record))
            }
        };
        self.counters.duplicates.increment();
        Ok((outcome, lsn))
    }

    /// Counts the in-progress answer a waiting claim ended on (its timeout
    /// passed, or the caps let it wait no longer): the looks that answered
    /// in progress while it waited were not counted.
    pub(crate) fn count_in_progress(&self) {
        bump(&self.counters.in_progress);
        self.counters.duplicates.increment();
    }

    /// Removes a key whatever its state. Returns whether a live record was
    /// removed, and the LSN the answer rests on: the tombstone's, or for an
    /// absent key the newest written (what made it absent is no newer).
    pub(crate) fn remove(&self, key: &KeyRef<'_>) -> Result<(bool, u64)> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let next_lsn = state.log.next_lsn;
        let Some(found) = state.live(key, now, &self.counters)? else {
            return Ok((false, self.commit.written_lsn()));
        };
        let header = transition::remove(&found.header, next_lsn, now.wall_ms);
        let entry = found.entry;
        state.write(key, Some(&entry), &header, &[], &self.commit, &self.counters, now)?;
        bump(&self.counters.removes);
        drop(state);
        self.waiters.wake(key.hash);
        Ok((true, header.lsn))
    }

    /// Replaces the answer of `key`'s Completed record with `answer` when
    /// it is `expected`: a record at the next LSN, as it was but for its
    /// answer and its last change. Returns whether it did, and the LSN the
    /// answer rests on (the record's, or the newest written: what the
    /// caller was answered from is no newer).
    pub(crate) fn replace(&self, key: &KeyRef<'_>, expected: &[u8], answer: &[u8]) -> Result<(bool, u64)> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let next_lsn = state.log.next_lsn;
        let Some(found) = state.live(key, now, &self.counters)? else {
            return Ok((false, self.commit.written_lsn()));
        };
        let completed = RecordRef::new(&found.header, &found.frame)
            .is_some_and(|record| record.state() == State::Completed && record.response() == expected);
        if !completed {
            return Ok((false, self.commit.written_lsn()));
        }
        let header = transition::replace(&found.header, next_lsn, now.wall_ms);
        let entry = found.entry;
        state.write(key, Some(&entry), &header, answer, &self.commit, &self.counters, now)?;
        bump(&self.counters.replacements);
        Ok((true, header.lsn))
    }

    /// The live record of `key`, and the LSN the answer rests on: the
    /// record's, or for an absent key the newest written (the tombstone or
    /// expiry that made it absent is no newer). Read under the shared lock;
    /// an expired key is dropped under the exclusive one.
    pub(crate) fn get(&self, key: &KeyRef<'_>) -> Result<(Option<Record>, u64)> {
        {
            let state = self.read()?;
            let now = state.now(&*self.clock);
            match state.lookup(key, now)? {
                Lookup::Absent => return Ok((None, self.commit.written_lsn())),
                Lookup::Live(found) => {
                    return Ok((Record::from_frame(&found.header, &found.frame), found.entry.lsn));
                }
                Lookup::Gone(_) => {}
            }
        }
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        let Some(found) = state.live(key, now, &self.counters)? else {
            return Ok((None, self.commit.written_lsn()));
        };
        Ok((Record::from_frame(&found.header, &found.frame), found.entry.lsn))
    }

    /// Up to `limit` keys of the listing `which` of `scope` of `keyspace`
    /// after `after`, in key order. The listing is made at its first use,
    /// by one pass over the shard's records (see [`listing`]); every write
    /// keeps it from then on.
    pub(crate) fn listed_keys(
        &self,
        (which, keyspace, scope): (Which, Keyspace, &[u8]),
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Box<[u8]>>> {
        let state = self.read()?;
        if !state.listings.lock().has(which, keyspace, scope) {
            let made = listing_of(&state, which, keyspace, scope)?;
            state.listings.lock().install(keyspace, scope, made);
        }
        let keys = state.listings.lock().range(which, keyspace, scope, after, limit);
        Ok(keys)
    }

    /// The live records of `keys` (keys of this shard, whose index hashes
    /// `hasher` gives) that the listing `which` lists; a key found not
    /// live (or, for the staged keys, a completion without staged
    /// messages) leaves the listing, under the same lock as it was read.
    pub(crate) fn listed_records(
        &self,
        (which, keyspace, scope): (Which, Keyspace, &[u8]),
        keys: &[&[u8]],
        hasher: &KeyHasher,
    ) -> Result<Vec<Record>> {
        let state = self.read()?;
        let now = state.now(&*self.clock);
        let mut records = Vec::with_capacity(keys.len());
        for &key in keys {
            let found = KeyRef { hash: hasher.hash(keyspace, scope, key), keyspace, scope, key };
            let record = match state.lookup(&found, now)? {
                Lookup::Live(found) => Record::from_frame(&found.header, &found.frame),
                Lookup::Absent | Lookup::Gone(_) => None,
            };
            let staged = |record: &Record| record.state == State::Completed && is_staged(&record.response);
            match record {
                Some(record) if which == Which::Every || staged(&record) => records.push(record),
                _ => state.listings.lock().forget(which, keyspace, scope, key),
            }
        }
        Ok(records)
    }

    /// The keyspace, scope and key of every record the index points at
    /// (for iteration, which then reads each through [`Shard::get`]).
    pub(crate) fn keys(&self) -> Result<Vec<Name>> {
        let state = self.read()?;
        state
            .index
            .iter()
            .map(|(_, at)| {
                let (header, frame) = state.read_at(at)?;
                let (scope, key, _) = header.body(&frame);
                Ok((header.keyspace, scope.to_vec(), key.to_vec()))
            })
            .collect()
    }

    /// Drops the Processing records abandoned past their lease end + TTL, so
    /// that compaction can reclaim them; returns how many.
    pub(crate) fn expire_abandoned(&self) -> Result<u64> {
        let mut state = self.lock()?;
        let now = state.now(&*self.clock);
        Ok(state.expire_abandoned(now, &self.counters))
    }

    /// Adds this shard's records by state to `census`.
    pub(crate) fn census(&self, census: &mut Census) -> Result<()> {
        let state = self.read()?;
        let now = state.now(&*self.clock);
        // Finished records by their headers; Processing ones, which need
        // their lease ends, from the lease table.
        for (_, at) in state.index.iter() {
            let (header, _) = state.read_at(at)?;
            let Some(entry) = transition::entry(&header, at) else { continue };
            let counter = match entry.state {
                State::Processing => continue,
                _ if transition::is_gone(&entry, 0, now) => &mut census.expired,
                State::Completed => &mut census.completed,
                State::Failed => &mut census.failed,
            };
            *counter += 1;
        }
        for (_, lease) in state.leases.iter() {
            if transition::is_gone(&lease.entry, lease.end_ms, now) {
                census.expired += 1;
            } else {
                census.processing += 1;
            }
        }
        Ok(())
    }

    /// Records, live bytes, disk bytes and segments of this shard.
    pub(crate) fn footprint(&self) -> Footprint {
        let state = self.state.read();
        let now = state.now_ms(&*self.clock);
        let mut footprint = Footprint { records: state.index.len() as u64, ..Footprint::default() };
        let active = state.log.active.id;
        for (id, usage) in &state.usage {
            footprint.live_bytes += usage.live_bytes.saturating_sub(usage.expired_bytes(now));
            // The active segment's file is longer than its records: the
            // writer zero-fills ahead of them (and a read-only open leaves
            // a torn tail in place).
            footprint.disk_bytes += if *id == active { state.log.allocated() } else { usage.total_bytes };
            footprint.segments += 1;
        }
        footprint
    }

    /// Makes every record up to `lsn` durable (group commit).
    pub(crate) fn sync_to(&self, lsn: u64) -> Result<()> {
        self.commit.sync_to(lsn)
    }

    /// One step of an async wait for `lsn` to be durable (see
    /// [`GroupCommit::turn_async`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn commit_turn(&self, lsn: u64) -> Result<AsyncTurn> {
        self.commit.turn_async(lsn)
    }

    /// Stops the shard's flusher, if it runs (see
    /// [`GroupCommit::stop_flusher`]).
    pub(crate) fn stop_flusher(&self) {
        self.commit.stop_flusher();
    }

    /// The shard's group commit, for a wait on a blocking thread.
    #[cfg(feature = "tokio")]
    pub(crate) fn commit(&self) -> Arc<GroupCommit> {
        Arc::clone(&self.commit)
    }

    /// Whether an explicit sync has work here: records not yet durable,
    /// or not yet under the durable mark.
    pub(crate) fn needs_sync(&self) -> bool {
        self.commit.is_dirty() || self.commit.is_unmarked()
    }

    /// Makes everything written so far durable, and writes the durable
    /// mark at that fsync.
    pub(crate) fn sync_all(&self) -> Result<()> {
        self.commit.sync_marked(self.commit.written_lsn())
    }
}

/// What the listing `which` of `scope` of `keyspace` lists of `state`'s
/// records (for the staged keys, those of every scope): one pass over
/// every record the index points at.
fn listing_of(state: &ShardState, which: Which, keyspace: Keyspace, scope: &[u8]) -> Result<Made> {
    let (mut keys, mut staged) = (BTreeSet::new(), HashMap::<Box<[u8]>, BTreeSet<Box<[u8]>>>::new());
    for (_, at) in state.index.iter() {
        let (header, frame) = state.read_at(at)?;
        let (found, key, answer) = header.body(&frame);
        match which {
            Which::Every if header.keyspace == keyspace && found == scope => {
                keys.insert(key.into());
            }
            Which::Staged
                if header.keyspace == Keyspace::Caller
                    && header.kind == Kind::Put(State::Completed)
                    && is_staged(answer) =>
            {
                staged.entry(found.into()).or_default().insert(key.into());
            }
            Which::Every | Which::Staged => {}
        }
    }
    Ok(match which {
        Which::Every => Made::Every(keys),
        Which::Staged => Made::Staged(staged),
    })
}
