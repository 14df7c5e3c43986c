//! Many threads hammer a few hot keys: at no moment do two holders hold a
//! valid lease on one key, and every completed key replays its first response.

use crate::common::fingerprint;
use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Lease, ManualClock, Store};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KEYS: usize = 4;
const THREADS: usize = 8;
const ROUNDS: usize = 400;
const LEASE_MS: u64 = 1_000;

/// (token, lease start ms, lease end ms)
type Holder = (u64, u64, u64);

/// What the threads saw, shared between them.
#[derive(Default)]
struct Seen {
    /// Per key: (token, lease start, lease end) of every holder between its
    /// Acquired and its finishing call, as the store reported them.
    holders: Mutex<HashMap<usize, Vec<Holder>>>,
    /// The response whose completion returned Ok, and the first one replayed.
    first_response: Mutex<HashMap<usize, Vec<u8>>>,
    replayed: Mutex<HashMap<usize, Vec<u8>>>,
    executions: AtomicU64,
    lost: AtomicU64,
}

fn hammer(store: &Store, clock: Option<&ManualClock>) -> (u64, u64) {
    let seen = Seen::default();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (store, seen) = (store.clone(), &seen);
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    claim_once(&store, seen, clock, thread, round);
                }
            });
        }
    });
    let first = seen.first_response.lock();
    for (slot, response) in seen.replayed.lock().iter() {
        assert_eq!(first.get(slot), Some(response), "hot-{slot} replayed a response that never completed");
    }
    for (slot, response) in first.iter() {
        let record = store.get(b"", format!("hot-{slot}").as_bytes()).expect("get").expect("completed key present");
        assert_eq!(&record.response, response);
    }
    (seen.executions.load(Ordering::SeqCst), seen.lost.load(Ordering::SeqCst))
}

/// One claim of a hot key by `thread` in `round`, and what it is answered.
fn claim_once(store: &Store, seen: &Seen, clock: Option<&ManualClock>, thread: usize, round: usize) {
    let slot = (thread + round) % KEYS;
    let key = format!("hot-{slot}");
    let request = ClaimRequest::new(&key, fingerprint("same request")).lease(Duration::from_millis(LEASE_MS));
    match store.claim(&request).expect("claim") {
        Claim::Acquired(lease) => hold_then_finish(seen, lease, &key, slot, (thread, round)),
        Claim::Replay(record) => {
            // A replay can answer before the completer's call returns, so
            // it is compared with the first replay now and with the
            // completion at the end.
            let mut replayed = seen.replayed.lock();
            let first = replayed.entry(slot).or_insert_with(|| record.response.clone());
            assert_eq!(first, &record.response, "{key} replayed another response");
        }
        Claim::InProgress { .. } => {
            if let Some(clock) = clock {
                if round.is_multiple_of(50) {
                    clock.advance(Duration::from_millis(600));
                }
            }
        }
        Claim::Mismatch => panic!("same fingerprint answered Mismatch"),
    }
}

/// Holds `lease` (no other holder's lease may overlap it in time), runs
/// the "side effect", then releases (every third round) or completes.
fn hold_then_finish(seen: &Seen, lease: Lease, key: &str, slot: usize, (thread, round): (usize, usize)) {
    // The lease starts at the store's "now". No other holder's lease may
    // overlap it in time.
    let (lease_start_ms, lease_end_ms) = (lease.deadline_ms() - LEASE_MS, lease.deadline_ms());
    {
        let mut holders = seen.holders.lock();
        let current = holders.entry(slot).or_default();
        for (token, their_start_ms, their_end_ms) in current.iter() {
            let overlap = lease_start_ms < *their_end_ms && *their_start_ms < lease_end_ms;
            assert!(!overlap, "two valid holders of {key}: {token} and {}", lease.token());
        }
        current.push((lease.token(), lease_start_ms, lease_end_ms));
    }
    seen.executions.fetch_add(1, Ordering::SeqCst);
    for _ in 0..3 {
        std::thread::yield_now(); // the "side effect" takes a while
    }
    seen.holders.lock().entry(slot).or_default().retain(|(token, _, _)| *token != lease.token());
    let response = format!("{key} by {thread}/{round}").into_bytes();
    let outcome = match round % 3 {
        0 => lease.release(),
        _ => lease.complete(&response),
    }
    .map_err(Error::from);
    match outcome {
        Ok(()) if round % 3 != 0 => {
            let mut first = seen.first_response.lock();
            let previous = first.insert(slot, response.clone());
            assert!(previous.is_none(), "{key} completed twice");
        }
        Ok(()) => {}
        Err(Error::LeaseLost { .. }) => {
            seen.lost.fetch_add(1, Ordering::SeqCst);
        }
        Err(error) => panic!("finish: {error}"),
    }
}

#[test]
fn one_holder_at_a_time_and_first_response_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().shards(2).durability(Durability::Buffered)).expect("open");
    let (executions, lost) = hammer(&store, None);
    assert!(executions >= KEYS as u64, "every key ran at least once");
    assert_eq!(lost, 0, "no lease can be lost without expiry");
    let stats = store.stats();
    assert_eq!(stats.claims, (THREADS * ROUNDS) as u64);
    assert_eq!(stats.acquired, executions);
}

#[test]
fn with_leases_expiring_a_stale_holder_is_fenced_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(crate::common::START_MS);
    let config = Config::new().shards(2).durability(Durability::Sync).clock(Arc::new(clock.clone()));
    let store = Store::open(dir.path(), config).expect("open");
    let (executions, lost) = hammer(&store, Some(&clock));
    assert!(executions >= KEYS as u64);
    let stats = store.stats();
    assert_eq!(stats.lease_lost, lost);
    assert!(stats.fsyncs > 0);
}
