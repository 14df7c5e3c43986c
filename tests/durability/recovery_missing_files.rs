//! Every segment is accounted for: a deleted segment (oldest, middle,
//! newest), a deleted shard folder or catalog, or a segment copied into
//! another shard is `Error::Corruption` naming what is wrong — never a
//! smaller store — and `verify` reports the same thing open refuses.

use crate::common::{acquire, fingerprint, START_MS};
use idemkv::{store::verify, ClaimRequest, Config, Durability, Error, ManualClock, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(2)
        .durability(Durability::Buffered)
        .segment_bytes(4096)
        .response_bytes_max(512)
        .compaction_interval(None)
        .clock(Arc::new(clock.clone()))
}

/// A closed store with several segments in each shard.
fn filled_store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("open");
    for index in 0..120 {
        let key = format!("key-{index}");
        acquire(&store, &ClaimRequest::new(&key, fingerprint(&key))).complete(&[b'r'; 100]).expect("complete");
    }
    store.close().expect("close");
    dir
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    crate::common::segment_files(dir, 0)
}

fn open_error(dir: &Path) -> Error {
    let clock = ManualClock::new(START_MS);
    Store::open(dir, config(&clock)).expect_err("a missing file must be refused")
}

/// Open refuses naming `file`, and verify reports damage naming it too.
fn refused_and_reported(dir: &Path, file: &Path) {
    match open_error(dir) {
        Error::Corruption { file: named, .. } => assert_eq!(named, file),
        other => panic!("expected Corruption naming {}, got {other:?}", file.display()),
    }
    let report = verify(dir).expect("verify");
    assert!(!report.is_clean(), "verify called a store with {} missing clean", file.display());
    assert!(report.damage.iter().any(|damage| damage.file == file), "{:?}", report.damage);
}

#[test]
fn a_deleted_oldest_middle_or_newest_segment_is_corruption() {
    for pick in ["oldest", "middle", "newest"] {
        let dir = filled_store();
        let all = segments(dir.path());
        assert!(all.len() >= 3, "expected several segments, got {}", all.len());
        let victim = match pick {
            "oldest" => all[0].clone(),
            "middle" => all[all.len() / 2].clone(),
            _ => all[all.len() - 1].clone(),
        };
        std::fs::remove_file(&victim).expect("delete");
        refused_and_reported(dir.path(), &victim);
    }
}

#[test]
fn a_deleted_shard_folder_or_catalog_is_corruption() {
    let dir = filled_store();
    let shard = dir.path().join("shard-0001");
    std::fs::remove_dir_all(&shard).expect("delete");
    refused_and_reported(dir.path(), &shard);

    let dir = filled_store();
    let catalog = dir.path().join("shard-0000/CATALOG");
    std::fs::remove_file(&catalog).expect("delete");
    refused_and_reported(dir.path(), &catalog);
}

#[test]
fn a_segment_copied_over_another_shards_file_is_refused_by_both() {
    let dir = filled_store();
    let from = dir.path().join("shard-0000/0000000001.seg");
    let to = dir.path().join("shard-0001/0000000001.seg");
    std::fs::copy(from, &to).expect("copy");
    refused_and_reported(dir.path(), &to);
}

#[test]
fn a_segment_the_catalog_does_not_know_is_refused() {
    let dir = filled_store();
    let all = segments(dir.path());
    let newest = all.last().expect("segment");
    let id: u32 = newest.file_stem().and_then(|stem| stem.to_str()).and_then(|stem| stem.parse().ok()).expect("id");
    let stranger = dir.path().join(format!("shard-0000/{:010}.seg", id + 5));
    std::fs::copy(newest, &stranger).expect("copy");
    refused_and_reported(dir.path(), &stranger);
}

#[test]
fn a_zeroed_segment_of_an_unfinished_roll_is_dropped_and_the_store_opens() {
    let dir = filled_store();
    let all = segments(dir.path());
    let newest = all.last().expect("segment");
    let id: u32 = newest.file_stem().and_then(|stem| stem.to_str()).and_then(|stem| stem.parse().ok()).expect("id");
    // A power cut right after the next segment was created, before its
    // header (or the catalog naming it) was durable: zeroes.
    let unfinished = dir.path().join(format!("shard-0000/{:010}.seg", id + 1));
    std::fs::write(&unfinished, vec![0u8; 4096]).expect("write");
    let report = verify(dir.path()).expect("verify");
    assert!(report.is_clean(), "{:?}", report.damage);
    assert!(report.torn_tails.iter().any(|span| span.file == unfinished), "{:?}", report.torn_tails);
    let clock = ManualClock::new(START_MS);
    let store = Store::open(dir.path(), config(&clock)).expect("an unfinished roll must not stop the store");
    assert!(!unfinished.exists(), "the unfinished segment is deleted at open");
    let request = ClaimRequest::new("key-7", fingerprint("key-7"));
    assert!(matches!(store.claim(&request).expect("claim"), idemkv::Claim::Replay(_)));
}
