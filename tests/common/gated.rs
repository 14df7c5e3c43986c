//! A disk whose fsyncs wait at a gate while it is closed, and can be told
//! to fail one: for tests that must hold an fsync while other calls run.
//! It can also count the writes into segment files (and fail those of
//! records), map files, and say that its files overwrite in place, for
//! tests of how records reach a segment.

use idemkv::io::{Map, StdStorage, Storage, StorageFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// Bytes of a segment's header (its durable mark included): records come
/// after it (docs/format.md).
pub const SEGMENT_HEADER_BYTES: u64 = 64;

/// Writes into segment files (`*.seg`): records (anything not all zeros
/// past the header), and the largest zero-fill write. While `fail` is set,
/// a write of records fails with `EIO` (writing nothing), uncounted.
#[derive(Debug, Default)]
pub struct SegmentWrites {
    pub records: AtomicU64,
    pub largest_fill: AtomicU64,
    pub fail: AtomicBool,
}

impl SegmentWrites {
    /// Counts a write; whether it is to fail.
    fn note(&self, buf: &[u8], offset: u64) -> bool {
        if buf.iter().all(|byte| *byte == 0) {
            self.largest_fill.fetch_max(buf.len() as u64, Ordering::Relaxed);
        } else if offset >= SEGMENT_HEADER_BYTES {
            if self.fail.load(Ordering::SeqCst) {
                return true;
            }
            self.records.fetch_add(1, Ordering::Relaxed);
        }
        false
    }
}

/// The real file system, every file's fsync passing `gate`; with `maps`,
/// files map as the real ones do (otherwise they map nothing, and records
/// go by `pwrite`); with `writes`, the writes into segment files are
/// counted there; `in_place` is what its files say of overwriting in place
/// (`StorageFile::overwrites_in_place`: where they do, a store under
/// `Sync` stages its records for one write a batch).
#[derive(Debug)]
pub struct GatedStorage {
    pub gate: Arc<Gate>,
    pub maps: bool,
    pub writes: Option<Arc<SegmentWrites>>,
    pub in_place: bool,
}

impl GatedStorage {
    /// Files that pass `gate`, map nothing and do not say that they
    /// overwrite in place, their writes not counted.
    pub fn new(gate: &Arc<Gate>) -> Self {
        GatedStorage { gate: Arc::clone(gate), maps: false, writes: None, in_place: false }
    }
}

#[derive(Debug)]
struct GatedFile {
    inner: Arc<dyn StorageFile>,
    gate: Arc<Gate>,
    maps: bool,
    writes: Option<Arc<SegmentWrites>>,
    in_place: bool,
}

impl StorageFile for GatedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.writes.as_ref().is_some_and(|writes| writes.note(buf, offset)) {
            return Err(io::Error::from_raw_os_error(5));
        }
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
    fn map(&self, writable: bool) -> io::Result<Option<Map>> {
        if self.maps {
            self.inner.map(writable)
        } else {
            Ok(None)
        }
    }
    fn overwrites_in_place(&self) -> bool {
        self.in_place
    }
}

impl Storage for GatedStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let segment = path.extension().is_some_and(|extension| extension == "seg");
        Ok(Arc::new(GatedFile {
            inner: StdStorage.open(path, create)?,
            gate: Arc::clone(&self.gate),
            maps: self.maps,
            writes: self.writes.clone().filter(|_| segment),
            in_place: self.in_place,
        }))
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
