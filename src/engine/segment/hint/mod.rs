//! Hint files: what recovery needs to rebuild a shard's index from one
//! segment without reading its frames (Bitcask's "hint files").
//!
//! Beside segment `NNNNNNNNNN.seg` a hint `NNNNNNNNNN.hint` lists, for every
//! frame of a prefix `[64, end)` of the segment, in order: the key's
//! 128-bit index hash, the kind (put with its state, or tombstone), the
//! LSN, the frame length and, for puts, the fencing token and the
//! `deadline_ms` as written in the frame (what recovery puts in the index
//! entry). Offsets are implied: frames are contiguous from the header on.
//!
//! ```text
//! header (88 bytes)
//! offset size field
//!      0    8 magic "IDEMKVHT"
//!      8    1 hint version (1), independent of the store's format version
//!      9    3 reserved, 0
//!     12    4 shard (u32 LE)
//!     16    4 segment id (u32 LE)
//!     20    8 lsn floor of the segment header (u64 LE)
//!     28    8 end: the prefix covered, offset after its last frame (u64 LE)
//!     36    8 frames in the prefix (u64 LE)
//!     44    8 keys: puts that bring a key into the index (claims; for a
//!             compacted segment, the puts it kept) (u64 LE)
//!     52    8 tombstones in the prefix (u64 LE); frames, and keys −
//!             tombstones, summed over a shard's hints, pre-size what open
//!             rebuilds (estimates only)
//!     60    8 lsn of the last frame, or the lsn floor (u64 LE)
//!     68    8 newest updated_ms of the prefix's frames (u64 LE)
//!     76    4 length of the last frame, or 0 (u32 LE)
//!     80    4 stored CRC field of the last frame, or 0 (u32 LE)
//!     84    4 crc32 of bytes 0..84
//! blocks, each
//!      0    4 payload length, at most 64 KiB (u32 LE)
//!      4    4 entries in the block (u32 LE)
//!      8    4 crc32 of (the header's CRC field, bytes 0..8, the payload)
//!     12    . payload: entries
//! entry
//!      1 byte kind: 0 tombstone, 1 processing, 2 completed, 3 failed
//!     16 bytes index hash (u128 LE)
//!     varint  lsn − previous lsn (the lsn floor before the first)
//!     varint  frame length
//!     puts only:
//!     varint  zigzag(lsn − token)
//!     varint  zigzag(deadline_ms − previous deadline_ms of the same class:
//!             Processing, or Completed/Failed; 0 before the first)
//! ```
//!
//! **Staleness.** A hint is used for its segment only if its header names
//! the segment's shard, id and LSN floor, `end` lies within the file (and,
//! for the active segment, at or before the durable mark), and the frame
//! that ends at `end` is whole — its CRC checks — and has the hint's
//! length, LSN and CRC. A compaction rewrites a segment shorter with other
//! offsets, a repair rewrites it without its unreadable bytes (and deletes
//! its hint): each moves or removes that last frame, so a hint of an
//! earlier version of the file is recognised (short of a 32-bit CRC
//! collision of a frame with the same LSN, length and offset). An old hint
//! whose last frame is still in place describes a prefix that is unchanged
//! too (segments only grow, and a rewrite that keeps a frame in place kept
//! every frame before it), so it is used for that prefix and the rest of
//! the segment is replayed from the log.
//!
//! **A cache, not a log.** Hints are written with a temporary file and a
//! rename, never fsynced: a crash may leave the temporary file (deleted at
//! the next writable open) and a power cut an empty, torn or older hint,
//! each recognised (header CRC, block CRCs chained to the header, counts,
//! the fingerprint above) and ignored: open then replays the segment from
//! the log. Syncing them would add latency to every roll and compaction
//! for data the log can always rebuild. What a hint covers is durable when
//! it is written: a sealed segment was fsynced at its roll, a rewritten one
//! before its rename, and the active segment's prefix only when everything
//! written was synced (at close).
//!
//! Hints trust the log they describe: open does not read the frames a hint
//! covers, so damage inside them is found when the record is read
//! (`Error::Corruption` naming file and offset) or by `verify`, not at
//! open. Repair reads them the other way round: where a frame is
//! unreadable, its segment's hint tells where the next one starts and what
//! the lost one was ([`listed`]).

