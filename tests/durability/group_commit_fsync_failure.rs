//! Under `Durability::Sync` the shard's flusher runs one fsync for a batch
//! of waiting callers. When that fsync fails, every caller of the batch is
//! told so with the fsync's I/O error (none of them is acknowledged), the
//! shard refuses every later call (`Error::Poisoned`) until reopened, and
//! everything acknowledged before is still there after the reopen.
//!
//! A storage whose fsyncs wait at a gate holds the first batch's fsync
//! while the other callers write their claims, so that they all ride the
//! next batch; that one's fsync fails: each of them gets the error, the
//! first batch's caller its acknowledgement.

use idemkv::io::{StdStorage, Storage, StorageFile};
use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Fingerprint, State, Store};
use parking_lot::{Condvar, Mutex};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CALLERS: u64 = 16;

/// Fsyncs wait while the gate is closed; the fsync that brings
/// `fail_countdown` from 1 to 0 fails with `EIO` (and syncs nothing).
#[derive(Debug, Default)]
struct Disk {
    closed: Mutex<bool>,
    opened: Condvar,
    held: AtomicU64,
    fail_countdown: AtomicU64,
}

impl Disk {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock() = closed;
        self.opened.notify_all();
    }

    fn sync(&self, inner: &dyn StorageFile) -> io::Result<()> {
        let mut closed = self.closed.lock();
        if *closed {
            self.held.fetch_add(1, Ordering::SeqCst);
        }
        while *closed {
            self.opened.wait(&mut closed);
        }
        drop(closed);
        let countdown = self.fail_countdown.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if countdown == Ok(1) {
            return Err(io::Error::from_raw_os_error(5));
        }
        inner.sync()
    }
}

#[derive(Debug)]
struct DiskStorage(Arc<Disk>);

#[derive(Debug)]
struct DiskFile {
    inner: Arc<dyn StorageFile>,
    disk: Arc<Disk>,
}

impl StorageFile for DiskFile {
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
        self.disk.sync(&*self.inner)
    }
}

impl Storage for DiskStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(DiskFile { inner: StdStorage.open(path, create)?, disk: Arc::clone(&self.0) }))
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

fn config(storage: Arc<dyn Storage>) -> Config {
    Config::new().shards(1).durability(Durability::Sync).compaction_interval(None).storage(storage)
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest::new(key, Fingerprint::of(b"r"))
}

/// Waits (boundedly) until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_failed_batch_fsync_fails_each_of_its_callers_and_latches_the_shard() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = Arc::new(Disk::default());
    let store = Store::open(dir.path(), config(Arc::new(DiskStorage(Arc::clone(&disk))))).expect("open");
    let written_before = store.stats().records_written;

    // The first batch (one claim) holds its fsync at the gate; every other
    // claim is written meanwhile and waits for the next batch, whose fsync
    // fails.
    disk.set_closed(true);
    let first = {
        let store = store.clone();
        std::thread::spawn(move || store.claim(&request("first")).map(|claim| matches!(claim, Claim::Acquired(_))))
    };
    wait_until("the first batch's fsync is held", || disk.held.load(Ordering::SeqCst) >= 1);
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let store = store.clone();
            std::thread::spawn(move || {
                let key = format!("caller-{caller}");
                (key.clone(), store.claim(&request(&key)).map(|claim| matches!(claim, Claim::Acquired(_))))
            })
        })
        .collect();
    wait_until("every claim is written", || store.stats().records_written == written_before + 1 + CALLERS);
    disk.fail_countdown.store(2, Ordering::SeqCst);
    disk.set_closed(false);

    assert!(first.join().expect("first").expect("the first batch's fsync succeeded"), "a fresh key is acquired");
    for caller in callers {
        let (key, answer) = caller.join().expect("caller");
        match answer {
            Err(Error::Io { operation: "fsync", source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(5), "{key}: the fsync's own error");
            }
            other => panic!("{key}: {other:?}, not the failed fsync's error"),
        }
    }
    assert!(matches!(store.claim(&request("after")), Err(Error::Poisoned { shard: 0 })));
    drop(store);

    let store = Store::open(dir.path(), config(Arc::new(StdStorage))).expect("reopen");
    let first = store.get(b"", b"first").expect("get").expect("the acknowledged claim is kept");
    assert_eq!(first.state, State::Processing);
}
