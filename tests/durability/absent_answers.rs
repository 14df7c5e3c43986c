//! Under `Durability::Sync`, "absent" answers of `get` and `remove` wait for
//! durability like every other answer: right after a release, the tombstone
//! that made the key absent may not be on disk yet, and a power cut would
//! bring the key back after the caller was told it was gone.
//!
//! Regression test for "Storage integrity" item 6. A storage whose fsyncs
//! wait at a gate holds the release's fsync; `get` and `remove` must not
//! answer before it ends.

use idemkv::io::{StdStorage, Storage, StorageFile};
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::{Condvar, Mutex};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Closed: every file fsync waits until it opens again.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    waiting: usize,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        self.state.lock().closed = closed;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut state = self.state.lock();
        state.waiting += 1;
        self.changed.notify_all();
        while state.closed {
            self.changed.wait(&mut state);
        }
        state.waiting -= 1;
    }

    fn wait_for_a_waiter(&self) {
        let mut state = self.state.lock();
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.waiting == 0 {
            assert!(!self.changed.wait_until(&mut state, deadline).timed_out(), "no fsync reached the gate");
        }
    }
}

#[derive(Debug)]
struct GatedStorage {
    inner: StdStorage,
    gate: Arc<Gate>,
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
        self.gate.pass();
        self.inner.sync()
    }
}

impl Storage for GatedStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(GatedFile { inner: self.inner.open(path, create)?, gate: Arc::clone(&self.gate) }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.read_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
}

#[test]
fn absent_answers_wait_for_the_tombstone_to_be_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = Arc::new(Gate::default());
    let storage = GatedStorage { inner: StdStorage, gate: Arc::clone(&gate) };
    let config =
        Config::new().shards(1).durability(Durability::Sync).compaction_interval(None).storage(Arc::new(storage));
    let store = Store::open(dir.path(), config).expect("open");
    let request = ClaimRequest::new("k", Fingerprint::of(b"r"));
    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("a new key is acquired") };

    gate.set_closed(true);
    let releaser = std::thread::spawn(move || lease.release().map_err(idemkv::Error::from));
    gate.wait_for_a_waiter(); // the tombstone is written; its fsync waits
    let (answers, answered) = mpsc::channel();
    let getter = {
        let (store, answers) = (store.clone(), answers.clone());
        std::thread::spawn(move || answers.send(format!("get {:?}", store.get(b"", b"k").expect("get"))))
    };
    let remover = {
        let store = store.clone();
        std::thread::spawn(move || answers.send(format!("remove {:?}", store.remove(b"", b"k").expect("remove"))))
    };
    let early = answered.recv_timeout(Duration::from_millis(300));
    assert!(early.is_err(), "answered before the tombstone was durable: {early:?}");

    gate.set_closed(false);
    releaser.join().expect("join").expect("release");
    let mut got: Vec<String> =
        (0..2).map(|_| answered.recv_timeout(Duration::from_secs(10)).expect("answer")).collect();
    got.sort();
    assert_eq!(got, ["get None", "remove false"]);
    getter.join().expect("join").expect("send");
    remover.join().expect("join").expect("send");
    let stats = store.stats();
    assert_eq!(stats.records_synced, stats.records_written, "every record written was made durable");
}
