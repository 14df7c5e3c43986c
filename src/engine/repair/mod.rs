//! Repair of a damaged store: never automatic. It keeps every whole frame
//! and drops only what cannot be read: the scanner's salvage walk
//! resynchronises after each damaged span (on the frame boundaries the
//! segment's hint lists, on the damaged frame's own length, or on the next
//! whole frame), a segment with damage is rewritten with its whole frames
//! alone (temporary file, fsync, rename), a missing segment is replaced by
//! an empty one, and every record dropped is listed by scope, key, LSN and
//! state — from the hint where its frame is unreadable. A new, empty active
//! segment then starts with LSNs far above every one read, so that no token
//! a lost record handed out is handed out again. A store that `verify`
//! calls clean is left as it is (but for the leftovers of an unfinished
//! roll or drop, which open would delete too, and hints that differ from
//! their segments, which open would trust).

mod names;
mod salvage;
mod write;

use crate::engine::entry::KeyHasher;
use crate::engine::recovery::{check_catalog, create_shard, CatalogCheck};
use crate::engine::segment::catalog::Catalog;
use crate::engine::segment::hint::{self, Verdict};
use crate::engine::segment::scanner::{self, Expected};
use crate::engine::segment::{self, writer::create_segment};
use crate::error::{Error, Result};
use crate::io::{StdStorage, Storage};
use crate::keyspace::Keyspace;
use crate::record::{Kind, State};
use salvage::{Analysis, Lost, Segment};
use std::path::{Path, PathBuf};

/// Tokens skipped after a repair that dropped anything: the records that
/// could not be read may have handed out tokens up to this far above the
/// highest LSN read, so a stale holder's token is never handed out again.
const LSN_GAP: u64 = 1 << 32;

/// How repair knows what a dropped record was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// Read whole from its frame (a segment outside the catalog, deleted).
    Frame,
    /// Listed by its segment's hint file (state and LSN); its scope and key
    /// match the hint's keyed hash (read from the damaged frame, or from
    /// another record of the same key).
    Hint,
    /// Listed by its segment's hint file, but no readable copy of its scope
    /// and key is left: they are empty here.
    HintWithoutKey,
    /// No hint covers it: scope, key, state and LSN are what the damaged
    /// frame's bytes say, unchecked.
    Unverified,
}

/// A record that repair dropped, as far as it could be known.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DroppedRecord {
    /// The segment it was in.
    pub file: PathBuf,
    /// Where its frame started in that segment.
    pub offset: u64,
    /// Its keyspace ([`Keyspace::Caller`] also when unknown: see
    /// `evidence`).
    pub keyspace: Keyspace,
    /// Its scope.
    pub scope: Vec<u8>,
    /// Its key.
    pub key: Vec<u8>,
    /// Its LSN.
    pub lsn: u64,
    /// `"processing"`, `"completed"`, `"failed"` or `"tombstone"`
    /// (`"unknown"` for an unchecked record whose damaged bytes name none).
    pub kind: &'static str,
    /// How repair knows it.
    pub evidence: Evidence,
    /// A newer record of the same key was kept: the key reads as it did.
    pub superseded: bool,
}

/// What [`repair`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RepairReport {
    /// What each step did, in order, one line each.
    pub actions: Vec<String>,
    /// Every record dropped: those in unreadable spans or missing
    /// segments, and those of segments outside the catalog.
    pub records_dropped: Vec<DroppedRecord>,
    /// Bytes removed that could not be read as records (nor as a header).
    pub unreadable_bytes: u64,
    /// Whole records kept in the segments repair rewrote.
    pub records_kept: u64,
}

impl RepairReport {
    /// Nothing was dropped.
    #[must_use]
    pub fn dropped_nothing(&self) -> bool {
        self.records_dropped.is_empty() && self.unreadable_bytes == 0
    }

    /// Nothing was done: the store was clean.
    #[must_use]
    pub fn did_nothing(&self) -> bool {
        self.actions.is_empty() && self.dropped_nothing()
    }
}

