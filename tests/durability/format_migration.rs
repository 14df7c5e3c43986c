//! Guards the migration from format 2 to format 3 (keyspaces): a store
//! written by the last build of format 2 (`tests/fixtures/format-2-keyspaces`,
//! made by that build) holds idemkv's own records the way format 2 kept
//! them — a hold, a version, an inbox entry, a dead letter, a re-drive mark
//! and relay progress under `idemkv.hold/`-style scopes — beside a
//! caller's records and a near miss of a prefix. It verifies clean as it
//! is; a read-only open shows it as it is (format 2 has no keyspaces); the
//! first writable open moves each record of idemkv's own to its keyspace
//! with its state, answer and times, leaves every caller's record (the near
//! miss too) where it was, and writes the manifest of format 3. Opened
//! again, nothing moves twice; it still verifies clean.

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Keyspace, ManualClock, State, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(2)
        .segment_bytes(8192)
        .response_bytes_max(1024)
        .durability(Durability::Sync)
        .default_lease(Duration::from_secs(30 * 24 * 3600))
        .default_ttl(Duration::from_secs(30 * 24 * 3600))
        .clock(Arc::new(clock.clone()))
}

/// One of idemkv's own records in the fixture: keyspace, scope, key, what
/// it answers (`None`: Processing).
type Own = (Keyspace, &'static [u8], &'static [u8], Option<&'static [u8]>);

/// idemkv's own records in the fixture.
const OWN: [Own; 6] = [
    (Keyspace::Hold, b"acct-7", b"order-1", None),
    (Keyspace::Version, b"acct-7", b"order-1", Some(b"IDKVVER1\x03\x00\x00\x00\x00\x00\x00\x00")),
    (Keyspace::Inbox, b"ledger", b"msg-1", Some(b"P")),
    (Keyspace::DeadLetter, b"ledger", b"msg-2", Some(b"letter of msg-2")),
    (Keyspace::Redrive, b"ledger", b"msg-3", Some(b"letter of msg-3")),
    (Keyspace::Relay, b"shop", b"order-9", Some(b"C progress of order-9")),
];

fn legacy_scope(keyspace: Keyspace, scope: &[u8]) -> Vec<u8> {
    let prefix: &[u8] = match keyspace {
        Keyspace::Hold => b"idemkv.hold/",
        Keyspace::Version => b"idemkv.version/",
        Keyspace::Inbox => b"idemkv.inbox/",
        Keyspace::DeadLetter => b"idemkv.dead/",
        Keyspace::Redrive => b"idemkv.redrive/",
        Keyspace::Relay => b"idemkv.relay/",
        _ => b"",
    };
    [prefix, scope].concat()
}

fn copy() -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-2-keyspaces");
    crate::common::copy_dir(&fixture, copy.path());
    copy
}

fn manifest_version(dir: &Path) -> u8 {
    std::fs::read(dir.join("MANIFEST")).expect("manifest")[8]
}

fn assert_callers_records(store: &Store) {
    for number in 0..60 {
        let key = format!("completed-{number}");
        let request = ClaimRequest::new(key.as_bytes(), Fingerprint::of(key.as_bytes())).scope(b"fixture");
        let Claim::Replay(record) = store.claim(&request).expect("claim") else { panic!("{key}") };
        assert_eq!((record.keyspace, record.response), (Keyspace::Caller, format!("response {number}").into_bytes()));
    }
    let near = store.get(b"idemkv.hol/near", b"miss").expect("get").expect("the near miss stays the caller's");
    assert_eq!((near.keyspace, near.response), (Keyspace::Caller, b"a caller's".to_vec()));
}

#[test]
fn a_read_only_open_of_format_2_shows_it_as_it_is() {
    let copy = copy();
    assert!(idemkv::store::verify(copy.path()).expect("verify").is_clean());
    let clock = ManualClock::new(crate::common::START_MS + 3_600_000);
    let store = Store::open_read_only(copy.path(), config(&clock)).expect("open read-only");
    for (keyspace, scope, key, _) in OWN {
        let legacy = store.get(&legacy_scope(keyspace, scope), key).expect("get");
        assert_eq!(legacy.map(|record| record.keyspace), Some(Keyspace::Caller), "{keyspace}");
        assert_eq!(store.get_in(keyspace, scope, key).expect("get_in"), None, "{keyspace}");
    }
    drop(store);
    assert_eq!(manifest_version(copy.path()), 2, "a read-only open changes nothing");
}

#[test]
fn the_first_writable_open_moves_each_of_idemkvs_records_to_its_keyspace() {
    let copy = copy();
    let clock = ManualClock::new(crate::common::START_MS + 3_600_000);
    let store = Store::open(copy.path(), config(&clock)).expect("open and migrate");
    assert_eq!(manifest_version(copy.path()), 3);
    for (keyspace, scope, key, answer) in OWN {
        let record = store.get_in(keyspace, scope, key).expect("get_in").unwrap_or_else(|| panic!("{keyspace} moved"));
        assert_eq!(record.keyspace, keyspace);
        assert_eq!(record.fingerprint, Fingerprint::of(key), "{keyspace}");
        match answer {
            Some(answer) => assert_eq!((record.state, record.response.as_slice()), (State::Completed, answer)),
            None => assert_eq!(record.state, State::Processing, "{keyspace}"),
        }
        assert_eq!(store.get(&legacy_scope(keyspace, scope), key).expect("get"), None, "{keyspace} left the caller's");
    }
    assert_callers_records(&store);
    let census = store.census().expect("census");
    assert_eq!((census.completed, census.processing), (60 + 5 + 1, 1), "{census:?}");
    store.close().expect("close");

    // Again: nothing moves twice, every record answers as before.
    let store = Store::open(copy.path(), config(&clock)).expect("open again");
    for (keyspace, scope, key, _) in OWN {
        assert!(store.get_in(keyspace, scope, key).expect("get_in").is_some(), "{keyspace}");
    }
    assert_callers_records(&store);
    store.close().expect("close");
    let report = idemkv::store::verify(copy.path()).expect("verify");
    assert!(report.is_clean(), "{report:?}");
}

/// A hold moved by the migration is a lease like any: its holder is gone,
/// so once its lease ends the next claim takes it over, recovered.
#[test]
fn a_moved_hold_is_taken_over_after_its_lease() {
    let copy = copy();
    let clock = ManualClock::new(crate::common::START_MS + 3_600_000);
    let store = Store::open(copy.path(), config(&clock)).expect("open and migrate");
    let request = ClaimRequest::new(b"order-1", Fingerprint::of(b"order-1")).scope(b"acct-7").keyspace(Keyspace::Hold);
    assert!(matches!(store.claim(&request).expect("claim"), Claim::InProgress { .. }));
    clock.advance(Duration::from_secs(31 * 24 * 3600));
    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("taken over") };
    assert!(lease.recovered());
    assert_eq!(lease.keyspace(), Keyspace::Hold);
    lease.release().expect("release");
}
