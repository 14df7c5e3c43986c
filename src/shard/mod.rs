//! One shard: its index, its log and its lock. Every state transition of a
//! key happens here, under the shard's lock, as one appended record.

mod compact;

use crate::claim::Record;
use crate::clock::Clock;
use crate::compaction::SegmentUsage;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::index::{Entry, Index};
use crate::io::{Storage, StorageFile};
use crate::record::{self, Header, Kind, State};
use crate::segment::{self, header::SegmentHeader};
use crate::stats::{bump, Counters};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How much a shard holds, for [`crate::Stats`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Footprint {
    pub records: u64,
    pub live_bytes: u64,
    pub disk_bytes: u64,
    pub segments: u64,
}

/// A `(scope, key)` with its index hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyRef<'a> {
    pub hash: u128,
    pub scope: &'a [u8],
    pub key: &'a [u8],
}

/// What a claim carries besides its key, already validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimParams {
    pub fingerprint: Fingerprint,
    pub lease_ms: u64,
    pub ttl_ms: u64,
}

/// What a lease holder knows of its Processing record, so finishing it
/// needs no read of the log: while the token still matches the index, these
/// are exactly the stored values (a renewal keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub attempt: u32,
    pub fingerprint: Fingerprint,
    pub created_ms: u64,
    pub ttl_ms: u64,
    pub recovered: bool,
}

/// The shard-level answer to a claim.
#[derive(Debug)]
pub(crate) enum Outcome {
    Acquired { token: u64, attempt: u32, lease_deadline_ms: u64, held: Held },
    Replay(Record),
    InProgress { retry_after_ms: u64, attempt: u32 },
    Mismatch,
}

/// How a holder finishes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Finish<'a> {
    Complete(&'a [u8]),
    Fail(&'a [u8]),
    Release,
}

/// The segment being appended to.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub id: u32,
    pub file: Arc<dyn StorageFile>,
    /// End of the last whole record: where the next one goes.
    pub end: u64,
}

/// Everything behind the shard's lock.
#[derive(Debug)]
pub(crate) struct ShardState {
    pub index: Index,
    pub active: ActiveSegment,
    pub sealed: BTreeMap<u32, Arc<dyn StorageFile>>,
    pub next_lsn: u64,
    /// The largest time seen: the shard's clock never goes backwards.
    pub now_floor_ms: u64,
    /// Live-data accounting per segment (sealed and active), for compaction.
    pub usage: BTreeMap<u32, SegmentUsage>,
    encode_buffer: Vec<u8>,
    read_buffer: Vec<u8>,
}

impl ShardState {
    pub(crate) fn new(
        index: Index,
        active: ActiveSegment,
        sealed: BTreeMap<u32, Arc<dyn StorageFile>>,
        next_lsn: u64,
        now_floor_ms: u64,
    ) -> Self {
        ShardState {
            index,
            active,
            sealed,
            next_lsn,
            now_floor_ms,
            usage: BTreeMap::new(),
            encode_buffer: Vec::new(),
            read_buffer: Vec::new(),
        }
    }

    /// Recomputes the per-segment accounting from the index and the
    /// segments' lengths (at open).
    pub(crate) fn rebuild_usage(&mut self, lengths: &BTreeMap<u32, u64>) {
        self.usage = lengths.iter().map(|(id, total_bytes)| (*id, SegmentUsage::with_total(*total_bytes))).collect();
        for entry in self.index.values() {
            self.usage.entry(entry.segment).or_default().add(entry);
        }
    }

    /// Points the index at a new record, keeping the accounting.
    fn index_insert(&mut self, hash: u128, entry: Entry) {
        if let Some(old) = self.index.insert(hash, entry) {
            self.usage.entry(old.segment).or_default().release(&old);
        }
        self.usage.entry(entry.segment).or_default().add(&entry);
    }

    /// Drops a key from the index, keeping the accounting.
    fn index_remove(&mut self, hash: u128) -> Option<Entry> {
        let old = self.index.remove(&hash)?;
        self.usage.entry(old.segment).or_default().release(&old);
        Some(old)
    }