/// Repairs the store in `dir`: keeps every whole record, drops only what
/// cannot be read and lists it (see the module docs). One pass leaves a
/// store that verifies clean; a second finds nothing to do. The store must
/// not be open: repair takes its lock.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// idemkv::Store::open(dir.path(), idemkv::Config::new())?.close()?;
/// let report = idemkv::store::repair(dir.path())?;
/// assert!(report.did_nothing());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::NotFound`] when `dir` does not exist, [`Error::NotAStore`]
/// when it has no manifest, [`Error::Locked`] when a store has it open, a
/// damaged manifest as [`Error::Corruption`] (repair does not guess the
/// shard count or the hash key), a segment of a format version this build
/// does not read as [`Error::UnsupportedFormatVersion`] (it is not
/// rewritten as this one), I/O errors. Repair stops at the first error; each
/// of its steps is crash-safe on its own, and running it again finishes.
pub fn repair(dir: &Path) -> Result<RepairReport> {
    let storage = StdStorage;
    let manifest = crate::engine::open::existing_manifest(&storage, dir)?;
    let _lock = crate::engine::open::lock_directory(dir)?;
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
    for path in &check.leftovers {
        delete(storage, path, "left by an unfinished roll or drop; open deletes it too", report)?;
    }
    let mut max_lsn = 0;
    for path in &check.unknown {
        drop_segment(storage, path, shard, &mut max_lsn, report)?;
    }
    let mut analyses = Vec::with_capacity(check.present.len());
    for (id, path) in &check.present {
        let file = storage.open_read_only(path).map_err(|error| Error::io("open", path, error))?;
        let expected = Expected { shard, segment: *id, active: *id == check.catalog.last };
        analyses.push(salvage::analyse(Segment { storage, dir, hasher, file: &*file, path, expected })?);
    }
    let missing: Vec<Missing> = check.missing.iter().map(|path| Missing::read(storage, dir, shard, path)).collect();
    let damaged = analyses.iter().any(Analysis::damaged) || !missing.is_empty() || !check.unknown.is_empty();
    if !damaged {
        for analysis in &analyses {
            if let Verdict::Disagrees { offset, .. } = analysis.verdict {
                let why = format!("it differs from its segment at offset {offset}; open would trust it");
                delete_hint(storage, &analysis.path, &why, report)?;
            }
        }
        return Ok(());
    }
    max_lsn = analyses
        .iter()
        .map(|analysis| analysis.max_lsn)
        .chain(missing.iter().map(|gone| gone.max_lsn))
        .fold(max_lsn, u64::max);
    list_dropped(storage, hasher, &analyses, &missing, report)?;
    start_above(storage, dir, &check, &analyses, max_lsn, report)?;
    fix_segments(storage, dir, shard, &analyses, &missing, report)?;
    Ok(())
}

/// Rewrites every damaged segment and replaces every missing one, oldest
/// first (each needs the highest LSN of the segments before it).
fn fix_segments(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    analyses: &[Analysis],
    missing: &[Missing],
    report: &mut RepairReport,
) -> Result<()> {
    let mut slots: Vec<(u32, Option<&Analysis>, Option<&Missing>)> = analyses
        .iter()
        .map(|analysis| (analysis.id, Some(analysis), None))
        .chain(missing.iter().map(|gone| (gone.id, None, Some(gone))))
        .collect();
    slots.sort_unstable_by_key(|(id, _, _)| *id);
    let mut below = 0;
    for slot in slots {
        match slot {
            (_, Some(segment), _) => {
                if segment.damaged() {
                    rewrite(storage, dir, segment, below, report)?;
                }
                below = below.max(segment.max_lsn);
            }
            (_, None, Some(gone)) => {
                replace_missing(storage, dir, shard, gone, below, report)?;
                below = below.max(gone.max_lsn);
            }
            (_, None, None) => {}
        }
    }
    Ok(())
}

/// A segment the catalog names that is not there, and what its hint (if
/// it is left) says it held.
struct Missing {
    id: u32,
    path: PathBuf,
    lsn_floor: Option<u64>,
    lost: Vec<Lost>,
    max_lsn: u64,
}

