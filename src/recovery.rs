//! Recovery at open: check a shard's files against its catalog, rebuild its
//! index from its segments, cut a torn tail off the active segment, refuse
//! damage anywhere else. The result is plain data ([`Recovered`]) from
//! which the shard builds itself.

use crate::error::{Error, Result};
use crate::index::{Entry, Index, KeyHasher};
use crate::io::{Storage, StorageFile};
use crate::record::Kind;
use crate::segment;
use crate::segment::catalog::{self, Catalog};
use crate::segment::header::HEADER_BYTES;
use crate::segment::scanner::{self, Expected};
use crate::segment::writer::{create_segment, ActiveSegment};
use std::collections::{BTreeMap, HashMap};
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
    /// The newest record of every key that is present (expired ones too).
    pub index: Index,
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
        index: Index::default(),
        active: ActiveSegment { id: 1, file, end: HEADER_BYTES as u64 },
        sealed: BTreeMap::new(),
        next_lsn: 1,
        torn_tail_bytes: 0,
        max_updated_ms: 0,
        lengths: BTreeMap::from([(1, HEADER_BYTES as u64)]),
        catalog,
        next_round: 2,
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
    for (id, path) in segment::list_segments(storage, dir)? {
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
            check.missing.push(segment::segment_path(dir, id));
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
/// changes nothing on disk.
pub(crate) fn recover_shard(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    hasher: &KeyHasher,
    access: Access,
) -> Result<Recovered> {
    let (catalog, segments) = catalogued_segments(storage, dir, shard, access)?;
    if access == Access::ReadWrite {
        discard_unfinished_compaction(storage, dir)?;
    }
    let mut replay =
        Replay { hasher, index: Index::default(), tombstones: HashMap::new(), max_lsn: 0, max_updated_ms: 0 };
    let mut lsn_floor = 1;
    let mut torn_tail_bytes = 0;
    let mut next_round = 0;
    let mut files = BTreeMap::new();
    let mut active_end = 0;
    let mut lengths = BTreeMap::new();
    for (id, path) in &segments {
        let file = match access {
            Access::ReadWrite => storage.open(path, false),
            Access::ReadOnly => storage.open_read_only(path),
        };
        let file = file.map_err(|error| Error::io("open", path, error))?;
        let expected = Expected { shard, segment: *id, active: *id == catalog.last };
        let scan = scanner::scan(&*file, path, expected, |frame| replay.apply(*id, &frame, path))?;
        lsn_floor = lsn_floor.max(scan.header.lsn_floor);
        // Zeros the writer filled ahead of its records stay (it writes into
        // them next); anything else after the last whole frame is torn.
        if scan.valid_end + scan.unwritten < scan.len {
            if access == Access::ReadWrite {
                file.set_len(scan.valid_end)
                    .and_then(|()| file.sync())
                    .map_err(|error| Error::io("truncate", path, error))?;
            }
            torn_tail_bytes = scan.len - scan.valid_end;
        }
        if expected.active {
            let (_, mark) = scanner::read_header(&*file, path, scan.valid_end, expected)?;
            next_round = mark.round.saturating_add(1);
        }
        active_end = scan.valid_end;
        lengths.insert(*id, scan.valid_end);
        files.insert(*id, file);
    }
    let (active_id, active_file) = files.pop_last().ok_or_else(|| Error::corruption(dir, 0, "no segment"))?;
    let after_max = replay.max_lsn.checked_add(1).ok_or_else(|| Error::corruption(dir, 0, "LSNs exhausted"))?;
    Ok(Recovered {
        dir: dir.to_path_buf(),
        index: replay.index,
        active: ActiveSegment { id: active_id, file: active_file, end: active_end },
        sealed: files,
        next_lsn: lsn_floor.max(after_max),
        torn_tail_bytes,
        max_updated_ms: replay.max_updated_ms,
        lengths,
        catalog,
        next_round,
    })
}

/// A compaction that crashed before its rename leaves a temporary file; the
/// segment it was rewriting is still whole, so the temporary file goes. So
/// does a catalog that was never renamed into place.
fn discard_unfinished_compaction(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let entries = storage.read_dir(dir).map_err(|error| Error::io("list", dir, error))?;
    let mut removed = false;
    for path in entries {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
        if name.ends_with(segment::COMPACTION_SUFFIX) || name == catalog::TEMP_NAME {
            storage.remove_file(&path).map_err(|error| Error::io("remove", &path, error))?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    }
    Ok(())
}

/// The index being rebuilt. Frames are applied newest-LSN-wins, so the
/// result does not depend on the order segments are read in.
struct Replay<'a> {
    hasher: &'a KeyHasher,
    index: Index,
    tombstones: HashMap<u128, u64>,
    max_lsn: u64,
    max_updated_ms: u64,
}

impl Replay<'_> {
    fn apply(&mut self, segment: u32, frame: &scanner::Frame<'_>, path: &Path) -> Result<()> {
        let header = &frame.header;
        self.max_lsn = self.max_lsn.max(header.lsn);
        self.max_updated_ms = self.max_updated_ms.max(header.updated_ms);
        let hash = self.hasher.hash(frame.scope, frame.key);
        let newest = self.index.get(&hash).map(|entry| entry.lsn).max(self.tombstones.get(&hash).copied()).unwrap_or(0);
        if header.lsn <= newest {
            return Ok(());
        }
        match header.kind {
            Kind::Put(state) => {
                self.tombstones.remove(&hash);
                let too_large = || Error::corruption(path, frame.offset, "frame beyond 4 GiB");
                let entry = Entry {
                    lsn: header.lsn,
                    token: header.token,
                    deadline_ms: header.deadline_ms,
                    segment,
                    offset: u32::try_from(frame.offset).map_err(|_| too_large())?,
                    frame_len: u32::try_from(frame.len).map_err(|_| too_large())?,
                    state,
                };
                self.index.insert(hash, entry);
            }
            Kind::Tombstone => {
                self.index.remove(&hash);
                self.tombstones.insert(hash, header.lsn);
            }
        }
        Ok(())
    }
}