    fn now_ms(&mut self, clock: &dyn Clock) -> u64 {
        self.now_floor_ms = self.now_floor_ms.max(clock.now_ms());
        self.now_floor_ms
    }
}

/// One shard of a store.
#[derive(Debug)]
pub(crate) struct Shard {
    pub id: u32,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    segment_bytes: u64,
    state: Mutex<ShardState>,
    /// Signalled whenever a key leaves Processing (for `claim_wait`).
    finished: Condvar,
    /// Whether a caller is running the fsync for everybody (group commit).
    sync_leader: Mutex<bool>,
    /// Signalled when that fsync ends.
    sync_done: Condvar,
    /// LSN of the newest record written to the operating system.
    written_lsn: AtomicU64,
    /// LSN up to which every record is on stable storage.
    durable_lsn: AtomicU64,
    poisoned: AtomicBool,
    /// Set under the state lock by `close`; checked under it by every call.
    closed: AtomicBool,
    pub counters: Counters,
}

impl Shard {
    pub(crate) fn new(
        id: u32,
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        segment_bytes: u64,
        state: ShardState,
    ) -> Self {
        // Everything recovered at open was synced by recovery.
        let recovered_lsn = state.next_lsn.saturating_sub(1);
        Shard {
            id,
            dir,
            storage,
            clock,
            segment_bytes,
            state: Mutex::new(state),
            finished: Condvar::new(),
            sync_leader: Mutex::new(false),
            sync_done: Condvar::new(),
            written_lsn: AtomicU64::new(recovered_lsn),
            durable_lsn: AtomicU64::new(recovered_lsn),
            poisoned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, ShardState>> {
        let state = self.state.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned { shard: self.id });
        }
        Ok(state)
    }

