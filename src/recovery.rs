//! Recovery at open: rebuild a shard's index from its segments, cut a torn
//! tail off the active segment, refuse damage anywhere else. The result is
//! plain data ([`Recovered`]) from which the shard builds itself.

use crate::error::{Error, Result};
use crate::index::{Entry, Index, KeyHasher};
use crate::io::{Storage, StorageFile};
use crate::record::{self, Kind};
use crate::segment;
use crate::segment::header::HEADER_BYTES;
use crate::segment::scanner::{self, Expected};
use crate::segment::writer::{create_segment, ActiveSegment};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    pub torn_tail_bytes: u64,
    /// The newest time written to the shard's log.
    pub max_updated_ms: u64,
    /// The length of every segment after recovery.
    pub lengths: BTreeMap<u32, u64>,
}

fn open_file(storage: &dyn Storage, path: &Path) -> Result<(Arc<dyn StorageFile>, u64)> {
    let file = storage.open(path, false).map_err(|error| Error::io("open", path, error))?;
    let len = file.len().map_err(|error| Error::io("stat", path, error))?;
    Ok((file, len))
}

/// Rebuilds shard `shard` in folder `dir`, creating it if new.
pub(crate) fn recover_shard(storage: &dyn Storage, dir: &Path, shard: u32, hasher: &KeyHasher) -> Result<Recovered> {
    storage.create_dir_all(dir).map_err(|error| Error::io("create", dir, error))?;
    discard_unfinished_compaction(storage, dir)?;
    let mut segments = segment::list_segments(storage, dir)?;
    drop_torn_creation(storage, dir, &mut segments)?;
    if segments.is_empty() {
        let file = create_segment(storage, dir, shard, 1, 1)?;
        return Ok(Recovered {
            dir: dir.to_path_buf(),
            index: Index::default(),
            active: ActiveSegment { id: 1, file, end: HEADER_BYTES as u64 },
            sealed: BTreeMap::new(),
            next_lsn: 1,
            torn_tail_bytes: 0,
            max_updated_ms: 0,
            lengths: BTreeMap::from([(1, HEADER_BYTES as u64)]),
        });
    }
    let mut replay =
        Replay { hasher, index: Index::default(), tombstones: HashMap::new(), max_lsn: 0, max_updated_ms: 0 };
    let mut lsn_floor = 1;
    let mut torn_tail_bytes = 0;
    let mut files = BTreeMap::new();
    let last = segments.len() - 1;
    let mut active_end = 0;
    let mut lengths = BTreeMap::new();
    for (position, (id, path)) in segments.iter().enumerate() {
        let file = storage.open(path, false).map_err(|error| Error::io("open", path, error))?;
        let bytes = segment::read_whole(&*file, path)?;
        let len = bytes.len() as u64;
        let expected = Expected { shard, segment: *id, active: position == last };
        let scan = scanner::scan(path, &bytes, expected, |frame| {
            replay.apply(*id, &frame);
            Ok(())
        })?;
        lsn_floor = lsn_floor.max(scan.header.lsn_floor);
        if scan.valid_end < len {
            file.set_len(scan.valid_end)
                .and_then(|()| file.sync())
                .map_err(|error| Error::io("truncate", path, error))?;
            torn_tail_bytes = len - scan.valid_end;
        }
        active_end = scan.valid_end;
        lengths.insert(*id, scan.valid_end);
        files.insert(*id, file);
    }
    let (active_id, active_file) = files.pop_last().ok_or_else(|| Error::corruption(dir, 0, "no segment"))?;
    Ok(Recovered {
        dir: dir.to_path_buf(),
        index: replay.index,
        active: ActiveSegment { id: active_id, file: active_file, end: active_end },
        sealed: files,
        next_lsn: lsn_floor.max(replay.max_lsn + 1),
        torn_tail_bytes,
        max_updated_ms: replay.max_updated_ms,
        lengths,
    })
}

/// A compaction that crashed before its rename leaves a temporary file; the
/// segment it was rewriting is still whole, so the temporary file goes.
fn discard_unfinished_compaction(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let entries = storage.read_dir(dir).map_err(|error| Error::io("list", dir, error))?;
    let mut removed = false;
    for path in entries {
        if path.to_str().is_some_and(|name| name.ends_with(segment::COMPACTION_SUFFIX)) {
            storage.remove_file(&path).map_err(|error| Error::io("remove", &path, error))?;
            removed = true;
        }
    }
    if removed {
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    }
    Ok(())
}

/// A crash while a segment was being created can leave a newest segment
/// shorter than its header, which never held a record: delete it.
fn drop_torn_creation(storage: &dyn Storage, dir: &Path, segments: &mut Vec<(u32, PathBuf)>) -> Result<()> {
    let Some((_, path)) = segments.last() else {
        return Ok(());
    };
    let (_, len) = open_file(storage, path)?;
    if len < HEADER_BYTES as u64 {
        storage.remove_file(path).map_err(|error| Error::io("remove", path, error))?;
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
        segments.pop();
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
    fn apply(&mut self, segment: u32, frame: &scanner::Frame<'_>) {
        let header = &frame.header;
        self.max_lsn = self.max_lsn.max(header.lsn);
        self.max_updated_ms = self.max_updated_ms.max(header.updated_ms);
        let (scope, key, _) = record::body(header, frame.bytes);
        let hash = self.hasher.hash(scope, key);
        let newest = self.index.get(&hash).map(|entry| entry.lsn).max(self.tombstones.get(&hash).copied()).unwrap_or(0);
        if header.lsn <= newest {
            return;
        }
        match header.kind {
            Kind::Put(state) => {
                self.tombstones.remove(&hash);
                let entry = Entry {
                    lsn: header.lsn,
                    token: header.token,
                    deadline_ms: header.deadline_ms,
                    segment,
                    offset: u32::try_from(frame.offset).expect("segment length checked"),
                    frame_len: u32::try_from(frame.bytes.len()).expect("segment length checked"),
                    state,
                };
                self.index.insert(hash, entry);
            }
            Kind::Tombstone => {
                self.index.remove(&hash);
                self.tombstones.insert(hash, header.lsn);
            }
        }
    }
}
