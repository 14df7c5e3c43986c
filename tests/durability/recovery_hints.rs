//! Hint files: an open that rebuilds segments from their hints gives the
//! same answers as one that replays the log, a key's newest record
//! deciding wherever its older ones are; a missing, damaged, truncated
//! (at any byte) or stale hint falls back to the log and loses nothing,
//! and so does a crash between a segment and its hint; a hint that cannot
//! be written fails no call; a read-only open writes none. (Verify and
//! repair with hints: `verify_hints.rs`.)

use crate::common::{acquire, delete_hints, fingerprint, hint_files, segment_files, START_MS};
use idemkv::{ClaimRequest, Config, Durability, ManualClock, Record, ReusePolicy, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const KEYS: usize = 400;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(2)
        .durability(Durability::Buffered)
        .segment_bytes(8192)
        .response_bytes_max(1024)
        .compaction_interval(None)
        .compaction_bytes_per_second(0)
        .clock(Arc::new(clock.clone()))
}

fn key(index: usize) -> String {
    format!("key-{index:04}")
}

/// A closed store with records in every state over many segments of two
/// shards: completed, failed, processing (renewed), released, removed,
/// expired, superseded, with one compaction pass between writes so that
/// some segments were rewritten.
fn varied_store(dir: &Path, clock: &ManualClock) {
    let store = Store::open(dir, config(clock)).expect("open");
    for index in 0..KEYS {
        let name = key(index);
        let short = ClaimRequest::new(&name, fingerprint(&name)).ttl(Duration::from_secs(60));
        let request = if index % 9 == 0 { short } else { ClaimRequest::new(&name, fingerprint(&name)) };
        let mut lease = acquire(&store, &request);
        match index % 6 {
            0 | 1 => lease.complete(format!("response {index}").as_bytes()).expect("complete"),
            2 => lease.fail(b"declined").expect("fail"),
            3 => lease.release().expect("release"),
            4 => {
                lease.renew(Duration::from_secs(90)).expect("renew");
                drop(lease.into_token());
            }
            _ => {
                lease.complete(b"soon removed").expect("complete");
                store.remove(b"", name.as_bytes()).expect("remove");
            }
        }
        if index == KEYS / 2 {
            clock.advance(Duration::from_secs(120));
            store.compact().expect("compact");
        }
    }
    store.close().expect("close");
}

/// What the store answers for every key, and its census.
fn answers(store: &Store) -> (BTreeMap<String, Option<Record>>, idemkv::store::Census) {
    let records =
        (0..KEYS + 10).map(|index| (key(index), store.get(b"", key(index).as_bytes()).expect("get"))).collect();
    (records, store.census().expect("census"))
}

fn open_answers(
    dir: &Path,
    clock: &ManualClock,
) -> ((BTreeMap<String, Option<Record>>, idemkv::store::Census), idemkv::store::Stats) {
    let store = Store::open(dir, config(clock)).expect("open");
    let answers = answers(&store);
    let stats = store.stats();
    store.close().expect("close");
    (answers, stats)
}

fn all_hints(dir: &Path) -> Vec<PathBuf> {
    [0, 1].into_iter().flat_map(|shard| hint_files(dir, shard)).collect()
}

fn all_segments(dir: &Path) -> usize {
    [0, 1].into_iter().map(|shard| segment_files(dir, shard).len()).sum()
}

#[test]
fn an_open_from_hints_answers_every_key_as_an_open_from_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    varied_store(dir.path(), &clock);
    let segments = all_segments(dir.path());
    assert!(segments > 10, "expected many segments, found {segments}");
    assert_eq!(all_hints(dir.path()).len(), segments, "every segment has a hint after close");
    let (with_hints, stats) = open_answers(dir.path(), &clock);
    assert_eq!(stats.hints_loaded, segments as u64, "{stats:?}");
    assert_eq!(stats.hints_ignored, 0);
    assert_eq!(delete_hints(dir.path()), segments);
    let (from_log, stats) = open_answers(dir.path(), &clock);
    assert_eq!(stats.hints_loaded, 0);
    assert_eq!(from_log, with_hints);
    assert!(from_log.0.values().filter(|record| record.is_some()).count() > KEYS / 3, "a store worth comparing");
    // That open wrote the hints back.
    assert_eq!(all_hints(dir.path()).len(), segments);
    let (again, stats) = open_answers(dir.path(), &clock);
    assert_eq!(stats.hints_loaded, segments as u64);
    assert_eq!(again, with_hints);
    let report = idemkv::store::verify(dir.path()).expect("verify");
    assert!(report.is_clean(), "{:?}", report.damage);
    assert_eq!(report.hints_checked, segments as u64);
}

