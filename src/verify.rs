//! Offline verification of a store directory: every shard's files against
//! its catalog, every header and every record's CRC, with the scanner and
//! the rules that open uses, without opening the store: every file is opened
//! for reading only, nothing is written and no lock is taken (so a
//! compaction of a live writer may delete a segment while it is checked,
//! which is then reported missing).

use crate::error::{Error, Result};
use crate::index::KeyHasher;
use crate::io::{StdStorage, Storage, StorageFile};
use crate::open::existing_manifest;
use crate::recovery::check_catalog;
use crate::segment;
use crate::segment::hint::{self, Checker, Verdict};
use crate::segment::scanner::{self, Expected};
use std::path::{Path, PathBuf};

/// One damaged span of a segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damage {
    /// The damaged file.
    pub file: PathBuf,
    /// Where the damage starts.
    pub offset: u64,
    /// How many bytes until the next whole record (or the end of the file).
    pub length: u64,
    /// What was wrong at `offset`.
    pub reason: String,
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
    /// Damage that open would refuse with [`Error::Corruption`].
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
    /// replay their segments from the log instead: not damage; the next
    /// writable open rewrites them.
    pub hints_ignored: u64,
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
/// let report = idemkv::verify(dir.path())?;
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
    let manifest = existing_manifest(&storage, dir)?;
    let mut report = VerifyReport { shards: manifest.shards, ..VerifyReport::default() };
    let hasher = KeyHasher::new(manifest.hash_key);
    for shard in 0..manifest.shards {
        let shard_dir = segment::shard_dir(dir, shard);
        let check = match check_catalog(&storage, &shard_dir, shard) {
            Ok(check) => check,
            Err(Error::Corruption { file, offset, reason }) => {
                report.damage.push(Damage { file, offset, length: 0, reason });
                continue;
            }
            Err(error) => return Err(error),
        };
        let whole = |file: &PathBuf, reason: &str| Damage {
            file: file.clone(),
            offset: 0,
            length: 0,
            reason: reason.to_string(),
        };
        report
            .damage
            .extend(check.missing.iter().map(|file| whole(file, "segment missing: the shard's catalog names it")));
        report.damage.extend(check.unknown.iter().map(|file| whole(file, "segment beyond the shard's catalog")));
        let leftover = "left by an unfinished roll or drop (no record); deleted at the next open";
        report.torn_tails.extend(check.leftovers.iter().map(|file| whole(file, leftover)));
        for (id, path) in &check.present {
            let file = storage.open_read_only(path).map_err(|error| Error::io("open", path, error))?;
            let expected = Expected { shard, segment: *id, active: *id == check.catalog.last };
            let checker = Checker::open(&storage, &shard_dir, &*file, path, expected, &hasher);
            check_segment(&*file, path, expected, checker, &mut report)?;
        }
    }
    Ok(report)
}

/// Walks one segment with the scanner that open uses, recording its first
/// damaged span (a torn tail or damage) instead of stopping the check, and
/// checks its hint against the frames.
fn check_segment(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    mut checker: Checker<'_>,
    report: &mut VerifyReport,
) -> Result<()> {
    let mut records = 0;
    let mut found = None;
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
    report.records += records;
    match &walked {
        Ok(scan) => report.bytes += scan.len,
        // The header itself is damaged, or names another segment.
        Err(Error::Corruption { offset, reason, .. }) => {
            let length = file.len().unwrap_or(0);
            report.damage.push(Damage { file: path.to_path_buf(), offset: *offset, length, reason: reason.clone() });
        }
        Err(Error::UnsupportedFormatVersion { found, .. }) => {
            let reason = format!("format version {found} is not read by this build");
            report.damage.push(Damage { file: path.to_path_buf(), offset: 0, length: 0, reason });
        }
        Err(_) => return walked.map(|_| ()),
    }
    let valid_end = walked.as_ref().map_or(0, |scan| scan.valid_end);
    match checker.finish(valid_end) {
        Verdict::Agrees => report.hints_checked += 1,
        Verdict::Ignored(_) => report.hints_ignored += 1,
        Verdict::Missing | Verdict::Unchecked => {}
        Verdict::Disagrees { offset, reason } => report.damage.push(Damage {
            file: hint::hint_path(path.parent().unwrap_or(Path::new("")), expected.segment),
            offset: 0,
            length: 0,
            reason: format!(
                "{reason} (segment offset {offset}); open would trust this hint: delete it (or run repair)"
            ),
        }),
    }
    if let Some(damaged) = found {
        let span = Damage {
            file: path.to_path_buf(),
            offset: damaged.offset,
            length: damaged.length,
            reason: damaged.reason.to_string(),
        };
        if damaged.torn_tail {
            report.torn_tails.push(span);
        } else {
            report.damage.push(span);
        }
    }
    Ok(())
}
