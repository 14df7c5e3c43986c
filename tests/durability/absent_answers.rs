//! Under `Durability::Sync`, "absent" answers of `get` and `remove` wait for
//! durability like every other answer: right after a release, the tombstone
//! that made the key absent may not be on disk yet, and a power cut would
//! bring the key back after the caller was told it was gone.
//!
//! Regression test for "Storage integrity" item 6. A storage whose fsyncs
//! wait at a gate holds the release's fsync; `get` and `remove` must not
//! answer before it ends.

use crate::common::gated::{Gate, GatedStorage};
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn absent_answers_wait_for_the_tombstone_to_be_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = Arc::new(Gate::default());
    let storage = GatedStorage::new(&gate);
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
