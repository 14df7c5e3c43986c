//! Repair of a damaged store: never automatic, it cuts each shard's log back
//! to its last consistent point — the longest run of catalogued segments
//! without a gap, up to the first damaged frame — and reports exactly what
//! it dropped. A store that `verify` calls clean is left as it is (but for
//! the leftovers of an unfinished roll or drop, which open would delete
//! too). The hint file of every segment it cuts or deletes goes too, and so
//! does a hint that differs from its segment (open would trust it); the
//! next writable open writes them again from the log.

use crate::error::{Error, Result};
use crate::index::KeyHasher;
use crate::io::{StdStorage, Storage, StorageFile};
use crate::record::Kind;
use crate::recovery::{check_catalog, create_shard};
use crate::segment::catalog::Catalog;
use crate::segment::header::Mark;
use crate::segment::hint::{self, Checker, Verdict};
use crate::segment::scanner::{self, Expected};
use crate::segment::{self, writer::create_segment};
use std::path::{Path, PathBuf};

/// Tokens skipped after a cut: the records that could not be read may
/// have handed out tokens up to this far above the highest one read, so a
/// stale holder's token is never handed out again.
const LSN_GAP: u64 = 1 << 32;

/// A record that repair dropped, as far as it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DroppedRecord {
    /// The segment it was in.
    pub file: PathBuf,
    /// Its scope.
    pub scope: Vec<u8>,
    /// Its key.
    pub key: Vec<u8>,
    /// Its LSN.
    pub lsn: u64,
    /// `"processing"`, `"completed"`, `"failed"` or `"tombstone"`.
    pub kind: &'static str,
}

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairReport {
    /// What each step did, in order, one line each.
    pub actions: Vec<String>,
    /// Whole records dropped with the segments or tails that were cut.
    pub records_dropped: Vec<DroppedRecord>,
    /// Bytes cut or deleted that could not be read as records.
    pub unreadable_bytes: u64,
}

impl RepairReport {
    /// Nothing was dropped.
    #[must_use]
    pub fn dropped_nothing(&self) -> bool {
        self.records_dropped.is_empty() && self.unreadable_bytes == 0
    }
}

/// Cuts the store in `dir` back to its last consistent point. The store
/// must not be open: repair takes its lock.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// idemkv::Store::open(dir.path(), idemkv::Config::new())?.close()?;
/// let report = idemkv::repair(dir.path())?;
/// assert!(report.dropped_nothing());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::NotFound`] when `dir` does not exist, [`Error::NotAStore`]
/// when it has no manifest, [`Error::Locked`] when a store has it open, a
/// damaged manifest as [`Error::Corruption`] (repair does not guess the
/// shard count or the hash key), I/O errors.
pub fn repair(dir: &Path) -> Result<RepairReport> {
    let storage = StdStorage;
    let manifest = crate::open::existing_manifest(&storage, dir)?;
    let _lock = crate::open::lock_directory(dir)?;
    let hasher = KeyHasher::new(manifest.hash_key);
    let mut report = RepairReport::default();
    for shard in 0..manifest.shards {
        repair_shard(&storage, &segment::shard_dir(dir, shard), shard, &hasher, &mut report)?;
    }
    Ok(report)
}

