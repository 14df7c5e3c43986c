//! Reads a segment back, frame by frame, through a bounded buffer. Open,
//! verify, repair and compaction all walk segments with [`walk`], so they
//! agree on what is a whole frame, what is a torn tail and what is damage.
//!
//! Memory stays bounded whatever the segment or frame size: frames are read
//! through a 1 MiB window, and a frame larger than the window has its CRC
//! checked piece by piece; only scope and key (at most 128 KiB) are kept.
//!
//! The rule: the walk stops at the first damaged frame (a bad CRC, bad
//! fields, a frame running past the end of the file, or an LSN lower than
//! the one before). In the active segment, damage at or after the durable
//! mark (see `header.rs`) is a **torn tail** — writes that were never
//! fsynced, cut at open — and damage before it is corruption. In a sealed
//! segment, which was fsynced whole before the next one was created, any
//! damage is corruption. The active segment may end in zeros the writer
//! filled ahead of its records: a span of zeros only, from the end of the
//! last whole frame past the durable mark to the end of the file, is space
//! never written ([`Scan::unwritten`]), neither torn nor damaged.
//!
//! Repair walks differently ([`salvage`]): it does not stop at damage but
//! resynchronises on the next whole frame, so that every whole frame of a
//! damaged segment is found, and every span between them reported.

use super::header::{HeaderError, Mark, SegmentHeader, HEADER_BYTES};
use crate::engine::frame::{self, DecodeError, PREFIX_BYTES};
use crate::error::{Error, Result};
use crate::format::FormatVersion;
use crate::io::StorageFile;
use crate::record::Header;
use std::path::Path;

/// Bytes read from the file at a time.
const WINDOW_BYTES: usize = 1 << 20;

/// One whole, CRC-checked frame found by the scanner.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    pub header: Header,
    pub offset: u64,
    pub len: u64,
    pub scope: &'a [u8],
    pub key: &'a [u8],
}

/// What a walk found.
#[derive(Debug)]
pub(crate) struct Scan {
    pub header: SegmentHeader,
    /// End of the last whole frame before the first damage, or of the file.
    pub valid_end: u64,
    /// The file's length.
    pub len: u64,
    /// Zero bytes from `valid_end` to the end of the active segment: space
    /// the writer zero-filled ahead of its records and never wrote (see
    /// `writer.rs`), not damage.
    pub unwritten: u64,
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

/// The first damaged span of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damaged {
    pub offset: u64,
    /// Bytes from the damage to the end of the file.
    pub length: u64,
    pub reason: &'static str,
    /// Past the durable mark of the active segment: writes cut short by a
    /// crash, cut at open. Anything else is corruption.
    pub torn_tail: bool,
}

/// A window over a file.
struct Reader<'a> {
    file: &'a dyn StorageFile,
    path: &'a Path,
    len: u64,
    window: Vec<u8>,
    /// File offset of `window[0]`.
    start: u64,
}

