//! Repair's writes, each crash-safe on its own: a segment rewritten with
//! only its whole frames (temporary file, fsync, rename, fsync of the
//! folder — the temporary file of a crash is deleted at open, as a
//! compaction's is), and the active segment that repair seals, its zeros
//! cut off and fsynced.

use super::salvage::Analysis;
use crate::engine::segment;
use crate::engine::segment::header::SegmentHeader;
use crate::engine::segment::scanner::FrameCopier;
use crate::error::{Error, Result};
use crate::io::{Storage, StorageFile};
use std::path::Path;

/// Bytes gathered before each write of a rewritten segment.
const BUFFER_BYTES: usize = 1 << 20;

/// Rewrites the segment `analysis` describes with a header of LSN floor
/// `lsn_floor` and its whole frames, in order, and nothing else; returns
/// its new length. The frames' LSNs only grow (the walk kept none out of
/// order) and stay at or above the floor, so open reads the result as a
/// sealed segment like any other.
///
/// # Errors
/// I/O errors; the old segment is then untouched, or already replaced
/// whole.
pub(crate) fn rewrite(storage: &dyn Storage, dir: &Path, analysis: &Analysis, lsn_floor: u64) -> Result<u64> {
    let temp = segment::compaction_path(dir, analysis.id);
    let written = fill(storage, &temp, analysis, lsn_floor);
    let renamed = written.and_then(|len| {
        storage.rename(&temp, &analysis.path).map_err(|error| Error::io("rename", &temp, error))?;
        Ok(len)
    });
    if renamed.is_err() {
        let _removed_here_or_at_open = storage.remove_file(&temp);
    }
    let len = renamed?;
    storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    Ok(len)
}

/// Writes the new segment into `temp`, fsynced.
fn fill(storage: &dyn Storage, temp: &Path, analysis: &Analysis, lsn_floor: u64) -> Result<u64> {
    let io = |error| Error::io("repair write", temp, error);
    let old = storage.open_read_only(&analysis.path).map_err(|error| Error::io("open", &analysis.path, error))?;
    let new = storage.open(temp, true).map_err(io)?;
    new.set_len(0).map_err(io)?;
    let header = SegmentHeader { shard: analysis.expected.shard, segment: analysis.id, lsn_floor };
    let mut out = Out { file: &*new, path: temp, buffer: Vec::with_capacity(BUFFER_BYTES), written: 0 };
    out.push(&header.encode())?;
    let mut copier = FrameCopier::new(&*old, &analysis.path)?;
    for (offset, len) in &analysis.kept {
        copier.copy(*offset, *len, &mut |bytes| out.push(bytes))?;
    }
    let len = out.flush()?;
    new.sync().map_err(io)?;
    Ok(len)
}

/// A buffered writer at the end of a new file.
struct Out<'a> {
    file: &'a dyn StorageFile,
    path: &'a Path,
    buffer: Vec<u8>,
    written: u64,
}

impl Out<'_> {
    fn push(&mut self, bytes: &[u8]) -> Result<()> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is buffered; returns the file's length.
    fn flush(&mut self) -> Result<u64> {
        self.file
            .write_all_at(&self.buffer, self.written)
            .map_err(|error| Error::io("repair write", self.path, error))?;
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(self.written)
    }
}

/// Seals the (undamaged) active segment as repair starts a new one after
/// it: the zeros the writer filled ahead of its records are cut off (a
/// sealed segment ends at its last frame) and it is fsynced whole (records
/// a killed process left past its durable mark included).
///
/// # Errors
/// I/O errors.
pub(crate) fn seal(storage: &dyn Storage, analysis: &Analysis) -> Result<()> {
    let path = &analysis.path;
    let io = |error| Error::io("repair", path, error);
    let file = storage.open(path, false).map_err(io)?;
    if analysis.unwritten > 0 {
        file.set_len(analysis.len - analysis.unwritten).map_err(io)?;
    }
    file.sync().map_err(io)
}
