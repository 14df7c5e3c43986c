//! The append side of a shard's log: the active segment and the sealed
//! ones, appending a frame (rolling to a new segment when the active one is
//! full), creating segment files crash-safely, and group commit — one fsync
//! shared by every caller that waits for it.
//!
//! The [`Writer`] lives behind its shard's lock; the [`GroupCommit`] is
//! shared outside it, so that callers wait for an fsync without holding up
//! writers.

use super::catalog::Catalog;
use super::header::{Mark, SegmentHeader, HEADER_BYTES};
use super::hint::HintBuilder;
use crate::error::{Error, Result};
use crate::io::{Storage, StorageFile};
use crate::stats::{bump, Counters};
use crate::telemetry::event;
use event_listener::{Event, EventListener, Listener};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// The segment being appended to.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub id: u32,
    pub file: Arc<dyn StorageFile>,
    /// End of the last whole record: where the next one goes.
    pub end: u64,
    /// The segment's hint so far, written when it is sealed (or at close).
    pub hint: HintBuilder,
}

/// Where an appended frame landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    pub segment: u32,
    pub offset: u32,
    pub frame_len: u32,
}

/// The files of one shard's log and the next LSN to write.
#[derive(Debug)]
pub(crate) struct Writer {
    dir: PathBuf,
    shard: u32,
    storage: Arc<dyn Storage>,
    segment_bytes: u64,
    pub active: ActiveSegment,
    pub sealed: BTreeMap<u32, Arc<dyn StorageFile>>,
    pub next_lsn: u64,
    /// The segments the shard must have, as stored in its catalog.
    pub catalog: Catalog,
}

impl Writer {
    /// A writer that continues the log found at open.
    #[expect(clippy::too_many_arguments, reason = "the parts of a recovered log")]
    pub(crate) fn new(
        dir: PathBuf,
        shard: u32,
        storage: Arc<dyn Storage>,
        segment_bytes: u64,
        active: ActiveSegment,
        sealed: BTreeMap<u32, Arc<dyn StorageFile>>,
        next_lsn: u64,
        catalog: Catalog,
    ) -> Self {
        Writer { dir, shard, storage, segment_bytes, active, sealed, next_lsn, catalog }
    }

    /// The path of segment `segment`.
    pub(crate) fn path(&self, segment: u32) -> PathBuf {
        super::segment_path(&self.dir, segment)
    }

    /// The open file of segment `segment`, active or sealed.
    pub(crate) fn file(&self, segment: u32) -> Option<&Arc<dyn StorageFile>> {
        if segment == self.active.id {
            Some(&self.active.file)
        } else {
            self.sealed.get(&segment)
        }
    }

    /// Appends one encoded frame with LSN `lsn` (the next LSN) to the active
    /// segment, rolling first if it would not fit. A failed write is cut
    /// back off the file so the log stays whole; if even that fails the
    /// shard is poisoned.
    pub(crate) fn append(
        &mut self,
        frame: &[u8],
        lsn: u64,
        commit: &GroupCommit,
        counters: &Counters,
    ) -> Result<Appended> {
        debug_assert_eq!(lsn, self.next_lsn);
        let frame_len = frame.len() as u64;
        if self.active.end + frame_len > self.segment_bytes {
            self.roll(commit, counters)?;
        }
        let offset = self.active.end;
        if let Err(error) = self.active.file.write_all_at(frame, offset) {
            if self.active.file.set_len(offset).is_err() {
                commit.poison();
            }
            return Err(Error::io("write", self.path(self.active.id), error));
        }
        self.active.end += frame_len;
        self.next_lsn = lsn.checked_add(1).ok_or_else(|| {
            commit.poison();
            Error::corruption(self.path(self.active.id), offset, "LSNs exhausted")
        })?;
        commit.written_lsn.store(lsn, Ordering::Release);
        bump(&counters.records_written);
        counters.bytes_written.add(frame_len);
        let offset = u32::try_from(offset).expect("segment_bytes is at most 4 GiB");
        let frame_len = u32::try_from(frame_len).expect("segment_bytes is at most 4 GiB");
        Ok(Appended { segment: self.active.id, offset, frame_len })
    }

    /// Seals the active segment (fsync) and starts the next one.
    fn roll(&mut self, commit: &GroupCommit, counters: &Counters) -> Result<()> {
        if let Err(error) = self.active.file.sync() {
            commit.poison();
            return Err(Error::io("fsync", self.path(self.active.id), error));
        }
        commit.synced(self.next_lsn.saturating_sub(1), counters);
        let id = self.active.id.checked_add(1).ok_or_else(|| Error::InvalidConfig("segment ids exhausted".into()))?;
        let file = create_segment(&*self.storage, &self.dir, self.shard, id, self.next_lsn)?;
        // The new segment exists before the catalog names it: a crash in
        // between leaves a segment one past the catalog, with no record,
        // which open deletes.
        let catalog = Catalog { last: id, ..self.catalog };
        if let Err(error) = catalog.store(&*self.storage, &self.dir) {
            let _deleted_here_or_at_open = self.storage.remove_file(&self.path(id));
            return Err(error);
        }
        self.catalog = catalog;
        let hint = HintBuilder::new(self.shard, id, self.next_lsn);
        let next = ActiveSegment { id, file, end: HEADER_BYTES as u64, hint };
        let mut previous = std::mem::replace(&mut self.active, next);
        previous.hint.write_logged(&*self.storage, &self.dir, &*previous.file, previous.end);
        self.sealed.insert(previous.id, previous.file);
        Ok(())
    }

    /// Writes the hint of the active segment as far as it is written (at
    /// close, once everything is durable); none for a segment without a
    /// record, which open reads at no cost.
    pub(crate) fn write_active_hint(&mut self) {
        let active = &mut self.active;
        if active.end > HEADER_BYTES as u64 {
            active.hint.write_logged(&*self.storage, &self.dir, &*active.file, active.end);
        }
    }
}

/// Creates segment `segment` of shard `shard`: header written and synced,
/// then the directory synced, so the file is never seen half-made after a
/// successful return.
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    segment: u32,
    lsn_floor: u64,
) -> Result<Arc<dyn StorageFile>> {
    let path = super::segment_path(dir, segment);
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

    /// LSN of the newest record written.
    pub(crate) fn written_lsn(&self) -> u64 {
        self.written_lsn.load(Ordering::Acquire)
    }

    /// Records that everything up to `lsn` is durable.
    fn synced(&self, lsn: u64, counters: &Counters) {
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
