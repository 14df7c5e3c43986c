//! The on-disk format version, shared by the manifest and segment headers.

/// A known on-disk format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FormatVersion {
    /// The first format: see `docs/format.md`.
    V1,
}

impl FormatVersion {
    /// The version this build writes.
    pub const CURRENT: FormatVersion = FormatVersion::V1;
}

impl From<FormatVersion> for u8 {
    fn from(version: FormatVersion) -> u8 {
        match version {
            FormatVersion::V1 => 1,
        }
    }
}

impl TryFrom<u8> for FormatVersion {
    /// The unknown version byte.
    type Error = u8;

    fn try_from(byte: u8) -> Result<Self, u8> {
        match byte {
            1 => Ok(FormatVersion::V1),
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
        assert_eq!(FormatVersion::try_from(2), Err(2));
    }
}
