//! What a shard keeps behind its lock: the index with its per-segment
//! accounting and the lease ends of its Processing keys, the log writer,
//! and the shard's clock floors. Every change to the index goes through
//! here, so the accounting that compaction decides on and the lease table
//! always match it.

use super::KeyRef;
use crate::clock::{Clock, Now};
use crate::engine::compaction::SegmentUsage;
use crate::engine::index::{Entry, Index, LeaseEnds};
use crate::engine::ledger::Ledger;
use crate::engine::segment::commit::GroupCommit;
use crate::engine::segment::hint::HintEntry;
use crate::engine::segment::writer::Writer;
use crate::engine::transition;
use crate::error::{Error, Result};
use crate::record::{self, Header, Kind, State};
use crate::stats::{bump, Counters};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Everything behind the shard's lock.
#[derive(Debug)]
pub(crate) struct ShardState {
    pub index: Index,
    /// The lease end, on the monotonic scale, of every Processing key.
    pub leases: LeaseEnds,
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
}

/// What the index says of a key, looked up without changing anything.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lookup {
    Absent,
    /// Expired (a TTL that passed, or an abandoned lease past its end +
    /// TTL), still in the index: only a writer drops it.
    Gone,
    /// Live, with its lease end (monotonic) if Processing.
    Live(Entry, u64),
}

impl ShardState {
    /// The state of a shard recovered at open, at `now`. Records expired by
    /// then leave the index and are counted in `counters`; every Processing
    /// record is read back once, to set its lease end by the rule across a
    /// restart ([`transition::lease_end`]) and its expiry.
    pub(crate) fn new(
        index: Index,
        log: Writer,
        now: Now,
        lengths: &BTreeMap<u32, u64>,
        counters: &Counters,
    ) -> Result<Self> {
        let mut state = ShardState {
            index,
            leases: LeaseEnds::default(),
            log,
            now_floor_ms: AtomicU64::new(now.wall_ms),
            monotonic_floor_ms: AtomicU64::new(now.monotonic_ms),
            usage: BTreeMap::new(),
            encode_buffer: Vec::new(),
            quota: None,
        };
        let before = state.index.len();
        state.index.retain(|entry| !entry.is_expired(now.wall_ms));
        counters.expirations.add((before - state.index.len()) as u64);
        let processing: Vec<(u128, Entry)> =
            state.index.iter().filter(|(_, entry)| entry.state == State::Processing).map(|(h, e)| (h, *e)).collect();
        for (hash, mut entry) in processing {
            let (header, _) = state.load(&entry, None)?;
            let lease_end_ms = transition::lease_end(&header, now);
            entry.deadline_ms = transition::gone_ms(&header);
            if transition::is_gone(&entry, lease_end_ms, now) {
                state.index.remove(&hash);
                bump(&counters.abandoned_expired);
            } else {
                state.index.insert(hash, entry);
                state.leases.insert(hash, lease_end_ms);
            }
        }
        state.rebuild_usage(lengths);
        Ok(state)
    }

    /// Recomputes the per-segment accounting from the index and the
    /// segments' lengths.
    fn rebuild_usage(&mut self, lengths: &BTreeMap<u32, u64>) {
        self.usage = lengths.iter().map(|(id, total_bytes)| (*id, SegmentUsage::with_total(*total_bytes))).collect();
        for entry in self.index.values() {
            self.usage.entry(entry.segment).or_default().add(entry);
        }
    }

    /// Points the index at a new record, keeping the accounting and the
    /// lease table (`lease_end_ms` for a Processing record); returns the
    /// entry it replaced.
    fn index_insert(&mut self, hash: u128, entry: Entry, lease_end_ms: Option<u64>) -> Option<Entry> {
        let old = self.index.insert(hash, entry);
        if let Some(old) = &old {
            self.usage.entry(old.segment).or_default().release(old);
        }
        self.usage.entry(entry.segment).or_default().add(&entry);
        match lease_end_ms {
            Some(end_ms) => self.leases.insert(hash, end_ms),
            None => self.leases.remove(hash),
        }
        old
    }