impl Reader<'_> {
    /// The bytes `offset..offset + len`, which must lie within the file and
    /// be at most [`WINDOW_BYTES`] long.
    fn get(&mut self, offset: u64, len: usize) -> Result<&[u8]> {
        debug_assert!(len <= WINDOW_BYTES && offset + len as u64 <= self.len);
        let window_end = self.start + self.window.len() as u64;
        if offset < self.start || offset + len as u64 > window_end {
            let fill = self.len.saturating_sub(offset).min(WINDOW_BYTES as u64);
            self.window.resize(usize::try_from(fill).unwrap_or(WINDOW_BYTES), 0);
            self.file.read_exact_at(&mut self.window, offset).map_err(|error| Error::io("read", self.path, error))?;
            self.start = offset;
        }
        let at = usize::try_from(offset - self.start).unwrap_or(0);
        Ok(&self.window[at..at + len])
    }

    /// The frame at `offset`, its CRC checked through the window; `None`
    /// with a reason when it is damaged.
    fn frame(&mut self, offset: u64) -> Result<Option<(Header, u64)>> {
        let rest = self.len - offset;
        if rest < PREFIX_BYTES as u64 {
            return Ok(None);
        }
        let prefix = self.get(offset, PREFIX_BYTES)?;
        let Ok((header, frame_len, stored_crc)) = frame::decode_prefix(prefix) else {
            return Ok(None);
        };
        if frame_len > rest {
            return Ok(None);
        }
        let mut hasher = frame::crc_start(prefix);
        let mut at = offset + PREFIX_BYTES as u64;
        let end = offset + frame_len;
        while at < end {
            let piece = usize::try_from((end - at).min(WINDOW_BYTES as u64)).unwrap_or(WINDOW_BYTES);
            hasher.update(self.get(at, piece)?);
            at += piece as u64;
        }
        Ok((hasher.finalize() == stored_crc).then_some((header, frame_len)))
    }

    /// Whether every byte from `offset` to the end of the file is zero.
    fn zeros(&mut self, offset: u64) -> Result<bool> {
        let mut at = offset;
        while at < self.len {
            let piece = usize::try_from((self.len - at).min(WINDOW_BYTES as u64)).unwrap_or(WINDOW_BYTES);
            if self.get(at, piece)?.iter().any(|byte| *byte != 0) {
                return Ok(false);
            }
            at += piece as u64;
        }
        Ok(true)
    }

    /// The offset from which every byte to the end of the file is zero.
    fn zeros_from(&mut self) -> Result<u64> {
        let mut end = self.len;
        while end > 0 {
            let piece = end.min(WINDOW_BYTES as u64);
            let start = end - piece;
            let bytes = self.get(start, usize::try_from(piece).unwrap_or(WINDOW_BYTES))?;
            if let Some(last) = bytes.iter().rposition(|byte| *byte != 0) {
                return Ok(start + last as u64 + 1);
            }
            end = start;
        }
        Ok(0)
    }

    /// Why the frame at `offset` is damaged (for the report).
    fn reason(&mut self, offset: u64) -> Result<&'static str> {
        let rest = self.len - offset;
        if rest < PREFIX_BYTES as u64 {
            return Ok("frame runs past the end of the segment");
        }
        Ok(match frame::decode_prefix(self.get(offset, PREFIX_BYTES)?) {
            Err(DecodeError::Invalid(reason)) => reason,
            Err(DecodeError::Truncated) => "frame runs past the end of the segment",
            Ok((_, frame_len, _)) if frame_len > rest => "frame runs past the end of the segment",
            Ok(_) => "CRC mismatch",
        })
    }
}

