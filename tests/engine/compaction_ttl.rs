//! Compaction with the manual clock: expired records leave the disk and the
//! index, live ones stay byte-identical, and removed or released keys never
//! come back, across compaction and reopen.

use crate::common::{acquire, fingerprint, replay, START_MS};
use idemkv::{Claim, ClaimRequest, Config, Durability, ManualClock, State, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(1024)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
}

fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("shard-0000"))
        .expect("ls")
        .map(|entry| entry.expect("entry").metadata().expect("stat").len())
        .sum()
}

fn segment_count(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("shard-0000")).expect("ls").count()
}

/// Passes are bounded; run them until one finds nothing to do.
fn compact_fully(store: &Store) -> idemkv::store::CompactionReport {
    let mut total = idemkv::store::CompactionReport::default();
    for _ in 0..100 {
        let report = store.compact().expect("compact");
        if report.bytes_reclaimed == 0 {
            return total;
        }
        total.segments_dropped += report.segments_dropped;
        total.segments_rewritten += report.segments_rewritten;
        total.bytes_reclaimed += report.bytes_reclaimed;
        total.records_dropped += report.records_dropped;
    }
    panic!("compaction never settled");
}

fn complete(store: &Store, key: &str, ttl: Duration, body: &[u8]) {
    acquire(store, &ClaimRequest::new(key, fingerprint(key)).ttl(ttl)).complete(body).expect("complete");
}

#[test]
fn expired_records_leave_the_disk_and_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    for index in 0..300 {
        complete(&store, &format!("short-{index}"), Duration::from_secs(10), &[b'x'; 200]);
    }
    let before = disk_bytes(dir.path());
    assert!(segment_count(dir.path()) > 10);
    clock.advance(Duration::from_secs(9));
    let report = store.compact().expect("compact");
    assert_eq!(report.bytes_reclaimed, 0, "nothing has expired yet");
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.get(b"", b"short-0").expect("get"), None, "absent for reads at expiry");
    let first = store.compact().expect("compact");
    assert!(first.segments_dropped > 0 && first.segments_dropped <= 16, "a pass is bounded: {first:?}");
    let rest = compact_fully(&store);
    let report = first;
    assert!(report.segments_dropped + rest.segments_dropped > 20, "{report:?} {rest:?}");
    assert!(report.records_dropped + rest.records_dropped >= 560, "{report:?} {rest:?}");
    let after = disk_bytes(dir.path());
    assert!(after < before / 10, "disk went from {before} to {after} bytes");
    // Only records of the active segment can still be indexed.
    assert!(store.stats().live_records < 30, "{:?}", store.stats());
    assert_eq!(store.stats().compaction_bytes_reclaimed, report.bytes_reclaimed + rest.bytes_reclaimed);
    drop(store);
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    assert_eq!(store.iter().count(), 0);
}

#[test]
fn live_records_survive_rewrites_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let long = Duration::from_secs(3600);
    for index in 0..200 {
        let body = format!("long-{index}-").repeat(index % 9 + 1);
        complete(&store, &format!("long-{index}"), long, body.as_bytes());
        for short in 0..3 {
            complete(&store, &format!("short-{index}-{short}"), Duration::from_secs(5), &[b's'; 150]);
        }
    }
    let processing = acquire(&store, &ClaimRequest::new("held", fingerprint("held")).lease(Duration::from_secs(1)));
    for index in 0..40 {
        complete(&store, &format!("filler-{index}"), Duration::from_secs(5), &[b'f'; 150]);
    }
    clock.advance(Duration::from_secs(6));
    let before = disk_bytes(dir.path());
    let report = compact_fully(&store);
    assert!(report.segments_rewritten > 10, "{report:?}");
    let after = disk_bytes(dir.path());
    assert!(after < before / 2, "disk went from {before} to {after} bytes");
    let check = |store: &Store| {
        for index in 0..200 {
            let key = format!("long-{index}");
            let body = format!("long-{index}-").repeat(index % 9 + 1);
            assert_eq!(replay(store, &ClaimRequest::new(&key, fingerprint(&key))).response, body.as_bytes());
        }
        // A Processing record stays, even with its lease expired.
        let held = store.get(b"", b"held").expect("get").expect("held stays");
        assert_eq!(held.state, State::Processing);
    };
    check(&store);
    let token = processing.into_token();
    // A second pass finds nothing more to do.
    assert_eq!(store.compact().expect("compact").bytes_reclaimed, 0);
    drop(store);
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    check(&store);
    store.complete(&token, b"late").expect("the holder still finishes after compaction and reopen");
}

