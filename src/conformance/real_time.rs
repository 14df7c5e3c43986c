//! The lease and expiry boundaries on real time, for a backend whose
//! clock nobody can move (a server's): what [`super::lease_boundaries`]
//! checks to the millisecond on a movable clock, checked here on either
//! side of each boundary with a margin, so that the backend's clock and
//! the scenario's may disagree by the margin, and a loaded machine may
//! oversleep by it, without a false failure.
//!
//! Each check that a boundary has *not* yet passed measures how long the
//! scenario really waited: past the boundary minus the margin, the
//! machine stalled longer than the scenario allows for, and it says so
//! instead of answering for the backend.

use super::contract::{acquire, fp};
use super::Setting;
use crate::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    State,
};
use std::time::{Duration, Instant};

/// How far apart the backend's clock and the scenario's may be, and how
/// late a sleep may wake, before a check would be wrong.
const MARGIN: Duration = Duration::from_millis(250);

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// Panics if more than `before - MARGIN` has passed since `since`: the
/// check about to be made is only sound while `before` is ahead.
fn still_before(since: Instant, before: Duration, what: &str) {
    let elapsed = since.elapsed();
    assert!(
        elapsed + MARGIN <= before,
        "the machine stalled: {elapsed:?} passed, too close to {what} at {before:?} to check it"
    );
}

/// Lease ends and expiries on real time: a lease holds until its end and
/// is taken over after it; a renewal moves the end past the first one; a
/// completed record replays until its TTL and is absent after it; an
/// abandoned Processing record is still there after its lease end and
/// absent after lease end + TTL, and the next claim then starts afresh.
/// About 4 s of sleeps.
///
/// # Panics
/// When the backend answers otherwise (or the machine stalls for more
/// than the margin while a boundary is ahead: the message says so).
pub async fn lease_ends<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let timed = ClaimOptions::new().lease(ms(800)).ttl(ms(1200));

    // A lease of 0.8 s renewed at 0.2 s for 1.2 s: it ends at 1.4 s.
    let lease = setting.key("lease");
    let claimed = Instant::now();
    let (first, _, _) = acquire(backend, b"", &lease, timed).await;
    tokio::time::sleep(ms(200)).await;
    still_before(claimed, ms(800), "the first lease end");
    backend.renew(&first, ms(1200)).await.expect("renew");
    tokio::time::sleep(ms(800)).await;
    still_before(claimed, ms(1400), "the renewed lease end");
    let left = ms(1400).saturating_sub(claimed.elapsed());
    match backend.claim(b"", &lease, fp("body"), timed).await.expect("claim") {
        BackendClaim::InProgress { retry_after } => assert!(
            retry_after <= left + MARGIN && retry_after + MARGIN >= left,
            "retry-after {retry_after:?}: the renewed lease end is {left:?} ahead"
        ),
        other => panic!("expected InProgress past the first lease end, before the renewed one, got {other:?}"),
    }
    tokio::time::sleep((ms(1400) + MARGIN).saturating_sub(claimed.elapsed())).await;
    let (second, attempt, recovered) = acquire(backend, b"", &lease, timed).await;
    assert_eq!((attempt, recovered), (2, true), "taken over after the renewed lease end");
    assert!(second.token > first.token, "the takeover's token is greater");

    // The completed record lives 1.2 s.
    let completed = Instant::now();
    backend.complete(&second, b"done").await.expect("complete");
    tokio::time::sleep(ms(600)).await;
    still_before(completed, ms(1200), "the expiry");
    match backend.claim(b"", &lease, fp("body"), timed).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"done", "replayed before its expiry"),
        other => panic!("expected Replay before the expiry, got {other:?}"),
    }
    tokio::time::sleep((ms(1200) + MARGIN).saturating_sub(completed.elapsed())).await;
    assert_eq!(backend.get(b"", &lease).await.expect("get"), None, "absent after its expiry");

    // Abandoned: a lease of 0.3 s and a TTL of 1.2 s, gone after 1.5 s.
    let abandoned = setting.key("abandoned");
    let short = ClaimOptions::new().lease(ms(300)).ttl(ms(1200));
    let claimed = Instant::now();
    let (held, _, _) = acquire(backend, b"", &abandoned, short).await;
    tokio::time::sleep(ms(300) + MARGIN).await;
    still_before(claimed, ms(1500), "lease end + TTL");
    let record = backend.get(b"", &abandoned).await.expect("get").expect("present until lease end + TTL");
    assert_eq!((record.state, record.token), (State::Processing, held.token), "still the abandoned holder's");
    tokio::time::sleep((ms(1500) + MARGIN).saturating_sub(claimed.elapsed())).await;
    assert_eq!(backend.get(b"", &abandoned).await.expect("get"), None, "absent after lease end + TTL");
    let (fresh, attempt, recovered) = acquire(backend, b"", &abandoned, short).await;
    assert_eq!((attempt, recovered), (1, false), "an expired lease is a fresh start");
    assert!(fresh.token > held.token, "no token repeats after expiry");
    backend.release(&fresh).await.expect("release");
}
