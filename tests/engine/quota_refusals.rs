//! What a per-scope quota refuses and what it never does: only a claim
//! that would create a new live record in a scope at its limit is refused
//! (typed, counted, nothing written); replays, in-progress answers,
//! mismatches, takeovers and finishing a lease pass; a release or a remove
//! frees the slot at once.

#![cfg(feature = "testing")]

use crate::common::{acquire, fingerprint, replay, START_MS};
use idemkv::{
    store::{Quota, QuotaLimit, ScopeUsage},
    Claim, ClaimRequest, Config, Error, ManualClock, Store,
};
use std::time::Duration;

/// Bytes of a Processing record of a 1-byte scope and a 3-byte key: the
/// 104-byte frame prefix, scope and key.
const PROCESSING_BYTES: u64 = 104 + 1 + 3;

fn open(dir: &std::path::Path, clock: &ManualClock, quota: Quota) -> Store {
    Store::open(dir, crate::common::config(clock).quota(quota)).expect("open")
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest::new(key, fingerprint("body")).scope("t").lease(Duration::from_secs(1))
}

/// What `scope_usage` answers for a scope holding `records` in `bytes`.
fn usage(records: u64, bytes: u64) -> ScopeUsage {
    let mut usage = ScopeUsage::default();
    usage.records = records;
    usage.bytes = bytes;
    usage
}

#[test]
fn a_new_key_at_the_record_limit_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().records(2).retry_after(Duration::from_secs(7)));
    acquire(&store, &request("k-1")).complete(b"one").expect("complete");
    let _held = acquire(&store, &request("k-2"));
    let written = store.stats().records_written;

    let refused = store.claim(&request("k-3")).expect_err("a third record");
    assert!(
        matches!(
            refused,
            Error::QuotaExceeded { limit: QuotaLimit::Records, max: 2, used: 2, retry_after }
                if retry_after == Duration::from_secs(7)
        ),
        "{refused:?}"
    );
    assert_eq!(refused.to_string(), "the scope is at its record quota: 2 used of 2");
    let stats = store.stats();
    assert_eq!((stats.quota_refusals, stats.records_written), (1, written), "refused, and nothing written");
    assert_eq!(store.get(b"t", b"k-3").expect("get"), None);
    assert_eq!(store.scope_usage("t"), Some(usage(2, 2 * PROCESSING_BYTES + 3)));

    // Another scope has a quota of its own.
    let other = ClaimRequest::new("k-3", fingerprint("body")).scope("u");
    acquire(&store, &other).complete(b"").expect("complete");
    assert_eq!(store.scope_usage("u"), Some(usage(1, PROCESSING_BYTES)));
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn answers_that_create_no_record_are_never_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().records(1).bytes(PROCESSING_BYTES));
    let first = acquire(&store, &request("k-1"));
    // In progress, and a mismatch, in a full scope.
    assert!(matches!(store.claim(&request("k-1")).expect("claim"), Claim::InProgress { .. }));
    let other_body = ClaimRequest::new("k-1", fingerprint("other")).scope("t");
    assert!(matches!(store.claim(&other_body).expect("claim"), Claim::Mismatch));
    // The lease ends: a takeover replaces the record, it adds none.
    clock.advance(Duration::from_secs(1));
    let mut second = acquire(&store, &request("k-1"));
    assert!(second.recovered());
    assert!(matches!(first.complete(b"late").map_err(|refused| refused.error), Err(Error::LeaseLost { .. })));
    // Renewing and completing are never refused, even over the byte limit.
    second.renew(Duration::from_secs(5)).expect("renew");
    second.complete(&[b'r'; 400]).expect("a completion over the byte limit");
    assert_eq!(store.scope_usage("t"), Some(usage(1, PROCESSING_BYTES + 400)));
    assert_eq!(replay(&store, &request("k-1")).response, vec![b'r'; 400]);
    assert_eq!(store.stats().quota_refusals, 0);
    // Only a new key is refused (the record limit is checked first).
    let refused = store.claim(&request("k-2")).expect_err("a new key");
    assert!(matches!(refused, Error::QuotaExceeded { limit: QuotaLimit::Records, .. }), "{refused:?}");
}

