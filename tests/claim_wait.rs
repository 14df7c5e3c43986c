//! `claim_wait` blocks while the key is in progress and answers with the
//! final state as soon as the holder finishes.

mod common;

use common::{acquire, fingerprint, open, START_MS};
use idemkv::{Claim, ClaimRequest, ManualClock, Store};
use std::time::{Duration, Instant};

/// Starts a thread that waits up to 30 s on key "k" and returns the answer
/// it got, passed through `then`.
fn spawn_waiter<T: Send + 'static>(
    store: &Store,
    then: impl FnOnce(Claim) -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let store = store.clone();
    std::thread::spawn(move || {
        let request = ClaimRequest::new("k", fingerprint("r"));
        then(store.claim_wait(&request, Duration::from_secs(30)).expect("claim_wait"))
    })
}

#[test]
fn waiter_gets_the_replay_when_the_holder_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let lease = acquire(&store, &request);
    let waiter = spawn_waiter(&store, |claim| claim);
    std::thread::sleep(Duration::from_millis(100));
    lease.complete(b"finished").expect("complete");
    let started = Instant::now();
    match waiter.join().expect("join") {
        Claim::Replay(record) => assert_eq!(record.response, b"finished"),
        other => panic!("expected Replay, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "the waiter was not woken");
}

#[test]
fn waiter_acquires_when_the_holder_releases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let lease = acquire(&store, &request);
    let waiter = spawn_waiter(&store, |claim| match claim {
        Claim::Acquired(lease) => lease.complete(b"second").map(|()| true),
        _ => Ok(false),
    });
    std::thread::sleep(Duration::from_millis(50));
    lease.release().expect("release");
    assert!(waiter.join().expect("join").expect("complete"));
}

#[test]
fn waiter_times_out_with_in_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let _lease = acquire(&store, &request);
    let started = Instant::now();
    let claim = store.claim_wait(&request, Duration::from_millis(120)).expect("claim_wait");
    assert!(matches!(claim, Claim::InProgress { .. }), "{claim:?}");
    assert!(started.elapsed() >= Duration::from_millis(120));
}

#[test]
fn waiter_takes_over_when_the_lease_runs_out_by_the_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(5));
    let _abandoned = acquire(&store, &request).into_token();
    let mover = {
        let clock = clock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            clock.advance(Duration::from_secs(6));
        })
    };
    match store.claim_wait(&request, Duration::from_secs(30)).expect("claim_wait") {
        Claim::Acquired(lease) => {
            assert!(lease.recovered());
            lease.complete(b"x").expect("complete");
        }
        other => panic!("expected a recovered Acquired, got {other:?}"),
    }
    mover.join().expect("join");
}
