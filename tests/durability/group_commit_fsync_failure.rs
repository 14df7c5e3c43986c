//! Under `Durability::Sync` one fsync serves a batch of waiting callers.
//! When that fsync fails, every caller of the batch is
//! told so with the fsync's I/O error (none of them is acknowledged), the
//! shard refuses every later call (`Error::Poisoned`) until reopened, and
//! everything acknowledged before is still there after the reopen.
//!
//! A storage whose fsyncs wait at a gate holds the first batch's fsync
//! while the other callers write their claims, so that they all ride the
//! next batch; that one's fsync fails: each of them gets the error, the
//! first batch's caller its acknowledgement.

use crate::common::gated::{Gate, GatedStorage};
use idemkv::io::{StdStorage, Storage};
use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Fingerprint, State, Store};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CALLERS: u64 = 16;

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
    let gate = Arc::new(Gate::default());
    let store = Store::open(dir.path(), config(Arc::new(GatedStorage::new(&gate)))).expect("open");
    let written_before = store.stats().records_written;

    // The first batch (one claim) holds its fsync at the gate; every other
    // claim is written meanwhile and waits for the next batch, whose fsync
    // fails.
    gate.set_closed(true);
    let first = {
        let store = store.clone();
        std::thread::spawn(move || store.claim(&request("first")).map(|claim| matches!(claim, Claim::Acquired(_))))
    };
    gate.wait_for_a_waiter();
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
    gate.fail_countdown.store(2, Ordering::SeqCst);
    gate.set_closed(false);

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

/// The same with tokio tasks (`claim_async`), whose batches the shard's
/// flusher thread runs: the first task's fsync held at the gate, every
/// other task's claim rides the next batch, whose fsync fails; each of
/// them gets the error, the first its acknowledgement, and the flusher
/// leaves nobody waiting.
#[cfg(feature = "tokio")]
#[test]
fn a_failed_flusher_fsync_fails_each_of_its_async_callers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = Arc::new(Gate::default());
    let store = Store::open(dir.path(), config(Arc::new(GatedStorage::new(&gate)))).expect("open");
    let written_before = store.stats().records_written;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let acquired = |claim: Claim| matches!(claim, Claim::Acquired(_));

    gate.set_closed(true);
    let first = {
        let store = store.clone();
        runtime.spawn(async move { store.claim_async(&request("first")).await.map(acquired) })
    };
    gate.wait_for_a_waiter();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let store = store.clone();
            let key = format!("caller-{caller}");
            runtime.spawn(async move { (key.clone(), store.claim_async(&request(&key)).await.map(acquired)) })
        })
        .collect();
    wait_until("every claim is written", || store.stats().records_written == written_before + 1 + CALLERS);
    gate.fail_countdown.store(2, Ordering::SeqCst);
    gate.set_closed(false);

    runtime.block_on(async {
        let first =
            tokio::time::timeout(Duration::from_secs(20), first).await.expect("the first task returns").expect("first");
        assert!(first.expect("the first batch's fsync succeeded"), "a fresh key is acquired");
        for caller in callers {
            let returned = tokio::time::timeout(Duration::from_secs(20), caller).await;
            let (key, answer) = returned.expect("every task returns").expect("caller");
            match answer {
                Err(Error::Io { operation: "fsync", source, .. }) => {
                    assert_eq!(source.raw_os_error(), Some(5), "{key}: the fsync's own error");
                }
                other => panic!("{key}: {other:?}, not the failed fsync's error"),
            }
        }
        let after = store.claim_async(&request("after")).await;
        assert!(matches!(after, Err(Error::Poisoned { shard: 0 })), "{after:?}");
    });
    drop(store);

    let store = Store::open(dir.path(), config(Arc::new(StdStorage))).expect("reopen");
    let first = store.get(b"", b"first").expect("get").expect("the acknowledged claim is kept");
    assert_eq!(first.state, State::Processing);
}
