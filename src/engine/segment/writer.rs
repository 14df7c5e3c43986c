//! The append side of a shard's log: the active segment and the sealed
//! ones, appending a frame (rolling to a new segment when the active one is
//! full), creating segment files crash-safely, and reading records back
//! (through a memory map where the storage offers one). Group commit, one
//! fsync shared by every caller that waits for it, is in `commit`.
//!
//! The active segment is zero-filled ahead of the write position, a
//! [`ALLOCATION_STEP`] at a time: a record then lands in space the file
//! already has, so the fsync that makes it durable commits data only, not a
//! new file length, and a full disk fails the zero-fill (nothing of the
//! record written) rather than the record. Unless every record is synced
//! as it is written ([`crate::Durability::Sync`]), records are then copied
//! into the segment's writable map (`pwrite` where the storage maps
//! nothing), which puts them in the page cache as `pwrite` would, without a
//! system call. Under `Sync` the map serves reads only (a page written
//! through a map and then synced is write-protected again, so the next
//! record into it takes a page fault that waits on the page's writeback;
//! and on a copy-on-write file system a full disk there would end the
//! process with `SIGBUS`, docs/benchmarks.md). There, where the file
//! system overwrites in place
//! ([`StorageFile::overwrites_in_place`](crate::io::StorageFile::overwrites_in_place)),
//! a record is staged in the group commit, under the shard's lock but
//! without a system call, and the batch that makes it durable writes every
//! record staged with one `pwrite` before its fsync; reads of a staged
//! record copy it from there. Elsewhere each record is written with a
//! `pwrite` of its own under the shard's lock, which a full disk can
//! refuse (the record is then cut back and the call fails, the store goes
//! on). A staged write can meet no full disk (its space is zero-filled and
//! the file system keeps it); any other failure of it fails its batch and
//! poisons the shard, as a failed fsync does.
//! Sealing trims the zeros off and maps the sealed segment read-only; open
//! takes a zero tail for space never written, not for damage.
//!
//! The [`Writer`] lives behind its shard's lock.

use crate::engine::segment::catalog::Catalog;
use crate::engine::segment::commit::GroupCommit;
use crate::engine::segment::header::{SegmentHeader, HEADER_BYTES};
use crate::engine::segment::hint::HintBuilder;
use crate::engine::telemetry::{bump, Counters};
use crate::error::{Error, Result};
use crate::io::{Map, Storage, StorageFile};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How far ahead of the write position the active segment is zero-filled.
pub(crate) const ALLOCATION_STEP: u64 = 1 << 20;
/// Zeros to fill with (a static in zero-initialised memory: it costs no
/// memory until read, and then only the kernel's shared zero page).
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];
const _: () = assert!(ZEROS.len() as u64 == ALLOCATION_STEP);