fn repair_shard(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    hasher: &KeyHasher,
    report: &mut RepairReport,
) -> Result<()> {
    let check = match check_catalog(storage, dir, shard) {
        Ok(check) => check,
        Err(Error::Corruption { reason, .. }) => return rebuild_catalog(storage, dir, shard, hasher, &reason, report),
        Err(error) => return Err(error),
    };
    for path in check.leftovers.iter().chain(&check.unknown) {
        delete(storage, path, "not in the catalog", report)?;
    }
    // The longest run without a gap from the oldest segment present.
    let mut run: Vec<(u32, PathBuf)> = Vec::new();
    let mut after_gap = Vec::new();
    for (id, path) in check.present {
        if after_gap.is_empty() && run.last().is_none_or(|(last, _)| last + 1 == id) {
            run.push((id, path));
        } else {
            after_gap.push((id, path));
        }
    }
    if let Some(missing) = check.missing.first() {
        report.actions.push(format!("{}: missing; the log is cut before it", missing.display()));
    }
    let mut max_lsn = 0;
    let mut cut_at = None;
    for (position, (id, path)) in run.iter().enumerate() {
        let file = storage.open(path, false).map_err(|error| Error::io("open", path, error))?;
        let active = position + 1 == run.len() && after_gap.is_empty() && *id == check.catalog.last;
        let expected = Expected { shard, segment: *id, active };
        let checker = Checker::open(storage, dir, &*file, path, expected, hasher);
        match first_damage(&*file, path, expected, &mut max_lsn, checker)? {
            (None, Verdict::Disagrees { offset, .. }) => {
                delete_hint(storage, path, &format!("it differs from its segment at offset {offset}"), report)?;
            }
            (None, _) => {}
            (Some(offset), _) => {
                cut_at = Some((position, offset));
                break;
            }
        }
    }
    let keep = match cut_at {
        None => run.len(),
        Some((position, offset)) => {
            let path = &run[position].1;
            let file = storage.open(path, false).map_err(|error| Error::io("open", path, error))?;
            let len = file.len().map_err(|error| Error::io("stat", path, error))?;
            report.unreadable_bytes += len.saturating_sub(offset);
            for (_, later) in &run[position + 1..] {
                drop_segment(storage, later, shard, &mut max_lsn, report)?;
            }
            if offset == 0 {
                delete(storage, path, "its header is damaged", report)?;
                position
            } else {
                cut(&*file, path, offset)?;
                report.actions.push(format!("{}: damaged at offset {offset}; cut there", path.display()));
                delete_hint(storage, path, "its segment was cut", report)?;
                position + 1
            }
        }
    };
    for (_, path) in &after_gap {
        drop_segment(storage, path, shard, &mut max_lsn, report)?;
    }
    let cut_something = cut_at.is_some() || !after_gap.is_empty() || !check.missing.is_empty();
    let kept = &run[..keep];
    let catalog = if cut_something || kept.is_empty() {
        // A new, empty active segment whose LSN floor stays above every
        // token the dropped records may have handed out.
        let first = kept.first().map_or(check.catalog.first, |(id, _)| *id);
        let id = kept.last().map_or(first, |(id, _)| id + 1);
        let floor = max_lsn.saturating_add(LSN_GAP);
        create_segment(storage, dir, shard, id, floor)?;
        let path = segment::segment_path(dir, id);
        report.actions.push(format!("{}: new active segment, LSNs from {floor}", path.display()));
        delete_hint(storage, &path, "of an earlier segment of the same id", report)?;
        Catalog { shard, first, last: id }
    } else {
        check.catalog
    };
    if catalog != check.catalog {
        catalog.store(storage, dir)?;
        let path = dir.join(crate::segment::catalog::FILE_NAME);
        report.actions.push(format!("{}: now names segments {}..={}", path.display(), catalog.first, catalog.last));
    }
    Ok(())
}

/// The offset of the first damage of a segment (torn tail or corruption),
/// or `None`, and what `checker` found of its hint; raises `max_lsn` to the
/// highest LSN read.
fn first_damage(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    max_lsn: &mut u64,
    mut checker: Checker<'_>,
) -> Result<(Option<u64>, Verdict)> {
    let mut damage = None;
    let walked = scanner::walk(
        file,
        path,
        expected,
        |frame| {
            *max_lsn = (*max_lsn).max(frame.header.lsn);
            checker.visit(&frame);
            Ok(())
        },
        |damaged| {
            damage = Some(damaged.offset);
            Ok(())
        },
    );
    match walked {
        Ok(scan) => Ok((damage, checker.finish(scan.valid_end))),
        Err(Error::Corruption { .. } | Error::UnsupportedFormatVersion { .. }) => Ok((Some(0), Verdict::Unchecked)),
        Err(error) => Err(error),
    }
}

