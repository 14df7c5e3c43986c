//! Group commit: how far a shard's log is written and durable, and one
//! fsync shared by every caller that waits for it. It lives outside the
//! shard's lock, so that callers wait for an fsync without holding up
//! writers.

use crate::engine::segment::header::Mark;
use crate::engine::telemetry::event;
use crate::error::{Error, Result};
use crate::io::StorageFile;
use crate::stats::{bump, Counters};
use event_listener::{Event, EventListener, Listener};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// The active segment and the newest written LSN, taken together under the
/// shard's lock: an fsync of `file` makes everything up to `written_lsn`
/// durable (a roll fsyncs the sealed segment itself).
#[derive(Debug)]
pub(crate) struct ActiveSnapshot {
    pub file: Arc<dyn StorageFile>,
    pub path: PathBuf,
    pub written_lsn: u64,
    /// The active segment's end when `written_lsn` was read.
    pub end: u64,
}

/// What a caller waiting for durability does next.
#[derive(Debug)]
pub(crate) enum Turn {
    /// The record is durable.
    Durable,
    /// Run the next fsync for everybody.
    Lead,
    /// Wait for the running fsync, then ask again.
    Follow(EventListener),
}

/// Ends a lead when dropped, even if the fsync panicked.
struct EndLead<'a>(&'a GroupCommit);

impl Drop for EndLead<'_> {
    fn drop(&mut self) {
        *self.0.leader.lock() = false;
        self.0.done.notify(usize::MAX);
    }
}

/// How far a shard's log is written and durable, and who is running the
/// fsync for everybody. A failed write or fsync poisons it: an fsync that
/// failed cannot be retried into success, so the shard refuses work until
/// the store is reopened.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    shard: u32,
    /// Whether a caller is running the fsync for everybody.
    leader: Mutex<bool>,
    /// Notified when that fsync ends.
    done: Event,
    /// LSN of the newest record written to the operating system.
    written_lsn: AtomicU64,
    /// LSN up to which every record is on stable storage.
    durable_lsn: AtomicU64,
    poisoned: AtomicBool,
    /// The round of the next durable mark.
    round: AtomicU32,
}

impl GroupCommit {
    /// Everything up to `recovered_lsn` is already durable (recovery synced
    /// it); the next durable mark is of round `next_round`.
    pub(crate) fn new(shard: u32, recovered_lsn: u64, next_round: u32) -> Self {
        GroupCommit {
            shard,
            leader: Mutex::new(false),
            done: Event::new(),
            written_lsn: AtomicU64::new(recovered_lsn),
            durable_lsn: AtomicU64::new(recovered_lsn),
            poisoned: AtomicBool::new(false),
            round: AtomicU32::new(next_round),
        }
    }

    pub(crate) fn poison(&self) {
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            event!(
                error,
                shard = self.shard,
                "shard poisoned: a write or fsync failed; every call on it now fails until the store is reopened"
            );
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Whether records were written that are not yet durable.
    pub(crate) fn is_dirty(&self) -> bool {
        self.written_lsn.load(Ordering::Acquire) > self.durable_lsn.load(Ordering::Acquire)
    }

    /// LSN up to which every record is on stable storage.
    pub(crate) fn durable_lsn(&self) -> u64 {
        self.durable_lsn.load(Ordering::Acquire)
    }

    /// Records that the record `lsn` has been written (to the OS).
    pub(crate) fn written(&self, lsn: u64) {
        self.written_lsn.store(lsn, Ordering::Release);
    }

    /// LSN of the newest record written.
    pub(crate) fn written_lsn(&self) -> u64 {
        self.written_lsn.load(Ordering::Acquire)
    }

    /// Records that everything up to `lsn` is durable.
    pub(crate) fn synced(&self, lsn: u64, counters: &Counters) {
        bump(&counters.fsyncs);
        let before = self.durable_lsn.fetch_max(lsn, Ordering::AcqRel);
        let batch = lsn.saturating_sub(before);
        counters.records_synced.add(batch);
        #[expect(clippy::cast_precision_loss, reason = "a batch is far below 2^52 records")]
        counters.fsync_batch.record(batch as f64);
    }

    /// Makes every record up to `lsn` durable, sharing fsyncs between
    /// callers: one caller at a time leads and fsyncs everything written so
    /// far; the others wait for it to end and are all woken together.
    /// Records written while an fsync runs ride the next one. `active` gives
    /// the active segment (file and path) and the written LSN, read together
    /// under the shard's lock, so that a roll cannot slip between them.
    pub(crate) fn sync_to(&self, lsn: u64, counters: &Counters, active: impl Fn() -> ActiveSnapshot) -> Result<()> {
        loop {
            match self.turn(lsn)? {
                Turn::Durable => return Ok(()),
                Turn::Lead => self.lead(counters, &active)?,
                Turn::Follow(listener) => listener.wait(),
            }
        }
    }

    /// One step of waiting for `lsn` to be durable: it is already, or this
    /// caller must [`lead`](GroupCommit::lead) the next fsync, or it waits
    /// for the running one and asks again. Blocking and async callers share
    /// this, so an async caller needs a thread only to lead.
    pub(crate) fn turn(&self, lsn: u64) -> Result<Turn> {
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(Turn::Durable);
        }
        let mut leading = self.leader.lock();
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(Turn::Durable);
        }
        if self.is_poisoned() {
            return Err(Error::Poisoned { shard: self.shard });
        }
        if *leading {
            // Listening under the leader's lock: the leader clears the flag
            // under it before notifying, so this listener is not missed.
            return Ok(Turn::Follow(self.done.listen()));
        }
        *leading = true;
        Ok(Turn::Lead)
    }

    /// Runs the fsync this caller leads (after [`Turn::Lead`]), then ends
    /// the lead and wakes the followers, whatever the outcome.
    pub(crate) fn lead(&self, counters: &Counters, active: &impl Fn() -> ActiveSnapshot) -> Result<()> {
        let _end = EndLead(self);
        self.sync_written(counters, active)
    }

    /// One fsync of the active segment, covering every record written
    /// before it starts. Only the leader calls it.
    fn sync_written(&self, counters: &Counters, active: &impl Fn() -> ActiveSnapshot) -> Result<()> {
        let snapshot = active();
        if let Err(error) = snapshot.file.sync() {
            self.poison();
            return Err(Error::io("fsync", snapshot.path, error));
        }
        self.synced(snapshot.written_lsn, counters);
        // Only now, after the fsync, is the mark true; it becomes durable
        // with the next one.
        let mark = Mark { synced_end: snapshot.end, round: self.round.fetch_add(1, Ordering::AcqRel) };
        if let Err(error) = snapshot.file.write_all_at(&mark.encode(), mark.offset()) {
            self.poison();
            return Err(Error::io("write", snapshot.path, error));
        }
        Ok(())
    }
}
