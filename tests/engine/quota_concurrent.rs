//! A scope's keys are spread over every shard, so its quota is counted
//! store-wide: threads claiming new keys of one scope at once never take
//! more slots than it has, and slots freed by releases are reused without
//! ever going over.

#![cfg(feature = "testing")]

use crate::common::{fingerprint, START_MS};
use idemkv::{store::Quota, Claim, ClaimRequest, Error, ManualClock, Store};
use std::sync::atomic::{AtomicU64, Ordering};

const THREADS: u64 = 8;
const LIMIT: u64 = 40;

fn open(dir: &std::path::Path, clock: &ManualClock) -> Store {
    Store::open(dir, crate::common::config(clock).shards(8).quota(Quota::new().records(LIMIT))).expect("open")
}

#[test]
fn concurrent_claims_never_take_more_than_the_last_slot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let acquired = AtomicU64::new(0);
    let refused = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (store, acquired, refused) = (&store, &acquired, &refused);
            scope.spawn(move || {
                for n in 0..50 {
                    let key = format!("t{thread}-k{n}");
                    match store.claim(&ClaimRequest::new(&key, fingerprint("b")).scope("tenant")) {
                        Ok(Claim::Acquired(lease)) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                            lease.complete(b"done").expect("complete");
                        }
                        Err(Error::QuotaExceeded { .. }) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("{other:?}"),
                    }
                }
            });
        }
    });
    assert_eq!(acquired.load(Ordering::Relaxed), LIMIT);
    assert_eq!(refused.load(Ordering::Relaxed), THREADS * 50 - LIMIT);
    assert_eq!(store.stats().quota_refusals, THREADS * 50 - LIMIT);
    assert_eq!(store.scope_usage("tenant").map(|usage| usage.records), Some(LIMIT));
    assert_eq!(store.quota_audit().expect("audit"), None);
}

#[test]
fn slots_freed_by_releases_are_reused_without_going_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    // Leases held now, counted after the store counted them and before
    // they are given back: never more than the store's own count.
    let held = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    let acquired = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (store, held, most, acquired) = (&store, &held, &most, &acquired);
            scope.spawn(move || {
                for n in 0..300 {
                    let key = format!("t{thread}-k{n}");
                    match store.claim(&ClaimRequest::new(&key, fingerprint("b")).scope("tenant")) {
                        Ok(Claim::Acquired(lease)) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                            most.fetch_max(held.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                            std::thread::yield_now();
                            held.fetch_sub(1, Ordering::SeqCst);
                            lease.release().expect("release");
                        }
                        Err(Error::QuotaExceeded { .. }) => std::thread::yield_now(),
                        other => panic!("{other:?}"),
                    }
                }
            });
        }
    });
    assert!(most.load(Ordering::SeqCst) <= LIMIT, "{} held at once", most.load(Ordering::SeqCst));
    assert!(acquired.load(Ordering::Relaxed) > LIMIT, "released slots were reused");
    assert_eq!(store.scope_usage("tenant"), None, "everything released");
    assert_eq!(store.quota_audit().expect("audit"), None);
}