/// Guards the shadow rule: a tombstone outside the oldest segment must stay
/// while an older record of its key may exist in an older segment.
#[test]
fn removed_and_released_keys_never_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let long = Duration::from_secs(3600);
    // Segment 1: the two victims' first records, then live anchors that keep
    // it above the rewrite threshold, so those first records stay on disk.
    complete(&store, "removed", long, b"must not return");
    let released =
        acquire(&store, &ClaimRequest::new("released", fingerprint("released")).lease(Duration::from_secs(3600)));
    for index in 0..9 {
        complete(&store, &format!("anchor-{index}"), long, &[b'a'; 150]);
    }
    for index in 0..60 {
        complete(&store, &format!("filler-a-{index}"), Duration::from_secs(5), &[b'f'; 150]);
    }
    let first_segment = dir.path().join("shard-0000/0000000001.seg");
    let first_segment_len = std::fs::metadata(&first_segment).expect("stat").len();
    // Later segments: the tombstones, among short-lived filler.
    assert!(store.remove(b"", b"removed").expect("remove"));
    released.release().expect("release");
    for index in 0..60 {
        complete(&store, &format!("filler-b-{index}"), Duration::from_secs(5), &[b'f'; 150]);
    }
    clock.advance(Duration::from_secs(6));
    let report = compact_fully(&store);
    assert!(report.segments_rewritten > 0, "{report:?}");
    let untouched = std::fs::metadata(&first_segment).expect("segment 1 stays").len();
    assert_eq!(untouched, first_segment_len, "the test needs segment 1 left as it was");
    let assert_gone = |store: &Store| {
        assert_eq!(store.get(b"", b"removed").expect("get"), None);
        assert_eq!(store.get(b"", b"released").expect("get"), None);
        let claim = store.claim(&ClaimRequest::new("removed", fingerprint("removed"))).expect("claim");
        assert!(matches!(claim, Claim::Acquired(_)), "removed key came back: {claim:?}");
    };
    assert_eq!(store.get(b"", b"removed").expect("get"), None);
    drop(store);
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    assert_eq!(store.get(b"", b"released").expect("get"), None, "released key came back after reopen");
    assert_gone(&store);
    for index in 0..9 {
        assert!(store.get(b"", format!("anchor-{index}").as_bytes()).expect("get").is_some());
    }
}

#[test]
fn a_compaction_cut_short_by_a_crash_is_discarded_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    for index in 0..60 {
        complete(&store, &format!("k-{index}"), Duration::from_secs(3600), &[b'x'; 200]);
    }
    drop(store);
    let leftover = dir.path().join("shard-0000/0000000001.seg.compact");
    std::fs::write(&leftover, b"half a rewrite").expect("write");
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    assert!(!leftover.exists());
    for index in 0..60 {
        assert!(store.get(b"", format!("k-{index}").as_bytes()).expect("get").is_some());
    }
}

#[test]
fn the_background_compactor_runs_and_stops_with_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let config = config(&clock).compaction_interval(Some(Duration::from_millis(10)));
    let store = Store::open(dir.path(), config.clone()).expect("open");
    for index in 0..100 {
        complete(&store, &format!("k-{index}"), Duration::from_secs(1), &[b'x'; 200]);
    }
    clock.advance(Duration::from_secs(2));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.stats().compaction_bytes_reclaimed == 0 {
        assert!(std::time::Instant::now() < deadline, "the background compactor never reclaimed anything");
        std::thread::sleep(Duration::from_millis(10));
    }
    store.close().expect("close");
    Store::open(dir.path(), config).expect("reopen after close");
}
