//! Offline verification of a store directory: every header and every
//! record's CRC, without opening the store (nothing is written, no lock is
//! taken).

use crate::error::{Error, Result};
use crate::io::{StdStorage, Storage};
use crate::manifest::Manifest;
use crate::segment;
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
/// # Errors
/// [`Error::NotAStore`] when `dir` has no manifest, a damaged manifest as
/// [`Error::Corruption`], I/O errors. Damage inside segments is reported,
/// not returned as an error.
pub fn verify(dir: &Path) -> Result<VerifyReport> {
    let storage = StdStorage;
    let manifest = Manifest::load(&storage, dir)?.ok_or_else(|| Error::NotAStore { path: dir.to_path_buf() })?;
    let mut report = VerifyReport { shards: manifest.shards, ..VerifyReport::default() };
    for shard in 0..manifest.shards {
        let shard_dir = segment::shard_dir(dir, shard);
        let segments = match segment::list_segments(&storage, &shard_dir) {
            Ok(segments) => segments,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        let last = segments.len().saturating_sub(1);
        for (position, (id, path)) in segments.iter().enumerate() {
            let file = storage.open(path, false).map_err(|error| Error::io("open", path, error))?;
            let bytes = segment::read_whole(&*file, path)?;
            report.segments += 1;
            report.bytes += bytes.len() as u64;
            let expected = Expected { shard, segment: *id, active: position == last };
            check_segment(path, &bytes, expected, &mut report);
        }
    }
    Ok(report)
}

/// Walks one segment with the scanner that open uses, recording every
/// damaged span instead of stopping at the first.
fn check_segment(path: &Path, bytes: &[u8], expected: Expected, report: &mut VerifyReport) {
    let mut records = 0;
    let mut found = Vec::new();
    let walked = scanner::walk(
        path,
        bytes,
        expected,
        |_| {
            records += 1;
            Ok(())
        },
        |damaged| {
            found.push(damaged.clone());
            Ok(())
        },
    );
    report.records += records;
    if let Err(error) = walked {
        // Only the segment header makes the walk itself fail.
        report.damage.push(Damage {
            file: path.to_path_buf(),
            offset: 0,
            length: bytes.len() as u64,
            reason: error.to_string(),
        });
    }
    for damaged in found {
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
}