    /// Drops a key from the index, keeping the accounting. Returns the
    /// entry dropped; `None` also when, with quotas on, the record's scope
    /// could not be read back (an I/O error): the key then stays indexed,
    /// and counted, until a later try.
    pub(crate) fn index_remove(&mut self, hash: u128) -> Option<Entry> {
        self.index_drop(hash, None)
    }

    /// [`ShardState::index_remove`] of a key whose scope may be known.
    fn index_drop(&mut self, hash: u128, scope: Option<&[u8]>) -> Option<Entry> {
        if self.quota.is_some() && !self.quota_release(self.index.get(&hash)?, scope) {
            return None;
        }
        let old = self.index.remove(&hash)?;
        self.leases.remove(hash);
        self.usage.entry(old.segment).or_default().release(&old);
        Some(old)
    }

    /// The shard's time: the wall clock never earlier than any seen (for
    /// TTLs), and elapsed time (for leases).
    pub(crate) fn now(&self, clock: &dyn Clock) -> Now {
        // Read first: most calls find the floor already there (the same
        // millisecond), and a plain load leaves the cache line shared
        // between the threads reading the shard.
        let raise = |floor: &AtomicU64, reading: u64| {
            let seen = floor.load(Ordering::Acquire);
            if reading <= seen {
                seen
            } else {
                floor.fetch_max(reading, Ordering::AcqRel).max(reading)
            }
        };
        Now {
            wall_ms: raise(&self.now_floor_ms, clock.now_ms()),
            monotonic_ms: raise(&self.monotonic_floor_ms, clock.monotonic_ms()),
        }
    }

    /// The shard's wall-clock time for TTLs (see [`ShardState::now`]).
    pub(crate) fn now_ms(&self, clock: &dyn Clock) -> u64 {
        self.now(clock).wall_ms
    }

    /// The lease end (monotonic) of the key at `hash`, if Processing. Every
    /// Processing entry has one; were one missing, the lease would count as
    /// running, since refusing is safer than running a side effect twice.
    pub(crate) fn lease_end(&self, hash: u128) -> u64 {
        self.leases.get(hash).unwrap_or(u64::MAX)
    }

    /// What the index says of the key at `hash` at `now`, changing nothing
    /// (what a reader sharing the lock may do).
    pub(crate) fn lookup(&self, hash: u128, now: Now) -> Lookup {
        let Some(entry) = self.index.get(&hash).copied() else {
            return Lookup::Absent;
        };
        let lease_end_ms = if entry.state == State::Processing { self.lease_end(hash) } else { 0 };
        if transition::is_gone(&entry, lease_end_ms, now) {
            Lookup::Gone
        } else {
            Lookup::Live(entry, lease_end_ms)
        }
    }

    /// The index entry of a key and, if Processing, its lease end; the key
    /// is dropped (and counted) if it has expired: a TTL that passed, or an
    /// abandoned lease past its end + TTL.
    pub(crate) fn live_entry(&mut self, hash: u128, now: Now, counters: &Counters) -> Option<(Entry, u64)> {
        let Lookup::Live(entry, lease_end_ms) = self.lookup(hash, now) else {
            let entry = *self.index.get(&hash)?;
            let counter =
                if entry.state == State::Processing { &counters.abandoned_expired } else { &counters.expirations };
            if self.index_remove(hash).is_some() {
                bump(counter);
            }
            return None;
        };
        Some((entry, lease_end_ms))
    }