#[test]
fn the_byte_limit_counts_each_live_record_frame() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().bytes(2 * PROCESSING_BYTES + 10));
    let first = acquire(&store, &request("k-1"));
    let _second = acquire(&store, &request("k-2"));
    // Two Processing records fit, a third would go over.
    let refused = store.claim(&request("k-3")).expect_err("over the byte limit");
    assert!(
        matches!(refused, Error::QuotaExceeded { limit: QuotaLimit::Bytes, max, used, .. }
            if max == 2 * PROCESSING_BYTES + 10 && used == 2 * PROCESSING_BYTES),
        "{refused:?}"
    );
    // A completion is kept whatever its size; the scope is then over.
    first.complete(&[b'x'; 1000]).expect("complete");
    assert_eq!(store.scope_usage("t"), Some(usage(2, 2 * PROCESSING_BYTES + 1000)));
    assert!(matches!(store.claim(&request("k-3")), Err(Error::QuotaExceeded { limit: QuotaLimit::Bytes, .. })));
    // Removing the large record brings it back under.
    assert!(store.remove(b"t", b"k-1").expect("remove"));
    assert_eq!(store.scope_usage("t"), Some(usage(1, PROCESSING_BYTES)));
    drop(acquire(&store, &request("k-3")));
    assert_eq!(store.stats().quota_refusals, 2);
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn a_release_or_a_remove_frees_the_slot_and_an_empty_scope_is_forgotten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock, Quota::new().records(1));
    acquire(&store, &request("k-1")).release().expect("release");
    assert_eq!(store.scope_usage("t"), None, "a scope that holds nothing is not kept");
    acquire(&store, &request("k-2")).complete(b"done").expect("complete");
    assert!(store.claim(&request("k-3")).is_err());
    assert!(store.remove(b"t", b"k-2").expect("remove"));
    assert_eq!(store.scope_usage("t"), None);
    acquire(&store, &request("k-3")).fail(b"declined").expect("fail");
    assert_eq!(store.scope_usage("t"), Some(usage(1, PROCESSING_BYTES + 8)));
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn a_scope_quota_overrides_the_default_and_unlimited_exempts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let config = crate::common::config(&clock)
        .quota(Quota::new().records(1))
        .scope_quota("big", Quota::new().records(3))
        .scope_quota("internal", Quota::unlimited());
    let store = Store::open(dir.path(), config).expect("open");
    let claim = |scope: &str, key: &str| store.claim(&ClaimRequest::new(key, fingerprint("b")).scope(scope));
    for key in ["a", "b", "c"] {
        assert!(matches!(claim("big", key), Ok(Claim::Acquired(_))));
        assert!(matches!(claim("internal", key), Ok(Claim::Acquired(_))));
    }
    assert!(matches!(claim("big", "d"), Err(Error::QuotaExceeded { max: 3, .. })));
    assert!(matches!(claim("small", "a"), Ok(Claim::Acquired(_))));
    assert!(matches!(claim("small", "b"), Err(Error::QuotaExceeded { max: 1, .. })));
    assert_eq!(store.scope_usage("big").map(|usage| usage.records), Some(3));
    assert_eq!(store.scope_usage("internal"), None, "an exempt scope is not counted");
}

#[test]
fn without_a_quota_nothing_is_counted_or_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), crate::common::config(&clock)).expect("open");
    for n in 0..50 {
        drop(acquire(&store, &ClaimRequest::new(&format!("k-{n}"), fingerprint("b")).scope("t")));
    }
    assert_eq!(store.scope_usage("t"), None);
    assert_eq!(store.stats().quota_refusals, 0);
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn zero_limits_and_unusable_scopes_are_invalid_config() {
    for config in [
        Config::new().quota(Quota::new().records(0)),
        Config::new().quota(Quota::new().bytes(0)),
        Config::new().scope_quota("t", Quota::new().records(0)),
        Config::new().scope_bytes_max(4).scope_quota("tenant", Quota::new().records(1)),
    ] {
        assert!(matches!(config.validate(), Err(Error::InvalidConfig(_))), "accepted {config:?}");
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(matches!(Store::open(dir.path(), config), Err(Error::InvalidConfig(_))));
    }
    Config::new().quota(Quota::unlimited()).validate().expect("no limit is valid");
}

#[test]
fn extreme_limits_and_odd_scopes_never_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let config = crate::common::config(&clock)
        .quota(Quota::new().records(u64::MAX).bytes(u64::MAX).retry_after(Duration::MAX))
        .scope_quota("", Quota::new().bytes(1))
        .scope_quota([0xff, 0x00], Quota::new().records(1));
    let store = Store::open(dir.path(), config).expect("open");
    // The empty scope can hold nothing: every record is larger than a byte.
    let empty = ClaimRequest::new("k", fingerprint("b"));
    assert!(matches!(store.claim(&empty), Err(Error::QuotaExceeded { limit: QuotaLimit::Bytes, used: 0, max: 1, .. })));
    let binary = [0xff, 0x00];
    drop(acquire(&store, &ClaimRequest::new("k", fingerprint("b")).scope(&binary)));
    assert!(store.claim(&ClaimRequest::new("j", fingerprint("b")).scope(&binary)).is_err());
    for n in 0..20 {
        acquire(&store, &ClaimRequest::new(&format!("k-{n}"), fingerprint("b")).scope("t"))
            .complete(&[7; 100])
            .expect("complete");
    }
    assert_eq!(store.scope_usage("t").map(|usage| usage.records), Some(20));
    assert_eq!(store.scope_usage(vec![b'x'; 100_000]), None, "a scope longer than any is simply absent");
    // Input the claim refuses before any quota is looked at.
    let long_scope = vec![b's'; 300];
    assert!(matches!(
        store.claim(&ClaimRequest::new("k", fingerprint("b")).scope(&long_scope)),
        Err(Error::ScopeTooLong { .. })
    ));
    assert_eq!(store.quota_audit().expect("audit"), None);
}
