//! Guards the on-disk format: a store written by this build's format
//! (version 2) and checked in under `tests/fixtures/format-2` must open,
//! verify clean and answer every record it holds as it was written, so a
//! change that stops reading it fails here. Its damaged copy
//! (`format-2-damaged`, one byte flipped inside a frame of shard 0's sealed
//! segment) must be reported by verify with its file and offset; opened
//! from its hints it answers every other record and refuses the damaged
//! one with that file and offset, never a wrong answer; opened from the
//! log (hints deleted) it is refused.
//!
//! `regenerate` writes both again; run it only when the format version
//! changes (`cargo test --test format_fixtures -- --ignored regenerate`),
//! and keep the old fixtures under their old version's name.

use idemkv::{Claim, ClaimRequest, Config, Durability, Error, Fingerprint, ManualClock, State, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const COMPLETED: u32 = 60;
const FAILED: u32 = 5;
const PROCESSING: u32 = 3;
const RELEASED: u32 = 2;
const REMOVED: u32 = 2;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Small segments, so the fixture has sealed segments with hint files
/// beside an active one; a manual clock, so that its records never expire
/// for the test (TTLs count from the clock's start).
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

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest::new(key.as_bytes(), Fingerprint::of(key.as_bytes())).scope(b"fixture")
}

/// A copy of fixture `name` in a fresh directory (open writes to a store).
fn copy_of(name: &str) -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    crate::common::copy_dir(&fixture(name), copy.path());
    copy
}

#[test]
fn the_format_2_fixture_opens_verifies_and_answers_every_record() {
    let copy = copy_of("format-2");
    let report = idemkv::store::verify(copy.path()).expect("verify");
    assert!(report.is_clean(), "{report:?}");
    assert!(report.segments > u64::from(report.shards), "sealed segments too: {report:?}");
    assert!(report.hints_checked > 0, "hint files too: {report:?}");
    let clock = ManualClock::new(crate::common::START_MS + 3_600_000);
    let store = Store::open(copy.path(), config(&clock)).expect("open the fixture");
    for number in 0..COMPLETED {
        let key = format!("completed-{number}");
        let Claim::Replay(record) = store.claim(&request(&key)).expect("claim") else { panic!("{key}") };
        assert_eq!((record.state, record.response), (State::Completed, format!("response {number}").into_bytes()));
    }
    for number in 0..FAILED {
        let key = format!("failed-{number}");
        let Claim::Replay(record) = store.claim(&request(&key)).expect("claim") else { panic!("{key}") };
        assert_eq!((record.state, record.response), (State::Failed, format!("declined {number}").into_bytes()));
    }
    for number in 0..PROCESSING {
        let key = format!("processing-{number}");
        let record = store.get(b"fixture", key.as_bytes()).expect("get").expect("present");
        assert_eq!(record.state, State::Processing, "{key}");
        let point = record.checkpoint.expect("a checkpoint");
        assert_eq!((point.step.as_str(), point.payload), ("charged", format!("charge {number}").into_bytes()));
    }
    for (prefix, count) in [("released", RELEASED), ("removed", REMOVED)] {
        for number in 0..count {
            let key = format!("{prefix}-{number}");
            assert_eq!(store.get(b"fixture", key.as_bytes()).expect("get"), None, "{key}");
        }
    }
    let census = store.census().expect("census");
    let counts = (census.completed, census.failed, census.processing, census.expired);
    assert_eq!(counts, (u64::from(COMPLETED), u64::from(FAILED), u64::from(PROCESSING), 0), "{census:?}");
}

#[test]
fn the_damaged_fixture_is_reported_and_never_answers_wrong() {
    let copy = copy_of("format-2-damaged");
    let report = idemkv::store::verify(copy.path()).expect("verify");
    assert_eq!(report.damage.len(), 1, "{report:?}");
    let damage = &report.damage[0];
    assert_eq!(damage.file, crate::common::segment_files(copy.path(), 0)[0], "{damage:?}");
    let at = (damage.file.clone(), damage.offset);
    let clock = ManualClock::new(crate::common::START_MS + 3_600_000);
    {
        // From its hints: every record but the damaged one answers.
        let store = Store::open(copy.path(), config(&clock)).expect("open from the hints");
        let mut refused = Vec::new();
        for number in 0..COMPLETED {
            let key = format!("completed-{number}");
            match store.claim(&request(&key)) {
                Ok(Claim::Replay(record)) => assert_eq!(record.response, format!("response {number}").into_bytes()),
                Err(Error::Corruption { file, offset, .. }) => refused.push((key, (file, offset))),
                other => panic!("{key}: {other:?}"),
            }
        }
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].1, at, "{refused:?}");
    }
    crate::common::delete_hints(copy.path());
    match Store::open(copy.path(), config(&clock)) {
        Err(Error::Corruption { file, offset, .. }) => assert_eq!((file, offset), at),
        other => panic!("open from the log must refuse the damaged store: {other:?}"),
    }
}

