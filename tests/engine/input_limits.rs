//! Every bad input of DESIGN §6 gets a typed error and changes nothing.

use crate::common::{acquire, config, fingerprint, open, START_MS};
use idemkv::{ClaimRequest, Config, Error, LeaseToken, ManualClock, Store};
use std::time::Duration;

type Expected = fn(&Error) -> bool;

fn unchanged(store: &Store, before: u64) {
    assert_eq!(store.stats().records_written, before, "a refused call wrote a record");
}

#[test]
fn bad_keys_scopes_and_durations_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let fp = fingerprint("r");
    let long_key = vec![b'k'; 256];
    let long_scope = vec![b's'; 256];
    let cases: Vec<(ClaimRequest<'_>, Expected)> = vec![
        (ClaimRequest::new("", fp), |e| matches!(e, Error::KeyEmpty)),
        (ClaimRequest::new(&long_key, fp), |e| matches!(e, Error::KeyTooLong { len: 256, max: 255 })),
        (ClaimRequest::new("k", fp).scope(&long_scope), |e| matches!(e, Error::ScopeTooLong { len: 256, max: 255 })),
        (ClaimRequest::new("k", fp).lease(Duration::ZERO), |e| {
            matches!(e, Error::InvalidDuration { what: "lease", .. })
        }),
        (ClaimRequest::new("k", fp).ttl(Duration::ZERO), |e| matches!(e, Error::InvalidDuration { what: "ttl", .. })),
        (ClaimRequest::new("k", fp).ttl(Duration::from_secs(400 * 24 * 3600)), |e| {
            matches!(e, Error::InvalidDuration { what: "ttl", .. })
        }),
    ];
    for (request, expected) in &cases {
        let error = store.claim(request).expect_err("bad request accepted");
        assert!(expected(&error), "{request:?} gave {error:?}");
        unchanged(&store, 0);
    }
    // The longest legal key and scope work.
    let key = vec![b'k'; 255];
    let lease = acquire(&store, &ClaimRequest::new(&key, fp).scope(&long_scope[..255]));
    lease.complete(b"ok").expect("complete");
    assert!(matches!(store.get(b"", b""), Err(Error::KeyEmpty)));
    assert!(matches!(store.remove(&long_scope, b"k"), Err(Error::ScopeTooLong { .. })));
}

#[test]
fn oversized_response_is_refused_and_the_lease_stays_usable_by_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).response_bytes_max(16)).expect("open");
    let request = ClaimRequest::new("k", fingerprint("r"));
    let token = acquire(&store, &request).into_token();
    let before = store.stats().records_written;
    let error = store.complete(&token, &[0u8; 17]).expect_err("too large");
    assert!(matches!(error, Error::ResponseTooLarge { len: 17, max: 16 }), "{error:?}");
    assert!(matches!(store.fail(&token, &[0u8; 17]), Err(Error::ResponseTooLarge { .. })));
    unchanged(&store, before);
    store.complete(&token, &[7u8; 16]).expect("the largest response fits");
    let bad_token = LeaseToken { key: Vec::new(), ..token };
    assert!(matches!(store.release(&bad_token), Err(Error::KeyEmpty)));
}

#[test]
fn invalid_configs_are_refused_before_touching_the_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("store");
    for config in
        [Config::new().shards(6), Config::new().default_lease(Duration::ZERO), Config::new().segment_bytes(10)]
    {
        assert!(matches!(Store::open(&target, config), Err(Error::InvalidConfig(_))));
    }
    assert!(!target.exists());
}

#[test]
fn a_directory_that_is_not_a_store_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), b"mine").expect("write");
    let error = Store::open(dir.path(), Config::new()).expect_err("foreign directory");
    assert!(matches!(error, Error::NotAStore { .. }), "{error:?}");
    let names: Vec<_> =
        std::fs::read_dir(dir.path()).expect("ls").map(|entry| entry.expect("entry").file_name()).collect();
    assert_eq!(names, vec!["notes.txt"]);
    let file = dir.path().join("notes.txt");
    assert!(Store::open(&file, Config::new()).is_err(), "a file is not a directory");
}

#[test]
fn a_second_open_of_a_live_directory_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new()).expect("open");
    let error = Store::open(dir.path(), Config::new()).expect_err("second open");
    let pid = std::process::id();
    assert!(matches!(error, Error::Locked { holder_pid: Some(holder), .. } if holder == pid), "{error:?}");
    assert!(error.to_string().contains(&format!("process {pid}")), "{error}");
    store.close().expect("close");
    Store::open(dir.path(), Config::new()).expect("open after close");
}

#[test]
fn another_shard_count_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    Store::open(dir.path(), Config::new().shards(4)).expect("open").close().expect("close");
    let error = Store::open(dir.path(), Config::new().shards(8)).expect_err("mismatch");
    assert!(matches!(error, Error::ShardCountMismatch { on_disk: 4, configured: 8 }), "{error:?}");
    Store::open(dir.path(), Config::new().shards(4)).expect("reopen with the same count");
}

#[test]
fn a_newer_format_version_is_refused_with_its_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    Store::open(dir.path(), Config::new().shards(1)).expect("open").close().expect("close");
    let manifest = dir.path().join("MANIFEST");
    let mut bytes = std::fs::read(&manifest).expect("read");
    bytes[8] = 9;
    let crc = crc32fast::hash(&bytes[..32]);
    bytes[32..36].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&manifest, &bytes).expect("write");
    let error = Store::open(dir.path(), Config::new().shards(1)).expect_err("newer version");
    assert!(matches!(error, Error::UnsupportedFormatVersion { found: 9, supported: 3, .. }), "{error:?}");
}

#[test]
fn operations_after_close_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = open(dir.path(), &clock);
    let clone = store.clone();
    store.close().expect("close");
    let claim = clone.claim(&ClaimRequest::new("k", fingerprint("r")));
    assert!(matches!(claim, Err(Error::Closed)), "{claim:?}");
    assert!(matches!(clone.get(b"", b"k"), Err(Error::Closed)));
}
