//! What repair finds in one segment: every whole frame (the scanner's
//! salvage walk, which resynchronises after damage), every unreadable span,
//! and the records those spans held — from the segment's hint where it
//! lists them, else as the damaged bytes read. Reads only.

use super::Evidence;
use crate::engine::entry::KeyHasher;
use crate::engine::frame::{self, PREFIX_BYTES};
use crate::engine::segment::header::{SegmentHeader, HEADER_BYTES};
use crate::engine::segment::hint::{self, Checker, HintEntry, Listed, Verdict};
use crate::engine::segment::scanner::{self, Boundaries, Expected, Frame, Unreadable};
use crate::error::Result;
use crate::io::{Storage, StorageFile};
use crate::keyspace::Keyspace;
use crate::record::{self, Kind};
use std::path::{Path, PathBuf};

/// Where a frame's LSN is: after its CRC and length, and the kind, state,
/// flags, reserved byte and attempt of its payload (see `engine/frame.rs`).
const LSN_AT: u64 = 16;

/// A record that repair cannot keep: its frame is unreadable (or gone).
pub(crate) use crate::keyspace::Name;

#[derive(Debug, Clone)]
pub(crate) struct Lost {
    pub offset: u64,
    /// `None` when the damaged bytes name no kind.
    pub kind: Option<Kind>,
    pub lsn: u64,
    /// The index hash of its scope and key: from the hint, or of the name
    /// the damaged bytes give.
    pub hash: u128,
    pub name: Option<Name>,
    pub evidence: Evidence,
}

/// One segment as repair found it.
#[derive(Debug)]
pub(crate) struct Analysis {
    pub id: u32,
    pub path: PathBuf,
    pub expected: Expected,
    /// Its header, if it reads; else why not.
    pub header: std::result::Result<SegmentHeader, String>,
    /// The durable mark claims more than the file holds.
    pub cut_short: bool,
    pub len: u64,
    /// Zeros the writer filled ahead of the active segment's records.
    pub unwritten: u64,
    /// Offset and length of every whole frame.
    pub kept: Vec<(u64, u64)>,
    pub unreadable: Vec<Unreadable>,
    pub lost: Vec<Lost>,
    /// The highest LSN the segment's frames, header and hint name.
    pub max_lsn: u64,
    pub first_lsn: Option<u64>,
    /// The LSN floor of the segment's hint, if the hint was trusted.
    pub hint_floor: Option<u64>,
    /// The frame starts the trusted hint gave the walk, so that a second
    /// walk (naming) finds the same frames.
    pub starts: Vec<u64>,
    pub hint_end: u64,
    /// The hint checked as open would use it (meaningful when undamaged).
    pub verdict: Verdict,
}

impl Analysis {
    /// Whether repair must rewrite the segment: anything in it is not a
    /// whole frame, its header or end is damaged, or its hint lists a
    /// record the log no longer holds.
    pub(crate) fn damaged(&self) -> bool {
        self.header.is_err() || self.cut_short || !self.unreadable.is_empty() || !self.lost.is_empty()
    }

    /// Bytes that could not be read as records or as the header.
    pub(crate) fn unreadable_bytes(&self) -> u64 {
        let header = if self.header.is_err() { self.len.min(HEADER_BYTES as u64) } else { 0 };
        header + self.unreadable.iter().map(|span| span.length).sum::<u64>()
    }

    pub(crate) fn boundaries(&self) -> Boundaries<'_> {
        Boundaries { starts: &self.starts, end: self.hint_end }
    }
}

/// What one segment's analysis needs around it.
#[derive(Clone, Copy)]
pub(crate) struct Segment<'a> {
    pub storage: &'a dyn Storage,
    pub dir: &'a Path,
    pub hasher: &'a KeyHasher,
    pub file: &'a dyn StorageFile,
    pub path: &'a Path,
    pub expected: Expected,
}

/// Analyses a segment, with its hint if the hint agrees with every whole
/// frame it covers (else, as if it had none).
///
/// # Errors
/// I/O errors; a header of a format version this build does not read.
pub(crate) fn analyse(segment: Segment<'_>) -> Result<Analysis> {
    let listed = hint::listed(segment.storage, segment.dir, segment.expected.shard, segment.expected.segment);
    if let Some(listed) = listed {
        if let Some(analysis) = walk(segment, Some(&listed))? {
            return Ok(analysis);
        }
    }
    walk(segment, None).map(|analysis| analysis.expect("without a hint nothing disagrees"))
}

/// The frames a hint lists, indexed by their offsets.
struct Hinted<'a> {
    listed: &'a Listed,
    starts: Vec<u64>,
    end: u64,
    seen: Vec<bool>,
}

impl<'a> Hinted<'a> {
    fn new(listed: &'a Listed) -> Self {
        let starts: Vec<u64> = listed.entries.iter().map(|entry| entry.offset).collect();
        let end = listed.entries.last().map_or(HEADER_BYTES as u64, |last| last.offset + last.len);
        Hinted { listed, starts, end, seen: vec![false; listed.entries.len()] }
    }