mod builder;
mod check;
#[cfg(feature = "testing")]
pub(crate) mod fuzz;
mod reader;

pub(crate) use builder::HintBuilder;
pub(crate) use check::{Checker, Verdict};
pub(crate) use reader::{counts, listed, open, Described, HintReader, Listed, Opened};

use crate::engine::frame::{read_u32, read_u64, PREFIX_BYTES};
use crate::record::{Header, Kind, State};
use std::path::{Path, PathBuf};

/// File-name suffix of a hint.
pub(crate) const SUFFIX: &str = ".hint";
/// Suffix of a hint being written, before its rename.
pub(crate) const TEMP_SUFFIX: &str = ".hint.tmp";
const MAGIC: [u8; 8] = *b"IDEMKVHT";
/// The hint layout this build writes and reads; any other is ignored.
pub(crate) const VERSION: u8 = 1;
/// Bytes of the hint header.
pub(crate) const HEADER_BYTES: usize = 88;
/// Bytes before a block's payload.
pub(crate) const BLOCK_HEADER_BYTES: usize = 12;
/// Largest block payload.
pub(crate) const BLOCK_PAYLOAD_MAX: usize = 64 << 10;
/// Bytes one entry takes at most: kind, hash and four varints.
pub(crate) const ENTRY_BYTES_MAX: usize = 1 + 16 + 10 + 10 + 10 + 10;
const OFFSET_VERSION: usize = 8;
const OFFSET_SHARD: usize = 12;
const OFFSET_SEGMENT: usize = 16;
const OFFSET_LSN_FLOOR: usize = 20;
const OFFSET_END: usize = 28;
const OFFSET_FRAMES: usize = 36;
const OFFSET_KEYS: usize = 44;
const OFFSET_TOMBSTONES: usize = 52;
const OFFSET_LAST_LSN: usize = 60;
const OFFSET_MAX_UPDATED: usize = 68;
const OFFSET_LAST_LEN: usize = 76;
const OFFSET_LAST_CRC: usize = 80;
const OFFSET_CRC: usize = 84;
const _: () = assert!(OFFSET_CRC + 4 == HEADER_BYTES);
const _: () = assert!(ENTRY_BYTES_MAX < BLOCK_PAYLOAD_MAX);

/// The hint of segment `segment` in a shard folder.
pub(crate) fn hint_path(shard_dir: &Path, segment: u32) -> PathBuf {
    shard_dir.join(format!("{segment:010}{SUFFIX}"))
}

/// The temporary file a hint is written to before its rename.
pub(crate) fn temp_path(shard_dir: &Path, segment: u32) -> PathBuf {
    shard_dir.join(format!("{segment:010}{TEMP_SUFFIX}"))
}

/// The segment id of a hint's file name, if it names a hint.
pub(crate) fn parse_hint_name(path: &Path) -> Option<u32> {
    let digits = path.file_name()?.to_str()?.strip_suffix(SUFFIX)?;
    if digits.len() != 10 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether a file name is that of a hint being written.
pub(crate) fn is_temp_name(path: &Path) -> bool {
    path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.ends_with(TEMP_SUFFIX))
}

/// A decoded hint header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HintHeader {
    pub shard: u32,
    pub segment: u32,
    pub lsn_floor: u64,
    pub end: u64,
    pub frames: u64,
    pub keys: u64,
    pub tombstones: u64,
    pub last_lsn: u64,
    pub max_updated_ms: u64,
    pub last_len: u32,
    pub last_crc: u32,
}

