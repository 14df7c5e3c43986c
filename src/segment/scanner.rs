//! Reads a whole segment back, frame by frame. Open, verify and compaction
//! all walk segments with [`walk`], so they agree on what is a whole frame,
//! what is a torn tail and what is damage.

use super::header::{HeaderError, SegmentHeader, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::format::FormatVersion;
use crate::record::{self, DecodeError, Header, FIXED_BYTES, FRAME_HEADER_BYTES};
use std::path::Path;

/// One whole, CRC-checked frame found by the scanner.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    pub header: Header,
    pub offset: u64,
    pub bytes: &'a [u8],
}

/// What a scan found.
#[derive(Debug)]
pub(crate) struct Scan {
    pub header: SegmentHeader,
    /// End of the last whole frame before a torn tail, or of the file.
    /// Less than the file's length only when a torn tail was found (only
    /// ever in the active segment).
    pub valid_end: u64,
}

/// Which segment a file must be: the shard and segment id its header names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    pub shard: u32,
    pub segment: u32,
    /// The newest segment of its shard, the only one that may end in a
    /// torn tail.
    pub active: bool,
}

/// One damaged span found by [`walk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damaged {
    pub offset: u64,
    /// Bytes until the next whole frame, or to the end of the file.
    pub length: u64,
    pub reason: &'static str,
    /// A write cut short by a crash at the end of the active segment: open
    /// cuts it off. Anything else is corruption.
    pub torn_tail: bool,
}

/// Decodes the header of segment `bytes` read from `path` and checks that it
/// names the expected shard and segment.
pub(crate) fn read_header(path: &Path, bytes: &[u8], expected: Expected) -> Result<SegmentHeader> {
    let header = SegmentHeader::decode(bytes).map_err(|error| match error {
        HeaderError::Invalid(reason) => Error::corruption(path, 0, reason),
        HeaderError::UnsupportedVersion(found) => Error::UnsupportedFormatVersion {
            file: path.to_path_buf(),
            found,
            supported: FormatVersion::CURRENT.into(),
        },
    })?;
    if header.shard != expected.shard || header.segment != expected.segment {
        return Err(Error::corruption(path, 0, "segment header names another shard or segment"));
    }
    Ok(header)
}

/// Walks every frame of a segment, refusing any damage but a torn tail with
/// [`Error::Corruption`] naming file and offset (open and compaction).
pub(crate) fn scan(
    path: &Path,
    bytes: &[u8],
    expected: Expected,
    visit: impl FnMut(Frame<'_>) -> Result<()>,
) -> Result<Scan> {
    walk(path, bytes, expected, visit, |damaged| {
        if damaged.torn_tail {
            Ok(())
        } else {
            Err(Error::corruption(path, damaged.offset, damaged.reason))
        }
    })
}

/// Walks every frame of a segment: `visit` gets each whole frame, `damaged`
/// each damaged span; when `damaged` returns `Ok` the walk goes on at the
/// next whole frame (verify reports every span this way).
///
/// A damaged frame is a torn tail, and the walk ends there, only in the
/// active segment and only when no whole frame with a larger LSN starts
/// anywhere after the damage: a write cut short by a crash leaves nothing
/// valid behind it, while damage in the middle of the file does. An LSN
/// lower than the one before it is damage too.
///
/// # Errors
/// A header that does not decode or names another segment, and whatever
/// `visit` or `damaged` return.
pub(crate) fn walk(
    path: &Path,
    bytes: &[u8],
    expected: Expected,
    mut visit: impl FnMut(Frame<'_>) -> Result<()>,
    mut damaged: impl FnMut(&Damaged) -> Result<()>,
) -> Result<Scan> {
    let header = read_header(path, bytes, expected)?;
    let mut offset = HEADER_BYTES;
    let mut last_lsn = header.lsn_floor;
    while offset < bytes.len() {
        let reason = match record::decode(&bytes[offset..]) {
            Ok((frame_header, frame_len)) if frame_header.lsn >= last_lsn => {
                last_lsn = frame_header.lsn;
                let frame = &bytes[offset..offset + frame_len];
                visit(Frame { header: frame_header, offset: offset as u64, bytes: frame })?;
                offset += frame_len;
                continue;
            }
            Ok((_, frame_len)) => {
                let span = Damaged {
                    offset: offset as u64,
                    length: frame_len as u64,
                    reason: "LSN goes backwards",
                    torn_tail: false,
                };
                damaged(&span)?;
                offset += frame_len;
                continue;
            }
            Err(DecodeError::Truncated) => "frame runs past the end of the segment",
            Err(DecodeError::Invalid(reason)) => reason,
        };
        let rest = (bytes.len() - offset) as u64;
        if expected.active && !whole_frame_after(bytes, offset + 1, last_lsn) {
            damaged(&Damaged { offset: offset as u64, length: rest, reason, torn_tail: true })?;
            return Ok(Scan { header, valid_end: offset as u64 });
        }
        let next = next_whole_frame(bytes, offset + 1).map(|(next, _)| next);
        let length = next.map_or(rest, |next| (next - offset) as u64);
        damaged(&Damaged { offset: offset as u64, length, reason, torn_tail: false })?;
        match next {
            Some(next) => offset = next,
            None => break,
        }
    }
    Ok(Scan { header, valid_end: bytes.len() as u64 })
}

/// Whether a whole frame with an LSN above `last_lsn` starts at or after
/// `from`.
fn whole_frame_after(bytes: &[u8], from: usize, last_lsn: u64) -> bool {
    let mut start = from;
    while let Some((found, header)) = next_whole_frame(bytes, start) {
        if header.lsn > last_lsn {
            return true;
        }
        start = found + 1;
    }
    false
}

/// The offset and header of the next whole, CRC-checked frame at or after
/// `from`. Cheap checks on the length field come before the CRC.
fn next_whole_frame(bytes: &[u8], from: usize) -> Option<(usize, Header)> {
    let minimum = FRAME_HEADER_BYTES + FIXED_BYTES;
    let mut start = from;
    while start + minimum <= bytes.len() {
        let candidate = &bytes[start..];
        let plausible = record::declared_frame_bytes(candidate)
            .is_some_and(|len| len >= minimum as u64 && len <= candidate.len() as u64);
        if plausible {
            if let Ok((header, _)) = record::decode(candidate) {
                return Some((start, header));
            }
        }
        start += 1;
    }
    None
}
