//! Executing a compaction plan on one shard. The shard's lock is held only
//! for short batches (classifying up to `BATCH` records, or switching a
//! rewritten file in); reading, writing and fsyncing happen outside it.
//! The segment is walked by the scanner and copied a window at a time, so
//! memory stays bounded by the number of records, not their bytes.

use super::state::ShardState;
use super::Shard;
use crate::engine::compaction_policy::{SegmentUsage, SegmentView};
use crate::engine::entry::KeyHasher;
use crate::engine::frame::{self, PREFIX_BYTES};
use crate::engine::index::{self, Address};
use crate::engine::segment;
use crate::engine::segment::catalog::Catalog;
use crate::engine::segment::header::{SegmentHeader, HEADER_BYTES};
use crate::engine::segment::hint::{self, HintBuilder, HintEntry};
use crate::engine::segment::scanner::{self, Expected, FrameCopier};
use crate::engine::telemetry::bump;
use crate::engine::transition;
use crate::error::{Error, Result};
use crate::io::StorageFile;
use crate::record::{Header, Kind};
use crate::stats::CompactionReport;
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
    /// Superseded by a record that is not durable yet: copied as it is
    /// (the index does not point at it), so that a power cut that loses the
    /// newer record cannot lose this one too.
    Retain,
}

/// What a classification of one segment's records needs to know.
#[derive(Debug, Clone, Copy)]
struct Context {
    segment: u32,
    oldest: bool,
    now: u64,
    /// LSN up to which the shard's log is durable.
    durable_lsn: u64,
}

/// One record of the segment being compacted, as the plan needs it.
#[derive(Debug, Clone, Copy)]
struct Planned {
    offset: u64,
    len: u64,
    hash: u128,
    header: Header,
    decision: Decision,
}

impl Planned {
    /// Bytes it takes in the new file.
    fn kept_bytes(&self) -> u64 {
        match (self.decision, self.header.kind) {
            (Decision::Keep | Decision::Retain, _) | (Decision::Shadow, Kind::Tombstone) => self.len,
            (Decision::Shadow, Kind::Put(_)) => {
                crate::format::frame_bytes(usize::from(self.header.scope_len), usize::from(self.header.key_len), 0)
            }
            (Decision::Drop, _) => 0,
        }
    }
}

/// What the index must learn about a rewritten segment.
struct Rewritten {
    len: u64,
    /// (index hash, LSN, new offset) of every kept record.
    moved: Vec<(u128, u64, u32)>,
    /// The hint of the new file.
    hint: HintBuilder,
}

/// Appends to a new file through a bounded buffer.
struct Appender<'a> {
    file: &'a dyn StorageFile,
    path: &'a Path,
    buffer: Vec<u8>,
    flushed: u64,
}

impl Appender<'_> {
    fn push(&mut self, bytes: &[u8]) -> Result<()> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= 1 << 20 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .write_all_at(&self.buffer, self.flushed)
            .map_err(|error| Error::io("compaction write", self.path, error))?;
        self.flushed += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    fn offset(&self) -> u64 {
        self.flushed + self.buffer.len() as u64
    }
}

