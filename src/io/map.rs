//! Read-only memory maps of segment files: a replay reads its record out of
//! the page cache with no system call. This is the only module of the crate
//! allowed `unsafe` code; its one `unsafe` block is the map itself.
//!
//! What keeps a map sound (the argument in full, referred to below):
//!
//! 1. **Nobody else shortens a mapped file.** Reading a mapped page past the
//!    end of its file raises `SIGBUS`. Only the process holding the store's
//!    directory lock (`LOCK`, exclusive for a writer, shared for read-only
//!    opens) writes segments, so no other idemkv process truncates them.
//!    A person or program that edits the files of an open store behind its
//!    back is outside the contract (as with every mapped engine: LMDB,
//!    redb, …).
//! 2. **This process never shortens a file below a map in use.** A map
//!    covers the file's length when it was made. The log writer maps the
//!    active segment again after every change of its length (the zero-filled
//!    space it adds ahead of the write position, a failed write cut back,
//!    the trim when it is sealed), and every such change happens under the
//!    shard's write lock, while no reader holds the old map.
//! 3. **No byte a reader borrows is written while it is borrowed.** Readers
//!    borrow whole records that the index points at; the writer only ever
//!    writes past the last whole record (and the durable mark in the
//!    segment header, which readers never read through a map). Compaction
//!    writes a new file and renames it over the old one: the old map keeps
//!    the old file alive until it is dropped.
//!
//! A media error on a mapped page raises `SIGBUS` where `pread` would have
//! returned `EIO`; that is the price of the map, and why every other read
//! (open, verify, repair, compaction) goes through `pread`.

#![allow(unsafe_code)]

use memmap2::{Mmap, MmapOptions};
use std::fmt;
use std::fs::File;
use std::io;

/// A read-only map of the first bytes of a file, made by
/// [`StorageFile::map`](super::StorageFile::map).
pub struct Map(Mmap);

impl Map {
    /// Maps the first `len` bytes of `file` (at most its length) for
    /// reading, shared with the page cache, so later writes through the
    /// file below `len` show through.
    ///
    /// # Errors
    /// The operating system's error; a `len` that does not fit in memory.
    pub(crate) fn new(file: &File, len: u64) -> io::Result<Map> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        // SAFETY: the file is a segment of a store this process holds the
        // directory lock of, mapped no further than its current length;
        // see points 1–3 of the module docs for why it is not shortened
        // below `len`, nor written where a reader borrows, while this map
        // lives.
        let map = unsafe { MmapOptions::new().len(len).map(file)? };
        Ok(Map(map))
    }

    /// The bytes `offset..offset + len`, or `None` if they are not all
    /// inside the map.
    #[must_use]
    pub fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        self.0.get(start..start.checked_add(len)?)
    }

    /// How many bytes are mapped.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.0.len() as u64
    }

    /// Whether nothing is mapped.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Map").field("len", &self.0.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn reads_what_was_written_before_and_after_mapping() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = File::options().read(true).write(true).create(true).truncate(true).open(dir.path().join("f"));
        let file = file.expect("open");
        file.write_all_at(b"hello, map", 0).expect("write");
        file.set_len(4096).expect("extend");
        let map = Map::new(&file, 4096).expect("map");
        assert_eq!(map.len(), 4096);
        assert_eq!(map.get(0, 5), Some(&b"hello"[..]));
        // A write through the file below the mapped length shows through:
        // the map shares the page cache.
        file.write_all_at(b"later", 100).expect("write");
        assert_eq!(map.get(100, 5), Some(&b"later"[..]));
        assert_eq!(map.get(4096, 1), None);
        assert_eq!(map.get(4090, 7), None);
        assert_eq!(map.get(u64::MAX, 1), None);
        assert_eq!(map.get(1, usize::MAX), None);
        assert_eq!(map.get(4096, 0), Some(&[][..]));
    }

    #[test]
    fn maps_an_empty_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = File::create(dir.path().join("empty")).expect("create");
        let map = Map::new(&File::open(dir.path().join("empty")).expect("open"), 0).expect("map");
        drop(file);
        assert!(map.is_empty());
        assert_eq!(map.get(0, 1), None);
    }
}
