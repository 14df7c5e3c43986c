//! Reads a whole segment back, frame by frame, for recovery and verification.

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
    /// End of the last whole frame. Less than the file's length when a torn
    /// tail was found (only ever in the active segment).
    pub valid_end: u64,
}

/// Decodes the header of segment `bytes` read from `path`.
pub(crate) fn read_header(path: &Path, bytes: &[u8]) -> Result<SegmentHeader> {
    SegmentHeader::decode(bytes).map_err(|error| match error {
        HeaderError::Invalid(reason) => Error::corruption(path, 0, reason),
        HeaderError::UnsupportedVersion(found) => Error::UnsupportedFormatVersion {
            file: path.to_path_buf(),
            found,
            supported: FormatVersion::CURRENT.into(),
        },
    })
}

/// Walks every frame of a segment, calling `visit` for each whole one.
///
/// A damaged frame is a torn tail, and the scan ends there, only when
/// `active` is set (the segment is the last of its shard) and no whole frame
/// with a larger LSN starts anywhere after the damage: a write cut short by a
/// crash leaves nothing valid behind it, while damage in the middle of the
/// file does. Anything else is [`Error::Corruption`] naming file and offset.
pub(crate) fn scan(
    path: &Path,
    bytes: &[u8],
    active: bool,
    mut visit: impl FnMut(Frame<'_>) -> Result<()>,
) -> Result<Scan> {
    let header = read_header(path, bytes)?;
    let mut offset = HEADER_BYTES;
    let mut last_lsn = header.lsn_floor;
    while offset < bytes.len() {
        match record::decode(&bytes[offset..]) {
            Ok((frame_header, frame_len)) => {
                if frame_header.lsn < last_lsn {
                    return Err(Error::corruption(path, offset as u64, "LSN goes backwards"));
                }
                last_lsn = frame_header.lsn;
                visit(Frame {
                    header: frame_header,
                    offset: offset as u64,
                    bytes: &bytes[offset..offset + frame_len],
                })?;
                offset += frame_len;
            }
            Err(error) => {
                if active && !whole_frame_after(bytes, offset + 1, last_lsn) {
                    return Ok(Scan { header, valid_end: offset as u64 });
                }
                let reason = match error {
                    DecodeError::Truncated => "frame runs past the end of the segment",
                    DecodeError::Invalid(reason) => reason,
                };
                return Err(Error::corruption(path, offset as u64, reason));
            }
        }
    }
    Ok(Scan { header, valid_end: offset as u64 })
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
pub(crate) fn next_whole_frame(bytes: &[u8], from: usize) -> Option<(usize, Header)> {
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