impl Missing {
    fn read(storage: &dyn Storage, dir: &Path, shard: u32, path: &Path) -> Self {
        let id = segment::parse_segment_name(path).unwrap_or(0);
        let listed = hint::listed(storage, dir, shard, id);
        let lost: Vec<Lost> = listed
            .iter()
            .flat_map(|listed| &listed.entries)
            .map(|entry| Lost {
                offset: entry.offset,
                kind: Some(entry.kind),
                lsn: entry.lsn,
                hash: entry.hash,
                name: None,
                evidence: Evidence::HintWithoutKey,
            })
            .collect();
        let max_lsn = listed.as_ref().map_or(0, |listed| listed.header.last_lsn.max(listed.header.lsn_floor));
        Missing { id, path: path.to_path_buf(), lsn_floor: listed.map(|listed| listed.header.lsn_floor), lost, max_lsn }
    }
}

/// Lists every record the damaged and missing segments lose, named and
/// marked superseded where the shard's whole frames tell.
fn list_dropped(
    storage: &dyn Storage,
    hasher: &KeyHasher,
    analyses: &[Analysis],
    missing: &[Missing],
    report: &mut RepairReport,
) -> Result<()> {
    let files = analyses.iter().flat_map(|analysis| analysis.lost.iter().map(|_| &analysis.path));
    let files: Vec<PathBuf> =
        files.chain(missing.iter().flat_map(|gone| gone.lost.iter().map(|_| &gone.path))).cloned().collect();
    let mut lost: Vec<Lost> = analyses.iter().flat_map(|analysis| analysis.lost.iter().cloned()).collect();
    lost.extend(missing.iter().flat_map(|gone| gone.lost.iter().cloned()));
    let superseded = names::resolve(storage, hasher, analyses, &mut lost)?;
    for ((record, file), superseded) in lost.into_iter().zip(files).zip(superseded) {
        let (keyspace, scope, key) = record.name.unwrap_or_default();
        report.records_dropped.push(DroppedRecord {
            file,
            offset: record.offset,
            keyspace,
            scope,
            key,
            lsn: record.lsn,
            kind: kind_name(record.kind),
            evidence: record.evidence,
            superseded,
        });
    }
    Ok(())
}

fn kind_name(kind: Option<Kind>) -> &'static str {
    match kind {
        Some(Kind::Put(State::Processing)) => "processing",
        Some(Kind::Put(State::Completed)) => "completed",
        Some(Kind::Put(State::Failed)) => "failed",
        Some(Kind::Tombstone) => "tombstone",
        None => "unknown",
    }
}

/// Seals the shard's log as it is and starts a new, empty active segment
/// with LSNs from `max_lsn` + [`LSN_GAP`], named by the catalog — before
/// any damaged segment is rewritten, so that a crash half-way never leaves
/// a store that opens without the gap (a second run finds the damage
/// still there and finishes).
fn start_above(
    storage: &dyn Storage,
    dir: &Path,
    check: &CatalogCheck,
    analyses: &[Analysis],
    max_lsn: u64,
    report: &mut RepairReport,
) -> Result<()> {
    // The active segment becomes sealed: fsynced whole, ending at its last
    // frame (a damaged one is rewritten so, below).
    if let Some(active) = analyses.iter().find(|analysis| analysis.expected.active && !analysis.damaged()) {
        write::seal(storage, active)?;
        if active.unwritten > 0 {
            let path = active.path.display();
            report.actions.push(format!("{path}: the zeros ahead of its records cut off (it is sealed now)"));
        }
    }
    let id = check.catalog.last.checked_add(1).ok_or_else(|| Error::corruption(dir, 0, "segment ids exhausted"))?;
    let floor = max_lsn.saturating_add(LSN_GAP);
    create_segment(storage, dir, check.catalog.shard, id, floor)?;
    let path = segment::segment_path(dir, id);
    report.actions.push(format!("{}: new active segment, LSNs from {floor}", path.display()));
    delete_hint(storage, &path, "of an earlier segment of the same id", report)?;
    let catalog = Catalog { last: id, ..check.catalog };
    catalog.store(storage, dir)?;
    let path = dir.join(crate::engine::segment::catalog::FILE_NAME);
    report.actions.push(format!("{}: now names segments {}..={}", path.display(), catalog.first, catalog.last));
    Ok(())
}

