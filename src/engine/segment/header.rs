//! The segment header: magic, format version, shard, segment id, LSN floor,
//! and two slots of the durable mark.
//!
//! ```text
//! offset size field
//!      0    8 magic "IDEMKVSG"
//!      8    1 format version
//!      9    3 reserved, 0
//!     12    4 shard index (u32 LE)
//!     16    4 segment id (u32 LE)
//!     20    8 lsn floor (u64 LE): every LSN in the shard is below it when
//!             the segment is created, so LSNs and fencing tokens never
//!             repeat even after older segments are deleted
//!     28    4 crc32 of bytes 0..28
//!     32   16 durable mark, slot 0 ┐ synced_end (u64 LE), round (u32 LE),
//!     48   16 durable mark, slot 1 ┘ crc32 of the slot's bytes 0..12
//! ```
//!
//! The durable mark says how far the segment is known to be on stable
//! storage: after an fsync of the active segment the writer stores the end
//! it covered in slot `round % 2` (not after every one: see
//! `segment::commit`). The slot is written after the fsync, so the mark is
//! never ahead of what is durable, and a write torn by a power cut spoils
//! only one slot: the other still holds the previous mark. Recovery takes the valid slot with the
//! higher round; damage before the mark is corruption, damage at or after
//! it is a torn tail.

use crate::engine::frame::{read_u32, read_u64};
use crate::format::FormatVersion;

pub(crate) const MAGIC: [u8; 8] = *b"IDEMKVSG";
/// Bytes of the fixed header, without the mark slots.
const FIXED_BYTES: usize = 32;
/// Bytes of one durable-mark slot.
pub(crate) const MARK_SLOT_BYTES: usize = 16;
/// Bytes before the first record.
pub(crate) const HEADER_BYTES: usize = FIXED_BYTES + 2 * MARK_SLOT_BYTES;
const OFFSET_VERSION: usize = 8;
const OFFSET_SHARD: usize = 12;
const OFFSET_SEGMENT: usize = 16;
const OFFSET_LSN_FLOOR: usize = 20;
const OFFSET_CRC: usize = 28;
const _: () = assert!(OFFSET_CRC + 4 == FIXED_BYTES);
const _: () = assert!(HEADER_BYTES == crate::format::SEGMENT_HEADER_BYTES);

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub shard: u32,
    pub segment: u32,
    pub lsn_floor: u64,
}

/// A durable mark: the segment is on stable storage up to `synced_end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub synced_end: u64,
    pub round: u32,
}

impl Mark {
    /// The mark of a new segment: its header is durable, nothing more.
    pub(crate) const FRESH: Mark = Mark { synced_end: HEADER_BYTES as u64, round: 0 };

    /// The file offset of the slot this mark goes to.
    pub(crate) fn offset(self) -> u64 {
        (FIXED_BYTES + MARK_SLOT_BYTES * (self.round % 2) as usize) as u64
    }

    pub(crate) fn encode(self) -> [u8; MARK_SLOT_BYTES] {
        let mut out = [0u8; MARK_SLOT_BYTES];
        out[..8].copy_from_slice(&self.synced_end.to_le_bytes());
        out[8..12].copy_from_slice(&self.round.to_le_bytes());
        let crc = crc32fast::hash(&out[..12]);
        out[12..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(slot: &[u8]) -> Option<Mark> {
        (crc32fast::hash(&slot[..12]) == read_u32(slot, 12))
            .then(|| Mark { synced_end: read_u64(slot, 0), round: read_u32(slot, 8) })
    }
}

/// Why a header did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    Invalid(&'static str),
    UnsupportedVersion(u8),
}

impl SegmentHeader {
    /// The whole header of a new segment, both mark slots fresh.
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[OFFSET_VERSION] = FormatVersion::CURRENT.into();
        out[OFFSET_SHARD..OFFSET_SHARD + 4].copy_from_slice(&self.shard.to_le_bytes());
        out[OFFSET_SEGMENT..OFFSET_SEGMENT + 4].copy_from_slice(&self.segment.to_le_bytes());
        out[OFFSET_LSN_FLOOR..OFFSET_LSN_FLOOR + 8].copy_from_slice(&self.lsn_floor.to_le_bytes());
        let crc = crc32fast::hash(&out[..OFFSET_CRC]);
        out[OFFSET_CRC..FIXED_BYTES].copy_from_slice(&crc.to_le_bytes());
        for round in 0..2 {
            let mark = Mark { round, ..Mark::FRESH };
            let at = usize::try_from(mark.offset()).unwrap_or(FIXED_BYTES);
            out[at..at + MARK_SLOT_BYTES].copy_from_slice(&mark.encode());
        }
        out
    }

