//! Wall-clock jumps: leases count elapsed (monotonic) time, so a jump of
//! the wall clock either way neither shortens nor freezes one, within a
//! process and across a reopen (the rule is on `idemkv::Clock`). TTLs stay
//! on the wall clock.
//!
//! Regression tests for "Storage integrity" item 4: a forward jump expired
//! every lease at once (two holders could run), and after the clock stepped
//! back, time stayed frozen at the future floor, across restarts too.

use crate::common::{acquire, fingerprint, open, replay, START_MS};
use idemkv::{Claim, ClaimRequest, ManualClock, Store};
use std::time::Duration;

const HOUR_MS: u64 = 3_600_000;

fn in_progress(store: &Store, request: &ClaimRequest<'_>) -> Duration {
    match store.claim(request).expect("claim") {
        Claim::InProgress { retry_after, .. } => retry_after,
        other => panic!("expected InProgress, got {other:?}"),
    }
}

#[test]
fn a_forward_jump_of_the_wall_clock_does_not_end_a_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = ClaimRequest::new("charge", fingerprint("r")).lease(Duration::from_secs(30));
    let lease = acquire(&store, &request);
    let finished = ClaimRequest::new("done", fingerprint("r")).ttl(Duration::from_secs(600));
    acquire(&store, &finished).complete(b"kept").expect("complete");

    clock.set_wall_ms(START_MS + HOUR_MS);
    assert_eq!(in_progress(&store, &request), Duration::from_secs(30), "a second holder could run");
    clock.advance(Duration::from_secs(29));
    assert_eq!(in_progress(&store, &request), Duration::from_secs(1));
    // TTLs follow the wall clock: the 10-minute record is gone.
    assert_eq!(store.get(b"", b"done").expect("get"), None);

    lease.complete(b"charged once").expect("the holder finishes");
    assert_eq!(replay(&store, &request).response, b"charged once");
    assert_eq!(store.stats().recovered, 0);
}

#[test]
fn after_the_wall_clock_steps_back_a_lease_still_ends_after_its_duration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    // A mistaken jump forward is seen (and written) before NTP steps back.
    clock.set_wall_ms(START_MS + HOUR_MS);
    acquire(&store, &ClaimRequest::new("seen", fingerprint("r"))).complete(b"x").expect("complete");
    clock.set_wall_ms(START_MS);

    let request = ClaimRequest::new("charge", fingerprint("r")).lease(Duration::from_secs(30));
    let abandoned = acquire(&store, &request);
    drop(abandoned);
    assert_eq!(in_progress(&store, &request), Duration::from_secs(30));
    clock.set_wall_ms(START_MS - HOUR_MS); // and back once more, for good measure
    clock.advance(Duration::from_secs(30));
    let taken_over = acquire(&store, &request);
    assert!(taken_over.recovered(), "the lease ended after 30 s of elapsed time");
    assert_eq!(taken_over.attempt(), 2);
}

#[test]
fn across_a_reopen_a_clock_set_back_gives_a_lease_at_most_its_length() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS + HOUR_MS); // an hour ahead
    let request = ClaimRequest::new("charge", fingerprint("r")).lease(Duration::from_secs(30));
    {
        let store = open(dir.path(), &clock);
        drop(acquire(&store, &request)); // the holder crashes
    }
    clock.set_wall_ms(START_MS); // corrected while the process was down
    let store = open(dir.path(), &clock);
    assert_eq!(in_progress(&store, &request), Duration::from_secs(30), "at most the lease's length");
    clock.advance(Duration::from_secs(30));
    let taken_over = acquire(&store, &request);
    assert!(taken_over.recovered());
    drop(store);

    // Ten minutes later, across one more reopen with the clock still behind
    // the newest time written: the new lease is not frozen either.
    clock.advance(Duration::from_secs(600));
    drop(taken_over);
    let store = open(dir.path(), &clock);
    assert!(in_progress(&store, &request) <= Duration::from_secs(30));
    clock.advance(Duration::from_secs(30));
    assert_eq!(acquire(&store, &request).attempt(), 3);
}

#[test]
fn across_a_reopen_the_wall_clock_says_how_much_lease_is_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let short = ClaimRequest::new("short", fingerprint("r")).lease(Duration::from_secs(30));
    let long = ClaimRequest::new("long", fingerprint("r")).lease(Duration::from_secs(7_200));
    {
        let store = open(dir.path(), &clock);
        drop(acquire(&store, &short));
        drop(acquire(&store, &long));
    }
    // Set forward an hour across the restart: elapsed time does not survive
    // a restart, so the wall clock decides what is left (documented rule).
    clock.set_wall_ms(START_MS + HOUR_MS);
    let store = open(dir.path(), &clock);
    assert!(acquire(&store, &short).recovered(), "the wall clock says the 30 s lease ended");
    assert_eq!(in_progress(&store, &long), Duration::from_secs(3_600));
}