/// Reads and checks the header of segment `file` at `path`: it must name
/// the expected shard and segment. Returns it with its durable mark.
pub(crate) fn read_header(
    file: &dyn StorageFile,
    path: &Path,
    len: u64,
    expected: Expected,
) -> Result<(SegmentHeader, Mark)> {
    if len < HEADER_BYTES as u64 {
        return Err(Error::corruption(path, 0, "segment shorter than its header"));
    }
    let mut bytes = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut bytes, 0).map_err(|error| Error::io("read", path, error))?;
    let (header, mark) = SegmentHeader::decode(&bytes).map_err(|error| match error {
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
    Ok((header, mark))
}

/// Walks every frame of a segment, refusing any damage but a torn tail with
/// [`Error::Corruption`] naming file and offset (open and compaction).
pub(crate) fn scan(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    visit: impl FnMut(Frame<'_>) -> Result<()>,
) -> Result<Scan> {
    scan_from(file, path, expected, None, visit)
}

/// [`scan`] from `resume` on (the end of the prefix a hint described), or
/// from the first frame.
pub(crate) fn scan_from(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    resume: Option<Resume>,
    visit: impl FnMut(Frame<'_>) -> Result<()>,
) -> Result<Scan> {
    walk_from(file, path, expected, resume, visit, |damaged| {
        if damaged.torn_tail {
            Ok(())
        } else {
            Err(Error::corruption(path, damaged.offset, damaged.reason))
        }
    })
}

/// Walks the frames of a segment up to its first damage: `visit` gets each
/// whole frame, `damaged` the first damaged span (see the module docs for
/// the rule); the walk ends there.
///
/// # Errors
/// A header that does not decode or names another segment, I/O errors, and
/// whatever `visit` or `damaged` return.
pub(crate) fn walk(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    visit: impl FnMut(Frame<'_>) -> Result<()>,
    damaged: impl FnOnce(&Damaged) -> Result<()>,
) -> Result<Scan> {
    walk_from(file, path, expected, None, visit, damaged)
}

/// Where a walk starts when a prefix of the segment is already known (from
/// its hint): the offset after that prefix's last frame, and that frame's
/// LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resume {
    pub offset: u64,
    pub last_lsn: u64,
}

/// [`walk`] from `resume` on, or from the first frame.
fn walk_from(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    resume: Option<Resume>,
    mut visit: impl FnMut(Frame<'_>) -> Result<()>,
    damaged: impl FnOnce(&Damaged) -> Result<()>,
) -> Result<Scan> {
    let len = file.len().map_err(|error| Error::io("stat", path, error))?;
    let (header, mark) = read_header(file, path, len, expected)?;
    // A sealed segment is durable whole.
    let durable_end = if expected.active { mark.synced_end } else { len };
    if durable_end > len {
        damaged(&Damaged {
            offset: len,
            length: 0,
            reason: "segment is shorter than its durable mark",
            torn_tail: false,
        })?;
        return Ok(Scan { header, valid_end: len, len, unwritten: 0 });
    }
    let mut reader = Reader { file, path, len, window: Vec::new(), start: 0 };
    let start = resume.unwrap_or(Resume { offset: HEADER_BYTES as u64, last_lsn: header.lsn_floor });
    let (mut offset, mut last_lsn) = (start.offset.clamp(HEADER_BYTES as u64, len), start.last_lsn);
    while offset < len {
        let whole = reader.frame(offset)?.filter(|(frame, _)| frame.lsn >= last_lsn);
        let Some((frame, frame_len)) = whole else {
            let reason = match reader.frame(offset)? {
                Some(_) => "LSN goes backwards",
                None => reader.reason(offset)?,
            };
            let torn_tail = offset >= durable_end;
            if torn_tail && reader.zeros(offset)? {
                return Ok(Scan { header, valid_end: offset, len, unwritten: len - offset });
            }
            damaged(&Damaged { offset, length: len - offset, reason, torn_tail })?;
            return Ok(Scan { header, valid_end: offset, len, unwritten: 0 });
        };
        last_lsn = frame.lsn;
        let names = usize::from(frame.scope_len) + usize::from(frame.key_len);
        let names_at = offset + PREFIX_BYTES as u64;
        let bytes = reader.get(names_at, names)?;
        let (scope, key) = bytes.split_at(usize::from(frame.scope_len));
        visit(Frame { header: frame, offset, len: frame_len, scope, key })?;
        offset += frame_len;
    }
    Ok(Scan { header, valid_end: offset, len, unwritten: 0 })
}

/// The frame boundaries a segment's hint lists (repair's salvage walk):
/// the offset of every frame of the prefix `[64, end)` it covers, in
/// order. Empty without a hint.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Boundaries<'a> {
    pub starts: &'a [u64],
    pub end: u64,
}

impl Boundaries<'_> {
    /// The length the hint gives the frame at `offset`, if a hinted frame
    /// starts there.
    fn frame_len(&self, offset: u64) -> Option<u64> {
        let at = self.starts.binary_search(&offset).ok()?;
        let next = self.starts.get(at + 1).copied().unwrap_or(self.end);
        Some(next - offset)
    }

    /// The hinted frame starts after `offset`.
    fn after(&self, offset: u64) -> &[u64] {
        let at = self.starts.partition_point(|start| *start <= offset);
        &self.starts[at..]
    }
}

/// A span of a segment that holds no whole frame, found by [`salvage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub offset: u64,
    pub length: u64,
    pub reason: &'static str,
}

/// What [`salvage`] found besides the frames.
#[derive(Debug)]
pub(crate) struct Salvaged {
    /// The header and its durable mark, or why they cannot be read (a
    /// [`Error::Corruption`] or [`Error::UnsupportedFormatVersion`]).
    pub header: Result<(SegmentHeader, Mark)>,
    /// The file's length.
    pub len: u64,
    /// Zeros at the end of the active segment past its durable mark: space
    /// the writer zero-filled, neither a frame nor damage.
    pub unwritten: u64,
}

/// Walks every whole frame of a segment, damage or not (repair): after an
/// unreadable span it resynchronises on the next whole frame — where the
/// hint says the damaged frame ends, else where its own length says, else
/// at the next hinted frame start that holds a whole frame, else at the
/// first byte offset that does — so that one damaged frame costs that
/// frame alone. `visit` gets each whole frame (its CRC checks, its fields
/// make sense, its LSN is not below the one before), `unreadable` each span
/// between them. A damaged header does not stop the walk: the frames after
/// it are still read (with no LSN floor).
///
/// # Errors
/// I/O errors, and whatever `visit` or `unreadable` return.
pub(crate) fn salvage(
    file: &dyn StorageFile,
    path: &Path,
    expected: Expected,
    boundaries: Boundaries<'_>,
    mut visit: impl FnMut(Frame<'_>) -> Result<()>,
    mut unreadable: impl FnMut(Unreadable) -> Result<()>,
) -> Result<Salvaged> {
    let len = file.len().map_err(|error| Error::io("stat", path, error))?;
    let header = read_header(file, path, len, expected);
    let (floor, durable_end) = match &header {
        Ok((header, mark)) if expected.active => (header.lsn_floor, mark.synced_end),
        Ok((header, _)) => (header.lsn_floor, len),
        // Without a mark, zeros at the end of the active segment are still
        // never a record.
        Err(_) => (0, if expected.active { HEADER_BYTES as u64 } else { len }),
    };
    let mut walk =
        Salvage { reader: Reader { file, path, len, window: Vec::new(), start: 0 }, boundaries, last_lsn: floor };
    let zeros_from = if expected.active { walk.reader.zeros_from()?.max(durable_end) } else { len };
    let mut offset = HEADER_BYTES as u64;
    while offset < len.min(zeros_from) {
        if let Some((frame, frame_len)) = walk.whole(offset)? {
            walk.last_lsn = frame.lsn;
            let names = usize::from(frame.scope_len) + usize::from(frame.key_len);
            let bytes = walk.reader.get(offset + PREFIX_BYTES as u64, names)?;
            let (scope, key) = bytes.split_at(usize::from(frame.scope_len));
            visit(Frame { header: frame, offset, len: frame_len, scope, key })?;
            offset += frame_len;
            continue;
        }
        let reason = walk.reason(offset)?;
        let next = walk.resync(offset, zeros_from.min(len))?;
        unreadable(Unreadable { offset, length: next - offset, reason })?;
        offset = next;
    }
    // The walk stopped at the zeros of the active segment, or at the end.
    Ok(Salvaged { header, len, unwritten: len.saturating_sub(offset) })
}

/// The state of a [`salvage`] walk.
struct Salvage<'a> {
    reader: Reader<'a>,
    boundaries: Boundaries<'a>,
    last_lsn: u64,
}

impl Salvage<'_> {
    /// The whole frame at `offset` whose LSN is not below the last one's.
    fn whole(&mut self, offset: u64) -> Result<Option<(Header, u64)>> {
        Ok(self.reader.frame(offset)?.filter(|(frame, _)| frame.lsn >= self.last_lsn))
    }

    fn reason(&mut self, offset: u64) -> Result<&'static str> {
        Ok(match self.reader.frame(offset)? {
            Some(_) => "LSN goes backwards",
            None => self.reader.reason(offset)?,
        })
    }

    /// Where the next whole frame after the damage at `offset` starts, or
    /// `end` (see [`salvage`] for the order in which places are tried).
    fn resync(&mut self, offset: u64, end: u64) -> Result<u64> {
        let hinted = self.boundaries.frame_len(offset).map(|len| offset + len);
        let own = self.own_end(offset)?;
        for candidate in [hinted, own].into_iter().flatten() {
            if candidate == end || (candidate < end && self.whole(candidate)?.is_some()) {
                return Ok(candidate);
            }
        }
        let starts: Vec<u64> = self.boundaries.after(offset).iter().copied().filter(|start| *start < end).collect();
        for start in starts {
            if self.whole(start)?.is_some() {
                return Ok(start);
            }
        }
        // Past what the hint covers (or the damaged frame's own end, when
        // its prefix decodes), byte by byte.
        let mut at = (offset + 1).max(self.boundaries.end).max(own.unwrap_or(0)).min(end);
        while at < end {
            if self.whole(at)?.is_some() {
                return Ok(at);
            }
            at += 1;
        }
        Ok(end)
    }

    /// Where the frame at `offset` ends by its own length fields, if its
    /// prefix decodes and the frame fits in the file.
    fn own_end(&mut self, offset: u64) -> Result<Option<u64>> {
        if self.reader.len - offset < PREFIX_BYTES as u64 {
            return Ok(None);
        }
        let prefix = self.reader.get(offset, PREFIX_BYTES)?;
        Ok(frame::decode_prefix(prefix)
            .ok()
            .map(|(_, frame_len, _)| offset + frame_len)
            .filter(|end| *end <= self.reader.len))
    }
}

/// Reads whole frames of a segment again, in increasing offsets, through
/// the bounded window (compaction copies the frames it keeps this way).
pub(crate) struct FrameCopier<'a>(Reader<'a>);

impl<'a> FrameCopier<'a> {
    pub(crate) fn new(file: &'a dyn StorageFile, path: &'a Path) -> Result<Self> {
        let len = file.len().map_err(|error| Error::io("stat", path, error))?;
        Ok(FrameCopier(Reader { file, path, len, window: Vec::new(), start: 0 }))
    }

    /// Hands the bytes `offset..offset + len` to `out`, a window at a time.
    pub(crate) fn copy(&mut self, offset: u64, len: u64, out: &mut impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.0.len) {
            return Err(Error::corruption(self.0.path, offset, "frame runs past the end of the segment"));
        }
        let mut at = offset;
        while at < offset + len {
            let piece = usize::try_from((offset + len - at).min(WINDOW_BYTES as u64)).unwrap_or(WINDOW_BYTES);
            out(self.0.get(at, piece)?)?;
            at += piece as u64;
        }
        Ok(())
    }
}
