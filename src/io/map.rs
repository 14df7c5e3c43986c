//! Memory maps of segment files: a replay reads its record out of the page
//! cache with no system call, and the writer copies a new record into the
//! active segment's map instead of calling `pwrite`. This is the only module
//! of the crate allowed `unsafe` code; its two `unsafe` blocks are the maps
//! themselves.
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
//!    borrow whole records that the index points at, through `&Map` under
//!    the shard's shared lock; the writer writes through `&mut Map` under
//!    the exclusive lock, and only past the last whole record. The durable
//!    mark in the segment header is written with `pwrite` by the fsync
//!    leader, outside the lock; no slice of the map ever covers it (records
//!    start after the header). Compaction writes a new file and renames it
//!    over the old one: the old map keeps the old file alive until dropped.
//! 4. **A write through the map cannot fail half-way unseen.** It goes only
//!    into space the writer zero-filled with `pwrite` first, so the file
//!    system has already reserved its blocks (a full disk failed that
//!    `pwrite`, with an error, before any record was copied). What the copy
//!    leaves in the page cache survives a crash of the process, as a
//!    `pwrite` would; an error writing it back to the disk surfaces at the
//!    next fsync, as it would after a `pwrite`.
//!
//! A media error on a mapped page raises `SIGBUS` where `pread` would have
//! returned `EIO`; that is the price of the map, and why every other read
//! (open, verify, repair, compaction) goes through `pread`.

#![allow(unsafe_code)]

use memmap2::{Mmap, MmapMut, MmapOptions};
use std::fmt;
use std::fs::File;
use std::io;

/// A map of the first bytes of a file, made by
/// [`StorageFile::map`](super::StorageFile::map): read-only, or writable
/// for the active segment.
pub struct Map(Mapping);

enum Mapping {
    Read(Mmap),
    Write(MmapMut),
}

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
        Ok(Map(Mapping::Read(map)))
    }

    /// Maps the first `len` bytes of `file` (at most its length, opened for
    /// reading and writing) for reading and writing, shared with the page
    /// cache: what is copied in is the file's content.
    ///
    /// # Errors
    /// The operating system's error; a `len` that does not fit in memory.
    pub(crate) fn writable(file: &File, len: u64) -> io::Result<Map> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        // SAFETY: as for `new` (points 1–3 of the module docs); writes go
        // through `write`, which takes `&mut self`, only into zero-filled
        // space past the last record (point 4).
        let map = unsafe { MmapOptions::new().len(len).map_mut(file)? };
        Ok(Map(Mapping::Write(map)))
    }

    fn bytes(&self) -> &[u8] {
        match &self.0 {
            Mapping::Read(map) => map,
            Mapping::Write(map) => map,
        }
    }

    /// Copies `bytes` in at `offset`; `false` (nothing copied) if the map is
    /// read-only or they do not fit inside it.
    pub(crate) fn write(&mut self, offset: u64, bytes: &[u8]) -> bool {
        let Mapping::Write(map) = &mut self.0 else {
            return false;
        };
        let target = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(bytes.len())?))
            .and_then(|range| map.get_mut(range));
        match target {
            Some(target) => {
                target.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// The bytes `offset..offset + len`, or `None` if they are not all
    /// inside the map.
    #[must_use]
    pub fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        self.bytes().get(start..start.checked_add(len)?)
    }

    /// How many bytes are mapped.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Whether nothing is mapped.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let writable = matches!(self.0, Mapping::Write(_));
        f.debug_struct("Map").field("len", &self.len()).field("writable", &writable).finish()
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
    fn writes_through_a_writable_map_reach_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = File::options().read(true).write(true).create(true).truncate(true).open(&path).expect("open");
        file.set_len(64).expect("extend");
        let mut map = Map::writable(&file, 64).expect("map");
        assert!(map.write(10, b"record"));
        assert!(!map.write(60, b"too long"), "past the end of the map");
        assert!(!map.write(u64::MAX, b"x"));
        assert_eq!(map.get(10, 6), Some(&b"record"[..]));
        let mut read = [0u8; 6];
        file.read_exact_at(&mut read, 10).expect("read");
        assert_eq!(&read, b"record", "pread sees what the map wrote");
        file.sync_data().expect("fsync");
        drop(map);
        assert_eq!(&std::fs::read(&path).expect("read")[10..16], b"record");
        let mut read_only = Map::new(&file, 64).expect("map");
        assert!(!read_only.write(0, b"x"), "a read-only map refuses writes");
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