/// Opens with hints that are damaged in some way and checks that every
/// answer is the log's, and that the damaged hints were ignored, counted
/// and written again.
fn falls_back(dir: &Path, clock: &ManualClock, expected: &(BTreeMap<String, Option<Record>>, idemkv::store::Census)) {
    let (answers, stats) = open_answers(dir, clock);
    assert!(stats.hints_ignored >= 1, "{stats:?}");
    assert_eq!(&answers, expected);
    let (_, stats) = open_answers(dir, clock);
    assert_eq!(stats.hints_ignored, 0, "the next open found good hints again");
}

#[test]
fn a_damaged_or_truncated_hint_falls_back_to_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    varied_store(dir.path(), &clock);
    let (expected, _) = open_answers(dir.path(), &clock);
    let hints = all_hints(dir.path());
    // A byte flipped in a header, in a block; a hint cut short; an empty one.
    for (index, damage) in ["header", "block", "truncated", "empty"].iter().enumerate() {
        let path = &hints[index * 3];
        let mut bytes = std::fs::read(path).expect("read");
        match *damage {
            "header" => bytes[30] ^= 0x01,
            "block" => *bytes.last_mut().expect("bytes") ^= 0x80,
            "truncated" => bytes.truncate(bytes.len() - 7),
            _ => bytes.clear(),
        }
        std::fs::write(path, bytes).expect("write");
        falls_back(dir.path(), &clock, &expected);
    }
}

#[test]
fn a_stale_hint_or_one_of_another_segment_falls_back_to_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    varied_store(dir.path(), &clock);
    let (expected, _) = open_answers(dir.path(), &clock);
    // The hint of another segment under this one's name.
    let hints = hint_files(dir.path(), 0);
    std::fs::copy(&hints[2], &hints[3]).expect("swap in");
    falls_back(dir.path(), &clock, &expected);
    // The hint of a segment before a compaction rewrote it.
    let before: Vec<Vec<u8>> =
        hint_files(dir.path(), 0).iter().map(|path| std::fs::read(path).expect("read")).collect();
    clock.advance(Duration::from_secs(3600));
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    let report = store.compact().expect("compact");
    assert!(report.segments_rewritten > 0, "{report:?}");
    let expected = answers(&store);
    store.close().expect("close");
    let mut restored = 0;
    for (path, old) in hint_files(dir.path(), 0).iter().zip(&before) {
        if std::fs::read(path).expect("read") != *old {
            std::fs::write(path, old).expect("restore");
            restored += 1;
        }
    }
    assert!(restored > 0);
    falls_back(dir.path(), &clock, &expected);
}

#[test]
fn a_crash_between_a_segment_and_its_hint_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    varied_store(dir.path(), &clock);
    let (expected, _) = open_answers(dir.path(), &clock);
    let shard = dir.path().join("shard-0001");
    let hints = hint_files(dir.path(), 1);
    // The roll fsynced the segment, then the crash came before the hint's
    // rename: its temporary file is there, the hint is not. Another hint
    // outlived its segment (a drop that crashed after deleting it).
    std::fs::rename(&hints[1], hints[1].with_extension("hint.tmp")).expect("unfinished");
    std::fs::write(shard.join("0000000000.hint"), b"of a segment dropped long ago").expect("orphan");
    let (answers, stats) = open_answers(dir.path(), &clock);
    assert_eq!(answers, expected);
    assert_eq!(stats.hints_ignored, 0, "a missing hint is not an ignored one");
    assert!(!hints[1].with_extension("hint.tmp").exists(), "the temporary file is deleted");
    assert!(!shard.join("0000000000.hint").exists(), "the orphan is deleted");
    assert!(hints[1].exists(), "the missing hint is written again");
}

#[test]
fn writes_after_the_hint_of_the_active_segment_are_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let cfg = || config(&clock).shards(1).segment_bytes(1 << 20);
    let store = Store::open(dir.path(), cfg()).expect("open");
    for index in 0..50 {
        acquire(&store, &ClaimRequest::new(&key(index), fingerprint("a"))).complete(b"first").expect("complete");
    }
    store.close().expect("close");
    // The active segment's hint covers those 50; then more writes, and the
    // store is dropped with them not yet durable: its hint stays as it was.
    let store = Store::open(dir.path(), cfg()).expect("open");
    assert_eq!(store.stats().hints_loaded, 1);
    for index in 50..80 {
        acquire(&store, &ClaimRequest::new(&key(index), fingerprint("a"))).complete(b"second").expect("complete");
    }
    store.remove(b"", key(3).as_bytes()).expect("remove");
    let hint = hint_files(dir.path(), 0).pop().expect("a hint");
    let before = std::fs::read(&hint).expect("read");
    drop(store);
    assert_eq!(std::fs::read(&hint).expect("read"), before, "a hint past the durable writes");
    let store = Store::open(dir.path(), cfg()).expect("open");
    assert_eq!(store.stats().hints_loaded, 1, "the prefix came from the hint");
    assert_eq!(store.stats().live_records, 79);
    assert!(store.get(b"", key(3).as_bytes()).expect("get").is_none());
    assert_eq!(store.get(b"", key(7).as_bytes()).expect("get").expect("present").response, b"first");
    assert_eq!(store.get(b"", key(77).as_bytes()).expect("get").expect("present").response, b"second");
}

