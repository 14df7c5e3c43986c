//! The segment header: magic, format version, shard, segment id, LSN floor.
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
//! ```

use crate::format::FormatVersion;
use crate::record::{read_u32, read_u64};

pub(crate) const MAGIC: [u8; 8] = *b"IDEMKVSG";
pub(crate) const HEADER_BYTES: usize = 32;
const OFFSET_VERSION: usize = 8;
const OFFSET_SHARD: usize = 12;
const OFFSET_SEGMENT: usize = 16;
const OFFSET_LSN_FLOOR: usize = 20;
const OFFSET_CRC: usize = 28;
const _: () = assert!(OFFSET_CRC + 4 == HEADER_BYTES);

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub shard: u32,
    pub segment: u32,
    pub lsn_floor: u64,
}

/// Why a header did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    Invalid(&'static str),
    UnsupportedVersion(u8),
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[OFFSET_VERSION] = FormatVersion::CURRENT.into();
        out[OFFSET_SHARD..OFFSET_SHARD + 4].copy_from_slice(&self.shard.to_le_bytes());
        out[OFFSET_SEGMENT..OFFSET_SEGMENT + 4].copy_from_slice(&self.segment.to_le_bytes());
        out[OFFSET_LSN_FLOOR..OFFSET_LSN_FLOOR + 8].copy_from_slice(&self.lsn_floor.to_le_bytes());
        let crc = crc32fast::hash(&out[..OFFSET_CRC]);
        out[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, HeaderError> {
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
        Ok(SegmentHeader {
            shard: read_u32(bytes, OFFSET_SHARD),
            segment: read_u32(bytes, OFFSET_SEGMENT),
            lsn_floor: read_u64(bytes, OFFSET_LSN_FLOOR),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let header = SegmentHeader { shard: 3, segment: 9, lsn_floor: 77 };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        for cut in 0..HEADER_BYTES {
            assert!(SegmentHeader::decode(&bytes[..cut]).is_err());
        }
        for byte in 0..HEADER_BYTES {
            let mut damaged = bytes;
            damaged[byte] ^= 0x10;
            assert!(SegmentHeader::decode(&damaged).is_err(), "flip at {byte} accepted");
        }
    }

    #[test]
    fn newer_version_is_named() {
        let mut bytes = SegmentHeader { shard: 0, segment: 1, lsn_floor: 0 }.encode();
        bytes[OFFSET_VERSION] = 200;
        let crc = crc32fast::hash(&bytes[..OFFSET_CRC]);
        bytes[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(SegmentHeader::decode(&bytes), Err(HeaderError::UnsupportedVersion(200)));
    }
}
