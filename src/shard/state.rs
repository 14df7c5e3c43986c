//! What a shard keeps behind its lock: the index with its per-segment
//! accounting, the log writer, and the shard's time floor. Every change to
//! the index goes through here, so the accounting that compaction decides
//! on always matches it.

use super::KeyRef;
use crate::clock::Clock;
use crate::compaction::SegmentUsage;
use crate::error::{Error, Result};
use crate::index::{Entry, Index};
use crate::record::{self, Header, Kind};
use crate::segment::writer::{GroupCommit, Writer};
use crate::stats::{bump, Counters};
use std::collections::BTreeMap;

/// Everything behind the shard's lock.
#[derive(Debug)]
pub(crate) struct ShardState {
    pub index: Index,
    pub log: Writer,
    /// The largest time seen: the shard's clock never goes backwards.
    pub now_floor_ms: u64,
    /// Live-data accounting per segment (sealed and active), for compaction.
    pub usage: BTreeMap<u32, SegmentUsage>,
    encode_buffer: Vec<u8>,
    /// The record last read by [`ShardState::load`].
    pub read_buffer: Vec<u8>,
}

impl ShardState {
    /// The state of a shard recovered at open. Records expired by
    /// `now_floor_ms` leave the index; returns the state and how many left.
    pub(crate) fn new(mut index: Index, log: Writer, now_floor_ms: u64, lengths: &BTreeMap<u32, u64>) -> (Self, u64) {
        let before = index.len();
        index.retain(|entry| !entry.is_expired(now_floor_ms));
        let expired = (before - index.len()) as u64;
        let mut state = ShardState {
            index,
            log,
            now_floor_ms,
            usage: BTreeMap::new(),
            encode_buffer: Vec::new(),
            read_buffer: Vec::new(),
        };
        state.rebuild_usage(lengths);
        (state, expired)
    }

    /// Recomputes the per-segment accounting from the index and the
    /// segments' lengths.
    fn rebuild_usage(&mut self, lengths: &BTreeMap<u32, u64>) {
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
    pub(crate) fn index_remove(&mut self, hash: u128) -> Option<Entry> {
        let old = self.index.remove(&hash)?;
        self.usage.entry(old.segment).or_default().release(&old);
        Some(old)
    }

    /// The shard's time: the clock, but never earlier than any time seen.
    pub(crate) fn now_ms(&mut self, clock: &dyn Clock) -> u64 {
        self.now_floor_ms = self.now_floor_ms.max(clock.now_ms());
        self.now_floor_ms
    }

    /// The index entry of a key, dropping it if its TTL has passed.
    pub(crate) fn live_entry(&mut self, hash: u128, now: u64, counters: &Counters) -> Option<Entry> {
        let entry = *self.index.get(&hash)?;
        if entry.is_expired(now) {
            bump(&counters.expirations);
            self.index_remove(hash);
            return None;
        }
        Some(entry)
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
    ) -> Result<()> {
        let header = Header {
            scope_len: u16::try_from(key.scope.len()).expect("scope length checked against limits"),
            key_len: u16::try_from(key.key.len()).expect("key length checked against limits"),
            response_len: u32::try_from(response.len()).expect("response length checked against limits"),
            ..*header
        };
        let mut buffer = std::mem::take(&mut self.encode_buffer);
        buffer.clear();
        record::encode(&header, key.scope, key.key, response, &mut buffer);
        let appended = self.log.append(&buffer, header.lsn, commit, counters);
        self.encode_buffer = buffer;
        // Even a failed append may have rolled to a new segment.
        self.usage.entry(self.log.active.id).or_default().total_bytes = self.log.active.end;
        let appended = appended?;
        match header.kind {
            Kind::Put(record_state) => {
                let entry = Entry {
                    lsn: header.lsn,
                    token: header.token,
                    deadline_ms: header.deadline_ms,
                    segment: appended.segment,
                    offset: appended.offset,
                    frame_len: appended.frame_len,
                    state: record_state,
                };
                self.index_insert(key.hash, entry);
            }
            Kind::Tombstone => {
                self.index_remove(key.hash);
            }
        }
        Ok(())
    }

    /// Reads the record of `entry` into the read buffer and checks its CRC
    /// and, when given, that it belongs to `key`.
    pub(crate) fn load(&mut self, entry: &Entry, key: Option<&KeyRef<'_>>) -> Result<Header> {
        let offset = u64::from(entry.offset);
        let path = || self.log.path(entry.segment);
        let file = self
            .log
            .file(entry.segment)
            .ok_or_else(|| Error::corruption(path(), offset, "index points at a missing segment"))?;
        self.read_buffer.resize(entry.frame_len as usize, 0);
        file.read_exact_at(&mut self.read_buffer, offset).map_err(|error| Error::io("read", path(), error))?;
        let (header, _) = record::decode(&self.read_buffer).map_err(|error| {
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
            let (scope, stored_key, _) = record::body(&header, &self.read_buffer);
            if scope != key.scope || stored_key != key.key {
                return Err(Error::KeyHashCollision);
            }
        }
        Ok(header)
    }
}