/// Deletes the hint of the segment at `path`, if it has one (a cache: the
/// next writable open writes it again from the log).
fn delete_hint(storage: &dyn Storage, path: &Path, why: &str, report: &mut RepairReport) -> Result<()> {
    let (Some(dir), Some(id)) = (path.parent(), segment::parse_segment_name(path)) else {
        return Ok(());
    };
    let hint = hint::hint_path(dir, id);
    match storage.remove_file(&hint) {
        Ok(()) => report.actions.push(format!("{}: deleted ({why})", hint.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(Error::io("remove", &hint, error)),
    }
    Ok(())
}

/// Truncates a segment at `offset` and marks what is left durable.
fn cut(file: &dyn StorageFile, path: &Path, offset: u64) -> Result<()> {
    let io = |error| Error::io("repair", path, error);
    file.set_len(offset).map_err(io)?;
    file.sync().map_err(io)?;
    // Both mark slots, so that neither claims more than is left.
    for round in [u32::MAX - 1, u32::MAX] {
        let mark = Mark { synced_end: offset, round };
        file.write_all_at(&mark.encode(), mark.offset()).map_err(io)?;
    }
    file.sync().map_err(io)
}

/// Deletes a whole segment after listing the records it held.
fn drop_segment(
    storage: &dyn Storage,
    path: &Path,
    shard: u32,
    max_lsn: &mut u64,
    report: &mut RepairReport,
) -> Result<()> {
    if let Ok(file) = storage.open(path, false) {
        let id = segment::parse_segment_name(path).unwrap_or(0);
        let expected = Expected { shard, segment: id, active: true };
        let mut readable = crate::segment::header::HEADER_BYTES as u64;
        let _unreadable_past_here = scanner::walk(
            &*file,
            path,
            expected,
            |frame| {
                *max_lsn = (*max_lsn).max(frame.header.lsn);
                readable = frame.offset + frame.len;
                let kind = match frame.header.kind {
                    Kind::Put(crate::record::State::Processing) => "processing",
                    Kind::Put(crate::record::State::Completed) => "completed",
                    Kind::Put(crate::record::State::Failed) => "failed",
                    Kind::Tombstone => "tombstone",
                };
                report.records_dropped.push(DroppedRecord {
                    file: path.to_path_buf(),
                    scope: frame.scope.to_vec(),
                    key: frame.key.to_vec(),
                    lsn: frame.header.lsn,
                    kind,
                });
                Ok(())
            },
            |_| Ok(()),
        );
        report.unreadable_bytes += file.len().unwrap_or(0).saturating_sub(readable);
    }
    delete(storage, path, "after the cut", report)
}

fn delete(storage: &dyn Storage, path: &Path, why: &str, report: &mut RepairReport) -> Result<()> {
    storage.remove_file(path).map_err(|error| Error::io("remove", path, error))?;
    delete_hint(storage, path, "its segment was deleted", report)?;
    if let Some(dir) = path.parent() {
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    }
    report.actions.push(format!("{}: deleted ({why})", path.display()));
    Ok(())
}

/// A shard whose folder or catalog is gone or damaged: the catalog is
/// rebuilt from the segments present, or the shard is made anew (empty)
/// when nothing is left.
fn rebuild_catalog(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    hasher: &KeyHasher,
    reason: &str,
    report: &mut RepairReport,
) -> Result<()> {
    let present = segment::list_segments(storage, dir).unwrap_or_default();
    let (Some((first, _)), Some((last, _))) = (present.first(), present.last()) else {
        create_shard(storage, dir, shard)?;
        report.actions.push(format!("{}: {reason}; made anew, empty", dir.display()));
        return Ok(());
    };
    Catalog { shard, first: *first, last: *last }.store(storage, dir)?;
    report.actions.push(format!("{}: {reason}; rebuilt from the segments present ({first}..={last})", dir.display()));
    // Now checked and cut like any shard.
    repair_shard(storage, dir, shard, hasher, report)
}
