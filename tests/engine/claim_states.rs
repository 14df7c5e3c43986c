//! Every row of the claim table of DESIGN §3, one test each.

use crate::common::{acquire, fingerprint, open, replay, START_MS};
use idemkv::{Claim, ClaimRequest, Error, ManualClock, State};
use std::time::Duration;

#[test]
fn absent_key_is_acquired_and_written_as_processing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("req")).lease(Duration::from_secs(10));
    let lease = acquire(&store, &request);
    assert_eq!(lease.attempt(), 1);
    assert!(!lease.recovered());
    assert_eq!(lease.deadline_ms(), START_MS + 10_000);
    let record = store.get(b"", b"k").expect("get").expect("present");
    assert_eq!(record.state, State::Processing);
    assert_eq!(record.token, lease.token());
    assert_eq!(record.fingerprint, fingerprint("req"));
    assert!(record.response.is_empty());
    lease.complete(b"ok").expect("complete");
}

#[test]
fn processing_with_valid_lease_answers_in_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("req")).lease(Duration::from_secs(10));
    let lease = acquire(&store, &request);
    clock.advance(Duration::from_secs(4));
    match store.claim(&request).expect("claim") {
        Claim::InProgress { retry_after, attempt } => {
            assert_eq!(retry_after, Duration::from_secs(6));
            assert_eq!(attempt, 1);
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    lease.release().expect("release");
    assert_eq!(store.stats().in_progress, 1);
}

#[test]
fn processing_with_expired_lease_is_recovered_with_a_new_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("req")).lease(Duration::from_secs(10));
    let stale = acquire(&store, &request);
    clock.advance(Duration::from_secs(10));
    let fresh = acquire(&store, &request);
    assert!(fresh.recovered());
    assert_eq!(fresh.attempt(), 2);
    assert!(fresh.token() > stale.token());
    let stale_token = stale.token();
    let lost = stale.complete(b"stale").expect_err("a stale holder");
    assert!(matches!(lost.error, Error::LeaseLost { token } if token == stale_token), "{lost:?}");
    assert!(lost.lease.is_none(), "a lost lease is not handed back");
    fresh.complete(b"fresh").expect("complete");
    assert_eq!(replay(&store, &request).response, b"fresh");
    assert_eq!(replay(&store, &request).attempt, 2);
    assert_eq!(store.stats().recovered, 1);
    assert_eq!(store.stats().lease_lost, 1);
}

#[test]
fn completed_and_failed_are_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let done = ClaimRequest::new("done", fingerprint("a"));
    let declined = ClaimRequest::new("declined", fingerprint("b"));
    acquire(&store, &done).complete(b"201 created").expect("complete");
    acquire(&store, &declined).fail(b"402 card declined").expect("fail");
    for _ in 0..3 {
        let record = replay(&store, &done);
        assert_eq!((record.state, record.response.as_slice()), (State::Completed, &b"201 created"[..]));
        let record = replay(&store, &declined);
        assert_eq!((record.state, record.response.as_slice()), (State::Failed, &b"402 card declined"[..]));
    }
    assert_eq!(store.stats().replays, 6);
}

#[test]
fn different_fingerprint_is_a_mismatch_in_every_present_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let processing = acquire(&store, &ClaimRequest::new("p", fingerprint("1")).lease(Duration::from_secs(5)));
    acquire(&store, &ClaimRequest::new("c", fingerprint("1"))).complete(b"secret").expect("complete");
    acquire(&store, &ClaimRequest::new("f", fingerprint("1"))).fail(b"secret").expect("fail");
    clock.advance(Duration::from_secs(6));
    // "p" now has an expired lease: still present, still a mismatch.
    for key in ["p", "c", "f"] {
        let claim = store.claim(&ClaimRequest::new(key, fingerprint("2"))).expect("claim");
        assert!(matches!(claim, Claim::Mismatch), "{key}: {claim:?}");
    }
    assert_eq!(store.stats().mismatches, 3);
    drop(processing);
}

#[test]
fn expired_record_is_absent_and_claimed_fresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("req")).ttl(Duration::from_secs(60));
    acquire(&store, &request).complete(b"old").expect("complete");
    clock.advance(Duration::from_secs(59));
    assert_eq!(replay(&store, &request).response, b"old");
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.get(b"", b"k").expect("get"), None);
    // Even another fingerprint is acquired: the old record is gone.
    let lease = acquire(&store, &ClaimRequest::new("k", fingerprint("other")));
    assert_eq!(lease.attempt(), 1);
    assert!(!lease.recovered());
    lease.complete(b"new").expect("complete");
    assert_eq!(store.stats().expirations, 1);
}

#[test]
fn released_key_is_absent_and_a_corrected_retry_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("k", fingerprint("bad input"));
    acquire(&store, &request).release().expect("release");
    assert_eq!(store.get(b"", b"k").expect("get"), None);
    let corrected = ClaimRequest::new("k", fingerprint("good input"));
    let lease = acquire(&store, &corrected);
    assert_eq!(lease.attempt(), 1);
    lease.complete(b"ok").expect("complete");
    assert_eq!(replay(&store, &corrected).response, b"ok");
}
