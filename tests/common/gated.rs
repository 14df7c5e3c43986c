//! A disk whose fsyncs wait at a gate while it is closed, and can be told
//! to fail one: for tests that must hold an fsync while other calls run.

use idemkv::io::{StdStorage, Storage, StorageFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Closed: every file fsync waits until it opens again. The fsync that
/// brings [`Gate::fail_countdown`] from 1 to 0 fails with `EIO` (and syncs
/// nothing).
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    pub fail_countdown: AtomicU64,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    waiting: usize,
}

impl Gate {
    pub fn set_closed(&self, closed: bool) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).closed = closed;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.waiting += 1;
        self.changed.notify_all();
        while state.closed {
            state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        state.waiting -= 1;
    }

    /// Waits (at most 10 s) until an fsync waits at the gate.
    pub fn wait_for_a_waiter(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.waiting == 0 {
            let left = deadline.checked_duration_since(Instant::now()).expect("no fsync reached the gate");
            state = self.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn sync(&self, inner: &dyn StorageFile) -> io::Result<()> {
        self.pass();
        let countdown = self.fail_countdown.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if countdown == Ok(1) {
            return Err(io::Error::from_raw_os_error(5));
        }
        inner.sync()
    }
}

/// The real file system, every file's fsync passing `gate`.
#[derive(Debug)]
pub struct GatedStorage {
    pub gate: Arc<Gate>,
}

#[derive(Debug)]
struct GatedFile {
    inner: Arc<dyn StorageFile>,
    gate: Arc<Gate>,
}

impl StorageFile for GatedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn sync(&self) -> io::Result<()> {
        self.gate.sync(&*self.inner)
    }
}

impl Storage for GatedStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(GatedFile { inner: StdStorage.open(path, create)?, gate: Arc::clone(&self.gate) }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdStorage.create_dir_all(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        StdStorage.read_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdStorage.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        StdStorage.sync_dir(path)
    }
}
