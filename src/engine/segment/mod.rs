//! Segments: the append-only files of a shard's log.
//!
//! A shard's folder `shard-NNNN/` holds files `NNNNNNNNNN.seg`, named by a
//! segment id that only grows. The newest is the active segment, the only
//! one written; the others are sealed (fsynced when sealed, never written
//! again).
//!
//! `header` is the file header with the durable mark, `catalog` the range
//! of segments a shard must have, `scanner` reads a segment back frame by
//! frame (for open, verify, repair and compaction alike), `writer` appends
//! to the active segment, `commit` shares fsyncs between callers, and `hint` the
//! per-segment hint files from which open rebuilds an index without
//! reading frames (`NNNNNNNNNN.hint`, a cache beside each segment).

pub(crate) mod catalog;
pub(crate) mod commit;
pub(crate) mod header;
pub(crate) mod hint;
pub(crate) mod scanner;
pub(crate) mod writer;

use crate::error::{Error, Result};
use crate::io::Storage;
use std::path::{Path, PathBuf};

/// File-name suffix of a segment.
pub(crate) const SUFFIX: &str = ".seg";
/// Suffix of the temporary file a compaction writes before renaming it
/// over the segment it rewrites.
pub(crate) const COMPACTION_SUFFIX: &str = ".seg.compact";

/// The temporary file of a compaction of segment `segment`.
pub(crate) fn compaction_path(shard_dir: &Path, segment: u32) -> PathBuf {
    shard_dir.join(format!("{segment:010}{COMPACTION_SUFFIX}"))
}

/// The folder of shard `shard` inside the store directory.
pub(crate) fn shard_dir(store_dir: &Path, shard: u32) -> PathBuf {
    store_dir.join(format!("shard-{shard:04}"))
}

/// The file of segment `segment` inside a shard folder.
pub(crate) fn segment_path(shard_dir: &Path, segment: u32) -> PathBuf {
    shard_dir.join(format!("{segment:010}{SUFFIX}"))
}

/// The segments of a shard folder, oldest first.
pub(crate) fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
    let mut segments: Vec<(u32, PathBuf)> = storage
        .read_dir(dir)
        .map_err(|error| Error::io("list", dir, error))?
        .into_iter()
        .filter_map(|path| parse_segment_name(&path).map(|id| (id, path)))
        .collect();
    segments.sort_unstable_by_key(|(id, _)| *id);
    Ok(segments)
}

/// The segment id of a file name, if it names a segment.
pub(crate) fn parse_segment_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 10 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let dir = shard_dir(Path::new("/s"), 7);
        assert_eq!(dir, Path::new("/s/shard-0007"));
        let path = segment_path(&dir, 42);
        assert_eq!(parse_segment_name(&path), Some(42));
        assert_eq!(parse_segment_name(Path::new("/s/42.seg")), None);
        assert_eq!(parse_segment_name(Path::new("/s/00000000x1.seg")), None);
        assert_eq!(parse_segment_name(Path::new("/s/0000000001.tmp")), None);
    }
}
