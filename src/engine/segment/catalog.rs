//! The catalog of a shard: which segments it must have. Segment ids of a
//! shard always form one contiguous range — a roll adds the next id, and
//! compaction deletes only the oldest segment whole (it rewrites others
//! under their own id) — so the catalog is that range, `first..=last`.
//!
//! ```text
//! offset size field
//!      0    8 magic "IDEMKVCT"
//!      8    1 format version
//!      9    3 reserved, 0
//!     12    4 shard index (u32 LE)
//!     16    4 first segment id (u32 LE)
//!     20    4 last segment id (u32 LE): the active segment
//!     24    4 crc32 of bytes 0..24
//! ```
//!
//! It is replaced atomically (`CATALOG.tmp`, fsync, rename, fsync of the
//! folder). A roll creates the new segment first and then names it here; a
//! drop names the new first segment here and then deletes the old one. So a
//! crash leaves at most one file outside the range — the next segment of an
//! unfinished roll (which holds no record yet) or the oldest of an
//! unfinished drop — and open deletes it. Any other difference between the
//! range and the files is corruption: a missing segment is lost data, never
//! a smaller store.

use crate::engine::frame::read_u32;
use crate::error::{Error, Result};
use crate::format::FormatVersion;
use crate::io::Storage;
use std::path::{Path, PathBuf};

/// File name of the catalog in a shard folder.
pub(crate) const FILE_NAME: &str = "CATALOG";
/// Its temporary name while it is replaced.
pub(crate) const TEMP_NAME: &str = "CATALOG.tmp";
const MAGIC: [u8; 8] = *b"IDEMKVCT";
const CATALOG_BYTES: usize = 28;
const OFFSET_VERSION: usize = 8;
const OFFSET_SHARD: usize = 12;
const OFFSET_FIRST: usize = 16;
const OFFSET_LAST: usize = 20;
const OFFSET_CRC: usize = 24;
const _: () = assert!(OFFSET_CRC + 4 == CATALOG_BYTES);

/// The segments a shard must have: every id in `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Catalog {
    pub shard: u32,
    pub first: u32,
    pub last: u32,
}

impl Catalog {
    pub(crate) fn encode(self) -> [u8; CATALOG_BYTES] {
        let mut out = [0u8; CATALOG_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[OFFSET_VERSION] = FormatVersion::CURRENT.into();
        out[OFFSET_SHARD..OFFSET_SHARD + 4].copy_from_slice(&self.shard.to_le_bytes());
        out[OFFSET_FIRST..OFFSET_FIRST + 4].copy_from_slice(&self.first.to_le_bytes());
        out[OFFSET_LAST..OFFSET_LAST + 4].copy_from_slice(&self.last.to_le_bytes());
        let crc = crc32fast::hash(&out[..OFFSET_CRC]);
        out[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(path: &Path, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason| Error::corruption(path, 0, reason);
        if bytes.len() != CATALOG_BYTES {
            return Err(corrupt("catalog has the wrong length"));
        }
        if bytes[..8] != MAGIC {
            return Err(corrupt("bad catalog magic"));
        }
        if crc32fast::hash(&bytes[..OFFSET_CRC]) != read_u32(bytes, OFFSET_CRC) {
            return Err(corrupt("catalog CRC mismatch"));
        }
        FormatVersion::try_from(bytes[OFFSET_VERSION]).map_err(|found| Error::UnsupportedFormatVersion {
            file: path.to_path_buf(),
            found,
            supported: FormatVersion::CURRENT.into(),
        })?;
        let catalog = Catalog {
            shard: read_u32(bytes, OFFSET_SHARD),
            first: read_u32(bytes, OFFSET_FIRST),
            last: read_u32(bytes, OFFSET_LAST),
        };
        if catalog.first == 0 || catalog.first > catalog.last {
            return Err(corrupt("catalog range is empty"));
        }
        Ok(catalog)
    }

    /// The catalog of the shard in folder `dir`, read through a file opened
    /// for reading only.
    ///
    /// # Errors
    /// [`Error::Corruption`] when it is missing or damaged, or names another
    /// shard; I/O errors.
    pub(crate) fn load(storage: &dyn Storage, dir: &Path, shard: u32) -> Result<Self> {
        let path = dir.join(FILE_NAME);
        let file = storage.open_read_only(&path).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => Error::corruption(&path, 0, "the shard's catalog is missing"),
            _ => Error::io("open", &path, error),
        })?;
        let len = file.len().map_err(|error| Error::io("stat", &path, error))?;
        if len != CATALOG_BYTES as u64 {
            return Err(Error::corruption(&path, 0, "catalog has the wrong length"));
        }
        let mut bytes = [0u8; CATALOG_BYTES];
        file.read_exact_at(&mut bytes, 0).map_err(|error| Error::io("read", &path, error))?;
        let catalog = Catalog::decode(&path, &bytes)?;
        if catalog.shard != shard {
            return Err(Error::corruption(&path, 0, "catalog names another shard"));
        }
        Ok(catalog)
    }

    /// Replaces the catalog of the shard in folder `dir` atomically and
    /// durably.
    ///
    /// # Errors
    /// I/O errors; the old catalog is then still in place, or the new one is.
    pub(crate) fn store(self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let temp: PathBuf = dir.join(TEMP_NAME);
        let file = storage.open(&temp, true).map_err(|error| Error::io("create", &temp, error))?;
        file.set_len(0)
            .and_then(|()| file.write_all_at(&self.encode(), 0))
            .and_then(|()| file.sync())
            .map_err(|error| Error::io("write", &temp, error))?;
        let path = dir.join(FILE_NAME);
        storage.rename(&temp, &path).map_err(|error| Error::io("rename", &path, error))?;
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let catalog = Catalog { shard: 2, first: 5, last: 9 };
        let bytes = catalog.encode();
        let path = Path::new("CATALOG");
        assert_eq!(Catalog::decode(path, &bytes).expect("decodes"), catalog);
        for byte in 0..CATALOG_BYTES {
            let mut damaged = bytes;
            damaged[byte] ^= 0x01;
            assert!(Catalog::decode(path, &damaged).is_err(), "flip at {byte} accepted");
        }
        assert!(Catalog::decode(path, &bytes[..CATALOG_BYTES - 1]).is_err());
        let empty = Catalog { shard: 0, first: 4, last: 3 }.encode();
        assert!(Catalog::decode(path, &empty).is_err());
    }
}
