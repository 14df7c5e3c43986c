//! How records reach a segment, seen from the file layer: a storage over
//! real files that maps them and counts the writes into segment files
//! (`common::gated`). Under `Sync` each record is written with a
//! `pwrite` of its own, over zeros written 16 KiB at a time; otherwise
//! records are copied into the active segment's map, over zeros written a
//! MiB at a time (`engine::segment::writer` says why). Every answer is
//! read back after a reopen.

use crate::common::gated::{GatedStorage, SegmentWrites, SEGMENT_HEADER_BYTES};
use idemkv::io::Storage;
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, State, Store};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const KEYS: usize = 40;

/// A store of `shards` shards under `durability` in `dir`, over real files
/// that map and whose segment writes `writes` counts (its gate open).
fn counted(dir: &Path, shards: u32, durability: Durability, writes: &Arc<SegmentWrites>) -> Store {
    let writes = Some(Arc::clone(writes));
    let storage: Arc<dyn Storage> = Arc::new(GatedStorage { gate: Arc::default(), maps: true, writes });
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
    assert_eq!(largest_fill, (1 << 20) - SEGMENT_HEADER_BYTES);
}