impl Shard {
    /// The sealed segments as the policy sees them at the shard's time,
    /// oldest first.
    pub(crate) fn sealed_views(&self) -> Result<Vec<SegmentView>> {
        let state = self.read()?;
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

    /// Drops or rewrites sealed segment `id`: each record is classified
    /// against the index, and what must stay is written to a new file that
    /// replaces the old one atomically. If nothing must stay and the segment
    /// is the oldest, the file is deleted instead. Returns the bytes read
    /// and written, for pacing.
    pub(crate) fn compact_segment(&self, id: u32, hasher: &KeyHasher, report: &mut CompactionReport) -> Result<u64> {
        let (file, oldest, now) = {
            let state = self.read()?;
            let now = state.now_ms(&*self.clock);
            let Some(file) = state.log.sealed.get(&id).cloned() else { return Ok(0) };
            (file, state.log.sealed.keys().next() == Some(&id), now)
        };
        let path = self.segment_path(id);
        let expected = Expected { shard: self.id, segment: id, active: false };
        let mut planned = Vec::new();
        let scan = scanner::scan(&*file, &path, expected, |frame| {
            let hash = hasher.hash(frame.header.keyspace, frame.scope, frame.key);
            let (offset, len, header) = (frame.offset, frame.len, frame.header);
            planned.push(Planned { offset, len, hash, header, decision: Decision::Drop });
            Ok(())
        })?;
        // What is durable now bounds what may be dropped: a record is left
        // out only for a newer one that a power cut cannot take back.
        self.sync_all()?;
        let durable_lsn = self.commit.durable_lsn();
        self.classify_all(&mut planned, hasher, Context { segment: id, oldest, now, durable_lsn }, report)?;
        let dropped = planned.iter().filter(|plan| !matches!(plan.decision, Decision::Keep | Decision::Retain));
        report.records_dropped += dropped.count() as u64;
        let len = scan.len;
        let kept: u64 = HEADER_BYTES as u64 + planned.iter().map(Planned::kept_bytes).sum::<u64>();
        if kept == HEADER_BYTES as u64 && oldest {
            self.delete_segment(id, &path)?;
            report.segments_dropped += 1;
            report.bytes_reclaimed += len;
            return Ok(len);
        }
        if kept >= len {
            // Nothing to reclaim: remember that until something changes.
            self.state.write().usage.entry(id).or_default().settled = true;
            return Ok(len);
        }
        let header = SegmentHeader { shard: self.id, segment: id, lsn_floor: scan.header.lsn_floor };
        let mut rewritten = self.write_replacement(&*file, &path, &header, &planned)?;
        self.switch_in(id, &path, &rewritten)?;
        // Outside the lock: the rewritten file never changes again, and no
        // other writer writes this segment's hint.
        let (written, new_file) = &mut rewritten;
        written.hint.write_logged(&*self.storage, &self.dir, &**new_file, written.len);
        let written = rewritten.0.len;
        report.segments_rewritten += 1;
        report.bytes_reclaimed += len - written;
        Ok(len + written)
    }

    /// Classifies every planned record against the index, in short batches
    /// under the lock.
    fn classify_all(
        &self,
        planned: &mut [Planned],
        hasher: &KeyHasher,
        context: Context,
        report: &mut CompactionReport,
    ) -> Result<()> {
        for batch in planned.chunks_mut(BATCH) {
            let mut state = self.lock()?;
            for plan in batch {
                plan.decision = self.classify(&mut state, plan, hasher, context, report)?;
            }
        }
        Ok(())
    }

    /// Writes the records that stay to the segment's temporary replacement,
    /// fsynced. Records marked Shadow that are puts become tombstones.
    fn write_replacement(
        &self,
        old: &dyn StorageFile,
        path: &Path,
        header: &SegmentHeader,
        planned: &[Planned],
    ) -> Result<(Rewritten, std::sync::Arc<dyn StorageFile>)> {
        let temp = segment::compaction_path(&self.dir, header.segment);
        let file = self.storage.open(&temp, true).map_err(|error| Error::io("create", &temp, error))?;
        let written = fill(old, path, &*file, &temp, header, planned).and_then(|rewritten| {
            file.sync().map_err(|error| Error::io("fsync", &temp, error))?;
            Ok(rewritten)
        });
        match written {
            Ok(rewritten) => Ok((rewritten, file)),
            Err(error) => {
                // The old segment is untouched; the temporary file is removed
                // here or, failing that, at the next open.
                let _ignored = self.storage.remove_file(&temp);
                Err(error)
            }
        }
    }

    /// Decides the fate of one record of the segment; an expired newest
    /// record leaves the index here.
    fn classify(
        &self,
        state: &mut ShardState,
        plan: &Planned,
        hasher: &KeyHasher,
        context: Context,
        report: &mut CompactionReport,
    ) -> Result<Decision> {
        let dead = if context.oldest { Decision::Drop } else { Decision::Shadow };
        let (hash, record) = (plan.hash, &plan.header);
        let tag = index::tag(hash);
        let offset = u32::try_from(plan.offset).unwrap_or(u32::MAX);
        if state.index.contains(tag, context.segment, offset) {
            let len = u32::try_from(plan.len).unwrap_or(u32::MAX);
            let at = Address { segment: context.segment, offset, len };
            let Some(entry) = transition::entry(record, at) else { return Ok(dead) };
            // A key whose scope could not be read back for its quota
            // stays indexed, so its record stays too.
            if entry.is_expired(context.now) && state.index_remove(hash, &entry) {
                bump(&self.counters.expirations);
                report.index_entries_released += 1;
                return Ok(dead);
            }
            return Ok(Decision::Keep);
        }
        // A newer live record of the key (one the index points at, with the
        // same key hash) shadows this one, once durable.
        let mut newest = None;
        for candidate in state.index.candidates(tag) {
            let (header, frame) = state.read_at(candidate)?;
            let (scope, key, _) = header.body(&frame);
            if hasher.hash(header.keyspace, scope, key) == hash {
                newest = Some(header.lsn);
                break;
            }
        }
        Ok(match newest {
            Some(lsn) if lsn > record.lsn && lsn <= context.durable_lsn => Decision::Drop,
            Some(lsn) if lsn > record.lsn => Decision::Retain,
            // The key is absent: released, removed, expired or superseded
            // by a tombstone in a later segment.
            _ => dead,
        })
    }

    /// Renames the written replacement over the segment, then points the
    /// index at the moved records.
    fn switch_in(&self, id: u32, path: &Path, rewritten: &(Rewritten, Arc<dyn StorageFile>)) -> Result<()> {
        let (rewritten, file) = rewritten;
        let temp = segment::compaction_path(&self.dir, id);
        if let Err(error) = self.storage.rename(&temp, path) {
            let _ignored = self.storage.remove_file(&temp);
            return Err(Error::io("rename", &temp, error));
        }
        // Until the directory is synced the rename may not survive a crash;
        // either file is whole, and the old handle stays valid, so on failure
        // the shard keeps reading the old one.
        self.storage.sync_dir(&self.dir).map_err(|error| Error::io("fsync", &self.dir, error))?;
        let mut state = self.state.write();
        for &(hash, from, to) in &rewritten.moved {
            let Ok(from) = u32::try_from(from) else { continue };
            let tag = index::tag(hash);
            let Some(len) =
                state.index.candidates(tag).find(|at| at.segment == id && at.offset == from).map(|at| at.len)
            else {
                continue;
            };
            state.index.replace(tag, id, from, Address { segment: id, offset: to, len });
            if let Some(lease) = state.leases.get_mut(hash).filter(|lease| lease.entry.segment == id) {
                if lease.entry.offset == from {
                    lease.entry.offset = to;
                }
            }
        }
        state.log.replace_sealed(id, Arc::clone(file));
        let usage = state.usage.entry(id).or_default();
        usage.total_bytes = rewritten.len;
        usage.settled = true;
        Ok(())
    }

    /// Deletes the oldest segment, which holds nothing live: the catalog
    /// first names the next segment as the first (under the shard's lock,
    /// so that a roll cannot store an older catalog over it), then the file
    /// goes. A crash in between leaves a file below the catalog's range,
    /// which open deletes.
    fn delete_segment(&self, id: u32, path: &Path) -> Result<()> {
        {
            let mut state = self.lock()?;
            debug_assert!(state.index.iter().all(|(_, at)| at.segment != id), "dropping a segment still indexed");
            if state.log.catalog.first != id {
                return Err(Error::corruption(path, 0, "compaction may drop only the oldest segment"));
            }
            let next = id.checked_add(1).ok_or_else(|| Error::corruption(path, 0, "segment ids exhausted"))?;
            let catalog = Catalog { first: next, ..state.log.catalog };
            catalog.store(&*self.storage, &self.dir)?;
            state.log.catalog = catalog;
            state.log.remove_sealed(id);
            state.usage.remove(&id);
        }
        self.storage.remove_file(path).map_err(|error| Error::io("remove", path, error))?;
        // A hint left behind (this fails, or a crash) is deleted at open.
        let _deleted_here_or_at_open = self.storage.remove_file(&hint::hint_path(&self.dir, id));
        self.storage.sync_dir(&self.dir).map_err(|error| Error::io("fsync", &self.dir, error))
    }

    /// Gives memory back when the index has shrunk: buckets merge back
    /// while under half the load that splits them.
    pub(crate) fn shrink_index(&self) {
        self.state.write().index.shrink();
    }
}

/// Writes the header and the records that stay to `new`.
fn fill(
    old: &dyn StorageFile,
    path: &Path,
    new: &dyn StorageFile,
    temp: &Path,
    header: &SegmentHeader,
    planned: &[Planned],
) -> Result<Rewritten> {
    new.set_len(0).map_err(|error| Error::io("compaction write", temp, error))?;
    let mut out = Appender { file: new, path: temp, buffer: Vec::new(), flushed: 0 };
    out.push(&header.encode())?;
    let mut copier = FrameCopier::new(old, path)?;
    let mut moved = Vec::new();
    let mut hint = HintBuilder::new(header.shard, header.segment, header.lsn_floor);
    for plan in planned {
        let at = out.offset();
        match (plan.decision, plan.header.kind) {
            (Decision::Drop, _) => {}
            (Decision::Keep | Decision::Retain, _) | (Decision::Shadow, Kind::Tombstone) => {
                let keep = plan.decision == Decision::Keep;
                if keep {
                    let offset = u32::try_from(at)
                        .map_err(|_| Error::corruption(path, plan.offset, "rewritten segment beyond 4 GiB"))?;
                    moved.push((plan.hash, plan.offset, offset));
                }
                copier.copy(plan.offset, plan.len, &mut |bytes| out.push(bytes))?;
                // A kept put is the newest record of a live key.
                let entry = HintEntry::of_frame(plan.hash, &plan.header, at, plan.len);
                hint.push(&entry, plan.header.updated_ms, keep && matches!(plan.header.kind, Kind::Put(_)));
            }
            (Decision::Shadow, Kind::Put(_)) => {
                let names = u64::from(plan.header.scope_len) + u64::from(plan.header.key_len);
                let mut prefix = Vec::new();
                copier.copy(plan.offset, PREFIX_BYTES as u64 + names, &mut |bytes| {
                    prefix.extend_from_slice(bytes);
                    Ok(())
                })?;
                let (scope, rest) = prefix[PREFIX_BYTES..].split_at(usize::from(plan.header.scope_len));
                let tombstone = Header { kind: Kind::Tombstone, response_len: 0, ..plan.header };
                let mut frame = Vec::new();
                frame::encode(&tombstone, scope, rest, &[], &mut frame);
                out.push(&frame)?;
                let entry = HintEntry::of_frame(plan.hash, &tombstone, at, frame.len() as u64);
                hint.push(&entry, tombstone.updated_ms, false);
            }
        }
    }
    out.flush()?;
    Ok(Rewritten { len: out.offset(), moved, hint })
}