    /// Whether the hint agrees with the whole frame `found`: a frame it
    /// covers must be one it lists, entry for entry.
    fn agrees(&mut self, found: &HintEntry) -> bool {
        if found.offset >= self.end {
            return true;
        }
        match self.starts.binary_search(&found.offset) {
            Ok(at) if self.listed.entries[at] == *found => {
                self.seen[at] = true;
                true
            }
            _ => false,
        }
    }
}

/// One salvage walk of the segment, with `listed` as its hint; `None` if
/// that hint disagrees with the frames.
fn walk(segment: Segment<'_>, listed: Option<&Listed>) -> Result<Option<Analysis>> {
    let mut hinted = listed.map(Hinted::new);
    let starts = hinted.as_ref().map_or_else(Vec::new, |hinted| hinted.starts.clone());
    let hint_end = hinted.as_ref().map_or(0, |hinted| hinted.end);
    let boundaries = Boundaries { starts: &starts, end: hint_end };
    let mut checker =
        Checker::open(segment.storage, segment.dir, segment.file, segment.path, segment.expected, segment.hasher);
    let Walked { salvaged, kept, unreadable, agrees, max_lsn, first_lsn } =
        salvage_frames(segment, boundaries, hinted.as_mut(), &mut checker)?;
    let (len, unwritten) = (salvaged.len, salvaged.unwritten);
    let (header, cut_short) = header_of(segment, salvaged)?;
    let floor_agrees = match (&header, listed) {
        (Ok(header), Some(listed)) => header.lsn_floor == listed.header.lsn_floor,
        _ => true,
    };
    if !(agrees && floor_agrees) {
        return Ok(None);
    }
    let verdict = if unreadable.is_empty() { checker.finish(len - unwritten) } else { Verdict::Unchecked };
    let mut analysis = Analysis {
        id: segment.expected.segment,
        path: segment.path.to_path_buf(),
        expected: segment.expected,
        header,
        cut_short,
        len,
        unwritten,
        kept,
        unreadable,
        lost: Vec::new(),
        max_lsn,
        first_lsn,
        hint_floor: listed.map(|listed| listed.header.lsn_floor),
        starts,
        hint_end,
        verdict,
    };
    if let Ok(header) = &analysis.header {
        analysis.max_lsn = analysis.max_lsn.max(header.lsn_floor);
    }
    if let Some(hinted) = &hinted {
        list_hinted(&mut analysis, hinted, segment);
    }
    list_unhinted(&mut analysis, segment);
    Ok(Some(analysis))
}

/// What the scanner's salvage walk found in a segment.
struct Walked {
    salvaged: scanner::Salvaged,
    /// Offset and length of every whole frame.
    kept: Vec<(u64, u64)>,
    unreadable: Vec<Unreadable>,
    /// The hint (if any) agrees with every whole frame it covers.
    agrees: bool,
    max_lsn: u64,
    first_lsn: Option<u64>,
}

/// Walks every whole frame and unreadable span of the segment within
/// `boundaries`, checking each frame against `hinted` and handing it to
/// `checker`.
fn salvage_frames(
    segment: Segment<'_>,
    boundaries: Boundaries<'_>,
    mut hinted: Option<&mut Hinted<'_>>,
    checker: &mut Checker<'_>,
) -> Result<Walked> {
    let (mut kept, mut unreadable, mut agrees) = (Vec::new(), Vec::new(), true);
    let (mut max_lsn, mut first_lsn) = (0, None);
    let salvaged = scanner::salvage(
        segment.file,
        segment.path,
        segment.expected,
        boundaries,
        |frame: Frame<'_>| {
            let found = HintEntry::of_frame(
                segment.hasher.hash(frame.header.keyspace, frame.scope, frame.key),
                &frame.header,
                frame.offset,
                frame.len,
            );
            agrees &= hinted.as_mut().is_none_or(|hinted| hinted.agrees(&found));
            checker.visit(&frame);
            kept.push((frame.offset, frame.len));
            max_lsn = max_lsn.max(frame.header.lsn);
            first_lsn.get_or_insert(frame.header.lsn);
            Ok(())
        },
        |span| {
            unreadable.push(span);
            Ok(())
        },
    )?;
    Ok(Walked { salvaged, kept, unreadable, agrees, max_lsn, first_lsn })
}

/// The segment's header (or why it does not read) and whether its durable
/// mark claims more than the file holds.
///
/// # Errors
/// A header of a format version this build does not read; I/O errors.
fn header_of(
    segment: Segment<'_>,
    salvaged: scanner::Salvaged,
) -> Result<(std::result::Result<SegmentHeader, String>, bool)> {
    match salvaged.header {
        Ok((header, mark)) => {
            let cut_short = segment.expected.active && mark.synced_end > salvaged.len;
            Ok((Ok(header), cut_short))
        }
        Err(crate::Error::Corruption { reason, .. }) => Ok((Err(reason), false)),
        Err(error) => Err(error),
    }
}

