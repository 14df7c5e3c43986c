//! What a shard keeps behind its lock: the index table with its
//! per-segment accounting and the lease table of its Processing keys, the
//! log writer, and the shard's clock floors. Every change to the index goes through
//! here, so the accounting that compaction decides on and the lease table
//! always match it.

use super::listing::Listings;
use super::KeyRef;
use crate::clock::{Clock, Now};
use crate::engine::compaction_policy::{SegmentUsage, UsageTally};
use crate::engine::entry::{Entry, Lease, Leases};
use crate::engine::frame;
use crate::engine::index::{tag, Address, Table};
use crate::engine::ledger::Ledger;
use crate::engine::recovery::{Frames, Replayed};
use crate::engine::segment::commit::GroupCommit;
use crate::engine::segment::hint::HintEntry;
use crate::engine::segment::writer::Writer;
use crate::engine::telemetry::{bump, Counters};
use crate::engine::transition;
use crate::error::{Error, Result};
use crate::record::{Header, Kind, State};
use parking_lot::Mutex;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(test)]
thread_local! {
    /// Records this thread read from the log: what the unit tests of
    /// listings count.
    pub(crate) static RECORDS_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Everything behind the shard's lock.
#[derive(Debug)]
pub(crate) struct ShardState {
    /// Where the newest record of each key is (a tag and an address).
    pub index: Table,
    /// The entry and lease end of every Processing key.
    pub leases: Leases,
    pub log: Writer,
    /// The largest wall-clock time seen: TTL time never goes backwards (see
    /// the argument in [`crate::clock`]). Atomic, so that readers sharing
    /// the lock raise it too.
    now_floor_ms: AtomicU64,
    /// The largest monotonic reading seen (a correct clock never needs it).
    monotonic_floor_ms: AtomicU64,
    /// Live-data accounting per segment (sealed and active), for compaction.
    pub usage: BTreeMap<u32, SegmentUsage>,
    encode_buffer: Vec<u8>,
    /// The store's per-scope quota ledger, `None` when no quota is set.
    pub(crate) quota: Option<Arc<Ledger>>,
    /// The listings made so far (see [`super::listing`]): a writer, which
    /// holds the lock alone, keeps them without taking this mutex; pages,
    /// which share the lock, take it to make one or to drop a key.
    pub(crate) listings: Mutex<Listings>,
}

/// The newest record of a key, read back: its entry, its lease end
/// (monotonic) if Processing, its header and its whole frame (borrowed
/// from the segment's map where there is one).
#[derive(Debug)]
pub(crate) struct Found<'a> {
    pub entry: Entry,
    pub lease_end_ms: u64,
    pub header: Header,
    pub frame: Cow<'a, [u8]>,
}

/// `floor` raised to `reading`, and the floor after it. Read first: most
/// calls find the floor already there (the same millisecond), and a plain
/// load leaves the cache line shared between the threads reading the shard.
fn raise(floor: &AtomicU64, reading: u64) -> u64 {
    let seen = floor.load(Ordering::Acquire);
    if reading <= seen {
        seen
    } else {
        floor.fetch_max(reading, Ordering::AcqRel).max(reading)
    }
}

/// What the index says of a key, looked up without changing anything.
#[derive(Debug)]
pub(crate) enum Lookup<'a> {
    Absent,
    /// Expired (a TTL that passed, or an abandoned lease past its end +
    /// TTL), still in the index: only a writer drops it.
    Gone(Entry),
    Live(Found<'a>),
}

impl ShardState {
    /// The state of a shard recovered at open, at `now`: the newest record
    /// of every key picked from the frames recovery found, and the table
    /// built from them in one pass, a region of the table at a time (the
    /// order they come in). Records expired by then stay out and are
    /// counted in `counters`; every Processing record is read back once,
    /// to set its lease end by the rule across a restart
    /// ([`transition::lease_end`]) and its expiry.
    pub(crate) fn new(
        frames: Frames,
        log: Writer,
        now: Now,
        lengths: &BTreeMap<u32, u64>,
        counters: &Counters,
    ) -> Result<Self> {
        let mut state = ShardState {
            index: Table::default(),
            leases: Leases::default(),
            log,
            now_floor_ms: AtomicU64::new(now.wall_ms),
            monotonic_floor_ms: AtomicU64::new(now.monotonic_ms),
            usage: lengths.iter().map(|(id, total_bytes)| (*id, SegmentUsage::with_total(*total_bytes))).collect(),
            encode_buffer: Vec::new(),
            quota: None,
            listings: Mutex::default(),
        };
        let newest = frames.finish();
        let mut table = Table::filling(newest.len());
        let mut tally = UsageTally::new(&state.usage);
        for found in newest.iter() {
            if let Some((at, deadline_ms)) = state.recovered(&found, now, counters)? {
                table.insert(tag(found.hash), at);
                tally.add(&mut state.usage, at.segment, at.len, deadline_ms);
            }
        }
        tally.finish(&mut state.usage);
        state.index = table.finish();
        Ok(state)
    }

