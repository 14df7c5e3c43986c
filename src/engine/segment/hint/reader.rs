//! The reading side: open a hint, check it against the segment it claims
//! to describe, and stream its entries through a bounded window. A hint is
//! untrusted input: every length and count is checked before it is used,
//! and anything wrong is a reason to ignore the hint, never a panic.

use super::{block_crc, hint_path, Deltas, HintEntry, HintHeader, BLOCK_HEADER_BYTES, BLOCK_PAYLOAD_MAX};
use crate::engine::frame::{self, read_u32, PREFIX_BYTES};
use crate::engine::segment::header::HEADER_BYTES;
use crate::io::{Storage, StorageFile};
use std::path::Path;
use std::sync::Arc;

/// Bytes read from a hint at a time (a block is at most 64 KiB).
const WINDOW_BYTES: usize = 1 << 20;
const _: () = assert!(BLOCK_HEADER_BYTES + BLOCK_PAYLOAD_MAX <= WINDOW_BYTES);
/// Bytes of a large frame checked at a time.
const PIECE_BYTES: u64 = 64 << 10;

/// A whole frame read back from a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameFacts {
    pub lsn: u64,
    /// Its stored CRC field.
    pub crc: u32,
}

/// Reads the frame of `len` bytes at `offset` of `file` and checks that it
/// is whole (its CRC, piece by piece for a large one).
pub(crate) fn read_frame_at(file: &dyn StorageFile, offset: u64, len: u64) -> Result<FrameFacts, &'static str> {
    if len < PREFIX_BYTES as u64 {
        return Err("a frame shorter than a record");
    }
    let mut prefix = [0u8; PREFIX_BYTES];
    file.read_exact_at(&mut prefix, offset).map_err(|_| "the segment has no frame where the hint ends")?;
    let (header, frame_len, stored_crc) =
        frame::decode_prefix(&prefix).map_err(|_| "the segment has no frame where the hint ends")?;
    if frame_len != len {
        return Err("the frame where the hint ends has another length");
    }
    let mut hasher = frame::crc_start(&prefix);
    let rest = len - PREFIX_BYTES as u64;
    let mut buffer = vec![0u8; usize::try_from(rest.min(PIECE_BYTES)).unwrap_or(0)];
    let mut at = offset + PREFIX_BYTES as u64;
    let end = offset + len;
    while at < end {
        let piece = usize::try_from((end - at).min(PIECE_BYTES)).unwrap_or(0);
        let bytes = &mut buffer[..piece];
        file.read_exact_at(bytes, at).map_err(|_| "the segment is unreadable where the hint ends")?;
        hasher.update(bytes);
        at += piece as u64;
    }
    if hasher.finalize() != stored_crc {
        return Err("the frame where the hint ends is damaged");
    }
    Ok(FrameFacts { lsn: header.lsn, crc: stored_crc })
}

/// The segment a hint must describe, as found on disk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Described<'a> {
    pub file: &'a dyn StorageFile,
    pub shard: u32,
    pub segment: u32,
    pub lsn_floor: u64,
    /// The segment file's length.
    pub len: u64,
    /// How far the segment is durable: its length if sealed, its durable
    /// mark if active.
    pub durable_end: u64,
}