/// Repair of the damaged copy drops the one damaged record, names it, keeps
/// every other record, and leaves a store that verifies clean and a second
/// repair leaves alone. The dropped completion's key falls back to the
/// record before it (its claim), so a retry is told "in progress", not run.
#[test]
fn repair_of_the_damaged_fixture_drops_only_the_damaged_record() {
    let copy = copy_of("format-2-damaged");
    let report = idemkv::store::repair(copy.path()).expect("repair");
    assert_eq!(report.records_dropped.len(), 1, "{report:?}");
    let dropped = &report.records_dropped[0];
    let key = String::from_utf8(dropped.key.clone()).expect("a key of the fixture");
    assert!(key.starts_with("completed-") && dropped.scope == b"fixture", "{dropped:?}");
    assert!(idemkv::store::verify(copy.path()).expect("verify").is_clean());
    assert!(idemkv::store::repair(copy.path()).expect("second repair").did_nothing());
    let clock = ManualClock::new(crate::common::START_MS + 3_600_000);
    let store = Store::open(copy.path(), config(&clock)).expect("open after repair");
    for number in 0..COMPLETED {
        let other = format!("completed-{number}");
        let claim = store.claim(&request(&other)).expect("claim");
        match claim {
            Claim::Replay(record) => assert_eq!(record.response, format!("response {number}").into_bytes()),
            // The dropped completion's key is back to its claim's record,
            // Processing under its (long) lease: in progress, never run.
            Claim::InProgress { .. } if other == key => {}
            other_answer => panic!("{other}: {other_answer:?}"),
        }
    }
}

/// Writes both fixtures again (see the module docs).
#[test]
#[ignore = "writes the checked-in fixtures; run only for a new format version"]
fn regenerate() {
    let clean = fixture("format-2");
    let damaged = fixture("format-2-damaged");
    for dir in [&clean, &damaged] {
        let _absent = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let clock = ManualClock::new(crate::common::START_MS);
    let store = Store::open(&clean, config(&clock)).expect("create");
    write_records(&store, &clock);
    store.close().expect("close");
    std::fs::remove_file(clean.join(idemkv::store::LOCK_FILE_NAME)).expect("no lock file in the fixture");
    crate::common::copy_dir(&clean, &damaged);
    let sealed = crate::common::segment_files(&damaged, 0).remove(0);
    let mut bytes = std::fs::read(&sealed).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&sealed, bytes).expect("write");
}

fn write_records(store: &Store, clock: &ManualClock) {
    for number in 0..COMPLETED {
        let lease = acquire(store, &format!("completed-{number}"));
        lease.complete(format!("response {number}").as_bytes()).expect("complete");
        clock.advance(Duration::from_millis(10));
    }
    for number in 0..FAILED {
        let lease = acquire(store, &format!("failed-{number}"));
        lease.fail(format!("declined {number}").as_bytes()).expect("fail");
    }
    for number in 0..PROCESSING {
        let mut lease = acquire(store, &format!("processing-{number}"));
        lease.checkpoint("charged", format!("charge {number}").as_bytes()).expect("checkpoint");
        lease.renew(Duration::from_secs(30 * 24 * 3600)).expect("renew");
        let _token = lease.into_token();
    }
    for number in 0..RELEASED {
        acquire(store, &format!("released-{number}")).release().expect("release");
    }
    for number in 0..REMOVED {
        let key = format!("removed-{number}");
        acquire(store, &key).complete(b"gone").expect("complete");
        assert!(store.remove(b"fixture", key.as_bytes()).expect("remove"));
    }
}

fn acquire(store: &Store, key: &str) -> idemkv::Lease {
    match store.claim(&request(key)).expect("claim") {
        Claim::Acquired(lease) => lease,
        other => panic!("{key}: {other:?}"),
    }
}
