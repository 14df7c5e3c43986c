//! Recovery at open: check a shard's files against its catalog, rebuild its
//! index from its segments, cut a torn tail off the active segment, refuse
//! damage anywhere else. The result is plain data ([`Recovered`]) from
//! which the shard builds itself.

mod one_segment;
mod replay;

use crate::engine::entry::KeyHasher;
use crate::engine::segment::catalog::{self, Catalog};
use crate::engine::segment::header::HEADER_BYTES;
use crate::engine::segment::hint::{self, HintBuilder};
use crate::engine::segment::writer::{create_segment, ActiveSegment};
use crate::error::{Error, Result};
use crate::io::{Storage, StorageFile};
use replay::Replay;
pub(crate) use replay::{Frames, Replayed};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How recovery may treat a shard's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A writable open: segments are opened for writing, a torn tail is cut
    /// and the leftovers of an unfinished roll, drop or compaction deleted.
    ReadWrite,
    /// A read-only open: every file is opened for reading only and nothing
    /// is changed. A torn tail is left on disk and ignored (the log ends
    /// at the last whole record); leftovers are ignored.
    ReadOnly,
}

/// A shard's log as found on disk.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// The shard's folder.
    pub dir: PathBuf,
    /// Every frame of the log, a key's frames that came close together
    /// counted once, for the shard to keep the newest of each key.
    pub frames: Frames,
    pub active: ActiveSegment,
    pub sealed: BTreeMap<u32, Arc<dyn StorageFile>>,
    /// The LSN the next record gets.
    pub next_lsn: u64,
    /// Bytes after the last whole record of the active segment: cut by a
    /// writable open, ignored by a read-only one.
    pub torn_tail_bytes: u64,
    /// The newest time written to the shard's log.
    pub max_updated_ms: u64,
    /// The length of every segment after recovery.
    pub lengths: BTreeMap<u32, u64>,
    pub catalog: Catalog,
    /// The round of the active segment's next durable mark.
    pub next_round: u32,
    /// Segments rebuilt (whole or a prefix) from their hint files.
    pub hints_loaded: u64,
    /// Hint files found but not used (damaged, truncated, stale): those
    /// segments were replayed from the log.
    pub hints_ignored: u64,
}

/// Creates shard `shard` in folder `dir` for a new store: its first segment,
/// then its catalog. Files left in the folder by an earlier creation that
/// never finished (it held no record; open checked) are replaced.
pub(crate) fn create_shard(storage: &dyn Storage, dir: &Path, shard: u32) -> Result<Recovered> {
    storage.create_dir_all(dir).map_err(|error| Error::io("create", dir, error))?;
    for path in storage.read_dir(dir).map_err(|error| Error::io("list", dir, error))? {
        storage.remove_file(&path).map_err(|error| Error::io("remove", &path, error))?;
    }
    let file = create_segment(storage, dir, shard, 1, 1)?;
    let catalog = Catalog { shard, first: 1, last: 1 };
    catalog.store(storage, dir)?;
    Ok(Recovered {
        dir: dir.to_path_buf(),
        frames: Frames::default(),
        active: ActiveSegment { id: 1, file, end: HEADER_BYTES as u64, hint: HintBuilder::new(shard, 1, 1) },
        sealed: BTreeMap::new(),
        next_lsn: 1,
        torn_tail_bytes: 0,
        max_updated_ms: 0,
        lengths: BTreeMap::from([(1, HEADER_BYTES as u64)]),
        catalog,
        next_round: 2,
        hints_loaded: 0,
        hints_ignored: 0,
    })
}

/// How a shard's files compare with its catalog.
#[derive(Debug)]
pub(crate) struct CatalogCheck {
    pub catalog: Catalog,
    /// The catalogued segments present, oldest first.
    pub present: Vec<(u32, PathBuf)>,
    /// Files a crash may leave outside the range: the oldest segment of an
    /// unfinished drop, the new segment of an unfinished roll (it never
    /// held a record). Open deletes them.
    pub leftovers: Vec<PathBuf>,
    /// Catalogued segments that are not there: lost data.
    pub missing: Vec<PathBuf>,
    /// Segments the catalog does not know.
    pub unknown: Vec<PathBuf>,
}

