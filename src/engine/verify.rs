//! Offline verification of a store directory: every shard's files against
//! its catalog, every header and every record's CRC, with the scanner and
//! the rules that open uses, without opening the store: every file is opened
//! for reading only, nothing is written and no lock is taken (so a
//! compaction of a live writer may delete a segment while it is checked,
//! which is then reported missing).

use crate::engine::entry::KeyHasher;
use crate::engine::open::existing_manifest;
use crate::engine::recovery::check_catalog;
use crate::engine::segment;
use crate::engine::segment::header::HEADER_BYTES;
use crate::engine::segment::hint::{self, Checker, Verdict};
use crate::engine::segment::scanner::{self, Expected};
use crate::error::{Error, Result};
use crate::io::{StdStorage, Storage, StorageFile};
use std::path::{Path, PathBuf};

/// One damaged span of a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damage {
    /// The damaged file.
    pub file: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// How many bytes until the next whole record (or the end of the file;
    /// 0 for a missing or whole file).
    pub length: u64,
    /// What was wrong at `offset`.
    pub reason: String,
    /// What `idemkv repair` would do about it, as a sentence.
    pub repair: String,
}

impl Damage {
    fn new(file: &Path, offset: u64, length: u64, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        let repair = format!("idemkv repair would {}", crate::engine::repair::advice(file, &reason));
        Damage { file: file.to_path_buf(), offset, length, reason, repair }
    }
}

/// A hint file that open would not use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IgnoredHint {
    /// The hint file.
    pub file: PathBuf,
    /// Why open would not use it.
    pub reason: String,
    /// Whether it is the hint of the active segment. A writable open
    /// rewrites the hint of a sealed segment from the log; it deletes that
    /// of the active segment, whose new hint is written when the store is
    /// closed (a store that is killed, not closed, has none until then).
    pub active_segment: bool,
}

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Shards in the manifest.
    pub shards: u32,
    /// Segment files read.
    pub segments: u64,
    /// Whole records that passed their CRC.
    pub records: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Damage that open would refuse with [`Error::Corruption`]: for a
    /// segment, every damaged span (found as repair finds them, past the
    /// first), each with what repair would do.
    pub damage: Vec<Damage>,
    /// Torn tails of active segments, which open cuts off (a crash
    /// mid-write, not corruption).
    pub torn_tails: Vec<Damage>,
    /// Hint files that open would use, each checked entry by entry against
    /// the frames of its segment and found to list them exactly. (A hint
    /// that differs from its segment is in `damage`: open would trust it.)
    pub hints_checked: u64,
    /// Hint files that open would ignore — damaged, truncated, stale (the
    /// segment was rewritten or cut since) or of another version — and
    /// replay their segments from the log instead: not damage (unless the
    /// hint lists frames past its segment's end, then in `damage`); the
    /// next writable open rewrites them (that of the active segment at
    /// close).
    pub hints_ignored: u64,
    /// Those hint files, each with the reason.
    pub ignored_hints: Vec<IgnoredHint>,
}

impl VerifyReport {
    /// No damage (torn tails are not damage).
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

/// Reads every segment of the store in `dir` and checks every record.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// idemkv::Store::open(dir.path(), idemkv::Config::new())?.close()?;
/// let report = idemkv::store::verify(dir.path())?;
/// assert!(report.is_clean());
/// # Ok(()) }
/// ```
///
/// Every file is opened for reading only, so a user who may read the store
/// but not write it can verify it. No lock is taken: it works beside a live
/// writer, but that writer's compaction may delete a segment while it is
/// checked, which is then reported missing; verify a store nobody has open
/// for a verdict.
///
/// # Errors
/// [`Error::NotFound`] when `dir` does not exist, [`Error::NotAStore`] when
/// it has no manifest, a damaged manifest as [`Error::Corruption`], I/O
/// errors (a directory or file the user may not read). Damage inside
/// segments is reported, not returned as an error.
pub fn verify(dir: &Path) -> Result<VerifyReport> {
    let storage = StdStorage;
    let manifest = existing_manifest(&storage, dir).map_err(|error| crate::engine::repair::advise(error, dir))?;
    let mut report = VerifyReport { shards: manifest.shards, ..VerifyReport::default() };
    let hasher = KeyHasher::new(manifest.hash_key);
    for shard in 0..manifest.shards {
        let shard_dir = segment::shard_dir(dir, shard);
        let check = match check_catalog(&storage, &shard_dir, shard) {
            Ok(check) => check,
            Err(Error::Corruption { file, offset, reason }) => {
                report.damage.push(Damage::new(&file, offset, 0, reason));
                continue;
            }
            Err(error) => return Err(error),
        };
        let whole = |file: &PathBuf, reason: &str| Damage::new(file, 0, 0, reason);
        report
            .damage
            .extend(check.missing.iter().map(|file| whole(file, "segment missing: the shard's catalog names it")));
        report.damage.extend(check.unknown.iter().map(|file| whole(file, "segment beyond the shard's catalog")));
        let leftover = "left by an unfinished roll or drop (no record); deleted at the next open";
        report.torn_tails.extend(check.leftovers.iter().map(|file| whole(file, leftover)));
        for (id, path) in &check.present {
            let file = storage.open_read_only(path).map_err(|error| Error::io("open", path, error))?;
            let expected = Expected { shard, segment: *id, active: *id == check.catalog.last };
            let segment = Segment { storage: &storage, dir: &shard_dir, hasher: &hasher, file: &*file, path, expected };
            check_segment(segment, &mut report)?;
        }
    }
    Ok(report)
}

/// One segment to check, and what its check needs.
#[derive(Clone, Copy)]
struct Segment<'a> {
    storage: &'a dyn Storage,
    dir: &'a Path,
    hasher: &'a KeyHasher,
    file: &'a dyn StorageFile,
    path: &'a Path,
    expected: Expected,
}

