//! The on-disk format version, shared by the manifest and segment headers.
//!
//! Hint files (`segment/hint`) are not part of it: they are optional caches
//! beside the segments with a version byte of their own; a store without
//! them opens as before, and a hint of a version this build does not know
//! is ignored (the segment is replayed from the log), never an error.

/// Name of the advisory lock file in a store directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Bytes of a segment's header, before its first frame (its layout is
/// the engine's `segment/header.rs`).
pub(crate) const SEGMENT_HEADER_BYTES: usize = 64;
/// Bytes of a frame's header: its CRC and its payload's length.
pub(crate) const FRAME_HEADER_BYTES: usize = 8;
/// Bytes of a frame payload's fixed part (its layout is the engine's
/// `frame.rs`).
pub(crate) const FRAME_FIXED_BYTES: usize = 96;
/// Bytes of a frame before its scope, key and response.
pub(crate) const FRAME_PREFIX_BYTES: usize = FRAME_HEADER_BYTES + FRAME_FIXED_BYTES;

/// Bytes one frame takes on disk.
pub(crate) fn frame_bytes(scope_len: usize, key_len: usize, response_len: usize) -> u64 {
    FRAME_PREFIX_BYTES as u64 + scope_len as u64 + key_len as u64 + response_len as u64
}

/// A known on-disk format version. Later builds may know more versions,
/// so a `match` on it needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FormatVersion {
    /// The second format: a per-shard segment catalog and a durable mark
    /// in every segment header; see `docs/format.md`. (Version 1, without
    /// them, is not read.) Read, and migrated to [`FormatVersion::V3`] by
    /// the first writable open.
    V2,
    /// The third format: every record names its keyspace (the frame's
    /// byte 3, zero in format 2), so that idemkv's own records live apart
    /// from the caller's (see [`Keyspace`](crate::Keyspace)).
    V3,
}

impl FormatVersion {
    /// The version this build writes. It reads this one and
    /// [`FormatVersion::V2`].
    pub const CURRENT: FormatVersion = FormatVersion::V3;
}

impl From<FormatVersion> for u8 {
    fn from(version: FormatVersion) -> u8 {
        match version {
            FormatVersion::V2 => 2,
            FormatVersion::V3 => 3,
        }
    }
}

impl TryFrom<u8> for FormatVersion {
    /// The unknown version byte.
    type Error = u8;

    fn try_from(byte: u8) -> Result<Self, u8> {
        match byte {
            2 => Ok(FormatVersion::V2),
            3 => Ok(FormatVersion::V3),
            other => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(FormatVersion::try_from(u8::from(FormatVersion::CURRENT)), Ok(FormatVersion::CURRENT));
        assert_eq!(FormatVersion::try_from(0), Err(0));
        assert_eq!(FormatVersion::try_from(1), Err(1));
        assert_eq!(FormatVersion::try_from(2), Ok(FormatVersion::V2));
        assert_eq!(FormatVersion::try_from(4), Err(4));
    }
}
