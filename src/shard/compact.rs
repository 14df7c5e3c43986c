//! Executing a compaction plan on one shard. The shard's lock is held only
//! for short batches (classifying up to `BATCH` records, or switching a
//! rewritten file in); reading, writing and fsyncing happen outside it.

use super::state::ShardState;
use super::Shard;
use crate::compaction::{CompactionReport, SegmentUsage, SegmentView};
use crate::error::{Error, Result};
use crate::index::KeyHasher;
use crate::record::{self, Header, Kind};
use crate::segment;
use crate::segment::header::SegmentHeader;
use crate::segment::scanner::{self, Expected};
use crate::stats::bump;
use std::path::Path;
use std::sync::Arc;

/// Records classified per hold of the shard's lock.
const BATCH: usize = 1024;

/// What becomes of one record of the segment being compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// The newest live record of its key: copied, and the index follows it.
    Keep,
    /// The newest record of a dead key outside the oldest segment: kept as
    /// a tombstone so that it still hides older records of its key.
    Shadow,
    /// Superseded, or dead in the oldest segment: left out.
    Drop,
}

/// The new file's contents and what the index must learn about it.
struct Rewritten {
    bytes: Vec<u8>,
    /// (index hash, LSN, new offset) of every kept record.
    moved: Vec<(u128, u64, u32)>,
    dropped: u64,
}

impl Shard {
    /// The sealed segments as the policy sees them at the shard's time,
    /// oldest first.
    pub(crate) fn sealed_views(&self) -> Result<Vec<SegmentView>> {
        let mut state = self.lock()?;
        let now = state.now_ms(&*self.clock);
        let views = state
            .log
            .sealed
            .keys()
            .map(|id| {
                state.usage.get(id).map_or_else(|| SegmentUsage::default().view(*id, now), |usage| usage.view(*id, now))
            })
            .collect();
        Ok(views)
    }

    /// Drops or rewrites sealed segment `id`: the file is read, each record
    /// classified against the index, and what must stay written to a new
    /// file that replaces the old one atomically. If nothing must stay and
    /// the segment is the oldest, the file is deleted instead. Returns the
    /// bytes read and written, for pacing.
    pub(crate) fn compact_segment(&self, id: u32, hasher: &KeyHasher, report: &mut CompactionReport) -> Result<u64> {
        let (file, oldest, now) = {
            let mut state = self.lock()?;
            let now = state.now_ms(&*self.clock);
            let Some(file) = state.log.sealed.get(&id).cloned() else { return Ok(0) };
            (file, state.log.sealed.keys().next() == Some(&id), now)
        };
        let path = self.segment_path(id);
        let bytes = segment::read_whole(&*file, &path)?;
        let len = bytes.len() as u64;
        let expected = Expected { shard: self.id, segment: id, active: false };
        let rewritten = self.rewrite(&path, &bytes, expected, oldest, now, hasher, report)?;
        report.records_dropped += rewritten.dropped;
        let empty = rewritten.bytes.len() == segment::header::HEADER_BYTES;
        if empty && oldest {
            self.delete_segment(id, &path)?;
            report.segments_dropped += 1;
            report.bytes_reclaimed += len;
            return Ok(len);
        }
        if rewritten.bytes.len() as u64 >= len {
            // Nothing to reclaim: remember that until something changes.
            self.state.lock().usage.entry(id).or_default().settled = true;
            return Ok(len);
        }
        let written = rewritten.bytes.len() as u64;
        self.replace_segment(id, &path, &rewritten)?;
        report.segments_rewritten += 1;
        report.bytes_reclaimed += len - written;
        Ok(len + written)
    }