/// Walks one segment with the scanner that open uses, recording its first
/// damaged span (a torn tail or damage) instead of stopping the check, and
/// checks its hint against the frames. A segment with damage is then read
/// as repair reads it, which finds every damaged span and every whole
/// record around them, and says what repair would do.
fn check_segment(segment: Segment<'_>, report: &mut VerifyReport) -> Result<()> {
    let Segment { file, path, expected, .. } = segment;
    let mut checker = Checker::open(segment.storage, segment.dir, file, path, expected, segment.hasher);
    let (mut records, mut found) = (0, None);
    let walked = scanner::walk(
        file,
        path,
        expected,
        |frame| {
            records += 1;
            checker.visit(&frame);
            Ok(())
        },
        |damaged| {
            found = Some(damaged.clone());
            Ok(())
        },
    );
    report.segments += 1;
    let header_damage = match &walked {
        Ok(scan) => {
            report.bytes += scan.len;
            None
        }
        // The header itself is damaged, or names another segment.
        Err(Error::Corruption { reason, .. }) => Some(reason.clone()),
        Err(Error::UnsupportedFormatVersion { found, .. }) => {
            let reason = format!("format version {found} is not read by this build");
            let repair = "idemkv repair would refuse it too: use a build that reads that version".to_string();
            report.damage.push(Damage { file: path.to_path_buf(), offset: 0, length: 0, reason, repair });
            return Ok(());
        }
        Err(_) => return walked.map(|_| ()),
    };
    let valid_end = walked.as_ref().map_or(0, |scan| scan.valid_end);
    let verdict = checker.finish(valid_end);
    let hint_ignored = matches!(verdict, Verdict::Ignored(_));
    check_hint(segment, &verdict, report);
    let corrupt = header_damage.is_some() || found.as_ref().is_some_and(|damaged| !damaged.torn_tail);
    if !corrupt && hint_ignored && found.is_none() {
        return cut_at_a_frame(segment, records, report);
    }
    if !corrupt {
        report.records += records;
        if let Some(damaged) = found {
            let span = Damage::new(path, damaged.offset, damaged.length, damaged.reason);
            let repair =
                "open cuts it; idemkv repair would keep any whole record after it and drop only its unreadable bytes";
            report.torn_tails.push(Damage { repair: repair.to_string(), ..span });
        }
        return Ok(());
    }
    report_damage(segment, header_damage, report)
}

/// A segment whose frames are whole but whose (ignored) hint lists more of
/// them: it was cut at a frame boundary, and what its hint lists past the
/// cut is lost — damage, which repair lists. (Open ignores such a hint and
/// reads the segment as it is.)
fn cut_at_a_frame(segment: Segment<'_>, records: u64, report: &mut VerifyReport) -> Result<()> {
    let Segment { file, path, expected, .. } = segment;
    let preview = crate::engine::repair::preview(segment.storage, segment.dir, segment.hasher, file, path, expected)?;
    report.records += records;
    if preview.lost > 0 {
        let len = file.len().map_err(|error| Error::io("stat", path, error))?;
        let reason = format!("its hint lists {} more records past its end: the segment was cut", preview.lost);
        let repair = format!("idemkv repair would {}", preview.advice);
        report.damage.push(Damage { file: path.to_path_buf(), offset: len, length: 0, reason, repair });
    }
    Ok(())
}

/// Every damaged span of a segment with damage, as repair finds them.
fn report_damage(segment: Segment<'_>, header_damage: Option<String>, report: &mut VerifyReport) -> Result<()> {
    let Segment { file, path, expected, .. } = segment;
    let preview = crate::engine::repair::preview(segment.storage, segment.dir, segment.hasher, file, path, expected)?;
    let repair = format!("idemkv repair would {}", preview.advice);
    let len = file.len().map_err(|error| Error::io("stat", path, error))?;
    let damage = |offset, length, reason: &str| Damage {
        file: path.to_path_buf(),
        offset,
        length,
        reason: reason.to_string(),
        repair: repair.clone(),
    };
    if let Some(reason) = header_damage {
        // The walk that found it read no further.
        report.bytes += len;
        report.damage.push(damage(0, len.min(HEADER_BYTES as u64), &reason));
    }
    if preview.cut_short {
        report.damage.push(damage(len, 0, "segment is shorter than its durable mark"));
    }
    report.damage.extend(preview.unreadable.iter().map(|span| damage(span.offset, span.length, span.reason)));
    report.records += preview.records;
    Ok(())
}

/// Counts (and names, if ignored) the segment's hint; one that differs
/// from its segment is damage: open would trust it.
fn check_hint(segment: Segment<'_>, verdict: &Verdict, report: &mut VerifyReport) {
    let file = hint::hint_path(segment.dir, segment.expected.segment);
    match verdict {
        Verdict::Agrees => report.hints_checked += 1,
        Verdict::Ignored(reason) => {
            report.hints_ignored += 1;
            let active_segment = segment.expected.active;
            report.ignored_hints.push(IgnoredHint { file, reason: reason.to_string(), active_segment });
        }
        Verdict::Missing | Verdict::Unchecked => {}
        Verdict::Disagrees { offset, reason } => {
            let reason = format!("{reason} (segment offset {offset}); open would trust this hint");
            report.damage.push(Damage::new(&file, 0, 0, reason));
        }
    }
}