    /// The newest record of a key found at open: where it is and when it
    /// reads absent, for the table and the accounting; `None` if it is
    /// expired at `now` (counted in `counters`). A Processing key goes
    /// into the lease table.
    fn recovered(&mut self, found: &Replayed, now: Now, counters: &Counters) -> Result<Option<(Address, u64)>> {
        // Recovery keeps only puts.
        let Kind::Put(record_state) = found.kind else { return Ok(None) };
        let at = found.address();
        let mut deadline_ms = found.deadline_ms;
        if record_state == State::Processing {
            let (header, _) = self.load_at(at, found.lsn, record_state, None)?;
            let end_ms = transition::lease_end(&header, now);
            let entry = transition::entry(&header, at).ok_or_else(|| {
                Error::corruption(self.log.path(at.segment), at.offset.into(), "index points at a tombstone")
            })?;
            if transition::is_gone(&entry, end_ms, now) {
                bump(&counters.abandoned_expired);
                return Ok(None);
            }
            deadline_ms = entry.deadline_ms;
            self.leases.insert(found.hash, Lease { entry, end_ms });
        } else if record_state.is_expired(deadline_ms, now.wall_ms) {
            bump(&counters.expirations);
            return Ok(None);
        }
        Ok(Some((at, deadline_ms)))
    }

    /// Points the index at a new record in place of `old` (the key's
    /// current entry, if it has one), keeping the accounting and the lease
    /// table (`lease_end_ms` for a Processing record).
    fn index_insert(&mut self, hash: u128, old: Option<&Entry>, entry: Entry, lease_end_ms: Option<u64>) -> Result<()> {
        match old {
            Some(old) => {
                if !self.index.replace(tag(hash), old.segment, old.offset, entry.address()) {
                    return Err(Error::corruption(
                        self.log.path(old.segment),
                        old.offset.into(),
                        "index entry missing",
                    ));
                }
                self.usage.entry(old.segment).or_default().release(old);
            }
            None => self.index.insert(tag(hash), entry.address()),
        }
        self.usage.entry(entry.segment).or_default().add(&entry);
        match lease_end_ms {
            Some(end_ms) => self.leases.insert(hash, Lease { entry, end_ms }),
            None => self.leases.remove(hash),
        }
        Ok(())
    }

    /// Drops the entry `entry` of the key at `hash` from the index, keeping
    /// the accounting. Returns whether it did: not, with quotas on, when
    /// the record's scope could not be read back (an I/O error); the key
    /// then stays indexed, and counted, until a later try.
    pub(crate) fn index_remove(&mut self, hash: u128, entry: &Entry) -> bool {
        self.index_drop(hash, entry, None)
    }

    /// [`ShardState::index_remove`] of a key that may be known.
    fn index_drop(&mut self, hash: u128, entry: &Entry, key: Option<&KeyRef<'_>>) -> bool {
        if self.quota.is_some() && !self.quota_release(entry, key) {
            return false;
        }
        if !self.index.remove(tag(hash), entry.segment, entry.offset) {
            return false;
        }
        if entry.state == State::Processing {
            self.leases.remove(hash);
        }
        self.usage.entry(entry.segment).or_default().release(entry);
        if let Some(key) = key {
            self.listed(key, None, &[]);
        }
        true
    }

    /// Keeps the listings in step with a write of `key`: its record's state
    /// and answer, or `None` when it has none any more.
    fn listed(&mut self, key: &KeyRef<'_>, state: Option<State>, answer: &[u8]) {
        let listings = self.listings.get_mut();
        if listings.is_empty() {
            return;
        }
        let staged = state == Some(State::Completed) && crate::record::is_staged(answer);
        listings.noted(key.keyspace, key.scope, key.key, state.is_some(), staged);
    }

    /// The shard's time: the wall clock never earlier than any seen (for
    /// TTLs), and elapsed time (for leases).
    pub(crate) fn now(&self, clock: &dyn Clock) -> Now {
        Now {
            wall_ms: raise(&self.now_floor_ms, clock.now_ms()),
            monotonic_ms: raise(&self.monotonic_floor_ms, clock.monotonic_ms()),
        }
    }

    /// [`ShardState::now`] for a decision on a Completed or Failed record,
    /// which only the wall clock (TTL) decides: the monotonic reading is
    /// the floor, not read from the clock, and must not decide anything.
    pub(crate) fn now_for_finished(&self, clock: &dyn Clock) -> Now {
        Now {
            wall_ms: raise(&self.now_floor_ms, clock.now_ms()),
            monotonic_ms: self.monotonic_floor_ms.load(Ordering::Acquire),
        }
    }

