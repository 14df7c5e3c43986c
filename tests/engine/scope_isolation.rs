//! Equal keys in different scopes never meet.

use crate::common::{acquire, fingerprint, open, replay, START_MS};
use idemkv::{Claim, ClaimRequest, ManualClock};

#[test]
fn same_key_in_three_scopes_is_three_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    for scope in ["", "tenant-a", "tenant-b"] {
        let request = ClaimRequest::new("same-key", fingerprint(scope)).scope(scope);
        acquire(&store, &request).complete(scope.as_bytes()).expect("complete");
    }
    for scope in ["", "tenant-a", "tenant-b"] {
        let request = ClaimRequest::new("same-key", fingerprint(scope)).scope(scope);
        assert_eq!(replay(&store, &request).response, scope.as_bytes());
    }
    // A fingerprint from another scope is a mismatch, never a replay.
    let foreign = ClaimRequest::new("same-key", fingerprint("tenant-a")).scope("tenant-b");
    assert!(matches!(store.claim(&foreign).expect("claim"), Claim::Mismatch));
    assert!(store.remove(b"tenant-a", b"same-key").expect("remove"));
    assert_eq!(store.get(b"tenant-a", b"same-key").expect("get"), None);
    assert!(store.get(b"tenant-b", b"same-key").expect("get").is_some());
}

#[test]
fn scope_and_key_boundary_is_unambiguous() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let first = ClaimRequest::new("c", fingerprint("x")).scope("ab");
    let second = ClaimRequest::new("bc", fingerprint("x")).scope("a");
    acquire(&store, &first).complete(b"first").expect("complete");
    acquire(&store, &second).complete(b"second").expect("complete");
    assert_eq!(replay(&store, &first).response, b"first");
    assert_eq!(replay(&store, &second).response, b"second");
}