impl HintHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[OFFSET_VERSION] = VERSION;
        out[OFFSET_SHARD..OFFSET_SHARD + 4].copy_from_slice(&self.shard.to_le_bytes());
        out[OFFSET_SEGMENT..OFFSET_SEGMENT + 4].copy_from_slice(&self.segment.to_le_bytes());
        let words = [
            (OFFSET_LSN_FLOOR, self.lsn_floor),
            (OFFSET_END, self.end),
            (OFFSET_FRAMES, self.frames),
            (OFFSET_KEYS, self.keys),
            (OFFSET_TOMBSTONES, self.tombstones),
            (OFFSET_LAST_LSN, self.last_lsn),
            (OFFSET_MAX_UPDATED, self.max_updated_ms),
        ];
        for (at, value) in words {
            out[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        out[OFFSET_LAST_LEN..OFFSET_LAST_LEN + 4].copy_from_slice(&self.last_len.to_le_bytes());
        out[OFFSET_LAST_CRC..OFFSET_LAST_CRC + 4].copy_from_slice(&self.last_crc.to_le_bytes());
        let crc = crc32fast::hash(&out[..OFFSET_CRC]);
        out[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The header, if `bytes` hold one of this build's version whose CRC
    /// checks; else why not.
    pub(crate) fn decode(bytes: &[u8]) -> Result<(Self, u32), &'static str> {
        let bytes = bytes.get(..HEADER_BYTES).ok_or("hint shorter than its header")?;
        if bytes[..8] != MAGIC {
            return Err("bad hint magic");
        }
        let crc = read_u32(bytes, OFFSET_CRC);
        if crc32fast::hash(&bytes[..OFFSET_CRC]) != crc {
            return Err("hint header CRC mismatch");
        }
        if bytes[OFFSET_VERSION] != VERSION {
            return Err("hint of another version");
        }
        if bytes[9..12] != [0, 0, 0] {
            return Err("hint header reserved bytes are not zero");
        }
        let header = HintHeader {
            shard: read_u32(bytes, OFFSET_SHARD),
            segment: read_u32(bytes, OFFSET_SEGMENT),
            lsn_floor: read_u64(bytes, OFFSET_LSN_FLOOR),
            end: read_u64(bytes, OFFSET_END),
            frames: read_u64(bytes, OFFSET_FRAMES),
            keys: read_u64(bytes, OFFSET_KEYS),
            tombstones: read_u64(bytes, OFFSET_TOMBSTONES),
            last_lsn: read_u64(bytes, OFFSET_LAST_LSN),
            max_updated_ms: read_u64(bytes, OFFSET_MAX_UPDATED),
            last_len: read_u32(bytes, OFFSET_LAST_LEN),
            last_crc: read_u32(bytes, OFFSET_LAST_CRC),
        };
        Ok((header, crc))
    }
}

/// The CRC of a block: over the header's CRC (so a block belongs to one
/// hint), the block's length and count fields, and its payload.
pub(crate) fn block_crc(header_crc: u32, fields: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header_crc.to_le_bytes());
    hasher.update(fields);
    hasher.update(payload);
    hasher.finalize()
}

/// Appends `value` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        #[expect(clippy::cast_possible_truncation, reason = "the low seven bits")]
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    #[expect(clippy::cast_possible_truncation, reason = "below 0x80")]
    out.push(value as u8);
}

/// Reads a LEB128 varint at `*at`, moving past it; `None` if it runs past
/// the end of `bytes` or beyond 64 bits. Inlined, with the one-byte case
/// first: most of a hint's varints are one byte, and open decodes 20 M
/// entries of a 10 M-record store.
#[inline]
pub(crate) fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let first = *bytes.get(*at)?;
    if first < 0x80 {
        *at += 1;
        return Some(u64::from(first));
    }
    get_long_varint(bytes, at)
}

/// [`get_varint`] of a varint of more than one byte.
fn get_long_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let byte = *bytes.get(*at)?;
        *at += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// A difference as an unsigned number, small for small differences either
/// way (zigzag).
pub(crate) fn zigzag(delta: u64) -> u64 {
    #[expect(clippy::cast_possible_wrap, clippy::cast_sign_loss, reason = "two's complement bit shuffling")]
    let encoded = ((delta as i64) << 1 ^ ((delta as i64) >> 63)) as u64;
    encoded
}

/// The difference [`zigzag`] encoded.
#[inline]
pub(crate) fn unzigzag(encoded: u64) -> u64 {
    (encoded >> 1) ^ (encoded & 1).wrapping_neg()
}

/// One frame as a hint lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HintEntry {
    pub hash: u128,
    pub kind: Kind,
    pub lsn: u64,
    /// The fencing token (0 for a tombstone).
    pub token: u64,
    /// `deadline_ms` as the frame has it (0 for a tombstone).
    pub deadline_ms: u64,
    pub offset: u64,
    pub len: u64,
}