    /// The shard's wall-clock time for TTLs (see [`ShardState::now`]).
    pub(crate) fn now_ms(&self, clock: &dyn Clock) -> u64 {
        self.now(clock).wall_ms
    }

    /// The lease end (monotonic) of the Processing key at `hash`. Every
    /// Processing entry has one; were one missing, the lease would count as
    /// running, since refusing is safer than running a side effect twice.
    pub(crate) fn lease_end(&self, hash: u128) -> u64 {
        self.leases.get(hash).map_or(u64::MAX, |lease| lease.end_ms)
    }

    /// The newest record of `key`, whatever its time: each entry with the
    /// key's tag is read back until one holds the key.
    pub(crate) fn find(&self, key: &KeyRef<'_>) -> Result<Option<Found<'_>>> {
        for at in self.index.candidates(tag(key.hash)) {
            let (header, frame) = self.read_at(at)?;
            let (scope, stored_key, _) = header.body(&frame);
            if header.keyspace != key.keyspace || scope != key.scope || stored_key != key.key {
                continue;
            }
            let entry = transition::entry(&header, at).ok_or_else(|| {
                Error::corruption(self.log.path(at.segment), at.offset.into(), "index points at a tombstone")
            })?;
            let lease_end_ms = if entry.state == State::Processing { self.lease_end(key.hash) } else { 0 };
            return Ok(Some(Found { entry, lease_end_ms, header, frame }));
        }
        Ok(None)
    }

    /// What the index says of `key` at `now`, changing nothing (what a
    /// reader sharing the lock may do).
    pub(crate) fn lookup(&self, key: &KeyRef<'_>, now: Now) -> Result<Lookup<'_>> {
        Ok(match self.find(key)? {
            None => Lookup::Absent,
            Some(found) if transition::is_gone(&found.entry, found.lease_end_ms, now) => Lookup::Gone(found.entry),
            Some(found) => Lookup::Live(found),
        })
    }

    /// The live record of `key`; the key is dropped (and counted) if it
    /// has expired: a TTL that passed, or an abandoned lease past its end
    /// + TTL.
    pub(crate) fn live(&mut self, key: &KeyRef<'_>, now: Now, counters: &Counters) -> Result<Option<Found<'_>>> {
        let gone = match self.lookup(key, now)? {
            Lookup::Absent => return Ok(None),
            Lookup::Gone(entry) => entry,
            Lookup::Live(_) => return self.find(key),
        };
        let counter = if gone.state == State::Processing { &counters.abandoned_expired } else { &counters.expirations };
        if self.index_drop(key.hash, &gone, Some(key)) {
            bump(counter);
        }
        Ok(None)
    }

    /// The live entry and lease end of the Processing key at `hash`, from
    /// the lease table: what a lease holder's call checks its token
    /// against. A lease abandoned past its end + TTL is dropped (and
    /// counted) here.
    pub(crate) fn live_lease(&mut self, key: &KeyRef<'_>, now: Now, counters: &Counters) -> Option<Lease> {
        let lease = *self.leases.get(key.hash)?;
        if transition::is_gone(&lease.entry, lease.end_ms, now) {
            if self.index_drop(key.hash, &lease.entry, Some(key)) {
                bump(&counters.abandoned_expired);
            }
            return None;
        }
        Some(lease)
    }

    /// Drops every Processing key whose lease ended and whose lease end +
    /// TTL has passed; returns how many. Walks only the lease table.
    pub(crate) fn expire_abandoned(&mut self, now: Now, counters: &Counters) -> u64 {
        let gone: Vec<(u128, Entry)> = self
            .leases
            .iter()
            .filter(|(_, lease)| transition::is_gone(&lease.entry, lease.end_ms, now))
            .map(|(hash, lease)| (hash, lease.entry))
            .collect();
        let mut dropped = 0;
        for (hash, entry) in &gone {
            if self.index_remove(*hash, entry) {
                bump(&counters.abandoned_expired);
                dropped += 1;
            }
        }
        dropped
    }

    /// Appends `header` (at the next LSN) for `key` with `response`, and
    /// points the index at it in place of `old`, the key's current entry
    /// (or drops the key for a tombstone).
    #[expect(clippy::too_many_arguments, reason = "the record, its key's entry and the shard's context")]
    pub(crate) fn write(
        &mut self,
        key: &KeyRef<'_>,
        old: Option<&Entry>,
        header: &Header,
        response: &[u8],
        commit: &GroupCommit,
        counters: &Counters,
        now: Now,
    ) -> Result<()> {
        let header = Header {
            keyspace: key.keyspace,
            scope_len: u16::try_from(key.scope.len()).expect("scope length checked against limits"),
            key_len: u16::try_from(key.key.len()).expect("key length checked against limits"),
            response_len: u32::try_from(response.len()).expect("response length checked against limits"),
            ..*header
        };
        let bytes = crate::format::frame_bytes(key.scope.len(), key.key.len(), response.len());
        let admitted = self.quota_admit(key, old.is_some(), &header, bytes, counters)?;
        let mut buffer = std::mem::take(&mut self.encode_buffer);
        buffer.clear();
        frame::encode(&header, key.scope, key.key, response, &mut buffer);
        let appended = self.log.append(&buffer, header.lsn, commit, counters);
        self.encode_buffer = buffer;
        // Even a failed append may have rolled to a new segment.
        self.usage.entry(self.log.active.id).or_default().total_bytes = self.log.active.end;
        let appended = appended.inspect_err(|_| self.quota_give_back(key, admitted))?;
        let hinted = HintEntry::of_frame(key.hash, &header, appended.offset.into(), appended.frame_len.into());
        self.log.active.hint.push(&hinted, header.updated_ms, hinted.is_claim());
        match header.kind {
            Kind::Put(record_state) => {
                let entry = Entry {
                    lsn: header.lsn,
                    token: header.token,
                    deadline_ms: transition::gone_ms(&header),
                    segment: appended.segment,
                    offset: appended.offset,
                    frame_len: appended.frame_len,
                    state: record_state,
                };
                let lease_end_ms = (record_state == State::Processing).then(|| transition::lease_end(&header, now));
                self.index_insert(key.hash, old, entry, lease_end_ms)?;
                self.quota_settle(key, old, admitted, &entry);
                self.listed(key, Some(record_state), response);
            }
            Kind::Tombstone => {
                if let Some(old) = old {
                    self.index_drop(key.hash, old, Some(key));
                }
            }
        }
        Ok(())
    }

    /// The bytes of the checkpoint in the Processing record of `entry`
    /// for `key` (none without reading the log when the frame has room for
    /// no more than scope and key).
    pub(crate) fn stored_checkpoint(&self, entry: &Entry, key: &KeyRef<'_>) -> Result<Vec<u8>> {
        if u64::from(entry.frame_len) == crate::format::frame_bytes(key.scope.len(), key.key.len(), 0) {
            return Ok(Vec::new());
        }
        let (header, frame) = self.load(entry, Some(key))?;
        Ok(header.body(&frame).2.to_vec())
    }

    /// The record of `entry` (its header and its whole frame, borrowed from
    /// the segment's map where there is one), its CRC checked, and checked
    /// to belong to `key` when one is given.
    pub(crate) fn load(&self, entry: &Entry, key: Option<&KeyRef<'_>>) -> Result<(Header, Cow<'_, [u8]>)> {
        self.load_at(entry.address(), entry.lsn, entry.state, key)
    }

    /// [`ShardState::load`] of the record at `at`, which must have LSN
    /// `lsn` and state `state`.
    fn load_at(
        &self,
        at: Address,
        lsn: u64,
        state: State,
        key: Option<&KeyRef<'_>>,
    ) -> Result<(Header, Cow<'_, [u8]>)> {
        let offset = u64::from(at.offset);
        let path = || self.log.path(at.segment);
        let (header, frame) = self.read_at(at)?;
        if header.lsn != lsn {
            return Err(Error::corruption(path(), offset, "record LSN differs from the index"));
        }
        if header.kind != Kind::Put(state) {
            return Err(Error::corruption(path(), offset, "record state differs from the index"));
        }
        if let Some(key) = key {
            let (scope, stored_key, _) = header.body(&frame);
            if header.keyspace != key.keyspace || scope != key.scope || stored_key != key.key {
                return Err(Error::KeyHashCollision);
            }
        }
        Ok((header, frame))
    }

    /// The record at `at` (its header and its whole frame), its CRC
    /// checked.
    pub(crate) fn read_at(&self, at: Address) -> Result<(Header, Cow<'_, [u8]>)> {
        #[cfg(test)]
        RECORDS_READ.with(|read| read.set(read.get() + 1));
        let offset = u64::from(at.offset);
        let frame = self.log.read(at.segment, offset, at.len as usize)?;
        let (header, _) = frame::decode(&frame).map_err(|error| {
            let reason = match error {
                frame::DecodeError::Truncated => "record is shorter than indexed",
                frame::DecodeError::Invalid(reason) => reason,
            };
            Error::corruption(self.log.path(at.segment), offset, reason)
        })?;
        Ok((header, frame))
    }
}
