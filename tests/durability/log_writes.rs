//! How records reach a segment, seen from the file layer: a storage over
//! real files that maps them and counts the writes into segment files
//! (`common::gated`). Under `Sync`, where the files overwrite in place,
//! records are staged and each batch writes its records with one `pwrite`
//! before its fsync; where they may not (a copy-on-write file system),
//! each record is written with a `pwrite` of its own. Either way over
//! zeros written 16 KiB at a time. Otherwise records are copied into the
//! active segment's map, over zeros written a MiB at a time
//! (`engine::segment::writer` says why). Every answer is read back after a
//! reopen.

use crate::common::gated::{Gate, GatedStorage, SegmentWrites, SEGMENT_HEADER_BYTES};
use idemkv::io::Storage;
use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Fingerprint, State, Store};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const KEYS: usize = 40;

/// A store of `shards` shards under `durability` in `dir`, over real files
/// that map, overwrite in place as `in_place` says, and whose segment
/// writes `writes` counts; their fsyncs pass `gate`.
fn gated(
    dir: &Path,
    shards: u32,
    durability: Durability,
    in_place: bool,
    writes: &Arc<SegmentWrites>,
    gate: &Arc<Gate>,
) -> Store {
    let writes = Some(Arc::clone(writes));
    let storage: Arc<dyn Storage> = Arc::new(GatedStorage { gate: Arc::clone(gate), maps: true, writes, in_place });
    let config = Config::new().shards(shards).durability(durability).compaction_interval(None).storage(storage);
    Store::open(dir, config).expect("open")
}

/// [`gated`] with its gate open, on files that overwrite in place.
fn counted(dir: &Path, shards: u32, durability: Durability, writes: &Arc<SegmentWrites>) -> Store {
    gated(dir, shards, durability, true, writes, &Arc::default())
}

/// A claim of `key` with the fingerprint of `request`, on a thread of its
/// own (under `Sync` it waits for its fsync).
fn claim_on_thread(store: &Store, key: String, request: &'static [u8]) -> JoinHandle<idemkv::Result<Claim>> {
    let store = store.clone();
    std::thread::spawn(move || store.claim(&ClaimRequest::new(&key, Fingerprint::of(request))))
}

