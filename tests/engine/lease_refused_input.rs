//! A finishing call refused for its input hands the lease back: after an
//! oversized `complete`, the same lease can still `fail` (or `release`), and
//! the failure is replayed. Nothing was written by the refused call.
//!
//! Regression test for "Storage integrity" item 9: `Lease::complete(self)`
//! consumed the lease even when it refused the response, so the key stayed
//! Processing until the lease ended.

use crate::common::{acquire, fingerprint, replay, START_MS};
use idemkv::{ClaimRequest, Config, Durability, Error, FinishError, ManualClock, State, Store};
use std::sync::Arc;

fn open(dir: &std::path::Path) -> Store {
    let clock = ManualClock::new(START_MS);
    let config = Config::new().shards(1).durability(Durability::Sync).response_bytes_max(16).clock(Arc::new(clock));
    Store::open(dir, config).expect("open")
}

#[test]
fn an_oversized_complete_hands_the_lease_back_for_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let request = ClaimRequest::new("k", fingerprint("r"));
    let lease = acquire(&store, &request);
    let token = lease.token();
    let written = store.stats().records_written;

    let refused = lease.complete(&[b'x'; 17]).expect_err("over the limit");
    assert!(matches!(refused.error, Error::ResponseTooLarge { len: 17, max: 16 }), "{refused:?}");
    assert_eq!(store.stats().records_written, written, "a refused call wrote something");
    let lease = refused.lease.expect("the lease is handed back");
    assert_eq!(lease.token(), token);

    lease.fail(b"507 too large").expect("fail after the refusal");
    let record = replay(&store, &request);
    assert_eq!((record.state, record.response.as_slice(), record.token), (State::Failed, &b"507 too large"[..], token));
    let stats = store.stats();
    assert_eq!((stats.failures, stats.abandoned_leases, stats.lease_lost), (1, 0, 0));
}

#[test]
fn a_handed_back_lease_can_release_and_counts_as_abandoned_only_if_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let request = ClaimRequest::new("k", fingerprint("r"));
    let FinishError { lease, .. } = acquire(&store, &request).complete(&[0; 100]).expect_err("refused");
    lease.expect("handed back").release().expect("release");
    assert_eq!(store.get(b"", b"k").expect("get"), None);
    assert_eq!(store.stats().abandoned_leases, 0);

    // With `?` the error becomes an `Error` and the lease is dropped.
    let finish = |store: &Store| -> Result<(), Error> {
        acquire(store, &request).fail(&[0; 100])?;
        Ok(())
    };
    assert!(matches!(finish(&store), Err(Error::ResponseTooLarge { .. })));
    assert_eq!(store.stats().abandoned_leases, 1);
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn the_async_calls_hand_the_lease_back_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let request = ClaimRequest::new("k", fingerprint("r"));
    let refused = acquire(&store, &request).complete_async(&[0; 17]).await.expect_err("over the limit");
    assert!(matches!(refused.error, Error::ResponseTooLarge { .. }));
    refused.lease.expect("handed back").complete_async(b"short").await.expect("complete");
    assert_eq!(replay(&store, &request).response, b"short");
}
