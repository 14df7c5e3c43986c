//! `repair` (never automatic) drops only what cannot be read — a damaged
//! frame, a missing segment — keeps every whole record around it, lists
//! exactly what it dropped, and leaves a store that opens, verifies clean
//! and never hands out a token again.

use crate::common::{acquire, fingerprint, replay, START_MS};
use idemkv::{
    store::{repair, verify},
    Claim, ClaimRequest, Config, Durability, Error, ManualClock, Store,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(None)
        .clock(Arc::new(clock.clone()))
}

/// A closed one-shard store of 60 completed keys over several segments;
/// returns it and the highest token handed out.
fn filled_store() -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let mut max_token = 0;
    for index in 0..60 {
        let key = format!("key-{index:02}");
        let lease = acquire(&store, &ClaimRequest::new(&key, fingerprint(&key)));
        max_token = max_token.max(lease.token());
        lease.complete(&[b'r'; 100]).expect("complete");
    }
    store.close().expect("close");
    (dir, max_token)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    crate::common::segment_files(dir, 0)
}

/// After a repair: the store opens, verifies clean, serves `key-00`, and a
/// new claim's token is above every token handed out before.
fn usable_after(dir: &Path, max_token: u64) {
    let report = verify(dir).expect("verify");
    assert!(report.is_clean(), "{:?}", report.damage);
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir, config(&clock)).expect("a repaired store opens");
    assert_eq!(replay(&store, &ClaimRequest::new("key-00", fingerprint("key-00"))).response, [b'r'; 100]);
    let lease = acquire(&store, &ClaimRequest::new("new-key", fingerprint("new-key")));
    assert!(lease.token() > max_token, "token {} handed out again (max before {max_token})", lease.token());
    lease.complete(b"after repair").expect("complete");
}

/// Every key but `dropped` replays its response.
fn kept_but(dir: &Path, dropped: &[Vec<u8>]) {
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir, config(&clock)).expect("open");
    for index in 0..60 {
        let key = format!("key-{index:02}");
        if dropped.contains(&key.clone().into_bytes()) {
            continue;
        }
        let record = store.get(b"", key.as_bytes()).expect("get").unwrap_or_else(|| panic!("{key} was lost"));
        assert_eq!(record.response, [b'r'; 100], "{key}");
    }
}

#[test]
fn damage_in_a_sealed_segment_drops_that_frame_alone_and_keeps_what_came_after() {
    let (dir, max_token) = filled_store();
    let all = segments(dir.path());
    assert!(all.len() >= 3, "expected several segments, got {}", all.len());
    let damaged = &all[1];
    let mut bytes = std::fs::read(damaged).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(damaged, bytes).expect("write");
    let clock = ManualClock::new(START_MS);
    // Verify reads the log; open reads only what no hint covers, so it
    // refuses the damage once the hints are gone.
    assert!(!verify(dir.path()).expect("verify").is_clean());
    crate::common::delete_hints(dir.path());
    assert!(matches!(Store::open(dir.path(), config(&clock)), Err(Error::Corruption { .. })));

    let report = repair(dir.path()).expect("repair");
    assert!(report.unreadable_bytes > 0);
    // The damaged frame, and nothing else, is dropped and named.
    assert_eq!(report.records_dropped.len(), 1, "{report:?}");
    let record = &report.records_dropped[0];
    assert_eq!(record.file, *damaged);
    assert!(record.key.starts_with(b"key-"), "{record:?}");
    usable_after(dir.path(), max_token);
    let lost: Vec<Vec<u8>> =
        report.records_dropped.iter().filter(|record| !record.superseded).map(|record| record.key.clone()).collect();
    kept_but(dir.path(), &lost);
}

#[test]
fn a_missing_middle_segment_is_replaced_and_the_segments_after_it_are_kept() {
    let (dir, max_token) = filled_store();
    let all = segments(dir.path());
    std::fs::remove_file(&all[1]).expect("delete");
    let report = repair(dir.path()).expect("repair");
    assert!(report.actions.iter().any(|action| action.contains("missing")), "{:?}", report.actions);
    // Its hint is left: the records it held are listed from it.
    assert!(!report.records_dropped.is_empty(), "{report:?}");
    assert!(report.records_dropped.iter().all(|record| record.file == all[1]), "{report:?}");
    usable_after(dir.path(), max_token);
    // Every key that lost its answer is named among the dropped records,
    // or is one of those whose key no readable copy is left of.
    let named: Vec<&[u8]> = report.records_dropped.iter().map(|record| record.key.as_slice()).collect();
    let unnamed = named.iter().filter(|key| key.is_empty()).count();
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let (mut lost, mut lost_unnamed) = (0, 0);
    for index in 0..60 {
        let key = format!("key-{index:02}");
        let record = store.get(b"", key.as_bytes()).expect("get");
        if record.is_some_and(|record| record.response == [b'r'; 100]) {
            continue;
        }
        lost += 1;
        lost_unnamed += usize::from(!named.contains(&key.as_bytes()));
    }
    assert!(lost > 0 && lost <= report.records_dropped.len(), "{lost} keys lost: {report:?}");
    assert!(lost_unnamed <= unnamed, "{lost_unnamed} keys lost without being named: {report:?}");
    // What came after the gap is there.
    assert!(store.get(b"", b"key-59").expect("get").is_some_and(|record| record.response == [b'r'; 100]));
    store.close().expect("close");
}

#[test]
fn a_clean_store_is_left_as_it_is() {
    let (dir, max_token) = filled_store();
    let before = segments(dir.path());
    let report = repair(dir.path()).expect("repair");
    assert!(report.dropped_nothing(), "{report:?}");
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    assert_eq!(segments(dir.path()), before);
    usable_after(dir.path(), max_token);
}

#[test]
fn repair_refuses_a_store_that_is_open() {
    let (dir, _) = filled_store();
    let clock = ManualClock::new(START_MS);
    let open = Store::open(dir.path(), config(&clock)).expect("open");
    assert!(matches!(repair(dir.path()), Err(Error::Locked { .. })));
    let claim = ClaimRequest::new("key-01", fingerprint("key-01"));
    assert!(matches!(open.claim(&claim).expect("claim"), Claim::Replay(_)));
}
