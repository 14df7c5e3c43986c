//! A torn tail of the active segment — writes past its durable mark — is
//! cut back to the last whole record, wherever the tear falls inside the
//! last record.

use crate::common::{acquire, fingerprint, replay, START_MS};
use idemkv::{ClaimRequest, Config, Durability, ManualClock, Store};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn config(clock: &ManualClock) -> Config {
    Config::new().shards(1).durability(Durability::Buffered).clock(Arc::new(clock.clone()))
}

fn active_segment(dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir.join("shard-0000"))
        .expect("ls")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    segments.sort();
    segments.pop().expect("a segment")
}

fn copy_store(from: &Path, to: &Path) {
    for entry in walk(from) {
        let target = to.join(entry.strip_prefix(from).expect("prefix"));
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&entry, &target).expect("copy");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("ls") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.file_name().is_some_and(|name| name != "LOCK") {
            files.push(path);
        }
    }
    files
}

#[test]
fn torn_tail_is_cut_at_every_byte_offset_of_the_last_record() {
    let original = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let first = ClaimRequest::new("first", fingerprint("1"));
    let last = ClaimRequest::new("last", fingerprint("2"));
    let (whole_len, torn_len) = {
        let store = Store::open(original.path(), config(&clock)).expect("open");
        acquire(&store, &first).complete(b"first response").expect("complete");
        let lease = acquire(&store, &last);
        let before = crate::common::records_end(&active_segment(original.path()));
        lease.complete(b"the last response, torn").expect("complete");
        let after = crate::common::records_end(&active_segment(original.path()));
        // A crash before any fsync: nothing past the header is durable, so
        // a tear anywhere in the records is a torn tail.
        drop(store);
        (before, after)
    };
    assert!(torn_len > whole_len);
    for cut in whole_len..torn_len {
        let copy = tempfile::tempdir().expect("tempdir");
        copy_store(original.path(), copy.path());
        let segment = active_segment(copy.path());
        OpenOptions::new().write(true).open(&segment).expect("open").set_len(cut).expect("truncate");
        // A tear that left only zero bytes reads as space never written.
        let bytes = std::fs::read(&segment).expect("read");
        let (torn, len) = if bytes[as_index(whole_len)..].iter().all(|byte| *byte == 0) {
            (0, cut)
        } else {
            (cut - whole_len, whole_len)
        };

        let store = Store::open(copy.path(), config(&clock)).unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
        assert_eq!(store.stats().torn_tail_bytes_cut, torn, "cut at {cut}");
        assert_eq!(std::fs::metadata(&segment).expect("stat").len(), len);
        assert_eq!(replay(&store, &first).response, b"first response");
        // The torn completion is gone; the claim before it survived.
        let record = store.get(b"", b"last").expect("get").expect("claim record survives");
        assert_eq!(record.state, idemkv::State::Processing, "cut at {cut}");
        // The store goes on writing after the cut, and reopens cleanly.
        store
            .complete(
                &idemkv::LeaseToken {
                    keyspace: idemkv::Keyspace::Caller,
                    scope: Vec::new(),
                    key: b"last".to_vec(),
                    token: record.token,
                },
                b"redo",
            )
            .expect("complete after cut");
        store.close().expect("close");
        let store = Store::open(copy.path(), config(&clock)).expect("reopen");
        assert_eq!(replay(&store, &last).response, b"redo");
        assert_eq!(store.stats().torn_tail_bytes_cut, 0);
    }
}

fn as_index(offset: u64) -> usize {
    usize::try_from(offset).expect("small")
}

/// A store whose only key, "k", completed with "kept", dropped without
/// close (its active segment keeps the writer's zeros).
fn one_completed_record() -> (tempfile::TempDir, ManualClock, ClaimRequest<'static>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let request = ClaimRequest::new("k", fingerprint("1"));
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    acquire(&store, &request).complete(b"kept").expect("complete");
    drop(store);
    (dir, clock, request)
}

#[test]
fn a_zero_filled_tail_is_space_never_written_and_is_written_next() {
    let (dir, clock, request) = one_completed_record();
    let segment = active_segment(dir.path());
    let end = crate::common::records_end(&segment);
    // The writer's zero-fill ahead of its records, or a power cut after the
    // size grew but before the data landed: zeros only.
    OpenOptions::new().write(true).open(&segment).expect("open").set_len(end + 4096).expect("extend");
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    assert_eq!(store.stats().torn_tail_bytes_cut, 0, "zeros are not a tear");
    assert_eq!(replay(&store, &request).response, b"kept");
    // The next record goes where the records end, into the zeros.
    let next = ClaimRequest::new("next", fingerprint("2"));
    acquire(&store, &next).complete(b"after the zeros").expect("complete");
    assert!(crate::common::records_end(&segment) > end);
    store.close().expect("close");
    assert_eq!(std::fs::metadata(&segment).expect("stat").len(), crate::common::records_end(&segment), "close trims");
    let store = Store::open(dir.path(), config(&clock)).expect("reopen");
    assert_eq!(store.stats().torn_tail_bytes_cut, 0);
    assert_eq!(replay(&store, &next).response, b"after the zeros");
    assert!(idemkv::store::verify(dir.path()).expect("verify").is_clean());
}

#[test]
fn bytes_after_the_zeros_make_it_a_torn_tail() {
    let (dir, clock, request) = one_completed_record();
    let segment = active_segment(dir.path());
    let end = crate::common::records_end(&segment);
    let file = OpenOptions::new().write(true).open(&segment).expect("open");
    file.set_len(end + 4096).expect("extend");
    // A later write landed, an earlier one did not: zeros, then bytes.
    std::os::unix::fs::FileExt::write_all_at(&file, b"stray", end + 4000).expect("write");
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    assert_eq!(store.stats().torn_tail_bytes_cut, 4096);
    assert_eq!(replay(&store, &request).response, b"kept");
}