impl HintEntry {
    /// The entry of a frame read from the log.
    pub(crate) fn of_frame(hash: u128, header: &Header, offset: u64, len: u64) -> Self {
        let (token, deadline_ms) = match header.kind {
            Kind::Put(_) => (header.token, header.deadline_ms),
            Kind::Tombstone => (0, 0),
        };
        HintEntry { hash, kind: header.kind, lsn: header.lsn, token, deadline_ms, offset, len }
    }

    /// A put that issued its own token: a claim that brought its key into
    /// the index (what the `keys` estimate counts for appended frames).
    pub(crate) fn is_claim(&self) -> bool {
        matches!(self.kind, Kind::Put(_)) && self.token == self.lsn
    }
}

fn kind_byte(kind: Kind) -> u8 {
    match kind {
        Kind::Tombstone => 0,
        Kind::Put(State::Processing) => 1,
        Kind::Put(State::Completed) => 2,
        Kind::Put(State::Failed) => 3,
    }
}

#[inline]
fn kind_of_byte(byte: u8) -> Option<Kind> {
    match byte {
        0 => Some(Kind::Tombstone),
        1 => Some(Kind::Put(State::Processing)),
        2 => Some(Kind::Put(State::Completed)),
        3 => Some(Kind::Put(State::Failed)),
        _ => None,
    }
}

/// What entries are encoded against: the previous LSN and the previous
/// deadline of each class of state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deltas {
    lsn: u64,
    deadlines: [u64; 2],
}

impl Deltas {
    pub(crate) fn new(lsn_floor: u64) -> Self {
        Deltas { lsn: lsn_floor, deadlines: [0; 2] }
    }

    fn class(state: State) -> usize {
        usize::from(state != State::Processing)
    }

    /// Appends `entry` to `out`; its LSN must not be below the previous.
    pub(crate) fn encode(&mut self, entry: &HintEntry, out: &mut Vec<u8>) {
        debug_assert!(entry.lsn >= self.lsn);
        out.push(kind_byte(entry.kind));
        out.extend_from_slice(&entry.hash.to_le_bytes());
        put_varint(out, entry.lsn - self.lsn);
        put_varint(out, entry.len);
        self.lsn = entry.lsn;
        if let Kind::Put(state) = entry.kind {
            put_varint(out, zigzag(entry.lsn.wrapping_sub(entry.token)));
            let previous = &mut self.deadlines[Self::class(state)];
            put_varint(out, zigzag(entry.deadline_ms.wrapping_sub(*previous)));
            *previous = entry.deadline_ms;
        }
    }

    /// Decodes the entry at `*at` of `payload` for the frame at `offset`,
    /// moving past it; why not, if the bytes do not hold one. Always
    /// inlined: returned through memory, the entry is read back before its
    /// stores have landed, a stall for each of the 20 M entries of a 10
    /// M-record open.
    #[inline(always)]
    pub(crate) fn decode(&mut self, payload: &[u8], at: &mut usize, offset: u64) -> Result<HintEntry, &'static str> {
        const TRUNCATED: &str = "hint entry runs past its block";
        let kind = kind_of_byte(*payload.get(*at).ok_or(TRUNCATED)?).ok_or("unknown kind in a hint entry")?;
        let hash_bytes = payload.get(*at + 1..*at + 17).ok_or(TRUNCATED)?;
        let mut raw = [0u8; 16];
        raw.copy_from_slice(hash_bytes);
        *at += 17;
        let lsn_delta = get_varint(payload, at).ok_or(TRUNCATED)?;
        let lsn = self.lsn.checked_add(lsn_delta).ok_or("hint LSN overflows")?;
        let len = get_varint(payload, at).ok_or(TRUNCATED)?;
        if len < PREFIX_BYTES as u64 {
            return Err("hint frame shorter than a record");
        }
        self.lsn = lsn;
        let (token, deadline_ms) = match kind {
            Kind::Put(state) => {
                let token = lsn.wrapping_sub(unzigzag(get_varint(payload, at).ok_or(TRUNCATED)?));
                let previous = &mut self.deadlines[Self::class(state)];
                *previous = previous.wrapping_add(unzigzag(get_varint(payload, at).ok_or(TRUNCATED)?));
                (token, *previous)
            }
            Kind::Tombstone => (0, 0),
        };
        Ok(HintEntry { hash: u128::from_le_bytes(raw), kind, lsn, token, deadline_ms, offset, len })
    }
}

#[cfg(test)]
mod tests;
