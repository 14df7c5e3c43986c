//! Keyspaces on the embedded store: a record of idemkv's own and a
//! caller's with the same scope and key are two records, through claims,
//! reads, scans, removals, iteration, reopening (from hints and from the
//! log alone) and compaction; a tenant's quota counts its own records
//! only, never the records idemkv keeps under its name.

use crate::common::{config, fingerprint, START_MS};
use idemkv::{store::Quota, Claim, ClaimRequest, Error, Keyspace, ManualClock, Store};
use std::collections::BTreeSet;

fn request(keyspace: Keyspace) -> ClaimRequest<'static> {
    ClaimRequest::new("acct-7", fingerprint("write")).scope("tenant").keyspace(keyspace)
}

/// Each keyspace's record of `("tenant", "acct-7")`, completed with the
/// keyspace's name.
fn fill(store: &Store) {
    for keyspace in Keyspace::ALL {
        let Claim::Acquired(lease) = store.claim(&request(keyspace)).expect("claim") else { panic!("{keyspace}") };
        assert_eq!(lease.keyspace(), keyspace);
        lease.complete(keyspace.name().as_bytes()).expect("complete");
    }
}

fn assert_apart(store: &Store) {
    for keyspace in Keyspace::ALL {
        let record = store.get_in(keyspace, b"tenant", b"acct-7").expect("get_in").expect("present");
        assert_eq!((record.keyspace, record.response.as_slice()), (keyspace, keyspace.name().as_bytes()));
        let Claim::Replay(replayed) = store.claim(&request(keyspace)).expect("claim") else { panic!("{keyspace}") };
        assert_eq!(replayed.response, keyspace.name().as_bytes());
        let page = store.scan_in(keyspace, b"tenant", None, 10).expect("scan_in");
        assert_eq!(page.iter().map(|record| record.keyspace).collect::<Vec<_>>(), [keyspace]);
    }
    let listed: BTreeSet<Keyspace> = store.iter().map(|record| record.expect("record").keyspace).collect();
    assert_eq!(listed, Keyspace::ALL.into_iter().collect(), "iteration names every keyspace");
}

#[test]
fn each_keyspace_holds_its_own_record_of_one_scope_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    fill(&store);
    assert_apart(&store);
    assert_eq!(store.stats().live_records, Keyspace::ALL.len() as u64);
    // Removing the caller's leaves idemkv's own.
    assert!(store.remove(b"tenant", b"acct-7").expect("remove"));
    assert!(store.get_in(Keyspace::Hold, b"tenant", b"acct-7").expect("get_in").is_some());
    assert!(store.remove_in(Keyspace::Hold, b"tenant", b"acct-7").expect("remove_in"));
    assert_eq!(store.get_in(Keyspace::Hold, b"tenant", b"acct-7").expect("get_in"), None);
    assert!(store.get_in(Keyspace::Version, b"tenant", b"acct-7").expect("get_in").is_some());
}

#[test]
fn keyspaces_survive_reopening_from_hints_and_from_the_log_and_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).segment_bytes(4096).response_bytes_max(1024)).expect("open");
    fill(&store);
    for number in 0..100 {
        let key = format!("filler-{number}");
        let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, fingerprint(&key))).expect("claim") else {
            panic!("{key}")
        };
        lease.complete(&[0; 64]).expect("complete");
    }
    store.compact().expect("compact");
    assert_apart(&store);
    store.close().expect("close");
    let store = Store::open(dir.path(), config(&clock)).expect("reopen from the hints");
    assert_apart(&store);
    store.close().expect("close");
    assert!(crate::common::delete_hints(dir.path()) > 0);
    let store = Store::open(dir.path(), config(&clock)).expect("reopen from the log");
    assert_apart(&store);
    drop(store);
    assert!(idemkv::store::verify(dir.path()).expect("verify").is_clean());
}

#[test]
fn a_tenants_quota_counts_its_own_records_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).quota(Quota::new().records(1))).expect("open");
    for keyspace in Keyspace::ALL {
        let Claim::Acquired(lease) = store.claim(&request(keyspace)).expect("claim") else { panic!("{keyspace}") };
        lease.complete(b"done").expect("complete");
    }
    assert_eq!(store.scope_usage("tenant").map(|usage| usage.records), Some(1));
    let another = ClaimRequest::new("acct-8", fingerprint("write")).scope("tenant");
    assert!(matches!(store.claim(&another), Err(Error::QuotaExceeded { .. })));
    let held = ClaimRequest::new("acct-8", fingerprint("write")).scope("tenant").keyspace(Keyspace::Hold);
    assert!(matches!(store.claim(&held).expect("claim"), Claim::Acquired(_)), "idemkv's own records are not refused");
    drop(store);
    // Counted again at open: the same.
    let store = Store::open(dir.path(), config(&clock).quota(Quota::new().records(1))).expect("reopen");
    assert_eq!(store.scope_usage("tenant").map(|usage| usage.records), Some(1));
}
