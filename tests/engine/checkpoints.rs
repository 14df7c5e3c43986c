//! Checkpoints on the embedded store: a holder's checkpoint is what the
//! next holder resumes from after a takeover; it is fenced, kept by
//! renewals, carried over by takeovers, survives a restart and compaction,
//! respects the size limits and vanishes with the Processing record.

use crate::common::{acquire, config, fingerprint, open, replay, START_MS};
use idemkv::{Checkpoint, Claim, ClaimRequest, Error, ManualClock, ReusePolicy, State, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(1);

fn request() -> ClaimRequest<'static> {
    ClaimRequest::new("order-1", fingerprint("POST /orders")).scope("tenant").lease(LEASE)
}

fn point(step: &str, payload: &[u8]) -> Checkpoint {
    Checkpoint::new(step, payload.to_vec())
}

fn stored_point(store: &Store) -> Option<Checkpoint> {
    store.get(b"tenant", b"order-1").expect("get").expect("present").checkpoint
}

#[test]
fn a_takeover_resumes_from_the_last_point_and_a_stale_holder_cannot_move_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let mut first = acquire(&store, &request());
    assert_eq!(first.last_checkpoint(), None);
    first.checkpoint("charged", b"ch_1").expect("checkpoint");
    first.checkpoint("reserved", b"ch_1 stock_7").expect("a later step replaces the point");
    assert_eq!(first.last_checkpoint(), Some(&point("reserved", b"ch_1 stock_7")));
    assert_eq!(stored_point(&store), Some(point("reserved", b"ch_1 stock_7")));

    clock.advance(LEASE * 2);
    let mut second = acquire(&store, &request());
    assert!(second.recovered());
    assert_eq!(second.attempt(), 2);
    assert_eq!(second.last_checkpoint(), Some(&point("reserved", b"ch_1 stock_7")), "resumes after that step");

    assert!(matches!(first.checkpoint("written", b"stale"), Err(Error::LeaseLost { .. })));
    assert_eq!(stored_point(&store), Some(point("reserved", b"ch_1 stock_7")), "the stale point was not stored");

    // The second holder stores nothing and dies too: the third still sees
    // the first holder's point.
    drop(second.checkpoint("", b"refused"));
    drop(second);
    clock.advance(LEASE * 2);
    let third = acquire(&store, &request());
    assert_eq!((third.attempt(), third.recovered()), (3, true));
    assert_eq!(third.last_checkpoint(), Some(&point("reserved", b"ch_1 stock_7")));
    third.complete(b"201 order 9").expect("complete");
    assert_eq!(store.stats().checkpoints, 2, "the two the first holder stored; refused ones are not counted");
    let record = replay(&store, &request());
    assert_eq!((record.response.as_slice(), record.checkpoint), (&b"201 order 9"[..], None));
}

#[test]
fn renewals_keep_the_point_and_finishing_drops_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let mut lease = acquire(&store, &request());
    lease.checkpoint("charged", b"ch_2").expect("checkpoint");
    let deadline = lease.deadline_ms();
    clock.advance(Duration::from_millis(400));
    assert_eq!(lease.deadline_ms(), deadline);
    assert!(matches!(store.claim(&request()).expect("claim"), Claim::InProgress { .. }), "the lease still runs");
    lease.renew(Duration::from_secs(5)).expect("renew");
    assert_eq!(stored_point(&store), Some(point("charged", b"ch_2")), "a renewal keeps the point");
    lease.release().expect("release");
    assert!(store.get(b"tenant", b"order-1").expect("get").is_none());
    let fresh = acquire(&store, &request());
    assert_eq!((fresh.last_checkpoint(), fresh.recovered()), (None, false), "a fresh claim starts clean");
    fresh.fail(b"402 declined").expect("fail");
    let retried = acquire(&store, &request().reuse(ReusePolicy::RetryFailed));
    assert_eq!((retried.last_checkpoint(), retried.attempt()), (None, 2));
    drop(retried);
}

