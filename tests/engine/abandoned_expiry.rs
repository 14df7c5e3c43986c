//! A Processing record whose holder never came back (a crash, a dropped
//! lease) expires at lease end + its TTL: it reads absent, is counted in
//! `Stats::abandoned_expired`, and compaction reclaims its segment. The next
//! claim of the key starts afresh: attempt 1, not recovered — after a whole
//! TTL nobody is told to check for a half-run predecessor, exactly as for a
//! Completed record that expired.
//!
//! Regression test for "Storage integrity" item 5: each crash or dropped
//! lease leaked an index entry and pinned its segment forever.

use crate::common::{acquire, fingerprint, START_MS};
use idemkv::{ClaimRequest, Config, Durability, ManualClock, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn open(dir: &Path, clock: &ManualClock) -> Store {
    let config = Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()));
    Store::open(dir, config).expect("open")
}

/// A claim with a 1 s lease and a 10 s TTL.
fn abandoned() -> ClaimRequest<'static> {
    ClaimRequest::new("crashed", fingerprint("r")).lease(Duration::from_secs(1)).ttl(Duration::from_secs(10))
}

#[test]
fn an_abandoned_lease_expires_after_lease_end_plus_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let request = abandoned();
    drop(acquire(&store, &request));
    assert_eq!(store.stats().abandoned_leases, 1);

    // Lease over, TTL not: a takeover, told to check for a half-run holder.
    clock.advance(Duration::from_millis(10_999));
    let second = acquire(&store, &request);
    assert!(second.recovered());
    assert_eq!(second.attempt(), 2);
    drop(second);

    // Its lease end + TTL passed: absent, counted, and a fresh start.
    clock.advance(Duration::from_secs(11));
    assert_eq!(store.get(b"", b"crashed").expect("get"), None);
    assert_eq!(store.stats().abandoned_expired, 1);
    assert_eq!(store.stats().live_records, 0);
    let fresh = acquire(&store, &request);
    assert_eq!((fresh.attempt(), fresh.recovered()), (1, false));
    fresh.complete(b"done").expect("complete");
    assert_eq!(store.stats().abandoned_expired, 1);
}

#[test]
fn an_abandoned_lease_found_at_open_is_dropped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    {
        let store = open(dir.path(), &clock);
        drop(acquire(&store, &abandoned()));
    }
    clock.advance(Duration::from_secs(11));
    let store = open(dir.path(), &clock);
    let stats = store.stats();
    assert_eq!((stats.abandoned_expired, stats.live_records), (1, 0));
    assert_eq!(store.census().expect("census").processing, 0);
    assert_eq!(acquire(&store, &abandoned()).attempt(), 1);
}

#[test]
fn compaction_reclaims_the_segment_an_abandoned_lease_pinned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    drop(acquire(&store, &abandoned()));
    // Fill the first segment and several more with keys that are released:
    // nothing but the abandoned lease stays live in the oldest segment.
    for n in 0..120 {
        let key = format!("scratch-{n}");
        let request = ClaimRequest::new(&key, fingerprint("r"));
        acquire(&store, &request).release().expect("release");
    }
    assert!(store.stats().segments > 2);

    let pinned = store.compact().expect("compact");
    assert_eq!(pinned.segments_dropped, 0, "the live lease keeps the oldest segment");
    assert_eq!(store.census().expect("census").processing, 1);

    clock.advance(Duration::from_secs(11));
    assert_eq!(store.census().expect("census").expired, 1, "counted as expired before compaction");
    let before = store.stats().segments;
    let report = store.compact().expect("compact");
    assert!(report.segments_dropped >= 1, "{report:?}");
    assert_eq!(report.index_entries_released, 1);
    let stats = store.stats();
    assert!(stats.segments < before);
    assert_eq!((stats.abandoned_expired, stats.live_records), (1, 0));
}
