//! Fencing tokens: a stale holder can never change a record; leases renew,
//! travel as tokens, and count when abandoned.

use crate::common::{acquire, fingerprint, open, replay, START_MS};
use idemkv::{Claim, ClaimRequest, Error, LeaseToken, ManualClock, State};
use std::time::Duration;

#[test]
fn stale_token_cannot_complete_fail_release_or_renew() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(1));
    let stale = acquire(&store, &request).into_token();
    clock.advance(Duration::from_secs(2));
    let fresh = acquire(&store, &request);
    let lost = |result: Result<(), Error>| matches!(result, Err(Error::LeaseLost { .. }));
    assert!(lost(store.complete(&stale, b"x")));
    assert!(lost(store.fail(&stale, b"x")));
    assert!(lost(store.release(&stale)));
    assert!(matches!(store.renew(&stale, Duration::from_secs(5)), Err(Error::LeaseLost { .. })));
    let record = store.get(b"", b"k").expect("get").expect("present");
    assert_eq!((record.state, record.token), (State::Processing, fresh.token()));
    fresh.complete(b"mine").expect("complete");
    assert_eq!(store.stats().lease_lost, 4);
}

#[test]
fn renew_keeps_others_out_and_never_shortens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(10));
    let mut lease = acquire(&store, &request);
    clock.advance(Duration::from_secs(8));
    lease.renew(Duration::from_secs(10)).expect("renew");
    assert_eq!(lease.deadline_ms(), START_MS + 18_000);
    lease.renew(Duration::from_secs(1)).expect("renew");
    assert_eq!(lease.deadline_ms(), START_MS + 18_000, "a shorter renewal does not shorten");
    clock.advance(Duration::from_secs(9));
    assert!(matches!(store.claim(&request).expect("claim"), Claim::InProgress { .. }));
    assert!(matches!(lease.renew(Duration::ZERO), Err(Error::InvalidDuration { .. })));
    lease.complete(b"done").expect("complete");
    assert_eq!(store.stats().renewals, 2);
}

#[test]
fn holder_may_finish_after_its_lease_ends_if_nobody_took_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(1));
    let lease = acquire(&store, &request);
    clock.advance(Duration::from_secs(5));
    lease.complete(b"late but first").expect("complete");
    assert_eq!(replay(&store, &request).response, b"late but first");
}

#[test]
fn token_finishes_from_another_thread_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("job", fingerprint("r")).scope("tenant");
    let token = acquire(&store, &request).into_token();
    assert_eq!(token.scope, b"tenant");
    let worker = {
        let store = store.clone();
        let token = token.clone();
        std::thread::spawn(move || store.complete(&token, b"from worker"))
    };
    worker.join().expect("join").expect("complete");
    assert!(matches!(store.complete(&token, b"again"), Err(Error::LeaseLost { .. })));
    let forged = LeaseToken { token: token.token + 1, ..token };
    assert!(matches!(store.release(&forged), Err(Error::LeaseLost { .. })));
    assert_eq!(replay(&store, &request).response, b"from worker");
    assert_eq!(store.stats().abandoned_leases, 0);
}

#[test]
fn dropped_lease_keeps_the_key_processing_and_is_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r")).lease(Duration::from_secs(3));
    drop(acquire(&store, &request));
    assert_eq!(store.stats().abandoned_leases, 1);
    assert!(matches!(store.claim(&request).expect("claim"), Claim::InProgress { .. }));
    clock.advance(Duration::from_secs(3));
    let lease = acquire(&store, &request);
    assert!(lease.recovered());
    lease.complete(b"ok").expect("complete");
}

#[test]
fn removed_key_fences_out_its_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("r"));
    let lease = acquire(&store, &request);
    assert!(store.remove(b"", b"k").expect("remove"));
    assert!(!store.remove(b"", b"k").expect("remove twice"));
    let lost = lease.complete(b"x").expect_err("a removed key's holder");
    assert!(matches!(lost.error, Error::LeaseLost { .. }) && lost.lease.is_none(), "{lost:?}");
    assert_eq!(store.get(b"", b"k").expect("get"), None);
    let again = acquire(&store, &request);
    assert_eq!(again.attempt(), 1);
    again.complete(b"y").expect("complete");
}

#[test]
fn tokens_only_grow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let mut last = 0;
    for round in 0..20 {
        let request = ClaimRequest::new("k", fingerprint("r"));
        let lease = acquire(&store, &request);
        assert!(lease.token() > last, "round {round}");
        last = lease.token();
        lease.release().expect("release");
    }
}
