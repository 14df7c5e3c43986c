//! TTL and lease expiry with the manual clock, and clocks that jump back.

use crate::common::{acquire, fingerprint, open, replay, START_MS};
use idemkv::{Claim, ClaimRequest, Config, Durability, ManualClock, Store};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn default_and_per_request_ttl_count_from_completion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(
        dir.path(),
        Config::new()
            .durability(Durability::Buffered)
            .clock(Arc::new(clock.clone()))
            .default_ttl(Duration::from_secs(100)),
    )
    .expect("open");
    let default_ttl = ClaimRequest::new("default", fingerprint("r"));
    let short_ttl = ClaimRequest::new("short", fingerprint("r")).ttl(Duration::from_secs(10));
    let lease_a = acquire(&store, &default_ttl);
    let lease_b = acquire(&store, &short_ttl);
    // Time spent processing does not count, even past the 30 s lease (no
    // one took the keys over) — though not past lease end + TTL, when an
    // abandoned lease expires.
    clock.advance(Duration::from_secs(35));
    lease_a.complete(b"a").expect("complete");
    lease_b.complete(b"b").expect("complete");
    assert_eq!(replay(&store, &short_ttl).deadline_ms, START_MS + 45_000);
    clock.advance(Duration::from_millis(9_999));
    assert_eq!(replay(&store, &short_ttl).response, b"b");
    clock.advance(Duration::from_millis(1));
    assert_eq!(store.get(b"", b"short").expect("get"), None);
    assert_eq!(replay(&store, &default_ttl).response, b"a");
    clock.advance(Duration::from_secs(90));
    assert_eq!(store.get(b"", b"default").expect("get"), None);
    assert_eq!(store.iter().count(), 0);
}

#[test]
fn expired_records_stay_expired_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let request = ClaimRequest::new("k", fingerprint("r")).ttl(Duration::from_secs(1));
    {
        let store = open(dir.path(), &clock);
        acquire(&store, &request).complete(b"x").expect("complete");
    }
    clock.advance(Duration::from_secs(1));
    let store = open(dir.path(), &clock);
    assert_eq!(store.get(b"", b"k").expect("get"), None);
    assert_eq!(store.stats().expirations, 1);
    assert_eq!(store.stats().live_records, 0);
}

#[test]
fn a_clock_jumping_back_never_revives_a_record_and_leases_count_elapsed_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let expired = ClaimRequest::new("expired", fingerprint("r")).ttl(Duration::from_secs(1));
    acquire(&store, &expired).complete(b"old").expect("complete");
    let held = ClaimRequest::new("held", fingerprint("r")).lease(Duration::from_secs(10));
    let lease = acquire(&store, &held);
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.get(b"", b"expired").expect("get"), None);
    // A write records the time in the log, which is the TTL floor after a restart.
    acquire(&store, &ClaimRequest::new("later", fingerprint("r"))).complete(b"l").expect("complete");
    assert!(matches!(store.claim(&held).expect("claim"), Claim::InProgress { .. }));

    clock.set_wall_ms(START_MS - 3_600_000); // an hour back
    assert_eq!(store.get(b"", b"expired").expect("get"), None, "revived by a clock jump");
    match store.claim(&held).expect("claim") {
        // The lease counts elapsed time: 2 s of its 10 s have passed.
        Claim::InProgress { retry_after, .. } => assert_eq!(retry_after, Duration::from_secs(8)),
        other => panic!("expected InProgress, got {other:?}"),
    }
    drop(store);
    drop(lease);

    // The TTL floor survives a restart: it is the newest time written to the log.
    let store = open(dir.path(), &clock);
    assert_eq!(store.get(b"", b"expired").expect("get"), None);
    assert!(matches!(store.claim(&held).expect("claim"), Claim::InProgress { .. }));
    // 8 s of the lease were left by the floor at reopen; they run as elapsed
    // time although the wall clock is still an hour behind.
    clock.advance(Duration::from_secs(8));
    let recovered = acquire(&store, &held);
    assert!(recovered.recovered());
    recovered.complete(b"ok").expect("complete");
}