    /// Drops every Processing key whose lease ended and whose lease end +
    /// TTL has passed; returns how many. Walks only the lease table.
    pub(crate) fn expire_abandoned(&mut self, now: Now, counters: &Counters) -> u64 {
        let gone: Vec<u128> = self
            .leases
            .iter()
            .filter(|(hash, end_ms)| self.index.get(hash).is_some_and(|entry| transition::is_gone(entry, *end_ms, now)))
            .map(|(hash, _)| hash)
            .collect();
        let mut dropped = 0;
        for hash in &gone {
            if self.index_remove(*hash).is_some() {
                bump(&counters.abandoned_expired);
                dropped += 1;
            }
        }
        dropped
    }

    /// Appends `header` (at the next LSN) for `key` with `response`, and
    /// points the index at it (or drops the key for a tombstone).
    pub(crate) fn write(
        &mut self,
        key: &KeyRef<'_>,
        header: &Header,
        response: &[u8],
        commit: &GroupCommit,
        counters: &Counters,
        now: Now,
    ) -> Result<()> {
        let header = Header {
            scope_len: u16::try_from(key.scope.len()).expect("scope length checked against limits"),
            key_len: u16::try_from(key.key.len()).expect("key length checked against limits"),
            response_len: u32::try_from(response.len()).expect("response length checked against limits"),
            ..*header
        };
        let bytes = record::frame_bytes(key.scope.len(), key.key.len(), response.len());
        let admitted = self.quota_admit(key, &header, bytes, counters)?;
        let mut buffer = std::mem::take(&mut self.encode_buffer);
        buffer.clear();
        record::encode(&header, key.scope, key.key, response, &mut buffer);
        let appended = self.log.append(&buffer, header.lsn, commit, counters);
        self.encode_buffer = buffer;
        // Even a failed append may have rolled to a new segment.
        self.usage.entry(self.log.active.id).or_default().total_bytes = self.log.active.end;
        let appended = appended.inspect_err(|_| self.quota_give_back(key.scope, admitted))?;
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
                let old = self.index_insert(key.hash, entry, lease_end_ms);
                self.quota_settle(key.scope, old.as_ref(), admitted, &entry);
            }
            Kind::Tombstone => {
                self.index_drop(key.hash, Some(key.scope));
            }
        }
        Ok(())
    }

    /// The bytes of the checkpoint in the Processing record of `entry`
    /// for `key` (none without reading the log when the frame has room for
    /// no more than scope and key).
    pub(crate) fn stored_checkpoint(&self, entry: &Entry, key: &KeyRef<'_>) -> Result<Vec<u8>> {
        if u64::from(entry.frame_len) == record::frame_bytes(key.scope.len(), key.key.len(), 0) {
            return Ok(Vec::new());
        }
        let (header, frame) = self.load(entry, Some(key))?;
        Ok(record::body(&header, &frame).2.to_vec())
    }

    /// The record of `entry` (its header and its whole frame, borrowed from
    /// the segment's map where there is one), its CRC checked, and checked
    /// to belong to `key` when one is given.
    pub(crate) fn load(&self, entry: &Entry, key: Option<&KeyRef<'_>>) -> Result<(Header, Cow<'_, [u8]>)> {
        let offset = u64::from(entry.offset);
        let path = || self.log.path(entry.segment);
        let frame = self.log.read(entry.segment, offset, entry.frame_len as usize)?;
        let (header, _) = record::decode(&frame).map_err(|error| {
            let reason = match error {
                record::DecodeError::Truncated => "record is shorter than indexed",
                record::DecodeError::Invalid(reason) => reason,
            };
            Error::corruption(path(), offset, reason)
        })?;
        if header.lsn != entry.lsn {
            return Err(Error::corruption(path(), offset, "record LSN differs from the index"));
        }
        if header.kind != Kind::Put(entry.state) {
            return Err(Error::corruption(path(), offset, "record state differs from the index"));
        }
        if let Some(key) = key {
            let (scope, stored_key, _) = record::body(&header, &frame);
            if scope != key.scope || stored_key != key.key {
                return Err(Error::KeyHashCollision);
            }
        }
        Ok((header, frame))
    }
}
