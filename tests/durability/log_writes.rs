//! How records reach a segment, seen from the file layer: a storage over
//! real files that forwards every call (maps included) and counts the
//! writes into segment files. Under `Sync` each record is written with a
//! `pwrite` of its own, over zeros written 16 KiB at a time; otherwise
//! records are copied into the active segment's map, over zeros written a
//! MiB at a time (`engine::segment::writer` says why). Every answer is
//! read back after a reopen.

use idemkv::io::{Map, StdStorage, Storage, StorageFile};
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, State, Store};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of a segment's header (its durable mark included): records come
/// after it (docs/format.md).
const HEADER_BYTES: u64 = 64;

/// Writes into segment files: records (anything not all zeros past the
/// header), and zero-fill writes and the largest of them.
#[derive(Debug, Default)]
struct Tally {
    records: AtomicU64,
    fills: AtomicU64,
    largest_fill: AtomicU64,
}

#[derive(Debug)]
struct Counting {
    tally: Arc<Tally>,
}

#[derive(Debug)]
struct CountingFile {
    inner: Arc<dyn StorageFile>,
    tally: Option<Arc<Tally>>,
}

impl StorageFile for CountingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(tally) = &self.tally {
            if buf.iter().all(|byte| *byte == 0) {
                tally.fills.fetch_add(1, Ordering::Relaxed);
                tally.largest_fill.fetch_max(buf.len() as u64, Ordering::Relaxed);
            } else if offset >= HEADER_BYTES {
                tally.records.fetch_add(1, Ordering::Relaxed);
            }
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
        self.inner.sync()
    }

    fn map(&self, writable: bool) -> io::Result<Option<Map>> {
        self.inner.map(writable)
    }
}

impl Storage for Counting {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let segment = path.extension().is_some_and(|extension| extension == "seg");
        let tally = segment.then(|| Arc::clone(&self.tally));
        Ok(Arc::new(CountingFile { inner: StdStorage.open(path, create)?, tally }))
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

const KEYS: usize = 40;

/// A store of `shards` shards under `durability` over a [`Counting`]
/// storage in `dir`.
fn counted(dir: &Path, shards: u32, durability: Durability, tally: &Arc<Tally>) -> Store {
    let storage: Arc<dyn Storage> = Arc::new(Counting { tally: Arc::clone(tally) });
    let config = Config::new().shards(shards).durability(durability).compaction_interval(None).storage(storage);
    Store::open(dir, config).expect("open")
}

fn claim_and_complete(store: &Store, n: usize) {
    let key = format!("key-{n}");
    let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, Fingerprint::of(b"f"))).expect("claim") else {
        panic!("{key}: a fresh key is acquired");
    };
    lease.complete(format!("answer-{n}").as_bytes()).expect("complete");
}

/// Reopens the store in `dir` and checks the answers of keys `0..keys`.
fn check_answers(dir: &Path, shards: u32, durability: Durability, keys: usize) {
    let store = counted(dir, shards, durability, &Arc::default());
    for n in 0..keys {
        let record = store.get(b"", format!("key-{n}").as_bytes()).expect("get").expect("kept");
        assert_eq!(record.state, State::Completed);
        assert_eq!(record.response, format!("answer-{n}").into_bytes());
    }
}

/// Claims and completes `KEYS` keys one after another in a store of
/// `shards` shards under `durability`, reopens it and checks every answer;
/// returns the record writes and the largest zero-fill write.
fn written(shards: u32, durability: Durability) -> (u64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tally = Arc::new(Tally::default());
    let store = counted(dir.path(), shards, durability, &tally);
    for n in 0..KEYS {
        claim_and_complete(&store, n);
    }
    let counts = (tally.records.load(Ordering::Relaxed), tally.largest_fill.load(Ordering::Relaxed));
    assert!(tally.fills.load(Ordering::Relaxed) > 0, "the segment was zero-filled ahead");
    store.close().expect("close");
    check_answers(dir.path(), shards, durability, KEYS);
    counts
}

#[test]
fn sync_records_are_each_written_with_pwrite_over_zeros_in_16_kib_pieces() {
    for shards in [1, 4] {
        let (records, largest_fill) = written(shards, Durability::Sync);
        assert_eq!(records, 2 * KEYS as u64, "{shards} shards: a claim and a completion a key");
        assert_eq!(largest_fill, 16 << 10, "{shards} shards");
    }
}

#[test]
fn buffered_records_are_copied_into_the_map_over_zeros_a_mib_at_a_time() {
    let (records, largest_fill) = written(4, Durability::Buffered);
    assert_eq!(records, 0, "no record written with pwrite");
    // The first fill runs from the header's end to the first MiB.
    assert_eq!(largest_fill, (1 << 20) - HEADER_BYTES);
}
