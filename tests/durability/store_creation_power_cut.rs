//! Regression (found by the `ops_model` fuzzer): a power cut while a new
//! store was being created kept the manifest but lost a shard folder's name,
//! so the next open refused with "the shard's folder is missing". Creation
//! now makes the shard folders' names durable before the manifest. Here the
//! power fails at every call of a first open, under many seeds, and the
//! store must always open afterwards — as a new store or as the one made.

use idemkv::io::{PowerCutStorage, Storage};
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use std::path::Path;
use std::sync::Arc;

fn config(disk: &PowerCutStorage) -> Config {
    Config::new().shards(4).durability(Durability::Sync).compaction_interval(None).storage(Arc::new(disk.clone()))
}

#[test]
fn a_power_cut_at_any_call_of_a_first_open_leaves_a_store_that_opens() {
    // The lock file is real; the store's files live in memory.
    let real = tempfile::tempdir().expect("tempdir");
    let dir = real.path().join("store");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut cut_inside = 0;
    for calls in 0..120u64 {
        for seed in 0..8u64 {
            let disk = PowerCutStorage::new();
            disk.create_dir_all(&dir).expect("mkdir");
            for parent in dir.ancestors().skip(1) {
                disk.sync_dir(parent).expect("sync");
            }
            disk.power_off_after(calls);
            match Store::open(&dir, config(&disk)) {
                Ok(store) => drop(store),
                Err(_) if disk.powered_off() => cut_inside += 1,
                Err(error) => panic!("first open with the power on failed: {error}"),
            }
            disk.cancel_power_off();
            disk.power_cut(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ calls);
            let store = Store::open(&dir, config(&disk))
                .unwrap_or_else(|error| panic!("cut after {calls} calls, seed {seed}: {error}"));
            usable(&store, &dir);
        }
    }
    assert!(cut_inside > 100, "the power failed inside the first open only {cut_inside} times");
}

fn usable(store: &Store, dir: &Path) {
    let request = ClaimRequest::new("k", Fingerprint::of(b"r"));
    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else {
        panic!("a new store in {} already held the key", dir.display());
    };
    lease.complete(b"ok").expect("complete");
    assert!(matches!(store.claim(&request).expect("claim"), Claim::Replay(_)));
}
