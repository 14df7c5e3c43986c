//! Quota counts are rebuilt at open from the index (the scope of each live
//! record read back from its frame): the same after a reopen, without the
//! records that expired while the store was closed, and counted from what
//! is there when a quota is set on an existing store.

#![cfg(feature = "testing")]

use crate::common::{acquire, fingerprint, replay, START_MS};
use idemkv::{
    store::{Quota, QuotaLimit, ScopeUsage},
    Claim, ClaimRequest, Config, Error, ManualClock, Store,
};
use std::path::Path;
use std::time::Duration;

fn config(clock: &ManualClock) -> Config {
    crate::common::config(clock).quota(Quota::new().records(3)).scope_quota("bytes", Quota::new().bytes(900))
}

fn request<'a>(scope: &'a str, key: &'a str, ttl_secs: u64) -> ClaimRequest<'a> {
    ClaimRequest::new(key, fingerprint("body")).scope(scope).ttl(Duration::from_secs(ttl_secs))
}

/// Every scope's usage, by name.
fn usages(store: &Store) -> Vec<(&'static str, Option<ScopeUsage>)> {
    ["a", "b", "bytes"].into_iter().map(|scope| (scope, store.scope_usage(scope))).collect()
}

fn fill(dir: &Path, clock: &ManualClock) -> Vec<(&'static str, Option<ScopeUsage>)> {
    let store = Store::open(dir, config(clock)).expect("open");
    for key in ["k-1", "k-2"] {
        acquire(&store, &request("a", key, 10)).complete(b"short-lived").expect("complete");
    }
    acquire(&store, &request("a", "k-3", 3600)).complete(b"long-lived").expect("complete");
    drop(acquire(&store, &request("b", "held", 3600)));
    acquire(&store, &request("bytes", "big", 3600)).complete(&[b'x'; 700]).expect("complete");
    let before = usages(&store);
    store.close().expect("close");
    before
}

#[test]
fn a_reopen_rebuilds_the_same_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let before = fill(dir.path(), &clock);
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    assert_eq!(usages(&store), before);
    assert_eq!(store.scope_usage("a").map(|usage| usage.records), Some(3));
    assert!(matches!(
        store.claim(&request("a", "k-4", 10)),
        Err(Error::QuotaExceeded { limit: QuotaLimit::Records, .. })
    ));
    assert!(matches!(
        store.claim(&request("bytes", "second", 10)),
        Err(Error::QuotaExceeded { limit: QuotaLimit::Bytes, used, .. }) if used == 104 + 5 + 3 + 700
    ));
    assert_eq!(replay(&store, &request("a", "k-1", 10)).response, b"short-lived");
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn records_that_expired_while_closed_are_not_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    fill(dir.path(), &clock);
    clock.advance(Duration::from_secs(10));
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    assert_eq!(store.scope_usage("a").map(|usage| usage.records), Some(1));
    for key in ["k-4", "k-5"] {
        assert!(matches!(store.claim(&request("a", key, 10)).expect("claim"), Claim::Acquired(_)));
    }
    assert!(store.claim(&request("a", "k-6", 10)).is_err());
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn a_quota_set_on_an_existing_store_counts_what_is_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    {
        let store = crate::common::open(dir.path(), &clock);
        for n in 0..5 {
            acquire(&store, &request("a", &format!("k-{n}"), 3600)).complete(b"done").expect("complete");
        }
        store.close().expect("close");
    }
    let store = Store::open(dir.path(), config(&clock)).expect("reopen with a quota");
    // Over its limit already: nothing is lost, new keys wait.
    assert_eq!(store.scope_usage("a").map(|usage| usage.records), Some(5));
    assert!(matches!(store.claim(&request("a", "k-9", 10)), Err(Error::QuotaExceeded { used: 5, max: 3, .. })));
    assert_eq!(replay(&store, &request("a", "k-0", 3600)).response, b"done");
    // A read-only handle counts too.
    store.close().expect("close");
    let reader = Store::open_read_only(dir.path(), config(&clock)).expect("read-only");
    assert_eq!(reader.scope_usage("a").map(|usage| usage.records), Some(5));
}
