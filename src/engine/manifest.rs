//! The manifest: what a store directory is, written once at creation.
//!
//! ```text
//! offset size field
//!      0    8 magic "IDEMKVMF"
//!      8    1 format version
//!      9    3 reserved, 0
//!     12    4 shard count (u32 LE, a power of two)
//!     16   16 index hash key (two u64 LE): the SipHash key that places
//!             (scope, key) in a shard and in the index; random per store
//!     32    4 crc32 of bytes 0..32
//! ```
//!
//! It is written atomically: a temporary file, fsync, rename, fsync of the
//! directory. A crash before the rename leaves a directory that is treated
//! as new.

use crate::config::SHARDS_MAX;
use crate::engine::frame::{read_u32, read_u64};
use crate::error::{Error, Result};
use crate::format::FormatVersion;
use crate::io::Storage;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

pub(crate) const FILE_NAME: &str = "MANIFEST";
pub(crate) const TEMP_NAME: &str = "MANIFEST.tmp";
const MAGIC: [u8; 8] = *b"IDEMKVMF";
pub(crate) const MANIFEST_BYTES: usize = 36;
const OFFSET_VERSION: usize = 8;
const OFFSET_SHARDS: usize = 12;
const OFFSET_HASH_KEY: usize = 16;
const OFFSET_CRC: usize = 32;
const _: () = assert!(OFFSET_CRC + 4 == MANIFEST_BYTES);

/// The decoded manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub shards: u32,
    pub hash_key: [u64; 2],
    /// The store's format: [`FormatVersion::CURRENT`] for a new store;
    /// an older one until the first writable open migrates it.
    pub version: FormatVersion,
}

impl Manifest {
    /// A manifest for a new store with a fresh random hash key.
    pub(crate) fn new(shards: u32) -> Self {
        // RandomState is seeded from the operating system's randomness; two
        // instances give two independent 64-bit values.
        let random = || {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u64(0x6964_656d_6b76);
            hasher.finish()
        };
        Manifest { shards, hash_key: [random(), random()], version: FormatVersion::CURRENT }
    }

    pub(crate) fn encode(&self) -> [u8; MANIFEST_BYTES] {
        let mut out = [0u8; MANIFEST_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[OFFSET_VERSION] = self.version.into();
        out[OFFSET_SHARDS..OFFSET_SHARDS + 4].copy_from_slice(&self.shards.to_le_bytes());
        out[OFFSET_HASH_KEY..OFFSET_HASH_KEY + 8].copy_from_slice(&self.hash_key[0].to_le_bytes());
        out[OFFSET_HASH_KEY + 8..OFFSET_CRC].copy_from_slice(&self.hash_key[1].to_le_bytes());
        let crc = crc32fast::hash(&out[..OFFSET_CRC]);
        out[OFFSET_CRC..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub(crate) fn decode(path: &Path, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: &str| Error::corruption(path, 0, reason);
        if bytes.len() != MANIFEST_BYTES {
            return Err(corrupt("manifest has the wrong length"));
        }
        if bytes[..8] != MAGIC {
            return Err(corrupt("bad manifest magic"));
        }
        if crc32fast::hash(&bytes[..OFFSET_CRC]) != read_u32(bytes, OFFSET_CRC) {
            return Err(corrupt("manifest CRC mismatch"));
        }
        let version =
            FormatVersion::try_from(bytes[OFFSET_VERSION]).map_err(|found| Error::UnsupportedFormatVersion {
                file: path.to_path_buf(),
                found,
                supported: FormatVersion::CURRENT.into(),
            })?;
        let shards = read_u32(bytes, OFFSET_SHARDS);
        if !shards.is_power_of_two() || shards > SHARDS_MAX {
            return Err(corrupt("manifest shard count is not a power of two in range"));
        }
        let hash_key = [read_u64(bytes, OFFSET_HASH_KEY), read_u64(bytes, OFFSET_HASH_KEY + 8)];
        Ok(Manifest { shards, hash_key, version })
    }

    /// Reads the manifest of `dir`, `None` if there is none. The file is
    /// opened for reading only, so a user who may not write it can read it.
    pub(crate) fn load(storage: &dyn Storage, dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(FILE_NAME);
        let file = match storage.open_read_only(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(Error::io("open", path, error)),
        };
        let len = file.len().map_err(|error| Error::io("stat", &path, error))?;
        if len != MANIFEST_BYTES as u64 {
            return Err(Error::corruption(&path, 0, "manifest has the wrong length"));
        }
        let mut bytes = [0u8; MANIFEST_BYTES];
        file.read_exact_at(&mut bytes, 0).map_err(|error| Error::io("read", &path, error))?;
        Self::decode(&path, &bytes).map(Some)
    }

    /// Writes the manifest of `dir` atomically.
    pub(crate) fn store(&self, storage: &dyn Storage, dir: &Path) -> Result<()> {
        let temp = dir.join(TEMP_NAME);
        let path = dir.join(FILE_NAME);
        let file = storage.open(&temp, true).map_err(|error| Error::io("create", &temp, error))?;
        file.set_len(0).map_err(|error| Error::io("truncate", &temp, error))?;
        file.write_all_at(&self.encode(), 0).map_err(|error| Error::io("write", &temp, error))?;
        file.sync().map_err(|error| Error::io("fsync", &temp, error))?;
        storage.rename(&temp, &path).map_err(|error| Error::io("rename", &temp, error))?;
        storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdStorage;

    #[test]
    fn store_and_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(Manifest::load(&StdStorage, dir.path()).expect("load"), None);
        let manifest = Manifest::new(8);
        assert_ne!(manifest.hash_key, Manifest::new(8).hash_key);
        manifest.store(&StdStorage, dir.path()).expect("store");
        assert_eq!(Manifest::load(&StdStorage, dir.path()).expect("load"), Some(manifest));
    }

    #[test]
    fn damage_is_refused() {
        let bytes = Manifest::new(4).encode();
        for byte in 0..MANIFEST_BYTES {
            let mut damaged = bytes;
            damaged[byte] ^= 0x01;
            assert!(Manifest::decode(Path::new("m"), &damaged).is_err(), "flip at {byte}");
        }
    }
}