#[test]
fn a_read_only_open_writes_no_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    varied_store(dir.path(), &clock);
    delete_hints(dir.path());
    let before = crate::common::snapshot::snapshot(dir.path());
    let store = Store::open_read_only(dir.path(), config(&clock)).expect("read-only open");
    assert_eq!(store.stats().hints_loaded, 0);
    store.close().expect("close");
    assert_eq!(crate::common::snapshot::snapshot(dir.path()), before);
    assert!(all_hints(dir.path()).is_empty());
}

/// A disk on which no hint can be written: creating a hint's temporary
/// file fails as on a full disk.
#[derive(Debug)]
struct NoHints;

impl idemkv::io::Storage for NoHints {
    fn open(&self, path: &Path, create: bool) -> std::io::Result<Arc<dyn idemkv::io::StorageFile>> {
        if create && path.to_string_lossy().ends_with(".hint.tmp") {
            return Err(std::io::Error::from_raw_os_error(28));
        }
        idemkv::io::StdStorage.open(path, create)
    }
    fn open_read_only(&self, path: &Path) -> std::io::Result<Arc<dyn idemkv::io::StorageFile>> {
        idemkv::io::StdStorage.open_read_only(path)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        idemkv::io::StdStorage.create_dir_all(path)
    }
    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<PathBuf>> {
        idemkv::io::StdStorage.read_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        idemkv::io::StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        idemkv::io::StdStorage.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        idemkv::io::StdStorage.sync_dir(path)
    }
}

#[test]
fn a_hint_that_cannot_be_written_fails_no_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock).storage(Arc::new(NoHints))).expect("open");
    for index in 0..KEYS {
        acquire(&store, &ClaimRequest::new(&key(index), fingerprint("a"))).complete(b"done").expect("complete");
    }
    let written = store.stats();
    assert!(written.segments > 10, "{written:?}");
    store.close().expect("close");
    assert!(all_hints(dir.path()).is_empty());
    let (answers, stats) = open_answers(dir.path(), &clock);
    assert_eq!(stats.hints_loaded, 0);
    assert!(answers
        .0
        .values()
        .take(KEYS)
        .all(|record| record.as_ref().is_some_and(|record| record.response == b"done")));
    assert!(!all_hints(dir.path()).is_empty(), "a healthy disk gets them at the next open");
}

/// The `end` field of a hint file: the offset after the frames it covers.
fn hint_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read hint");
    u64::from_le_bytes(bytes[28..36].try_into().expect("8 bytes"))
}

#[test]
fn a_sealed_segment_with_the_hint_of_a_prefix_gets_a_whole_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let cfg = || config(&clock).shards(1);
    let store = Store::open(dir.path(), cfg()).expect("open");
    acquire(&store, &ClaimRequest::new(&key(0), fingerprint("a"))).complete(b"first").expect("complete");
    store.close().expect("close");
    // The hint of the active segment's first records, kept aside while the
    // segment fills up and is sealed (as if its hint at the roll was never
    // written), then put back.
    let first = hint_files(dir.path(), 0).pop().expect("the active segment's hint");
    let prefix = std::fs::read(&first).expect("read");
    let store = Store::open(dir.path(), cfg()).expect("open");
    for index in 1..KEYS {
        acquire(&store, &ClaimRequest::new(&key(index), fingerprint("a"))).complete(b"more").expect("complete");
    }
    store.close().expect("close");
    let segment = segment_files(dir.path(), 0)[0].clone();
    let len = std::fs::metadata(&segment).expect("stat").len();
    assert!(hint_end(&first) == len && segment_files(dir.path(), 0).len() > 1, "sealed, with a whole hint");
    std::fs::write(&first, &prefix).expect("put the prefix's hint back");
    assert!(hint_end(&first) < len);
    let store = Store::open(dir.path(), cfg()).expect("open");
    assert_eq!(store.stats().hints_ignored, 0, "a hint of a prefix is used for the prefix");
    assert_eq!(store.get(b"", key(0).as_bytes()).expect("get").expect("present").response, b"first");
    assert_eq!(store.get(b"", key(7).as_bytes()).expect("get").expect("present").response, b"more");
    assert_eq!(hint_end(&first), len, "the open wrote a whole hint back");
}

