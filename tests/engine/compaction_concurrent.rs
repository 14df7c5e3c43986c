//! Compaction runs in a loop while several threads claim, complete, release
//! and replay, and the clock moves: every answer stays what the state
//! machine says, through compaction and a final reopen.
//!
//! The compactor moves the clock by a second a pass, at most one pass a
//! millisecond, and every claim takes a lease of a week: however slowly a
//! loaded machine runs a worker between its claim and its finish, the
//! clock cannot end the lease in between (that would be a takeover, not
//! what this test is about). Churn records live 2 s of that clock, so
//! compaction still has expired records to clear.

use crate::common::{fingerprint, START_MS};
use idemkv::{Claim, ClaimRequest, Config, Durability, ManualClock, Store};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const THREADS: usize = 3;
const ROUNDS: usize = 1500;
/// Longer than the clock moves in any run (at most 1,000 passes a second).
const LONG: Duration = Duration::from_secs(30 * 24 * 3600);
/// Longer than any claim-to-finish span of a worker, in passes.
const LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(2)
        .durability(Durability::Buffered)
        .segment_bytes(8192)
        .response_bytes_max(1024)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
}

/// What one thread expects of its own long-lived keys: `Some(response)` for
/// completed, `None` for released.
type Expected = HashMap<String, Option<Vec<u8>>>;

fn worker(store: &Store, thread: usize) -> Expected {
    let mut expected = Expected::new();
    for round in 0..ROUNDS {
        // Churn: short-lived records that compaction must clear away.
        let churn = format!("churn-{thread}-{round}");
        let request = ClaimRequest::new(&churn, fingerprint(&churn)).ttl(Duration::from_secs(2)).lease(LEASE);
        let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("{churn} not acquired") };
        lease.complete(&[b'c'; 200]).expect("complete");

        if round % 10 == 0 {
            let key = format!("keep-{thread}-{}", round / 10);
            let body = format!("{key}:").repeat(round % 7 + 1).into_bytes();
            let request = ClaimRequest::new(&key, fingerprint(&key)).ttl(LONG).lease(LEASE);
            let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("{key} not acquired") };
            if round % 30 == 0 {
                lease.release().expect("release");
                expected.insert(key, None);
            } else {
                lease.complete(&body).expect("complete");
                expected.insert(key, Some(body));
            }
        }
        if round % 100 == 99 {
            check(store, &expected);
        }
    }
    expected
}

fn check(store: &Store, expected: &Expected) {
    for (key, body) in expected {
        let record = store.get(b"", key.as_bytes()).expect("get");
        match body {
            Some(body) => assert_eq!(record.map(|record| record.response).as_ref(), Some(body), "{key}"),
            None => assert_eq!(record, None, "released {key} came back"),
        }
    }
}

#[test]
fn answers_hold_while_compaction_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let done = AtomicBool::new(false);
    let (expected, passes) = std::thread::scope(|scope| {
        let compactor = scope.spawn(|| {
            let mut passes = 0u32;
            while !done.load(Ordering::SeqCst) {
                store.compact().expect("compact");
                clock.advance(Duration::from_secs(1));
                passes += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            passes
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                scope.spawn({
                    let store = &store;
                    move || worker(store, thread)
                })
            })
            .collect();
        // Set even when a worker panicked, so that the compactor stops and
        // the failure is reported instead of the test hanging.
        let joined: Vec<_> = workers.into_iter().map(std::thread::ScopedJoinHandle::join).collect();
        done.store(true, Ordering::SeqCst);
        let expected: Vec<Expected> = joined.into_iter().map(|joined| joined.expect("worker")).collect();
        (expected, compactor.join().expect("compactor"))
    });
    assert!(passes > 5, "compaction ran only {passes} times");
    let stats = store.stats();
    assert!(stats.compaction_bytes_reclaimed > 0, "{stats:?}");
    for expected in &expected {
        check(&store, expected);
    }
    drop(store);
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    for expected in &expected {
        check(&store, expected);
    }
}