    /// Builds the replacement of a segment, classifying its records against
    /// the index in short batches under the lock.
    #[expect(clippy::too_many_arguments, reason = "one pass needs the whole context")]
    fn rewrite(
        &self,
        path: &Path,
        bytes: &[u8],
        expected: Expected,
        oldest: bool,
        now: u64,
        hasher: &KeyHasher,
        report: &mut CompactionReport,
    ) -> Result<Rewritten> {
        let mut frames = Vec::new();
        let scan = scanner::scan(path, bytes, expected, |frame| {
            frames.push((frame.offset, frame.bytes.len(), frame.header));
            Ok(())
        })?;
        let header = SegmentHeader { shard: self.id, segment: scan.header.segment, lsn_floor: scan.header.lsn_floor };
        let mut out = Rewritten { bytes: header.encode().to_vec(), moved: Vec::new(), dropped: 0 };
        for batch in frames.chunks(BATCH) {
            let mut state = self.lock()?;
            for (offset, frame_len, record) in batch {
                let start = usize::try_from(*offset).expect("offset within the segment");
                let frame = &bytes[start..start + frame_len];
                let (scope, key, _) = record::body(record, frame);
                let hash = hasher.hash(scope, key);
                match self.classify(&mut state, hash, record, scan.header.segment, oldest, now, report) {
                    Decision::Keep => {
                        let new_offset = u32::try_from(out.bytes.len()).expect("smaller than the segment");
                        out.moved.push((hash, record.lsn, new_offset));
                        out.bytes.extend_from_slice(frame);
                    }
                    Decision::Shadow if matches!(record.kind, Kind::Tombstone) => out.bytes.extend_from_slice(frame),
                    Decision::Shadow => {
                        let tombstone = Header { kind: Kind::Tombstone, response_len: 0, ..*record };
                        record::encode(&tombstone, scope, key, &[], &mut out.bytes);
                        out.dropped += 1;
                    }
                    Decision::Drop => out.dropped += 1,
                }
            }
        }
        Ok(out)
    }

    /// Decides the fate of one record of segment `segment`; an expired
    /// newest record leaves the index here.
    #[expect(clippy::too_many_arguments, reason = "one decision needs the whole context")]
    fn classify(
        &self,
        state: &mut ShardState,
        hash: u128,
        record: &Header,
        segment: u32,
        oldest: bool,
        now: u64,
        report: &mut CompactionReport,
    ) -> Decision {
        let dead = if oldest { Decision::Drop } else { Decision::Shadow };
        match (record.kind, state.index.get(&hash).copied()) {
            (Kind::Put(_), Some(entry)) if entry.lsn == record.lsn && entry.segment == segment => {
                if entry.is_expired(now) {
                    state.index_remove(hash);
                    bump(&self.counters.expirations);
                    report.index_entries_released += 1;
                    dead
                } else {
                    Decision::Keep
                }
            }
            // A newer live record of the key shadows this one.
            (_, Some(entry)) if entry.lsn > record.lsn => Decision::Drop,
            // The key is absent: released, removed, expired or superseded
            // by a tombstone in a later segment.
            _ => dead,
        }
    }

    /// Writes the replacement file, renames it over the segment, then points
    /// the index at the moved records.
    fn replace_segment(&self, id: u32, path: &Path, rewritten: &Rewritten) -> Result<()> {
        let temp = segment::compaction_path(&self.dir, id);
        let file = self.storage.open(&temp, true).map_err(|error| Error::io("create", &temp, error))?;
        let written = file
            .set_len(0)
            .and_then(|()| file.write_all_at(&rewritten.bytes, 0))
            .and_then(|()| file.sync())
            .and_then(|()| self.storage.rename(&temp, path));
        if let Err(error) = written {
            // The old segment is untouched; the temporary file is removed
            // here or, failing that, at the next open.
            let _ignored = self.storage.remove_file(&temp);
            return Err(Error::io("compaction write", &temp, error));
        }
        // Until the directory is synced the rename may not survive a crash;
        // either file is whole, and the old handle stays valid, so on failure
        // the shard keeps reading the old one.
        self.storage.sync_dir(&self.dir).map_err(|error| Error::io("fsync", &self.dir, error))?;
        let mut state = self.state.lock();
        for (hash, lsn, offset) in &rewritten.moved {
            if let Some(entry) = state.index.get_mut(hash) {
                if entry.lsn == *lsn && entry.segment == id {
                    entry.offset = *offset;
                }
            }
        }
        state.log.sealed.insert(id, Arc::clone(&file));
        let usage = state.usage.entry(id).or_default();
        usage.total_bytes = rewritten.bytes.len() as u64;
        usage.settled = true;
        Ok(())
    }

    /// Deletes the oldest segment, which holds nothing live.
    fn delete_segment(&self, id: u32, path: &Path) -> Result<()> {
        {
            let mut state = self.state.lock();
            debug_assert!(state.index.values().all(|entry| entry.segment != id), "dropping a segment still indexed");
            state.log.sealed.remove(&id);
            state.usage.remove(&id);
        }
        self.storage.remove_file(path).map_err(|error| Error::io("remove", path, error))?;
        self.storage.sync_dir(&self.dir).map_err(|error| Error::io("fsync", &self.dir, error))
    }

    /// Gives memory back when the index has shrunk to a quarter of its
    /// capacity.
    pub(crate) fn shrink_index(&self) {
        let mut state = self.state.lock();
        let len = state.index.len();
        if state.index.capacity() > 4 * len.max(1024) {
            state.index.shrink_to(len * 2);
        }
    }
}