/// Compares the segment files of shard `shard` in `dir` with its catalog;
/// changes nothing.
///
/// # Errors
/// [`Error::Corruption`] for a missing folder or a missing or damaged
/// catalog; I/O errors.
pub(crate) fn check_catalog(storage: &dyn Storage, dir: &Path, shard: u32) -> Result<CatalogCheck> {
    match storage.read_dir(dir) {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::corruption(dir, 0, "the shard's folder is missing"));
        }
        Err(error) => return Err(Error::io("list", dir, error)),
    }
    let catalog = Catalog::load(storage, dir, shard)?;
    let mut check =
        CatalogCheck { catalog, present: Vec::new(), leftovers: Vec::new(), missing: Vec::new(), unknown: Vec::new() };
    for (id, path) in crate::engine::segment::list_segments(storage, dir)? {
        if id < catalog.first || id == catalog.last.saturating_add(1) {
            check.leftovers.push(path);
        } else if id > catalog.last {
            check.unknown.push(path);
        } else {
            check.present.push((id, path));
        }
    }
    let mut present = check.present.iter().map(|(id, _)| *id).peekable();
    for id in catalog.first..=catalog.last {
        if present.next_if_eq(&id).is_none() {
            check.missing.push(crate::engine::segment::segment_path(dir, id));
        }
    }
    Ok(check)
}

/// The segments of shard `shard` in `dir` as its catalog names them, oldest
/// first, after deleting the leftovers of an unfinished roll or drop (a
/// read-only open leaves them, ignored).
///
/// # Errors
/// [`Error::Corruption`] for a missing folder, catalog or segment, or a
/// segment the catalog does not know; I/O errors.
fn catalogued_segments(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    access: Access,
) -> Result<(Catalog, Vec<(u32, PathBuf)>)> {
    let check = check_catalog(storage, dir, shard)?;
    if let Some(missing) = check.missing.first() {
        return Err(Error::corruption(missing, 0, "segment missing: the shard's catalog names it"));
    }
    if let Some(unknown) = check.unknown.first() {
        return Err(Error::corruption(unknown, 0, "segment beyond the shard's catalog"));
    }
    if access == Access::ReadOnly {
        return Ok((check.catalog, check.present));
    }
    for path in &check.leftovers {
        storage.remove_file(path).map_err(|error| Error::io("remove", path, error))?;
    }
    if !check.leftovers.is_empty() {
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    }
    Ok((check.catalog, check.present))
}