/// Rewrites a damaged segment with its whole frames alone; `below` is the
/// highest LSN of the segments before it.
fn rewrite(
    storage: &dyn Storage,
    dir: &Path,
    analysis: &Analysis,
    below: u64,
    report: &mut RepairReport,
) -> Result<()> {
    let path = analysis.path.display();
    for span in &analysis.unreadable {
        let unhinted = if span.offset + span.length > analysis.hint_end {
            "; no hint covers it: its records are listed as its damaged bytes read, and there may be more"
        } else {
            ""
        };
        report.actions.push(format!(
            "{path}: offset {} length {} unreadable ({}){unhinted}",
            span.offset, span.length, span.reason
        ));
    }
    if analysis.cut_short {
        report.actions.push(format!("{path}: ends before its durable mark: records that were durable are gone"));
    }
    let floor = match &analysis.header {
        Ok(header) => header.lsn_floor,
        Err(reason) => {
            let first = analysis.first_lsn.unwrap_or(u64::MAX);
            let floor = analysis.hint_floor.unwrap_or_else(|| below.saturating_add(1)).min(first);
            report.actions.push(format!("{path}: header unreadable ({reason}); written anew, LSN floor {floor}"));
            floor
        }
    };
    let len = write::rewrite(storage, dir, analysis, floor)?;
    report.unreadable_bytes += analysis.unreadable_bytes();
    report.records_kept += analysis.kept.len() as u64;
    report.actions.push(format!(
        "{path}: rewritten with its {} whole records, {len} bytes, without {} unreadable bytes",
        analysis.kept.len(),
        analysis.unreadable_bytes()
    ));
    delete_hint(storage, &analysis.path, "its segment was rewritten", report)
}

