//! Checking a hint against the log it describes (`verify` and `repair`):
//! a hint that open would use must list exactly the frames the scanner
//! finds, entry for entry. One that open would ignore is harmless.

use super::reader::{self, Described, HintReader, Opened};
use super::HintEntry;
use crate::engine::entry::KeyHasher;
use crate::engine::segment::scanner::{self, Expected, Frame};
use crate::io::{Storage, StorageFile};
use std::path::Path;

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The segment has no hint.
    Missing,
    /// Open would ignore the hint (the reason) and replay the log.
    Ignored(&'static str),
    /// Open would use the hint, and it lists the log's frames exactly.
    Agrees,
    /// Open would use the hint, but it differs from the log at the frame
    /// at this segment offset: open would build a wrong index.
    Disagrees { offset: u64, reason: &'static str },
    /// The log is damaged inside the prefix the hint covers, so the hint
    /// could not be checked whole (the damage is reported on its own).
    Unchecked,
}

/// Compares a hint with the frames of its segment as a walk visits them.
pub(crate) struct Checker<'a> {
    hasher: &'a KeyHasher,
    reader: Option<Box<HintReader>>,
    verdict: Option<Verdict>,
}

impl<'a> Checker<'a> {
    /// Opens the hint of the segment `file` (at `path`, which must be
    /// `expected`) in folder `dir`, for reading only.
    pub(crate) fn open(
        storage: &dyn Storage,
        dir: &Path,
        file: &dyn StorageFile,
        path: &Path,
        expected: Expected,
        hasher: &'a KeyHasher,
    ) -> Self {
        let mut checker = Checker { hasher, reader: None, verdict: None };
        let Ok(len) = file.len() else {
            checker.verdict = Some(Verdict::Unchecked);
            return checker;
        };
        // A damaged header is reported by the walk; no hint is used then.
        let Ok((header, mark)) = scanner::read_header(file, path, len, expected) else {
            checker.verdict = Some(Verdict::Unchecked);
            return checker;
        };
        let durable_end = if expected.active { mark.synced_end } else { len };
        let described = Described {
            file,
            shard: expected.shard,
            segment: expected.segment,
            lsn_floor: header.lsn_floor,
            len,
            durable_end,
        };
        match reader::open(storage, dir, &described) {
            Opened::Missing => checker.verdict = Some(Verdict::Missing),
            Opened::Ignored(reason) => checker.verdict = Some(Verdict::Ignored(reason)),
            Opened::Usable(reader) => checker.reader = Some(reader),
        }
        checker
    }

    /// Compares the next entry of the hint with `frame`, if the hint
    /// covers it.
    pub(crate) fn visit(&mut self, frame: &Frame<'_>) {
        if self.verdict.is_some() {
            return;
        }
        let Some(reader) = self.reader.as_mut() else { return };
        if frame.offset >= reader.header.end {
            return;
        }
        let found = HintEntry::of_frame(
            self.hasher.hash(frame.header.keyspace, frame.scope, frame.key),
            &frame.header,
            frame.offset,
            frame.len,
        );
        self.verdict = match reader.next_entry() {
            // Open applies the blocks before the damage, all of them frames
            // of this segment, then replays the log: harmless.
            Err(reason) => Some(Verdict::Ignored(reason)),
            Ok(Some(listed)) if listed == found => None,
            Ok(Some(_)) => Some(Verdict::Disagrees {
                offset: frame.offset,
                reason: "the hint's entry differs from the frame in the log",
            }),
            Ok(None) => Some(Verdict::Disagrees { offset: frame.offset, reason: "the hint ends before its frames do" }),
        };
    }

    /// The verdict once the walk ended at `valid_end` (the end of the last
    /// whole frame).
    pub(crate) fn finish(mut self, valid_end: u64) -> Verdict {
        if let Some(verdict) = self.verdict.take() {
            return verdict;
        }
        let Some(reader) = self.reader.as_mut() else { return Verdict::Missing };
        if valid_end < reader.header.end {
            return Verdict::Unchecked;
        }
        match reader.next_entry() {
            Ok(None) => Verdict::Agrees,
            Ok(Some(listed)) => {
                Verdict::Disagrees { offset: listed.offset, reason: "the hint lists a frame the log does not hold" }
            }
            Err(reason) => Verdict::Ignored(reason),
        }
    }
}