    /// The header and the newest valid durable mark.
    pub(crate) fn decode(bytes: &[u8]) -> Result<(Self, Mark), HeaderError> {
        let bytes = bytes.get(..HEADER_BYTES).ok_or(HeaderError::Invalid("segment shorter than its header"))?;
        if bytes[..8] != MAGIC {
            return Err(HeaderError::Invalid("bad segment magic"));
        }
        if crc32fast::hash(&bytes[..OFFSET_CRC]) != read_u32(bytes, OFFSET_CRC) {
            return Err(HeaderError::Invalid("segment header CRC mismatch"));
        }
        FormatVersion::try_from(bytes[OFFSET_VERSION]).map_err(HeaderError::UnsupportedVersion)?;
        if bytes[9..12] != [0, 0, 0] {
            return Err(HeaderError::Invalid("segment header reserved bytes are not zero"));
        }
        let header = SegmentHeader {
            shard: read_u32(bytes, OFFSET_SHARD),
            segment: read_u32(bytes, OFFSET_SEGMENT),
            lsn_floor: read_u64(bytes, OFFSET_LSN_FLOOR),
        };
        let slots = bytes[FIXED_BYTES..].chunks_exact(MARK_SLOT_BYTES).filter_map(Mark::decode);
        let mark = slots
            .filter(|mark| mark.synced_end >= HEADER_BYTES as u64)
            .max_by_key(|mark| mark.round)
            .ok_or(HeaderError::Invalid("both durable-mark slots are damaged"))?;
        Ok((header, mark))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let header = SegmentHeader { shard: 3, segment: 9, lsn_floor: 77 };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok((header, Mark { round: 1, ..Mark::FRESH })));
        for cut in 0..HEADER_BYTES {
            assert!(SegmentHeader::decode(&bytes[..cut]).is_err());
        }
        for byte in 0..FIXED_BYTES {
            let mut damaged = bytes;
            damaged[byte] ^= 0x10;
            assert!(SegmentHeader::decode(&damaged).is_err(), "flip at {byte} accepted");
        }
    }

    #[test]
    fn the_newest_valid_mark_wins_and_one_torn_slot_is_survived() {
        let mut bytes = SegmentHeader { shard: 0, segment: 1, lsn_floor: 1 }.encode();
        let mark = Mark { synced_end: 4096, round: 2 };
        let at = usize::try_from(mark.offset()).expect("small");
        bytes[at..at + MARK_SLOT_BYTES].copy_from_slice(&mark.encode());
        assert_eq!(SegmentHeader::decode(&bytes).map(|(_, mark)| mark), Ok(mark));
        // A torn write of the next round's slot leaves the previous mark.
        let next = Mark { synced_end: 8192, round: 3 };
        let at = usize::try_from(next.offset()).expect("small");
        bytes[at..at + 5].copy_from_slice(&next.encode()[..5]);
        assert_eq!(SegmentHeader::decode(&bytes).map(|(_, mark)| mark), Ok(mark));
        // Both slots damaged: refused.
        bytes[FIXED_BYTES..].fill(0xff);
        assert!(SegmentHeader::decode(&bytes).is_err());
    }

    #[test]
    fn newer_version_is_named() {
        let mut bytes = SegmentHeader { shard: 0, segment: 1, lsn_floor: 0 }.encode();
        bytes[OFFSET_VERSION] = 200;
        let crc = crc32fast::hash(&bytes[..OFFSET_CRC]);
        bytes[OFFSET_CRC..FIXED_BYTES].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(SegmentHeader::decode(&bytes), Err(HeaderError::UnsupportedVersion(200)));
    }
}
