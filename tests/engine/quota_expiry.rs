//! A record whose time is up never holds a quota slot: a TTL expiry, or an
//! abandoned lease past its end + TTL, frees it for the next new claim even
//! when nothing has read the expired key (the claim that would be refused
//! first sweeps expired records out). Compaction, which drops expired
//! records and moves live ones, keeps the counts exact.

#![cfg(feature = "testing")]

use crate::common::{acquire, fingerprint, START_MS};
use idemkv::{store::Quota, Claim, ClaimRequest, Config, Durability, Error, ManualClock, Store};
use std::sync::Arc;
use std::time::Duration;

fn open(dir: &std::path::Path, clock: &ManualClock, quota: Quota) -> Store {
    let config = Config::new()
        .shards(2)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
        .quota(quota);
    Store::open(dir, config).expect("open")
}

fn request<'a>(scope: &'a str, key: &'a str) -> ClaimRequest<'a> {
    ClaimRequest::new(key, fingerprint("body")).scope(scope).lease(Duration::from_secs(1)).ttl(Duration::from_secs(10))
}

#[test]
fn a_ttl_expiry_frees_the_slot_without_a_read_of_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().records(2));
    for key in ["k-1", "k-2"] {
        acquire(&store, &request("t", key)).complete(b"done").expect("complete");
    }
    clock.advance(Duration::from_millis(9_999));
    assert!(matches!(store.claim(&request("t", "k-3")), Err(Error::QuotaExceeded { .. })), "not expired yet");
    clock.advance(Duration::from_millis(1));
    // Both expired: the claim that would be refused drops them first.
    acquire(&store, &request("t", "k-3")).complete(b"done").expect("complete");
    acquire(&store, &request("t", "k-4")).complete(b"done").expect("complete");
    let stats = store.stats();
    assert_eq!((stats.expirations, stats.quota_refusals), (2, 1));
    assert_eq!(store.scope_usage("t").map(|usage| usage.records), Some(2));
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn an_abandoned_lease_holds_its_slot_until_lease_end_plus_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().records(1));
    drop(acquire(&store, &request("t", "crashed")));
    // Lease over, TTL not: the key may be taken over (no new record), but
    // it still holds the scope's one slot.
    clock.advance(Duration::from_millis(10_999));
    assert!(matches!(store.claim(&request("t", "other")), Err(Error::QuotaExceeded { .. })));
    let takeover = acquire(&store, &request("t", "crashed"));
    assert!(takeover.recovered());
    drop(takeover);
    // The takeover's lease end + TTL passes: the slot is free.
    clock.advance(Duration::from_secs(11));
    assert!(matches!(store.claim(&request("t", "other")).expect("claim"), Claim::Acquired(_)));
    assert_eq!(store.stats().abandoned_expired, 1);
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn lazily_found_expiries_and_compaction_keep_the_counts_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().records(1000));
    // Short-lived records first, long-lived ones after: sealed segments of
    // expired records for compaction to drop, and live ones to move.
    for n in 0..60 {
        let scope = format!("s{}", n % 3);
        acquire(&store, &request(&scope, &format!("short-{n}"))).complete(&[b'x'; 100]).expect("complete");
    }
    for n in 0..60 {
        let scope = format!("s{}", n % 3);
        let key = format!("long-{n}");
        let long = ClaimRequest::new(&key, fingerprint("body")).scope(&scope).ttl(Duration::from_secs(3600));
        acquire(&store, &long).complete(&[b'y'; 100]).expect("complete");
    }
    assert_eq!(store.scope_usage("s0").map(|usage| usage.records), Some(40));
    clock.advance(Duration::from_secs(10));
    // Usage counts records until they are found expired: a read finds one.
    assert_eq!(store.scope_usage("s0").map(|usage| usage.records), Some(40));
    assert_eq!(store.get(b"s0", b"short-0").expect("get"), None);
    assert_eq!(store.scope_usage("s0").map(|usage| usage.records), Some(39));
    assert_eq!(store.quota_audit().expect("audit"), None);
    // Compaction drops the rest and moves the live ones.
    let found = store.stats().expirations;
    let report = store.compact().expect("compact");
    assert!(report.segments_dropped + report.segments_rewritten > 0, "{report:?}");
    assert!(store.stats().expirations > found, "compaction found expired records");
    assert_eq!(store.quota_audit().expect("audit"), None);
    let census = store.census().expect("census");
    let counted: u64 =
        (0..3).filter_map(|scope| store.scope_usage(format!("s{scope}"))).map(|usage| usage.records).sum();
    assert_eq!(counted, census.processing + census.completed + census.failed + census.expired);
    // Once every expired record is found, what is left is the long-lived
    // records, at their sizes: 104 + scope + key + response bytes each.
    for n in 0..60 {
        assert_eq!(store.get(format!("s{}", n % 3).as_bytes(), format!("short-{n}").as_bytes()).expect("get"), None);
    }
    for scope in 0..3 {
        let expected: u64 =
            (0..60).filter(|n| n % 3 == scope).map(|n| 104 + 2 + format!("long-{n}").len() as u64 + 100).sum();
        let usage = store.scope_usage(format!("s{scope}")).expect("live records");
        assert_eq!((usage.records, usage.bytes), (20, expected));
    }
    assert_eq!(store.quota_audit().expect("audit"), None);
}