/// Puts an empty sealed segment where a catalogued one is missing, so that
/// the segments after it are kept; `below` is the highest LSN before it.
fn replace_missing(
    storage: &dyn Storage,
    dir: &Path,
    shard: u32,
    gone: &Missing,
    below: u64,
    report: &mut RepairReport,
) -> Result<()> {
    let floor = gone.lsn_floor.unwrap_or_else(|| below.saturating_add(1));
    create_segment(storage, dir, shard, gone.id, floor)?;
    report.actions.push(format!(
        "{}: missing; an empty segment takes its place (its hint {})",
        gone.path.display(),
        if gone.lsn_floor.is_some() {
            format!("lists {} records, dropped", gone.lost.len())
        } else {
            "is gone too: what it held is unknown".to_string()
        }
    ));
    delete_hint(storage, &gone.path, "its segment was missing", report)
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

/// Deletes a segment outside the catalog after listing the records it
/// held, whole or as its hint lists them.
fn drop_segment(
    storage: &dyn Storage,
    path: &Path,
    shard: u32,
    max_lsn: &mut u64,
    report: &mut RepairReport,
) -> Result<()> {
    if let Ok(file) = storage.open_read_only(path) {
        let id = segment::parse_segment_name(path).unwrap_or(0);
        let expected = Expected { shard, segment: id, active: true };
        let mut readable = 0;
        let _unreadable_counted_below = scanner::salvage(
            &*file,
            path,
            expected,
            scanner::Boundaries::default(),
            |frame| {
                *max_lsn = (*max_lsn).max(frame.header.lsn);
                readable += frame.len;
                report.records_dropped.push(DroppedRecord {
                    file: path.to_path_buf(),
                    offset: frame.offset,
                    keyspace: frame.header.keyspace,
                    scope: frame.scope.to_vec(),
                    key: frame.key.to_vec(),
                    lsn: frame.header.lsn,
                    kind: kind_name(Some(frame.header.kind)),
                    evidence: Evidence::Frame,
                    superseded: false,
                });
                Ok(())
            },
            |_| Ok(()),
        );
        let header = crate::engine::segment::header::HEADER_BYTES as u64;
        report.unreadable_bytes += file.len().unwrap_or(0).saturating_sub(readable + header);
    }
    delete(storage, path, "outside the shard's catalog", report)
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

/// What `idemkv repair` would do about damage to `file` found by open or
/// verify, as the end of a sentence ("idemkv repair would ..."), judged by
/// the kind of file and the reason.
pub(crate) fn advice(file: &Path, reason: &str) -> String {
    let name = file.file_name().and_then(|name| name.to_str()).unwrap_or("");
    let gap = "and start a new active segment with LSNs above every token handed out";
    if segment::parse_segment_name(file).is_some() {
        if reason.starts_with("segment missing") {
            format!(
                "put an empty segment in its place, keep every other segment, list the records its hint names {gap}"
            )
        } else if reason.starts_with("segment beyond") {
            "delete it after listing the records it holds".to_string()
        } else {
            format!("rewrite it with every whole record it holds, drop only the unreadable bytes, list the records they held {gap}")
        }
    } else if hint::parse_hint_name(file).is_some() {
        "delete it; the next writable open writes it again from the log".to_string()
    } else if name == crate::engine::segment::catalog::FILE_NAME {
        "rebuild the catalog from the segments present, then repair those".to_string()
    } else if name == crate::engine::manifest::FILE_NAME {
        "not fix this: repair does not rebuild a manifest (it holds the shard count and the hash key of the \
         store); restore it from a backup"
            .to_string()
    } else if reason.starts_with("the shard's folder is missing") {
        "make the shard anew, empty: what it held is unknown".to_string()
    } else {
        "check every segment and keep every whole record; see `idemkv verify` for what it finds".to_string()
    }
}

/// A [`Error::Corruption`] of the store in `store` with what repair would
/// do added to its reason (open's errors); other errors as they are.
pub(crate) fn advise(error: Error, store: &Path) -> Error {
    match error {
        Error::Corruption { file, offset, reason } => {
            let advice = advice(&file, &reason);
            let reason = format!("{reason}; `idemkv repair {}` would {advice}", store.display());
            Error::Corruption { file, offset, reason }
        }
        other => other,
    }
}

/// What repair finds in one damaged segment and would do about it
/// (verify reports the same spans repair acts on).
#[derive(Debug)]
pub(crate) struct Preview {
    /// What repair would do, as the end of a sentence.
    pub advice: String,
    pub unreadable: Vec<scanner::Unreadable>,
    /// Whole records it would keep.
    pub records: u64,
    /// The durable mark claims more than the file holds.
    pub cut_short: bool,
    /// Records known to be lost: in unreadable spans, or listed by the
    /// segment's hint past its end.
    pub lost: usize,
}

/// What repair would do about one damaged segment, counted: the salvage
/// analysis repair itself runs, without writing anything.
///
/// # Errors
/// I/O errors.
pub(crate) fn preview(
    storage: &dyn Storage,
    dir: &Path,
    hasher: &KeyHasher,
    file: &dyn crate::io::StorageFile,
    path: &Path,
    expected: Expected,
) -> Result<Preview> {
    let analysis = salvage::analyse(Segment { storage, dir, hasher, file, path, expected })?;
    let listed = analysis.lost.iter().filter(|lost| lost.evidence != Evidence::Unverified).count();
    let header = if analysis.header.is_err() { "with a new header, " } else { "" };
    let advice = format!(
        "rewrite it {header}keeping its {} whole records, drop its {} unreadable bytes and the {} records known \
         to be in them ({listed} listed by its hint), and start a new active segment with LSNs above every token \
         handed out",
        analysis.kept.len(),
        analysis.unreadable_bytes(),
        analysis.lost.len(),
    );
    Ok(Preview {
        advice,
        records: analysis.kept.len() as u64,
        cut_short: analysis.cut_short,
        lost: analysis.lost.len(),
        unreadable: analysis.unreadable,
    })
}
