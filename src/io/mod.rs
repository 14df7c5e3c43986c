//! The file layer: every byte the store reads or writes goes through
//! [`Storage`] and [`StorageFile`], so tests can inject faults (a failed or
//! short write, a failed fsync, a full disk: `FaultyStorage`) and cut the
//! power (`PowerCutStorage`) without `cfg(test)` switches. Those two test
//! doubles exist only with the feature `testing`.

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(feature = "testing")]
mod fault;
mod map;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod powercut;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use fault::{Fault, FaultyStorage};
pub use map::Map;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use powercut::{PowerCut, PowerCutStorage, FILE_BYTES_MAX, SECTOR_BYTES};

/// One open file, addressed by offset (no shared cursor, so readers and the
/// writer never race on a seek position).
#[expect(clippy::len_without_is_empty, reason = "a file length, not a collection")]
pub trait StorageFile: Send + Sync + Debug {
    /// Fills `buf` from `offset`; a file shorter than that is an
    /// [`io::ErrorKind::UnexpectedEof`] error.
    ///
    /// # Errors
    /// The operating system's error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Writes all of `buf` at `offset`.
    ///
    /// # Errors
    /// The operating system's error; part of `buf` may have been written.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Truncates or extends the file.
    ///
    /// # Errors
    /// The operating system's error.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// The file's length in bytes.
    ///
    /// # Errors
    /// The operating system's error.
    fn len(&self) -> io::Result<u64>;

    /// Makes the file's data durable, with the metadata needed to read it
    /// back such as its length (`fdatasync`).
    ///
    /// # Errors
    /// The operating system's error. After a failed sync the state of the
    /// written data is unknown.
    fn sync(&self) -> io::Result<()>;

    /// A memory map of the file's current length, through which the store
    /// reads records (and, `writable`, writes them into space it
    /// zero-filled with [`write_all_at`](StorageFile::write_all_at)) without
    /// a system call; `None` (the default) when the file cannot be mapped,
    /// and reads and writes go through the calls above. [`StdStorage`] maps
    /// its files; the fault-injecting and power-cut storages do not, so
    /// that every read and write of theirs passes through their plan.
    ///
    /// # Errors
    /// The operating system's error.
    fn map(&self, writable: bool) -> io::Result<Option<Map>> {
        let _ = writable;
        Ok(None)
    }

    /// Whether a write over bytes the file already holds never needs new
    /// space on its disk: its file system overwrites in place, so a full
    /// disk fails only a write that extends the file. `false` (the
    /// default) where that is not known. Where it is `true`, a store under
    /// [`Durability::Sync`](crate::Durability::Sync) stages its records in
    /// memory and writes them with one `pwrite` a batch, before the
    /// batch's fsync, rather than one `pwrite` a record: a failure of that
    /// write then fails the batch and poisons the shard, as a failed fsync
    /// does. [`StdStorage`] says `true` on ext4 (Linux), where the space
    /// the store zero-fills ahead of its records is theirs; not on
    /// copy-on-write file systems (btrfs, XFS with shared extents), where a
    /// full disk can refuse an overwrite.
    fn overwrites_in_place(&self) -> bool {
        false
    }
}

/// The directory operations the store needs.
pub trait Storage: Send + Sync + Debug {
    /// Opens a file for reading and writing, creating it if `create` is set.
    ///
    /// # Errors
    /// The operating system's error.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;

    /// Opens an existing file for reading only: a store opened with
    /// [`crate::Store::open_read_only`], `verify` and every load of
    /// a manifest or catalog read through it, so that they work on files the
    /// user may read but not write. The file's writing calls may then fail.
    ///
    /// The default opens the file as [`open`](Storage::open) does, without
    /// creating it; [`StdStorage`] asks the operating system for read
    /// access only.
    ///
    /// # Errors
    /// The operating system's error ([`io::ErrorKind::NotFound`] when the
    /// file does not exist).
    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.open(path, false)
    }

    /// Creates a directory and its parents.
    ///
    /// # Errors
    /// The operating system's error.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;

    /// The entries of a directory (full paths, any order).
    ///
    /// # Errors
    /// The operating system's error.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;

    /// Renames a file atomically.
    ///
    /// # Errors
    /// The operating system's error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Deletes a file.
    ///
    /// # Errors
    /// The operating system's error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Makes a directory's entries durable (fsync of the directory).
    ///
    /// # Errors
    /// The operating system's error.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
}

/// [`Storage`] on the real file system (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct StdStorage;

#[derive(Debug)]
struct StdFile(File);

impl StorageFile for StdFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn map(&self, writable: bool) -> io::Result<Option<Map>> {
        let len = self.0.metadata()?.len();
        if writable { Map::writable(&self.0, len) } else { Map::new(&self.0, len) }.map(Some)
    }

    #[cfg(target_os = "linux")]
    fn overwrites_in_place(&self) -> bool {
        /// `f_type` of ext2, ext3 and ext4 (`EXT4_SUPER_MAGIC`).
        const EXT4: i128 = 0xEF53;
        rustix::fs::fstatfs(&self.0).is_ok_and(|stat| i128::from(stat.f_type) == EXT4)
    }
}

impl Storage for StdStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new().read(true).write(true).create(create).truncate(false).open(path)?;
        Ok(Arc::new(StdFile(file)))
    }

    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(StdFile(File::open(path)?)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        fs::read_dir(path)?.map(|entry| entry.map(|entry| entry.path())).collect()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_file_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = StdStorage.open(&path, true).expect("open");
        file.write_all_at(b"hello", 3).expect("write");
        assert_eq!(file.len().expect("len"), 8);
        let mut buf = [0u8; 5];
        file.read_exact_at(&mut buf, 3).expect("read");
        assert_eq!(&buf, b"hello");
        let mut past_end = [0u8; 4];
        let error = file.read_exact_at(&mut past_end, 6).expect_err("short read");
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        file.set_len(2).expect("truncate");
        file.sync().expect("sync");
        assert_eq!(file.len().expect("len"), 2);
        StdStorage.sync_dir(dir.path()).expect("sync dir");
        assert_eq!(StdStorage.read_dir(dir.path()).expect("ls"), vec![path]);
    }

    #[test]
    fn std_read_only_file_reads_and_refuses_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        StdStorage.open(&path, true).expect("create").write_all_at(b"hello", 0).expect("write");
        let file = StdStorage.open_read_only(&path).expect("open read-only");
        let mut buf = [0u8; 5];
        file.read_exact_at(&mut buf, 0).expect("read");
        assert_eq!(&buf, b"hello");
        // A descriptor opened for reading cannot write, whoever runs the test.
        assert!(file.write_all_at(b"x", 0).is_err());
        assert!(file.set_len(0).is_err());
        assert_eq!(file.len().expect("len"), 5);
        let missing = StdStorage.open_read_only(&dir.path().join("missing")).expect_err("absent");
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