/// Rebuilds shard `shard` in folder `dir`; with [`Access::ReadOnly`] it
/// changes nothing on disk. Each segment is rebuilt from its hint where one
/// matches it, and from the log after (or without) it; a writable open
/// writes the hints that were missing.
pub(crate) fn recover_shard(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    hasher: &KeyHasher,
    access: Access,
) -> Result<Recovered> {
    let (catalog, segments) = catalogued_segments(storage, dir, shard, access)?;
    if access == Access::ReadWrite {
        discard_unfinished_compaction(storage, dir, &catalog)?;
    }
    let context = one_segment::Context { storage, dir, shard, access };
    let prepared = segments
        .iter()
        .map(|(id, path)| one_segment::prepare(context, *id, path, *id == catalog.last))
        .collect::<Result<Vec<_>>>()?;
    // Room for the frames the hints list, and the keys they bring (each
    // at most what its segment has room for); frames replayed from the log
    // are added as they come.
    let (frames, keys) = prepared
        .iter()
        .map(one_segment::Prepared::hinted)
        .fold((0u64, 0u64), |sum, more| (sum.0.saturating_add(more.0), sum.1.saturating_add(more.1)));
    let expected = |count: u64| usize::try_from(count).unwrap_or(usize::MAX);
    let mut replay = Replay::new(hasher, expected(frames), expected(keys));
    let mut shard_log = ShardLog::default();
    for prepared in prepared {
        let id = prepared.id();
        let recovered = one_segment::recover(context, prepared, &mut replay)?;
        shard_log.add(id, recovered);
    }
    let (active_id, active_file) = shard_log.files.pop_last().ok_or_else(|| Error::corruption(dir, 0, "no segment"))?;
    let active = ActiveSegment { id: active_id, file: active_file, end: shard_log.active_end, hint: shard_log.hint };
    let after_max = replay.max_lsn.checked_add(1).ok_or_else(|| Error::corruption(dir, 0, "LSNs exhausted"))?;
    let max_updated_ms = replay.max_updated_ms;
    Ok(Recovered {
        dir: dir.to_path_buf(),
        frames: replay.into_frames(),
        active,
        sealed: shard_log.files,
        next_lsn: shard_log.lsn_floor.max(after_max),
        torn_tail_bytes: shard_log.torn_tail_bytes,
        max_updated_ms,
        lengths: shard_log.lengths,
        catalog,
        next_round: shard_log.next_round,
        hints_loaded: shard_log.hints_loaded,
        hints_ignored: shard_log.hints_ignored,
    })
}

/// The segments of a shard as they are recovered, oldest first.
struct ShardLog {
    lsn_floor: u64,
    torn_tail_bytes: u64,
    next_round: u32,
    files: BTreeMap<u32, Arc<dyn StorageFile>>,
    active_end: u64,
    lengths: BTreeMap<u32, u64>,
    /// The hint of the last segment added (the active one, at the end).
    hint: HintBuilder,
    hints_loaded: u64,
    hints_ignored: u64,
}

impl Default for ShardLog {
    fn default() -> Self {
        ShardLog {
            lsn_floor: 1,
            torn_tail_bytes: 0,
            next_round: 0,
            files: BTreeMap::new(),
            active_end: 0,
            lengths: BTreeMap::new(),
            hint: HintBuilder::off(),
            hints_loaded: 0,
            hints_ignored: 0,
        }
    }
}

impl ShardLog {
    fn add(&mut self, id: u32, recovered: one_segment::Recovered) {
        self.lsn_floor = self.lsn_floor.max(recovered.lsn_floor);
        if recovered.torn_tail_bytes > 0 {
            self.torn_tail_bytes = recovered.torn_tail_bytes;
        }
        self.next_round = recovered.mark.round.saturating_add(1);
        self.active_end = recovered.valid_end;
        self.lengths.insert(id, recovered.valid_end);
        self.files.insert(id, recovered.file);
        self.hint = recovered.hint;
        self.hints_loaded += u64::from(recovered.hint_loaded);
        self.hints_ignored += u64::from(recovered.hint_ignored);
    }
}

/// A compaction that crashed before its rename leaves a temporary file; the
/// segment it was rewriting is still whole, so the temporary file goes. So
/// does a catalog that was never renamed into place, a hint that was never
/// renamed into place, and the hint of a segment outside the catalog (a
/// segment dropped, or a roll never finished).
fn discard_unfinished_compaction(storage: &dyn Storage, dir: &Path, catalog: &Catalog) -> Result<()> {
    let entries = storage.read_dir(dir).map_err(|error| Error::io("list", dir, error))?;
    let mut removed = false;
    for path in entries {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
        let orphan_hint = hint::parse_hint_name(&path).is_some_and(|id| !(catalog.first..=catalog.last).contains(&id));
        if name.ends_with(crate::engine::segment::COMPACTION_SUFFIX)
            || name == catalog::TEMP_NAME
            || hint::is_temp_name(&path)
            || orphan_hint
        {
            storage.remove_file(&path).map_err(|error| Error::io("remove", &path, error))?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    }
    Ok(())
}