#[test]
fn a_checkpoint_keeps_the_lease_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let mut lease = acquire(&store, &request());
    clock.advance(Duration::from_millis(900));
    lease.checkpoint("charged", b"").expect("checkpoint");
    clock.advance(Duration::from_millis(100));
    let Claim::Acquired(next) = store.claim(&request()).expect("claim") else {
        panic!("a checkpoint is no renewal: the lease ended at its first end");
    };
    assert_eq!(next.last_checkpoint(), Some(&point("charged", b"")));
}

#[test]
fn the_point_survives_a_restart_and_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let small = |clock: &ManualClock| config(clock).segment_bytes(64 * 1024).response_bytes_max(1024);
    let store = Store::open(dir.path(), small(&clock)).expect("open");
    let mut lease = acquire(&store, &request());
    lease.checkpoint("charged", b"ch_3").expect("checkpoint");
    let token = lease.into_token();
    // Enough other records to seal segments; they expire and compaction
    // rewrites what is left, the Processing record among it.
    for n in 0..3000 {
        let other = format!("other-{n}");
        let lease = acquire(&store, &ClaimRequest::new(&other, fingerprint("x")).ttl(Duration::from_secs(1)));
        lease.complete(&[b'r'; 100]).expect("complete");
    }
    store.close().expect("close");

    let store = Store::open(dir.path(), small(&clock)).expect("reopen");
    assert_eq!(stored_point(&store), Some(point("charged", b"ch_3")), "after a restart");
    clock.advance(Duration::from_secs(2));
    let report = store.compact().expect("compact");
    assert!(report.segments_rewritten > 0 && report.bytes_reclaimed > 0, "compaction rewrote segments: {report:?}");
    assert_eq!(stored_point(&store), Some(point("charged", b"ch_3")), "after compaction");
    store.checkpoint(&token, "shipped", b"parcel 5").expect("the holder goes on through its token");
    store.close().expect("close");

    let store = Store::open(dir.path(), small(&clock)).expect("reopen");
    clock.advance(LEASE * 10);
    let next = acquire(&store, &request());
    assert_eq!(next.last_checkpoint(), Some(&point("shipped", b"parcel 5")));
    next.complete(b"done").expect("complete");
    assert_eq!(replay(&store, &request()).checkpoint, None);
}

#[test]
fn points_respect_the_limits_and_bad_ones_store_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).response_bytes_max(64)).expect("open");
    let mut lease = acquire(&store, &request());
    lease.checkpoint("ok", &[7; 61]).expect("1 + 2 + 61 = 64 bytes fit");
    let refused =
        [lease.checkpoint("ok", &[7; 62]), lease.checkpoint("", b"x"), lease.checkpoint(&"s".repeat(256), b"")];
    assert!(matches!(refused[0], Err(Error::CheckpointTooLarge { len: 65, max: 64 })), "{:?}", refused[0]);
    assert!(matches!(refused[1], Err(Error::InvalidCheckpoint { .. })), "{:?}", refused[1]);
    assert!(matches!(refused[2], Err(Error::InvalidCheckpoint { .. })), "{:?}", refused[2]);
    assert_eq!(stored_point(&store), Some(point("ok", &[7; 61])), "refused points changed nothing");
    lease.checkpoint("next", b"").expect("the lease still holds after refusals");
    lease.complete(b"done").expect("complete");
}

#[test]
fn a_removed_key_takes_its_point_along() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let mut lease = acquire(&store, &request());
    lease.checkpoint("charged", b"ch_4").expect("checkpoint");
    assert!(store.remove(b"tenant", b"order-1").expect("remove"));
    assert!(matches!(lease.checkpoint("after", b""), Err(Error::LeaseLost { .. })));
    let fresh = acquire(&store, &request());
    assert_eq!(fresh.last_checkpoint(), None);
    let record = store.get(b"tenant", b"order-1").expect("get").expect("present");
    assert_eq!((record.state, record.checkpoint), (State::Processing, None));
    drop(fresh);
}
