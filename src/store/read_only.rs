//! Read-only handles: [`Store::open_read_only`] and what a handle tells
//! about how it was opened. The opening itself is in `open`; the refusals
//! of writing calls in `engine`.

use crate::config::Config;
use crate::engine::open;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
#[cfg(doc)]
use crate::lease::Lease;
#[cfg(doc)]
use crate::stats::Stats;
use crate::store::Store;
use std::path::Path;

impl Store {
    /// Opens the existing store in `dir` for reading only: [`get`](Store::get),
    /// [`iter`](Store::iter), [`census`](Store::census) and
    /// [`stats`](Store::stats) work; it works on files the user may read but
    /// not write.
    ///
    /// It never creates, deletes, truncates, renames or fsyncs anything:
    /// - the directory and its manifest must exist;
    /// - a torn tail of an active segment is ignored (the log ends at the
    ///   last whole record), not cut: a later writable open cuts it, and
    ///   [`torn_tail_bytes_found`](Store::torn_tail_bytes_found) tells how
    ///   much there is;
    /// - files left by an unfinished roll, drop or compaction are ignored,
    ///   not deleted;
    /// - no background thread runs (no compactor, no interval flusher,
    ///   whatever `config` says);
    /// - every call that would write ([`claim`](Store::claim),
    ///   [`complete`](Store::complete), [`fail`](Store::fail),
    ///   [`release`](Store::release), [`renew`](Store::renew),
    ///   [`remove`](Store::remove), [`compact`](Store::compact), the same on
    ///   a [`Lease`] and their async forms) answers [`Error::ReadOnly`] and
    ///   changes nothing; [`sync`](Store::sync) has nothing to do and
    ///   answers `Ok`.
    ///
    /// **Lock.** The handle takes the directory's lock (file
    /// [`LOCK`](crate::store::LOCK_FILE_NAME)) *shared*: any number of read-only
    /// handles may be open together, but not beside a writer. While a
    /// writer ([`Store::open`]) holds the store this open fails with
    /// [`Error::Locked`] naming the writer's process (a live writer's
    /// compaction could delete a segment while it is read, which would look
    /// like damage), and while a read-only handle is open a writer's open
    /// fails with [`Error::Locked`] (without a process id: a reader cannot
    /// write one). A store without a lock file was never opened by a writer
    /// (a writer creates it before the manifest), so there is nothing to
    /// lock and the file is not created; a lock file the user may not read
    /// is an I/O error, not a reason to read unlocked.
    ///
    /// `config` gives the clock (what has expired), the storage and the
    /// key limits; a shard count, if set, must match the store's.
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Error, Fingerprint, Store};
    /// # fn main() -> Result<(), idemkv::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let writer = Store::open(dir.path(), Config::new())?;
    /// let request = ClaimRequest::new("key-1", Fingerprint::of(b"request"));
    /// let Claim::Acquired(lease) = writer.claim(&request)? else { panic!("new key") };
    /// lease.complete(b"done")?;
    /// writer.close()?;
    ///
    /// let reader = Store::open_read_only(dir.path(), Config::new())?;
    /// assert_eq!(reader.get(b"", b"key-1")?.map(|record| record.response), Some(b"done".to_vec()));
    /// assert!(matches!(reader.claim(&request), Err(Error::ReadOnly { .. })));
    /// // Readers share the lock; a writer waits until they are gone.
    /// let second_reader = Store::open_read_only(dir.path(), Config::new())?;
    /// assert!(matches!(Store::open(dir.path(), Config::new()), Err(Error::Locked { .. })));
    /// drop((reader, second_reader));
    /// Store::open(dir.path(), Config::new())?.close()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotFound`] when `dir` does not exist; [`Error::NotAStore`]
    /// when it has no manifest; [`Error::Locked`] while a writer holds it;
    /// [`Error::InvalidConfig`]; [`Error::ShardCountMismatch`];
    /// [`Error::UnsupportedFormatVersion`]; [`Error::Corruption`] naming
    /// file and offset of damage that is not a torn tail (a damaged
    /// manifest too); I/O errors, such as a directory or file the user may
    /// not read.
    pub fn open_read_only(dir: impl AsRef<Path>, config: Config) -> Result<Store> {
        let dir = dir.as_ref();
        let engine = open::open_read_only(dir, config).map_err(|error| crate::engine::repair::advise(error, dir))?;
        Ok(Store::from_engine(engine))
    }

    /// Whether this handle was opened with
    /// [`open_read_only`](Store::open_read_only).
    #[must_use]
    pub fn is_read_only(&self) -> bool {
        self.engine().read_only
    }

    /// Bytes of torn tail (writes a crash cut short, after the last whole
    /// record of an active segment) found when this handle was opened:
    /// [`Store::open`] cut them (and counts them in
    /// [`Stats::torn_tail_bytes_cut`]), [`Store::open_read_only`] left them
    /// on disk and ignored them.
    #[must_use]
    pub fn torn_tail_bytes_found(&self) -> u64 {
        self.engine().torn_tail_bytes
    }
}