/// How many zeros one `write` fills where records are written with
/// `pwrite` (under `Sync`), rather than through a map.
///
/// 16 KiB, not the whole step: the page cache can keep a file's pages in
/// folios as large as the writes that made them (ext4 on Linux 6.18, where
/// this was measured), and each later small write into a folio walks all
/// of its blocks, as does each fsync's writeback. Zeros written 1 MiB at a
/// time made every record's `pwrite` over them cost about twice the CPU of
/// one over zeros written 16 KiB at a time (4.00 and 4.20 against 2.20
/// and 1.70 µs, each write beside a thread that fdatasyncs the file over
/// and over, `benches/zero_fill.rs`); 128 tasks of `group_commit` made
/// 1.6–1.8 times as many durable claims + completes (docs/benchmarks.md).
/// Records written through a map fare the other way round (fewer, larger
/// page faults): there the step is one write. (Where a map cannot be
/// made, those records fall back to `pwrite` over the 1 MiB zeros.)
const PWRITE_FILL: u64 = 16 << 10;
const _: () = assert!(ALLOCATION_STEP.is_multiple_of(PWRITE_FILL));

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
    /// The active segment's file length: its records, then zeros.
    allocated: u64,
    pub sealed: BTreeMap<u32, Arc<dyn StorageFile>>,
    /// A read-only map of every segment whose storage maps files, each no
    /// longer than its file (see `io::map` for why that holds).
    maps: BTreeMap<u32, Map>,
    pub next_lsn: u64,
    /// The segments the shard must have, as stored in its catalog.
    pub catalog: Catalog,
    /// Whether records go into the active segment through its map (see the
    /// module docs) rather than with `pwrite`.
    map_writes: bool,
    /// Under `Sync`, the group commit that stages records for its batches
    /// to write (see the module docs); set by [`Writer::stage_into`].
    staging: Option<Arc<GroupCommit>>,
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
        map_writes: bool,
    ) -> Result<Self> {
        let path = crate::engine::segment::segment_path(&dir, active.id);
        let allocated = active.file.len().map_err(|error| Error::io("stat", &path, error))?.max(active.end);
        let mut writer = Writer {
            dir,
            shard,
            storage,
            segment_bytes,
            active,
            allocated,
            sealed,
            maps: BTreeMap::new(),
            next_lsn,
            catalog,
            map_writes,
            staging: None,
        };
        let ids: Vec<u32> = writer.sealed.keys().copied().chain([writer.active.id]).collect();
        for id in ids {
            writer.remap(id);
        }
        Ok(writer)
    }

    /// Records are staged in `commit` from now on, for its batches to
    /// write, rather than written one by one (under `Sync`).
    pub(crate) fn stage_into(&mut self, commit: Arc<GroupCommit>) {
        self.staging = Some(commit);
    }

    /// The active segment's file length: its records, then the zeros
    /// filled ahead of them (what the file takes on disk).
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The path of segment `segment`.
    pub(crate) fn path(&self, segment: u32) -> PathBuf {
        crate::engine::segment::segment_path(&self.dir, segment)
    }

    /// The open file of segment `segment`, active or sealed.
    pub(crate) fn file(&self, segment: u32) -> Option<&Arc<dyn StorageFile>> {
        if segment == self.active.id {
            Some(&self.active.file)
        } else {
            self.sealed.get(&segment)
        }
    }

    /// Maps segment `segment` again at its file's current length, writable
    /// if it is the active segment, records are written through the map and
    /// its file may be written; without a
    /// map (the storage maps nothing, or mapping failed) its records are
    /// read with `pread` and written with `pwrite`.
    fn remap(&mut self, segment: u32) {
        self.maps.remove(&segment);
        let Some(file) = self.file(segment) else { return };
        let writable = segment == self.active.id && self.map_writes;
        let map = match file.map(writable) {
            Ok(map) => map,
            // A file opened for reading only maps for reading only.
            Err(_) if writable => file.map(false).ok().flatten(),
            Err(_) => None,
        };
        if let Some(map) = map {
            self.maps.insert(segment, map);
        }
    }

    /// Puts `file` in place of sealed segment `segment` (a compaction
    /// rewrote it), with its map.
    pub(crate) fn replace_sealed(&mut self, segment: u32, file: Arc<dyn StorageFile>) {
        self.sealed.insert(segment, file);
        self.remap(segment);
    }

    /// Forgets sealed segment `segment` (a compaction dropped it).
    pub(crate) fn remove_sealed(&mut self, segment: u32) {
        self.sealed.remove(&segment);
        self.maps.remove(&segment);
    }

    /// The `len` bytes at `offset` of segment `segment`: borrowed from its
    /// map, or read into a new buffer.
    ///
    /// # Errors
    /// [`Error::Corruption`] for a segment the shard does not have; the
    /// read's I/O error (a record past the end of its file).
    pub(crate) fn read(&self, segment: u32, offset: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        if let Some(commit) = self.staging.as_ref().filter(|_| segment == self.active.id) {
            if let Some(bytes) = commit.staged(offset, len) {
                return Ok(Cow::Owned(bytes));
            }
        }
        if let Some(bytes) = self.maps.get(&segment).and_then(|map| map.get(offset, len)) {
            return Ok(Cow::Borrowed(bytes));
        }
        let file = self
            .file(segment)
            .ok_or_else(|| Error::corruption(self.path(segment), offset, "index points at a missing segment"))?;
        let mut buffer = vec![0; len];
        file.read_exact_at(&mut buffer, offset).map_err(|error| Error::io("read", self.path(segment), error))?;
        Ok(Cow::Owned(buffer))
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
            self.roll(commit)?;
        }
        let offset = self.active.end;
        if offset + frame_len > self.allocated {
            self.allocate(offset + frame_len, commit)?;
        }
        let staged = self.staging.is_some();
        let mapped = !staged && self.maps.get_mut(&self.active.id).is_some_and(|map| map.write(offset, frame));
        if !mapped && !staged {
            if let Err(error) = self.active.file.write_all_at(frame, offset) {
                self.cut_back(offset, commit);
                return Err(Error::io("write", self.path(self.active.id), error));
            }
        }
        self.active.end += frame_len;
        self.next_lsn = lsn.checked_add(1).ok_or_else(|| {
            commit.poison();
            Error::corruption(self.path(self.active.id), offset, "LSNs exhausted")
        })?;
        if staged {
            commit.stage(frame, lsn, self.active.end)?;
        } else {
            commit.written(lsn, self.active.end);
        }
        bump(&counters.records_written);
        counters.bytes_written.add(frame_len);
        let offset = u32::try_from(offset).expect("segment_bytes is at most 4 GiB");
        let frame_len = u32::try_from(frame_len).expect("segment_bytes is at most 4 GiB");
        Ok(Appended { segment: self.active.id, offset, frame_len })
    }

    /// Zero-fills the active segment up to at least `need` bytes (an
    /// [`ALLOCATION_STEP`] boundary, at most the segment size). On failure
    /// (a full disk) the file is cut back to what it was: nothing of the
    /// record that needed the space has been written.
    fn allocate(&mut self, need: u64, commit: &GroupCommit) -> Result<()> {
        let target = need.div_ceil(ALLOCATION_STEP).saturating_mul(ALLOCATION_STEP).min(self.segment_bytes).max(need);
        let fill = if self.map_writes { ALLOCATION_STEP } else { PWRITE_FILL };
        let mut at = self.allocated;
        while at < target {
            let piece = (target - at).min(fill);
            let piece_len = usize::try_from(piece).expect("a piece is at most an allocation step");
            if let Err(error) = self.active.file.write_all_at(&ZEROS[..piece_len], at) {
                let previous = self.allocated;
                self.cut_back(previous, commit);
                return Err(Error::io("allocate", self.path(self.active.id), error));
            }
            at += piece;
        }
        self.allocated = target;
        self.remap(self.active.id);
        Ok(())
    }

    /// Cuts the active segment back to `len` bytes after a failed write;
    /// the shard is poisoned if even that fails.
    fn cut_back(&mut self, len: u64, commit: &GroupCommit) {
        if self.active.file.set_len(len).is_err() {
            commit.poison();
        }
        self.allocated = len;
        self.remap(self.active.id);
    }

    /// Cuts the zeros ahead of the write position off the active segment
    /// (at close, so that a closed store's files end at their last record).
    /// Best effort: zeros left behind read as space never written.
    pub(crate) fn trim(&mut self) {
        if self.allocated > self.active.end && self.active.file.set_len(self.active.end).is_ok() {
            self.allocated = self.active.end;
            self.remap(self.active.id);
        }
    }

    /// Seals the active segment (zeros cut off, fsync) and starts the next
    /// one.
    fn roll(&mut self, commit: &GroupCommit) -> Result<()> {
        commit.write_staged()?;
        let trimmed = if self.allocated > self.active.end { self.active.file.set_len(self.active.end) } else { Ok(()) };
        if let Err(error) = trimmed.and_then(|()| self.active.file.sync()) {
            commit.poison();
            return Err(Error::io("fsync", self.path(self.active.id), error));
        }
        self.allocated = self.active.end;
        // The writable map now outlasts the file; the segment is mapped
        // again, read-only, once sealed (until then reads and writes fall
        // back to pread and pwrite).
        self.maps.remove(&self.active.id);
        commit.synced(self.next_lsn.saturating_sub(1));
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
        self.allocated = HEADER_BYTES as u64;
        commit.rolled(Arc::clone(&self.active.file), self.path(id), self.active.end);
        previous.hint.write_logged(&*self.storage, &self.dir, &*previous.file, previous.end);
        self.sealed.insert(previous.id, previous.file);
        self.remap(previous.id);
        self.remap(id);
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
    let path = crate::engine::segment::segment_path(dir, segment);
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