    /// Refuses every later call. Taking the lock waits for the call in
    /// flight, so nothing is written after this returns.
    pub(crate) fn close(&self) {
        let _state = self.state.lock();
        self.closed.store(true, Ordering::Release);
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    fn segment_path(&self, segment: u32) -> PathBuf {
        segment::segment_path(&self.dir, segment)
    }

    /// Decides a claim and writes its record. Returns the answer and the LSN
    /// of the record it rests on (for the durability wait).
    pub(crate) fn claim(&self, key: &KeyRef<'_>, params: &ClaimParams) -> Result<(Outcome, u64)> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        bump(&self.counters.claims);
        let Some(entry) = self.live_entry(&mut state, key.hash, now) else {
            let header = Self::put_header(&mut state, State::Processing, params.fingerprint, now);
            let header = Header { deadline_ms: now.saturating_add(params.lease_ms), ttl_ms: params.ttl_ms, ..header };
            return self.acquire(&mut state, key, header);
        };
        let stored = self.load(&mut state, &entry, Some(key))?;
        if stored.fingerprint != params.fingerprint {
            bump(&self.counters.mismatches);
            return Ok((Outcome::Mismatch, entry.lsn));
        }
        match entry.state {
            State::Processing if entry.deadline_ms > now => {
                bump(&self.counters.in_progress);
                let outcome = Outcome::InProgress { retry_after_ms: entry.deadline_ms - now, attempt: stored.attempt };
                Ok((outcome, entry.lsn))
            }
            State::Processing => {
                bump(&self.counters.recovered);
                let header = Self::put_header(&mut state, State::Processing, params.fingerprint, now);
                let header = Header {
                    recovered: true,
                    attempt: stored.attempt.saturating_add(1),
                    created_ms: stored.created_ms,
                    deadline_ms: now.saturating_add(params.lease_ms),
                    ttl_ms: params.ttl_ms,
                    ..header
                };
                self.acquire(&mut state, key, header)
            }
            State::Completed | State::Failed => {
                bump(&self.counters.replays);
                let record = Record::from_frame(&stored, &state.read_buffer).ok_or_else(|| {
                    Error::corruption(
                        self.segment_path(entry.segment),
                        u64::from(entry.offset),
                        "index points at a tombstone",
                    )
                })?;
                Ok((Outcome::Replay(record), entry.lsn))
            }
        }
    }

    fn acquire(&self, state: &mut ShardState, key: &KeyRef<'_>, header: Header) -> Result<(Outcome, u64)> {
        self.write(state, key, &header, &[])?;
        bump(&self.counters.acquired);
        let held = Held {
            attempt: header.attempt,
            fingerprint: header.fingerprint,
            created_ms: header.created_ms,
            ttl_ms: header.ttl_ms,
            recovered: header.recovered,
        };
        let outcome = Outcome::Acquired {
            token: header.token,
            attempt: header.attempt,
            lease_deadline_ms: header.deadline_ms,
            held,
        };
        Ok((outcome, header.lsn))
    }

    /// A fresh header for a new record at the next LSN; the token is the LSN.
    fn put_header(state: &mut ShardState, kind: State, fingerprint: Fingerprint, now: u64) -> Header {
        Header {
            kind: Kind::Put(kind),
            recovered: false,
            attempt: 1,
            lsn: state.next_lsn,
            token: state.next_lsn,
            fingerprint,
            created_ms: now,
            updated_ms: now,
            deadline_ms: 0,
            ttl_ms: 0,
            scope_len: 0,
            key_len: 0,
            response_len: 0,
        }
    }

    /// The index entry of a key, dropping it if its TTL has passed.
    fn live_entry(&self, state: &mut ShardState, hash: u128, now: u64) -> Option<Entry> {
        let entry = *state.index.get(&hash)?;
        if entry.is_expired(now) {
            bump(&self.counters.expirations);
            state.index_remove(hash);
            return None;
        }
        Some(entry)
    }

    /// Finishes the lease `token` on `key`: complete, fail or release.
    pub(crate) fn finish(&self, key: &KeyRef<'_>, token: u64, finish: Finish<'_>, known: Option<&Held>) -> Result<u64> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        let (entry, stored) = self.held(&mut state, key, token, known)?;
        let header = Header { lsn: state.next_lsn, updated_ms: now, ..stored };
        let (header, response) = match finish {
            Finish::Complete(response) | Finish::Fail(response) => {
                let terminal = if matches!(finish, Finish::Complete(_)) { State::Completed } else { State::Failed };
                let header =
                    Header { kind: Kind::Put(terminal), deadline_ms: now.saturating_add(stored.ttl_ms), ..header };
                (header, response)
            }
            Finish::Release => {
                let header = Header { kind: Kind::Tombstone, deadline_ms: 0, ..header };
                (header, &[][..])
            }
        };
        self.write(&mut state, key, &header, response)?;
        let counter = match finish {
            Finish::Complete(_) => &self.counters.completions,
            Finish::Fail(_) => &self.counters.failures,
            Finish::Release => &self.counters.releases,
        };
        bump(counter);
        debug_assert_ne!(entry.lsn, header.lsn);
        drop(state);
        self.finished.notify_all();
        Ok(header.lsn)
    }