/// Waits (at most 10 s) until `done` says so of the store's stats.
fn wait_for(store: &Store, what: &str, done: impl Fn(&idemkv::store::Stats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(&store.stats()) {
        assert!(Instant::now() < deadline, "never {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
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
    let writes = Arc::new(SegmentWrites::default());
    let store = counted(dir.path(), shards, durability, &writes);
    for n in 0..KEYS {
        claim_and_complete(&store, n);
    }
    let counts = (writes.records.load(Ordering::Relaxed), writes.largest_fill.load(Ordering::Relaxed));
    store.close().expect("close");
    check_answers(dir.path(), shards, durability, KEYS);
    counts
}

#[test]
fn sync_records_of_a_lone_caller_are_each_written_once_over_zeros_in_16_kib_pieces() {
    for shards in [1, 4] {
        let (records, largest_fill) = written(shards, Durability::Sync);
        assert_eq!(records, 2 * KEYS as u64, "{shards} shards: a claim and a completion a key, a batch each");
        assert_eq!(largest_fill, 16 << 10, "{shards} shards");
    }
}

/// Claims that wait behind an fsync held at the gate: with `in_place`, a
/// batch writes their records with one `pwrite`, otherwise each claim
/// writes its own. Meanwhile claims of the same keys read the records
/// (staged ones from memory) and are answered from them.
fn claims_behind_a_held_fsync(in_place: bool) {
    const WAITING: usize = 16;
    let dir = tempfile::tempdir().expect("tempdir");
    let (writes, gate) = (Arc::new(SegmentWrites::default()), Arc::new(Gate::default()));
    let store = gated(dir.path(), 1, Durability::Sync, in_place, &writes, &gate);
    gate.set_closed(true);
    let first = claim_on_thread(&store, "key-first".into(), b"f");
    gate.wait_for_a_waiter();
    let waiting: Vec<_> = (0..WAITING).map(|n| claim_on_thread(&store, format!("key-{n}"), b"f")).collect();
    wait_for(&store, "wrote every claim's record", |stats| stats.records_written == 1 + WAITING as u64);
    let written_before = if in_place { 1 } else { 1 + WAITING as u64 };
    assert_eq!(writes.records.load(Ordering::SeqCst), written_before, "in place: {in_place}");
    // Duplicates read the records and wait for them to be durable.
    let same: Vec<_> = (0..4).map(|n| claim_on_thread(&store, format!("key-{n}"), b"f")).collect();
    let other = claim_on_thread(&store, "key-5".into(), b"another request");
    wait_for(&store, "answered the duplicates", |stats| stats.in_progress == 4 && stats.mismatches == 1);
    assert_eq!(writes.records.load(Ordering::SeqCst), written_before, "in place: {in_place}");
    gate.set_closed(false);
    let leases: Vec<_> = std::iter::once(first)
        .chain(waiting)
        .map(|claim| match claim.join().expect("join").expect("claim") {
            Claim::Acquired(lease) => lease,
            other => panic!("not acquired: {other:?}"),
        })
        .collect();
    for claim in same {
        assert!(matches!(claim.join().expect("join"), Ok(Claim::InProgress { .. })));
    }
    assert!(matches!(other.join().expect("join"), Ok(Claim::Mismatch)));
    // The claims took 2 writes (staged: the held batch's, then the next
    // one's) or 17.
    let claims = if in_place { 2 } else { 1 + WAITING as u64 };
    assert_eq!(writes.records.load(Ordering::SeqCst), claims, "in place: {in_place}");
    for lease in leases {
        lease.complete(b"answer").expect("complete");
    }
    assert_eq!(writes.records.load(Ordering::SeqCst), claims + 1 + WAITING as u64, "a write a completion");
    store.close().expect("close");
    let store = counted(dir.path(), 1, Durability::Sync, &Arc::default());
    for key in std::iter::once("key-first".to_owned()).chain((0..WAITING).map(|n| format!("key-{n}"))) {
        let record = store.get(b"", key.as_bytes()).expect("get").expect("kept");
        assert_eq!((record.state, record.response), (State::Completed, b"answer".to_vec()), "{key}");
    }
}

#[test]
fn sync_records_wait_staged_for_one_write_a_batch_where_the_files_overwrite_in_place() {
    claims_behind_a_held_fsync(true);
}

#[test]
fn sync_records_are_each_written_with_pwrite_where_the_files_may_not_overwrite_in_place() {
    claims_behind_a_held_fsync(false);
}

#[test]
fn a_failed_write_of_staged_records_fails_their_batch_and_poisons_the_shard() {
    const WAITING: usize = 4;
    let dir = tempfile::tempdir().expect("tempdir");
    let (writes, gate) = (Arc::new(SegmentWrites::default()), Arc::new(Gate::default()));
    let store = gated(dir.path(), 1, Durability::Sync, true, &writes, &gate);
    claim_and_complete(&store, 0);
    gate.set_closed(true);
    let first = claim_on_thread(&store, "key-1".into(), b"f");
    gate.wait_for_a_waiter();
    let waiting: Vec<_> = (2..2 + WAITING).map(|n| claim_on_thread(&store, format!("key-{n}"), b"f")).collect();
    wait_for(&store, "staged every claim's record", |stats| stats.records_written == 3 + WAITING as u64);
    writes.fail.store(true, Ordering::SeqCst);
    gate.set_closed(false);
    // The held batch had its records written: it is acknowledged.
    assert!(matches!(first.join().expect("join"), Ok(Claim::Acquired(_))));
    for claim in waiting {
        let error = claim.join().expect("join").expect_err("their write failed");
        assert!(
            matches!(&error, Error::Io { operation: "write", source, .. } if source.raw_os_error() == Some(5)),
            "{error:?}"
        );
    }
    assert!(matches!(store.get(b"", b"key-0"), Err(Error::Poisoned { shard: 0 })));
    writes.fail.store(false, Ordering::SeqCst);
    drop(store);
    let store = counted(dir.path(), 1, Durability::Sync, &Arc::default());
    let kept = store.get(b"", b"key-0").expect("get").expect("acknowledged");
    assert_eq!((kept.state, kept.response), (State::Completed, b"answer-0".to_vec()));
    assert_eq!(store.get(b"", b"key-1").expect("get").expect("acknowledged").state, State::Processing);
    for n in 2..2 + WAITING {
        assert_eq!(store.get(b"", format!("key-{n}").as_bytes()).expect("get"), None, "never written");
    }
}

#[test]
fn buffered_records_are_copied_into_the_map_over_zeros_a_mib_at_a_time() {
    let (records, largest_fill) = written(4, Durability::Buffered);
    assert_eq!(records, 0, "no record written with pwrite");
    // The first fill runs from the header's end to the first MiB.
    assert_eq!(largest_fill, (1 << 20) - SEGMENT_HEADER_BYTES);
}