/// Whether a hint whose header names the right segment describes a prefix
/// of it as it is now (the staleness rule of the module docs).
///
/// # Errors
/// Why not.
pub(crate) fn check_prefix(header: &HintHeader, segment: &Described<'_>) -> Result<(), &'static str> {
    check_bounds(header, segment)?;
    if header.frames == 0 {
        return Ok(());
    }
    let last_len = u64::from(header.last_len);
    let facts = read_frame_at(segment.file, header.end - last_len, last_len)?;
    if facts.lsn != header.last_lsn || facts.crc != header.last_crc {
        return Err("the segment changed since its hint: the frame where it ends differs");
    }
    Ok(())
}

/// The part of [`check_prefix`] that reads nothing: where the hint ends,
/// and its counts.
fn check_bounds(header: &HintHeader, segment: &Described<'_>) -> Result<(), &'static str> {
    if header.end < HEADER_BYTES as u64 {
        return Err("the hint ends inside the segment header");
    }
    if header.end > segment.len {
        return Err("the segment is shorter than its hint: rewritten or cut since");
    }
    if header.end > segment.durable_end {
        return Err("the hint covers writes not known to be durable");
    }
    let room = header.end - HEADER_BYTES as u64;
    let counted = header.keys.checked_add(header.tombstones);
    if counted.is_none_or(|counted| counted > header.frames) || header.frames > room / PREFIX_BYTES as u64 {
        return Err("the hint's counts disagree with its length");
    }
    if header.frames == 0 {
        if header.end != HEADER_BYTES as u64 || header.last_len != 0 || header.last_lsn != header.lsn_floor {
            return Err("an empty hint names a last frame");
        }
        return Ok(());
    }
    if u64::from(header.last_len) > room {
        return Err("the hint's last frame starts inside the segment header");
    }
    Ok(())
}

/// What the hint of `segment` counts, read from its header alone, for
/// pre-sizing what open rebuilds before any hint is read whole (estimates,
/// at most what the segment's length has room for): the frames it lists,
/// and the keys it brings into the index less its tombstones. `(0, 0)`
/// without a plausible hint. Holds no file open.
pub(crate) fn counts(storage: &dyn Storage, dir: &Path, segment: &Described<'_>) -> (u64, u64) {
    let Ok(file) = storage.open_read_only(&hint_path(dir, segment.segment)) else { return (0, 0) };
    let mut bytes = [0u8; super::HEADER_BYTES];
    if file.read_exact_at(&mut bytes, 0).is_err() {
        return (0, 0);
    }
    match HintHeader::decode(&bytes) {
        Ok((header, _))
            if header.shard == segment.shard
                && header.segment == segment.segment
                && header.lsn_floor == segment.lsn_floor
                && check_bounds(&header, segment).is_ok() =>
        {
            (header.frames, header.keys.saturating_sub(header.tombstones))
        }
        _ => (0, 0),
    }
}

/// A hint found beside a segment.
#[derive(Debug)]
pub(crate) enum Opened {
    /// There is none.
    Missing,
    /// There is one, but it is not for this segment as it is now, or is
    /// damaged (the reason).
    Ignored(&'static str),
    /// It names the segment and its fingerprint matches; its blocks are
    /// checked as they are read.
    Usable(Box<HintReader>),
}

/// Opens the hint of `segment` in folder `dir` (for reading only) and
/// checks its header against the segment.
pub(crate) fn open(storage: &dyn Storage, dir: &Path, segment: &Described<'_>) -> Opened {
    let path = hint_path(dir, segment.segment);
    let file = match storage.open_read_only(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Opened::Missing,
        Err(_) => return Opened::Ignored("the hint cannot be opened"),
    };
    match check_header(&*file, segment) {
        Ok((header, header_crc, len)) => Opened::Usable(Box::new(HintReader::new(file, header, header_crc, len))),
        Err(reason) => Opened::Ignored(reason),
    }
}

fn check_header(file: &dyn StorageFile, segment: &Described<'_>) -> Result<(HintHeader, u32, u64), &'static str> {
    let len = file.len().map_err(|_| "the hint cannot be read")?;
    if len < super::HEADER_BYTES as u64 {
        return Err("the hint is shorter than its header");
    }
    let mut bytes = [0u8; super::HEADER_BYTES];
    file.read_exact_at(&mut bytes, 0).map_err(|_| "the hint cannot be read")?;
    let (header, header_crc) = HintHeader::decode(&bytes)?;
    if header.shard != segment.shard || header.segment != segment.segment {
        return Err("the hint names another shard or segment");
    }
    if header.lsn_floor != segment.lsn_floor {
        return Err("the hint is of an earlier segment of the same id");
    }
    check_prefix(&header, segment)?;
    Ok((header, header_crc, len))
}

/// What a hint says a segment held, as far as it can be read (repair,
/// which must know what a damaged segment held).
#[derive(Debug)]
pub(crate) struct Listed {
    pub header: HintHeader,
    /// The entries of the blocks whose CRC checks, up to the first that
    /// does not, in segment order.
    pub entries: Vec<HintEntry>,
}

/// Reads every entry it can of the hint of segment `segment` of shard
/// `shard` in folder `dir`: its header must decode and name that segment;
/// nothing else about the segment is checked (the segment may be cut
/// short, or its header or last frame damaged), so the caller checks the
/// entries against the frames it finds. `None` without a readable hint.
pub(crate) fn listed(storage: &dyn Storage, dir: &Path, shard: u32, segment: u32) -> Option<Listed> {
    let file = storage.open_read_only(&hint_path(dir, segment)).ok()?;
    let len = file.len().ok()?;
    let mut bytes = [0u8; super::HEADER_BYTES];
    file.read_exact_at(&mut bytes, 0).ok()?;
    let (header, header_crc) = HintHeader::decode(&bytes).ok()?;
    if header.shard != shard || header.segment != segment || header.end < HEADER_BYTES as u64 {
        return None;
    }
    let mut reader = HintReader::new(file, header, header_crc, len);
    let (mut entries, mut block) = (Vec::new(), Vec::new());
    // Bounded: each block moves the reader forward in a file of `len` bytes.
    while let Ok(true) = reader.next_block(&mut block) {
        entries.append(&mut block);
    }
    Some(Listed { header, entries })
}

/// Streams the entries of a hint whose header was checked, one block in
/// memory at a time.
#[derive(Debug)]
pub(crate) struct HintReader {
    file: Arc<dyn StorageFile>,
    pub header: HintHeader,
    header_crc: u32,
    /// The hint file's length.
    len: u64,
    window: Vec<u8>,
    /// File offset of `window[0]`.
    window_start: u64,
    /// File offset of the next block.
    next_block: u64,
    /// The current block's payload: these indices of the window.
    payload_at: usize,
    payload_end: usize,
    deltas: Deltas,
    /// Entries decoded and not yet returned by `next_entry`.
    pending: Vec<HintEntry>,
    pending_at: usize,
    /// Segment offset of the next frame.
    offset: u64,
    decoded: u64,
}

impl HintReader {
    fn new(file: Arc<dyn StorageFile>, header: HintHeader, header_crc: u32, len: u64) -> Self {
        HintReader {
            file,
            header,
            header_crc,
            len,
            window: Vec::new(),
            window_start: 0,
            next_block: super::HEADER_BYTES as u64,
            payload_at: 0,
            payload_end: 0,
            deltas: Deltas::new(header.lsn_floor),
            pending: Vec::new(),
            pending_at: 0,
            offset: HEADER_BYTES as u64,
            decoded: 0,
        }
    }

    /// The next entry, `None` after the last (once the counts were checked
    /// against the header).
    ///
    /// # Errors
    /// Why the hint is unusable from here: damaged, truncated, or
    /// inconsistent. The entries returned before came from blocks whose CRC
    /// checked.
    pub(crate) fn next_entry(&mut self) -> Result<Option<HintEntry>, &'static str> {
        while self.pending_at == self.pending.len() {
            let mut pending = std::mem::take(&mut self.pending);
            let more = self.next_block(&mut pending);
            self.pending = pending;
            self.pending_at = 0;
            if !more? {
                return Ok(None);
            }
        }
        self.pending_at += 1;
        Ok(Some(self.pending[self.pending_at - 1]))
    }

    /// Decodes the next block's entries into `entries` (cleared first);
    /// `false` after the last block, once the counts were checked against
    /// the header.
    ///
    /// # Errors
    /// As [`next_entry`](HintReader::next_entry).
    pub(crate) fn next_block(&mut self, entries: &mut Vec<HintEntry>) -> Result<bool, &'static str> {
        entries.clear();
        self.next_block_with(|entry| {
            entries.push(*entry);
            Ok(())
        })
    }

    /// [`next_block`](HintReader::next_block) that hands each entry to
    /// `each` as it is decoded.
    ///
    /// # Errors
    /// As [`next_entry`](HintReader::next_entry), and `each`'s.
    pub(crate) fn next_block_with(
        &mut self,
        mut each: impl FnMut(&HintEntry) -> Result<(), &'static str>,
    ) -> Result<bool, &'static str> {
        if self.next_block == self.len {
            self.finish()?;
            return Ok(false);
        }
        let entries = self.load_block()?;
        let payload = &self.window[..self.payload_end];
        let mut at = self.payload_at;
        for _ in 0..entries {
            let entry = self.deltas.decode(payload, &mut at, self.offset)?;
            self.offset = (self.offset.checked_add(entry.len))
                .filter(|end| *end <= self.header.end)
                .ok_or("the hint's frames run past its end")?;
            each(&entry)?;
        }
        if at != self.payload_end {
            return Err("a hint block holds more than its entries");
        }
        self.decoded += u64::from(entries);
        Ok(true)
    }

    /// After the last block: the entries must be the header's.
    fn finish(&self) -> Result<(), &'static str> {
        if self.decoded != self.header.frames
            || self.offset != self.header.end
            || self.deltas.lsn != self.header.last_lsn
        {
            return Err("the hint ends before its last frame");
        }
        Ok(())
    }

    /// Reads the next block into the window and checks its CRC; returns
    /// its count of entries.
    fn load_block(&mut self) -> Result<u32, &'static str> {
        let at = self.next_block;
        let left = self.len - at;
        if left < BLOCK_HEADER_BYTES as u64 {
            return Err("the hint ends inside a block header");
        }
        let start = self.get(at, BLOCK_HEADER_BYTES)?;
        let payload = read_u32(&self.window, start) as usize;
        let count = read_u32(&self.window, start + 4);
        let stored_crc = read_u32(&self.window, start + 8);
        if payload > BLOCK_PAYLOAD_MAX || count == 0 {
            return Err("a hint block of an impossible size");
        }
        if left - (BLOCK_HEADER_BYTES as u64) < payload as u64 {
            return Err("the hint ends inside a block");
        }
        let start = self.get(at, BLOCK_HEADER_BYTES + payload)?;
        let body = start + BLOCK_HEADER_BYTES;
        let crc = block_crc(self.header_crc, &self.window[start..start + 8], &self.window[body..body + payload]);
        if crc != stored_crc {
            return Err("hint block CRC mismatch");
        }
        self.payload_at = body;
        self.payload_end = body + payload;
        self.next_block = at + (BLOCK_HEADER_BYTES + payload) as u64;
        Ok(count)
    }

    /// The index in the window of the file's bytes `offset..offset + len`
    /// (within the file, at most a window long), reading them if needed.
    fn get(&mut self, offset: u64, len: usize) -> Result<usize, &'static str> {
        debug_assert!(len <= WINDOW_BYTES && offset + len as u64 <= self.len);
        let window_end = self.window_start + self.window.len() as u64;
        if offset < self.window_start || offset + len as u64 > window_end {
            let fill = (self.len - offset).min(WINDOW_BYTES as u64);
            self.window.resize(usize::try_from(fill).unwrap_or(WINDOW_BYTES), 0);
            self.file.read_exact_at(&mut self.window, offset).map_err(|_| "the hint cannot be read")?;
            self.window_start = offset;
        }
        usize::try_from(offset - self.window_start).map_err(|_| "the hint cannot be read")
    }
}