    /// Extends the lease `token` on `key` to at least `extend_ms` from now.
    /// Returns the new lease end and the record's LSN.
    pub(crate) fn renew(
        &self,
        key: &KeyRef<'_>,
        token: u64,
        extend_ms: u64,
        known: Option<&Held>,
    ) -> Result<(u64, u64)> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        let (entry, stored) = self.held(&mut state, key, token, known)?;
        let deadline_ms = entry.deadline_ms.max(now.saturating_add(extend_ms));
        let header = Header { lsn: state.next_lsn, updated_ms: now, deadline_ms, ..stored };
        self.write(&mut state, key, &header, &[])?;
        bump(&self.counters.renewals);
        Ok((deadline_ms, header.lsn))
    }

    /// The entry and stored header of a key that `token` holds in
    /// Processing, or `LeaseLost`.
    fn held(
        &self,
        state: &mut ShardState,
        key: &KeyRef<'_>,
        token: u64,
        known: Option<&Held>,
    ) -> Result<(Entry, Header)> {
        match state.index.get(&key.hash).copied() {
            Some(entry) if entry.state == State::Processing && entry.token == token => {
                let stored = match known {
                    Some(held) => Header {
                        kind: Kind::Put(State::Processing),
                        recovered: held.recovered,
                        attempt: held.attempt,
                        lsn: entry.lsn,
                        token: entry.token,
                        fingerprint: held.fingerprint,
                        created_ms: held.created_ms,
                        updated_ms: 0,
                        deadline_ms: entry.deadline_ms,
                        ttl_ms: held.ttl_ms,
                        scope_len: 0,
                        key_len: 0,
                        response_len: 0,
                    },
                    None => self.load(state, &entry, Some(key))?,
                };
                Ok((entry, stored))
            }
            _ => {
                bump(&self.counters.lease_lost);
                Err(Error::LeaseLost { token })
            }
        }
    }

    /// Removes a key whatever its state. Returns whether a live record was
    /// removed, and the tombstone's LSN.
    pub(crate) fn remove(&self, key: &KeyRef<'_>) -> Result<(bool, u64)> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        let Some(entry) = self.live_entry(&mut state, key.hash, now) else {
            return Ok((false, 0));
        };
        let stored = self.load(&mut state, &entry, Some(key))?;
        let header = Header { kind: Kind::Tombstone, lsn: state.next_lsn, updated_ms: now, deadline_ms: 0, ..stored };
        self.write(&mut state, key, &header, &[])?;
        bump(&self.counters.removes);
        drop(state);
        self.finished.notify_all();
        Ok((true, header.lsn))
    }

    /// The live record of a key and its LSN.
    /// The live record at index hash `hash`, checked to belong to `key` when
    /// one is given (iteration has only the hash), and its LSN.
    pub(crate) fn get(&self, hash: u128, key: Option<&KeyRef<'_>>) -> Result<Option<(Record, u64)>> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        let Some(entry) = self.live_entry(&mut state, hash, now) else {
            return Ok(None);
        };
        let stored = self.load(&mut state, &entry, key)?;
        Ok(Record::from_frame(&stored, &state.read_buffer).map(|record| (record, entry.lsn)))
    }

    /// The index hashes of every key (for iteration).
    pub(crate) fn hashes(&self) -> Result<Vec<u128>> {
        Ok(self.lock()?.index.hashes().collect())
    }

    /// Adds this shard's records by state to `census`.
    pub(crate) fn census(&self, census: &mut crate::store::Census) -> Result<()> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        for entry in state.index.values() {
            let counter = match entry.state {
                _ if entry.is_expired(now) => &mut census.expired,
                State::Processing => &mut census.processing,
                State::Completed => &mut census.completed,
                State::Failed => &mut census.failed,
            };
            *counter += 1;
        }
        Ok(())
    }

    /// Records, live bytes, disk bytes and segments of this shard.
    pub(crate) fn footprint(&self) -> Footprint {
        let mut state = self.state.lock();
        let now = state.now_ms(&*self.clock);
        let mut footprint = Footprint { records: state.index.len() as u64, ..Footprint::default() };
        for usage in state.usage.values() {
            footprint.live_bytes += usage.live_bytes.saturating_sub(usage.expired_bytes(now));
            footprint.disk_bytes += usage.total_bytes;
            footprint.segments += 1;
        }
        footprint
    }

    /// Blocks up to `timeout` while the key's newest record is still the
    /// Processing record at `lsn`.
    pub(crate) fn wait_finished(&self, hash: u128, lsn: u64, timeout: Duration) {
        let mut state = self.state.lock();
        let unchanged =
            state.index.get(&hash).is_some_and(|entry| entry.lsn == lsn && entry.state == State::Processing);
        if unchanged {
            let _timed_out = self.finished.wait_for(&mut state, timeout);
        }
    }

    /// Reads the record of `entry` into the read buffer and checks its CRC
    /// and, when given, that it belongs to `key`.
    fn load(&self, state: &mut ShardState, entry: &Entry, key: Option<&KeyRef<'_>>) -> Result<Header> {
        let file = if entry.segment == state.active.id {
            &state.active.file
        } else {
            state.sealed.get(&entry.segment).ok_or_else(|| {
                Error::corruption(
                    self.segment_path(entry.segment),
                    u64::from(entry.offset),
                    "index points at a missing segment",
                )
            })?
        };
        let offset = u64::from(entry.offset);
        state.read_buffer.resize(entry.frame_len as usize, 0);
        file.read_exact_at(&mut state.read_buffer, offset)
            .map_err(|error| Error::io("read", self.segment_path(entry.segment), error))?;
        let (header, _) = record::decode(&state.read_buffer).map_err(|error| {
            let reason = match error {
                record::DecodeError::Truncated => "record is shorter than indexed",
                record::DecodeError::Invalid(reason) => reason,
            };
            Error::corruption(self.segment_path(entry.segment), offset, reason)
        })?;
        if header.lsn != entry.lsn {
            return Err(Error::corruption(
                self.segment_path(entry.segment),
                offset,
                "record LSN differs from the index",
            ));
        }
        if let Some(key) = key {
            let (scope, stored_key, _) = record::body(&header, &state.read_buffer);
            if scope != key.scope || stored_key != key.key {
                return Err(Error::KeyHashCollision);
            }
        }
        Ok(header)
    }

    /// Appends one record of `key` and points the index at it.
    fn write(&self, state: &mut ShardState, key: &KeyRef<'_>, header: &Header, response: &[u8]) -> Result<()> {
        debug_assert_eq!(header.lsn, state.next_lsn);
        let header = Header {
            scope_len: u16::try_from(key.scope.len()).expect("scope length checked against limits"),
            key_len: u16::try_from(key.key.len()).expect("key length checked against limits"),
            response_len: u32::try_from(response.len()).expect("response length checked against limits"),
            ..*header
        };
        let mut buffer = std::mem::take(&mut state.encode_buffer);
        buffer.clear();
        record::encode(&header, key.scope, key.key, response, &mut buffer);
        let appended = self.append(state, &buffer, header.lsn);
        state.encode_buffer = buffer;
        let (segment, offset, frame_len) = appended?;
        state.next_lsn += 1;
        match header.kind {
            Kind::Put(record_state) => {
                let entry = Entry {
                    lsn: header.lsn,
                    token: header.token,
                    deadline_ms: header.deadline_ms,
                    segment,
                    offset,
                    frame_len,
                    state: record_state,
                };
                state.index_insert(key.hash, entry);
            }
            Kind::Tombstone => {
                state.index_remove(key.hash);
            }
        }
        Ok(())
    }

    /// Appends one encoded frame to the active segment, rolling first if it
    /// would not fit. A failed write is cut back off the file so the log
    /// stays whole; if even that fails the shard is poisoned.
    fn append(&self, state: &mut ShardState, frame: &[u8], lsn: u64) -> Result<(u32, u32, u32)> {
        let frame_len = frame.len() as u64;
        if state.active.end + frame_len > self.segment_bytes {
            self.roll(state)?;
        }
        let offset = state.active.end;
        if let Err(error) = state.active.file.write_all_at(frame, offset) {
            if state.active.file.set_len(offset).is_err() {
                self.poison();
            }
            return Err(Error::io("write", self.segment_path(state.active.id), error));
        }
        state.active.end += frame_len;
        state.usage.entry(state.active.id).or_default().total_bytes = state.active.end;
        self.written_lsn.store(lsn, Ordering::Release);
        bump(&self.counters.records_written);
        self.counters.bytes_written.fetch_add(frame_len, Ordering::Relaxed);
        let offset = u32::try_from(offset).expect("segment_bytes is at most 4 GiB");
        let frame_len = u32::try_from(frame_len).expect("segment_bytes is at most 4 GiB");
        Ok((state.active.id, offset, frame_len))
    }

    /// Seals the active segment (fsync) and starts the next one.
    fn roll(&self, state: &mut ShardState) -> Result<()> {
        let sealed_path = self.segment_path(state.active.id);
        if let Err(error) = state.active.file.sync() {
            self.poison();
            return Err(Error::io("fsync", sealed_path, error));
        }
        bump(&self.counters.fsyncs);
        let synced = state.next_lsn.saturating_sub(1);
        let before = self.durable_lsn.fetch_max(synced, Ordering::AcqRel);
        self.counters.records_synced.fetch_add(synced.saturating_sub(before), Ordering::Relaxed);
        let id = state.active.id.checked_add(1).ok_or_else(|| Error::InvalidConfig("segment ids exhausted".into()))?;
        let file = create_segment(&*self.storage, &self.dir, self.id, id, state.next_lsn)?;
        let header_bytes = segment::header::HEADER_BYTES as u64;
        let previous = std::mem::replace(&mut state.active, ActiveSegment { id, file, end: header_bytes });
        state.usage.insert(id, SegmentUsage::with_total(header_bytes));
        state.sealed.insert(previous.id, previous.file);
        Ok(())
    }

    /// Makes every record up to `lsn` durable, sharing fsyncs between
    /// callers (group commit): one caller at a time leads and fsyncs
    /// everything written so far; the others wait on a condition variable and
    /// are all woken when it ends. Records written while an fsync runs ride
    /// the next one.
    pub(crate) fn sync_to(&self, lsn: u64) -> Result<()> {
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let mut leading = self.sync_leader.lock();
        loop {
            if self.durable_lsn.load(Ordering::Acquire) >= lsn {
                return Ok(());
            }
            if self.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned { shard: self.id });
            }
            if *leading {
                self.sync_done.wait(&mut leading);
                continue;
            }
            *leading = true;
            drop(leading);
            let synced = self.sync_written();
            leading = self.sync_leader.lock();
            *leading = false;
            self.sync_done.notify_all();
            synced?;
        }
    }

    /// One fsync of the active segment, covering every record written
    /// before it starts. Only the sync leader calls it.
    fn sync_written(&self) -> Result<()> {
        let (file, segment, target) = {
            let state = self.state.lock();
            (Arc::clone(&state.active.file), state.active.id, self.written_lsn.load(Ordering::Acquire))
        };
        if let Err(error) = file.sync() {
            self.poison();
            return Err(Error::io("fsync", self.segment_path(segment), error));
        }
        bump(&self.counters.fsyncs);
        let before = self.durable_lsn.fetch_max(target, Ordering::AcqRel);
        self.counters.records_synced.fetch_add(target.saturating_sub(before), Ordering::Relaxed);
        Ok(())
    }

    /// Whether records were written that are not yet durable.
    pub(crate) fn is_dirty(&self) -> bool {
        self.written_lsn.load(Ordering::Acquire) > self.durable_lsn.load(Ordering::Acquire)
    }

    /// Makes everything written so far durable.
    pub(crate) fn sync_all(&self) -> Result<()> {
        self.sync_to(self.written_lsn.load(Ordering::Acquire))
    }
}

/// Creates segment `segment` of shard `shard`: header written and synced,
/// then the directory synced, so the file is never seen half-made after a
/// successful return.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &std::path::Path,
    shard: u32,
    segment: u32,
    lsn_floor: u64,
) -> Result<Arc<dyn StorageFile>> {
    let path = segment::segment_path(dir, segment);
    let header = SegmentHeader { shard, segment, lsn_floor };
    let file = storage.open(&path, true).map_err(|error| Error::io("create", &path, error))?;
    let written =
        file.write_all_at(&header.encode(), 0).and_then(|()| file.sync()).and_then(|()| storage.sync_dir(dir));
    if let Err(error) = written {
        // A half-made segment must not be mistaken for the active one; if it
        // cannot be deleted, recovery treats a segment shorter than its
        // header as a torn creation and deletes it then.
        let _ignored = storage.remove_file(&path);
        return Err(Error::io("create", &path, error));
    }
    Ok(file)
}
