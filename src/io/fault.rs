//! A [`Storage`] that fails on purpose: the N-th I/O call from now returns
//! an error (or writes only part of its bytes), so tests can prove that no
//! fault loses an acknowledged record or brings back a released one.

use super::{Storage, StorageFile};
use parking_lot::Mutex;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What goes wrong when the fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The call fails with `EIO` and does nothing.
    Io,
    /// The disk is full: this and every later write or file creation fails
    /// with `ENOSPC` (nothing written) until [`FaultyStorage::clear`].
    /// Truncation, fsync, reads and deletes still work, as on a real disk.
    NoSpace,
    /// A write stores only its first half, then fails with `EIO` (a torn
    /// write); any other call fails as with [`Fault::Io`].
    ShortWrite,
}

#[derive(Debug)]
struct FaultState {
    calls: AtomicU64,
    fail_at: AtomicU64,
    fault: Mutex<Fault>,
    disk_full: AtomicBool,
    fired: AtomicU64,
}

/// Wraps another [`Storage`] and injects one planned fault.
///
/// Every call through it or its files counts (reads included). Clones share
/// the plan and the count.
///
/// # Examples
///
/// ```
/// use idemkv::io::{Fault, FaultyStorage, StdStorage};
/// use idemkv::{Config, Error, Store};
/// use std::sync::Arc;
///
/// let dir = tempfile::tempdir().unwrap();
/// let storage = FaultyStorage::new(Arc::new(StdStorage));
/// storage.fail_after(0, Fault::NoSpace); // the very next call fails
/// let opened = Store::open(dir.path(), Config::new().storage(Arc::new(storage.clone())));
/// assert!(matches!(opened, Err(Error::Io { .. })));
/// assert_eq!(storage.faults_fired(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct FaultyStorage {
    inner: Arc<dyn Storage>,
    state: Arc<FaultState>,
}

impl FaultyStorage {
    /// A pass-through wrapper with no fault planned.
    #[must_use]
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        FaultyStorage {
            inner,
            state: Arc::new(FaultState {
                calls: AtomicU64::new(0),
                fail_at: AtomicU64::new(u64::MAX),
                fault: Mutex::new(Fault::Io),
                disk_full: AtomicBool::new(false),
                fired: AtomicU64::new(0),
            }),
        }
    }

    /// Plans `fault` for the call after `calls_from_now` more calls succeed
    /// (0: the very next call fails).
    pub fn fail_after(&self, calls_from_now: u64, fault: Fault) {
        *self.state.fault.lock() = fault;
        let now = self.state.calls.load(Ordering::SeqCst);
        self.state.fail_at.store(now.saturating_add(calls_from_now).saturating_add(1), Ordering::SeqCst);
    }

    /// Cancels a planned fault and frees a full disk.
    pub fn clear(&self) {
        self.state.fail_at.store(u64::MAX, Ordering::SeqCst);
        self.state.disk_full.store(false, Ordering::SeqCst);
    }

    /// Calls made so far.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// Calls that failed because of a fault.
    #[must_use]
    pub fn faults_fired(&self) -> u64 {
        self.state.fired.load(Ordering::SeqCst)
    }

    /// Counts one call and says which fault, if any, it suffers. `allocates`
    /// is set for calls that need free space.
    fn check(&self, allocates: bool) -> Option<Fault> {
        let call = self.state.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = if call == self.state.fail_at.load(Ordering::SeqCst) {
            let fault = *self.state.fault.lock();
            if fault == Fault::NoSpace {
                self.state.disk_full.store(true, Ordering::SeqCst);
            }
            Some(fault)
        } else {
            None
        };
        let full = allocates && self.state.disk_full.load(Ordering::SeqCst);
        let fault = match fault {
            Some(Fault::NoSpace) if !allocates => None,
            Some(fault) => Some(fault),
            None if full => Some(Fault::NoSpace),
            None => None,
        };
        if fault.is_some() {
            self.state.fired.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    fn fail(&self, allocates: bool) -> io::Result<()> {
        match self.check(allocates) {
            None => Ok(()),
            Some(fault) => Err(error_of(fault)),
        }
    }
}

fn error_of(fault: Fault) -> io::Error {
    match fault {
        Fault::NoSpace => io::Error::from_raw_os_error(28), // ENOSPC
        Fault::Io | Fault::ShortWrite => io::Error::from_raw_os_error(5), // EIO
    }
}

#[derive(Debug)]
struct FaultyFile {
    storage: FaultyStorage,
    inner: Arc<dyn StorageFile>,
}

impl StorageFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.storage.fail(false)?;
        self.inner.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.storage.check(true) {
            None => self.inner.write_all_at(buf, offset),
            Some(Fault::ShortWrite) => {
                self.inner.write_all_at(&buf[..buf.len() / 2], offset)?;
                Err(error_of(Fault::ShortWrite))
            }
            Some(fault) => Err(error_of(fault)),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.storage.fail(false)?;
        self.inner.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        self.storage.fail(false)?;
        self.inner.len()
    }

    fn sync(&self) -> io::Result<()> {
        self.storage.fail(false)?;
        self.inner.sync()
    }
}

impl Storage for FaultyStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        self.fail(create)?;
        let inner = self.inner.open(path, create)?;
        Ok(Arc::new(FaultyFile { storage: self.clone(), inner }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.fail(true)?;
        self.inner.create_dir_all(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.fail(false)?;
        self.inner.read_dir(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.fail(true)?;
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.fail(false)?;
        self.inner.remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.fail(false)?;
        self.inner.sync_dir(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdStorage;

    #[test]
    fn fires_once_at_the_planned_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FaultyStorage::new(Arc::new(StdStorage));
        let file = storage.open(&dir.path().join("f"), true).expect("open");
        storage.fail_after(1, Fault::Io);
        file.write_all_at(b"ok", 0).expect("first call passes");
        assert!(file.write_all_at(b"no", 2).is_err());
        file.write_all_at(b"ok", 2).expect("later calls pass");
        assert_eq!(storage.faults_fired(), 1);
    }

    #[test]
    fn short_write_stores_half() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FaultyStorage::new(Arc::new(StdStorage));
        let file = storage.open(&dir.path().join("f"), true).expect("open");
        storage.fail_after(0, Fault::ShortWrite);
        assert!(file.write_all_at(b"abcdef", 0).is_err());
        assert_eq!(file.len().expect("len"), 3);
    }

    #[test]
    fn full_disk_stays_full_until_cleared_but_truncates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FaultyStorage::new(Arc::new(StdStorage));
        let file = storage.open(&dir.path().join("f"), true).expect("open");
        file.write_all_at(b"abc", 0).expect("write");
        storage.fail_after(0, Fault::NoSpace);
        let error = file.write_all_at(b"x", 3).expect_err("full");
        assert_eq!(error.raw_os_error(), Some(28));
        assert!(file.write_all_at(b"x", 3).is_err(), "still full");
        file.set_len(1).expect("truncate works on a full disk");
        file.sync().expect("sync works on a full disk");
        storage.clear();
        file.write_all_at(b"x", 1).expect("space again");
    }
}