/// Keys whose newest record is in a later segment than an older one of
/// theirs, each kind of newer record: what every open must answer for
/// them, from hints or from the log.
fn rewritten_store(dir: &Path, clock: &ManualClock) -> BTreeMap<&'static str, Option<&'static [u8]>> {
    let cfg = || config(clock).shards(1);
    let store = Store::open(dir, cfg()).expect("open");
    let done = |name: &str, response: &[u8]| {
        acquire(&store, &ClaimRequest::new(name, fingerprint(name))).complete(response).expect("complete");
    };
    for name in ["removed", "claimed-again", "replaced", "kept"] {
        done(name, b"first");
    }
    drop(acquire(&store, &ClaimRequest::new("abandoned", fingerprint("abandoned"))).into_token());
    let long = ClaimRequest::new("expired", fingerprint("expired")).ttl(Duration::from_secs(3600));
    acquire(&store, &long).fail(b"first").expect("fail");
    // Enough other keys to fill several segments in between.
    for index in 0..200 {
        done(&key(index), b"filler");
    }
    clock.advance(Duration::from_secs(31));
    assert!(store.remove(b"", b"removed").expect("remove"));
    assert!(store.remove(b"", b"claimed-again").expect("remove"));
    done("claimed-again", b"second");
    assert!(store.replace(b"", b"replaced", b"first", b"second").expect("replace"));
    let lapsed = acquire(&store, &ClaimRequest::new("abandoned", fingerprint("abandoned")));
    assert!(lapsed.recovered());
    lapsed.complete(b"second").expect("complete");
    // A newer record that expires before the older one would have.
    let short = ClaimRequest::new("expired", fingerprint("expired"))
        .reuse(ReusePolicy::RetryFailed)
        .ttl(Duration::from_secs(60));
    acquire(&store, &short).complete(b"second").expect("complete");
    store.close().expect("close");
    clock.advance(Duration::from_secs(120));
    BTreeMap::from([
        ("removed", None),
        ("claimed-again", Some(&b"second"[..])),
        ("replaced", Some(&b"second"[..])),
        ("abandoned", Some(&b"second"[..])),
        ("expired", None),
        ("kept", Some(&b"first"[..])),
    ])
}

#[test]
fn a_key_rewritten_in_later_segments_opens_from_hints_as_from_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let expected = rewritten_store(dir.path(), &clock);
    let segments = segment_files(dir.path(), 0).len();
    assert!(segments > 5, "the rewrites are segments apart: {segments} segments");
    for from_hints in [true, false] {
        if !from_hints {
            assert_eq!(delete_hints(dir.path()), segments);
        }
        let store = Store::open(dir.path(), config(&clock).shards(1)).expect("open");
        let stats = store.stats();
        assert_eq!(stats.hints_loaded, if from_hints { segments as u64 } else { 0 }, "{stats:?}");
        for (name, response) in &expected {
            let found = store.get(b"", name.as_bytes()).expect("get");
            assert_eq!(
                found.as_ref().map(|record| &record.response[..]),
                *response,
                "{name}, from hints: {from_hints}"
            );
        }
        assert_eq!(stats.live_records, 200 + 4, "{stats:?}");
        store.close().expect("close");
    }
}

#[test]
fn a_hint_cut_at_any_byte_falls_back_to_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let cfg = || config(&clock).shards(1).segment_bytes(1 << 20);
    let store = Store::open(dir.path(), cfg()).expect("open");
    // Enough frames for a sealed segment whose hint has several blocks.
    let keys = 7000;
    for index in 0..keys {
        acquire(&store, &ClaimRequest::new(&format!("key-{index:05}"), fingerprint("a")))
            .complete(b"done")
            .expect("complete");
    }
    store.close().expect("close");
    let hint = hint_files(dir.path(), 0).first().expect("a hint").clone();
    let whole = std::fs::read(&hint).expect("read");
    let first_block = 88 + 12 + u32::from_le_bytes(whole[88..92].try_into().expect("4 bytes")) as usize;
    assert!(first_block < whole.len(), "a hint of more than one block: {} bytes", whole.len());
    let answers = |store: &Store| -> Vec<Option<Record>> {
        (0..keys).map(|index| store.get(b"", format!("key-{index:05}").as_bytes()).expect("get")).collect()
    };
    let expected = answers(&Store::open_read_only(dir.path(), cfg()).expect("open"));
    assert!(expected.iter().all(Option::is_some));
    // In the header, through the first entries, across the first block's
    // end, and the last bytes.
    let cuts = (0..88)
        .step_by(8)
        .chain(88..200)
        .chain(first_block - 60..first_block + 120)
        .chain(whole.len() - 60..whole.len());
    for cut in cuts {
        std::fs::write(&hint, &whole[..cut]).expect("cut");
        let store = Store::open_read_only(dir.path(), cfg()).expect("an open of a store with a cut hint");
        assert_eq!(store.stats().hints_ignored, 1, "cut at {cut}");
        assert!(answers(&store) == expected, "cut at {cut}");
    }
}
