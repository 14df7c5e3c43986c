//! What was durable decides between a torn tail and corruption: damage past
//! the active segment's durable mark (writes never fsynced — a power cut
//! may leave holes before whole frames) is cut and counted; damage before
//! it, or a durable record cut away, is corruption.

use crate::common::{acquire, fingerprint, START_MS};
use idemkv::{store::verify, ClaimRequest, Config, Durability, Error, ManualClock, State, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn config(clock: &ManualClock) -> Config {
    Config::new().shards(1).durability(Durability::Buffered).compaction_interval(None).clock(Arc::new(clock.clone()))
}

fn active_segment(dir: &Path) -> PathBuf {
    dir.join("shard-0000/0000000001.seg")
}

/// Writes three completed keys and returns the offsets of their records.
fn three_records(store: &Store, dir: &Path) -> Vec<u64> {
    let mut offsets = Vec::new();
    for key in ["a", "b", "c"] {
        let lease = acquire(store, &ClaimRequest::new(key, fingerprint(key)));
        offsets.push(crate::common::records_end(&active_segment(dir)));
        lease.complete(format!("response {key}").as_bytes()).expect("complete");
    }
    offsets
}

fn zero(path: &Path, offset: u64, len: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    let start = usize::try_from(offset).expect("small");
    bytes[start..start + len].fill(0);
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn a_hole_before_whole_frames_past_the_mark_is_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let offsets = three_records(&store, dir.path());
    // A crash with nothing fsynced: a page of "b"'s completion never landed,
    // while "c"'s records after it did.
    drop(store);
    zero(&active_segment(dir.path()), offsets[1] + 10, 40);
    let report = verify(dir.path()).expect("verify");
    assert!(report.is_clean(), "{:?}", report.damage);
    assert_eq!(report.torn_tails.len(), 1, "{:?}", report.torn_tails);
    let store = Store::open(dir.path(), config(&clock)).expect("only unsynced data was lost: the store opens");
    assert!(store.stats().torn_tail_bytes_cut > 0);
    let a = store.get(b"", b"a").expect("get").expect("a's completion came before the hole");
    assert_eq!((a.state, a.response.as_slice()), (State::Completed, &b"response a"[..]));
    let b = store.get(b"", b"b").expect("get").expect("b's claim came before the hole");
    assert_eq!(b.state, State::Processing, "b's completion was cut");
    assert!(store.get(b"", b"c").expect("get").is_none(), "c came after the hole: cut");
}

#[test]
fn the_same_hole_after_an_fsync_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let offsets = three_records(&store, dir.path());
    store.sync().expect("sync");
    // The mark is written after the fsync and made durable by the next one.
    store.sync().expect("sync");
    let claim = ClaimRequest::new("d", fingerprint("d"));
    acquire(&store, &claim).complete(b"d").expect("complete");
    store.sync().expect("sync");
    drop(store);
    // Everything was durable when the store was dropped, so the active
    // segment got its hint, and open does not read the frames a hint covers
    // (recovery_hints.rs): without it, the log is replayed and checked.
    assert_eq!(crate::common::delete_hints(dir.path()), 1);
    let segment = active_segment(dir.path());
    zero(&segment, offsets[1] + 10, 40);
    match Store::open(dir.path(), config(&clock)) {
        Err(Error::Corruption { file, offset, .. }) => assert_eq!((file, offset), (segment.clone(), offsets[1])),
        other => panic!("damage to fsynced records must be refused, got {other:?}"),
    }
    let report = verify(dir.path()).expect("verify");
    assert!(report.damage.iter().any(|damage| damage.file == segment && damage.offset == offsets[1]));
}

#[test]
fn a_durable_record_cut_away_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let offsets = three_records(&store, dir.path());
    store.close().expect("close makes everything durable and marks it");
    let segment = active_segment(dir.path());
    std::fs::OpenOptions::new().write(true).open(&segment).expect("open").set_len(offsets[2]).expect("truncate");
    assert!(matches!(
        Store::open(dir.path(), config(&clock)),
        Err(Error::Corruption { ref file, .. }) if *file == segment
    ));
}

/// The newest durable mark in the segment header (the slot with the higher
/// round; both slots valid here): how far the segment is known durable.
fn header_mark(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read segment");
    let slot = |at: usize| {
        let end = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let round = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        (round, end)
    };
    slot(32).max(slot(48)).1
}

/// Completes more keys on a `Sync` store until a caller's fsync has left the
/// header's mark behind the log's end (written once in 2 ms: the next fsync
/// after a mark's skips it), so that what follows has a mark to move. On a
/// disk whose every fsync takes 2 ms or more each one writes the mark; the
/// test then still checks where the mark ends, but cannot tell a store
/// that moves it from one whose callers left nothing to move (the engine's
/// unit tests of the group commit tell them apart on any disk).
fn leave_the_mark_behind(store: &Store, segment: &Path) {
    for n in 0..200 {
        let key = format!("behind-{n}");
        acquire(store, &ClaimRequest::new(&key, fingerprint(&key))).complete(b"behind").expect("complete");
        if header_mark(segment) < crate::common::records_end(segment) {
            return;
        }
    }
    eprintln!("note: 200 keys' fsyncs each wrote the durable mark (fsyncs of 2 ms or more); nothing left to move");
}

#[test]
fn an_explicit_sync_marks_what_durable_callers_made_durable() {
    // `Sync` callers' fsyncs write the mark once in a while (a page apart
    // from the records'); a store's `sync` writes it where the log ends,
    // with nothing left to fsync, and the next fsync makes it durable.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).durability(Durability::Sync)).expect("open");
    let offsets = three_records(&store, dir.path());
    let segment = active_segment(dir.path());
    leave_the_mark_behind(&store, &segment);
    let end = crate::common::records_end(&segment);
    store.sync().expect("sync");
    assert_eq!(header_mark(&segment), end, "the mark is where the log ends");
    let claim = ClaimRequest::new("d", fingerprint("d"));
    acquire(&store, &claim).complete(b"d").expect("complete");
    drop(store);
    assert_eq!(crate::common::delete_hints(dir.path()), 1);
    zero(&segment, offsets[1] + 10, 40);
    match Store::open(dir.path(), config(&clock)) {
        Err(Error::Corruption { file, offset, .. }) => assert_eq!((file, offset), (segment, offsets[1])),
        other => panic!("damage to records the mark covers must be refused, got {other:?}"),
    }
}

#[test]
fn a_durable_store_dropped_without_close_keeps_its_hint() {
    // The last `Sync` caller's fsync may leave the mark behind (it is
    // written once in 2 ms); open takes a hint only as far as the mark, so
    // the drop writes the mark before the active segment's hint.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).durability(Durability::Sync)).expect("open");
    three_records(&store, dir.path());
    leave_the_mark_behind(&store, &active_segment(dir.path()));
    let end = crate::common::records_end(&active_segment(dir.path()));
    drop(store);
    assert_eq!(header_mark(&active_segment(dir.path())), end, "the drop marked the log's end");
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let stats = store.stats();
    assert_eq!((stats.hints_loaded, stats.hints_ignored), (1, 0), "the hint written at the drop is taken");
    assert!(store.get(b"", b"c").expect("get").is_some());
}