/// The records the hint lists that the walk did not find whole.
fn list_hinted(analysis: &mut Analysis, hinted: &Hinted<'_>, segment: Segment<'_>) {
    analysis.max_lsn = analysis.max_lsn.max(hinted.listed.header.last_lsn).max(hinted.listed.header.lsn_floor);
    for (entry, seen) in hinted.listed.entries.iter().zip(&hinted.seen) {
        analysis.max_lsn = analysis.max_lsn.max(entry.lsn);
        if *seen {
            continue;
        }
        let name = raw_name(segment.file, entry.offset, entry.len)
            .filter(|(keyspace, scope, key)| segment.hasher.hash(*keyspace, scope, key) == entry.hash);
        analysis.lost.push(Lost {
            offset: entry.offset,
            kind: Some(entry.kind),
            lsn: entry.lsn,
            hash: entry.hash,
            evidence: if name.is_some() { Evidence::Hint } else { Evidence::HintWithoutKey },
            name,
        });
    }
}

/// The records of the unreadable spans (or their parts) that no hint
/// covers, as far as the damaged bytes give them: frame after frame by the
/// lengths their fields claim, until those no longer make sense.
fn list_unhinted(analysis: &mut Analysis, segment: Segment<'_>) {
    let covered = analysis.hint_end;
    let spans: Vec<Unreadable> = analysis.unreadable.clone();
    for span in spans {
        let end = span.offset + span.length;
        let mut at = span.offset.max(covered);
        // Bounded: every step moves forward by at least a frame's prefix.
        while at < end {
            let Some((header, frame_len)) = raw_fields(segment.file, at).filter(|(_, len)| at + len <= end) else {
                // Fields that make no sense: the name alone, if it fits.
                if let Some(lost) = unnamed_kind(segment, at, end) {
                    analysis.lost.push(lost);
                }
                break;
            };
            // A store never holds an empty key: fields that give one are
            // not a record's.
            let Some(name) = raw_name(segment.file, at, frame_len) else { break };
            let hash = segment.hasher.hash(name.0, &name.1, &name.2);
            // An unchecked LSN may be anything: it does not raise the LSNs
            // of the new active segment (the gap above those read does).
            analysis.lost.push(Lost {
                offset: at,
                kind: Some(header.kind),
                lsn: header.lsn,
                hash,
                name: Some(name),
                evidence: Evidence::Unverified,
            });
            at += frame_len;
        }
    }
}

/// A record at `offset` whose kind and lengths the damaged bytes do not
/// give, named by the scope and key they hold if those fit before `end`.
fn unnamed_kind(segment: Segment<'_>, offset: u64, end: u64) -> Option<Lost> {
    let (keyspace, scope, key) = raw_name(segment.file, offset, end - offset)?;
    let mut lsn = [0u8; 8];
    segment.file.read_exact_at(&mut lsn, offset + LSN_AT).ok()?;
    Some(Lost {
        offset,
        kind: None,
        lsn: u64::from_le_bytes(lsn),
        hash: segment.hasher.hash(keyspace, &scope, &key),
        name: Some((keyspace, scope, key)),
        evidence: Evidence::Unverified,
    })
}

/// The fields of the (damaged) frame at `offset`, as its bytes read.
fn raw_fields(file: &dyn StorageFile, offset: u64) -> Option<(record::Header, u64)> {
    let mut prefix = [0u8; PREFIX_BYTES];
    file.read_exact_at(&mut prefix, offset).ok()?;
    frame::decode_damaged(&prefix)
}

/// The keyspace, scope and key of the (damaged) frame of `len` bytes at
/// `offset`, as its bytes read, if its length fields fit in the frame and
/// give a key (a store never holds an empty one); a keyspace byte this
/// build does not know reads as the caller's (the name is unchecked, as
/// the rest of it).
fn raw_name(file: &dyn StorageFile, offset: u64, len: u64) -> Option<Name> {
    let mut keyspace = [0u8; 1];
    file.read_exact_at(&mut keyspace, offset + frame::KEYSPACE_AT).ok()?;
    let keyspace = Keyspace::from_byte(keyspace[0]).unwrap_or_default();
    let mut lengths = [0u8; 4];
    file.read_exact_at(&mut lengths, offset + PREFIX_BYTES as u64 - 8).ok()?;
    let scope_len = usize::from(u16::from_le_bytes([lengths[0], lengths[1]]));
    let key_len = usize::from(u16::from_le_bytes([lengths[2], lengths[3]]));
    if key_len == 0 || (PREFIX_BYTES + scope_len + key_len) as u64 > len {
        return None;
    }
    let mut names = vec![0u8; scope_len + key_len];
    file.read_exact_at(&mut names, offset + PREFIX_BYTES as u64).ok()?;
    let key = names.split_off(scope_len);
    Some((keyspace, names, key))
}
