//! Verify and repair with hint files: open does not read the frames a
//! hint covers, so damage there is found by a read, by verify (which reads
//! every frame and checks every hint open would use against them) and cut
//! by repair, which names what it drops from the hint and deletes the hints
//! of what it changes; a hint that lies about its segment is damage to
//! verify and gone after repair.

use crate::common::{acquire, fingerprint, hint_files, segment_files, START_MS};
use idemkv::{ClaimRequest, Config, Durability, Error, ManualClock, Store};
use std::sync::Arc;

fn config(clock: &ManualClock) -> Config {
    Config::new()
        .shards(1)
        .durability(Durability::Buffered)
        .segment_bytes(8192)
        .response_bytes_max(1024)
        .compaction_interval(None)
        .clock(Arc::new(clock.clone()))
}

fn key(index: usize) -> String {
    format!("key-{index:04}")
}

#[test]
fn damage_that_a_hint_hides_from_open_is_found_by_reads_verify_and_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let cfg = || config(&clock);
    let store = Store::open(dir.path(), cfg()).expect("open");
    for index in 0..60 {
        acquire(&store, &ClaimRequest::new(&key(index), fingerprint("a"))).complete(&[b'r'; 200]).expect("complete");
    }
    store.close().expect("close");
    // The first key's completion, in the oldest segment: a byte of its
    // response flipped.
    let sealed = segment_files(dir.path(), 0)[0].clone();
    let mut bytes = std::fs::read(&sealed).expect("read");
    let at = bytes.windows(200).position(|window| window == [b'r'; 200]).expect("a response");
    bytes[at + 100] ^= 0x01;
    std::fs::write(&sealed, bytes).expect("write");
    let store = Store::open(dir.path(), cfg()).expect("open does not read what the hint covers");
    match store.get(b"", key(0).as_bytes()) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, sealed),
        other => panic!("the damaged record must be refused, got {other:?}"),
    }
    store.close().expect("close");
    let report = idemkv::store::verify(dir.path()).expect("verify");
    assert!(report.damage.iter().any(|damage| damage.file == sealed), "{:?}", report.damage);
    let repaired = idemkv::store::repair(dir.path()).expect("repair");
    assert!(repaired.actions.iter().any(|action| action.contains(".hint: deleted")), "{:?}", repaired.actions);
    let report = idemkv::store::verify(dir.path()).expect("verify");
    assert!(report.is_clean(), "{:?}", report.damage);
    let store = Store::open(dir.path(), cfg()).expect("open");
    // Repair dropped the damaged completion alone, named from the hint: the
    // claim before it is what is left of the key, and what came after it
    // is kept.
    assert_eq!(repaired.records_dropped.len(), 1, "{repaired:?}");
    assert_eq!(repaired.records_dropped[0].key, key(0).as_bytes());
    assert_eq!(repaired.records_dropped[0].evidence, idemkv::store::Evidence::Hint);
    let left = store.get(b"", key(0).as_bytes()).expect("get").expect("the claim stays");
    assert_eq!(left.state, idemkv::State::Processing);
    for index in 1..60 {
        let record = store.get(b"", key(index).as_bytes()).expect("get").expect("what came after the damage stays");
        assert_eq!(record.response, [b'r'; 200]);
    }
}

/// The CRC of a hint block (see docs/format.md): over the header's CRC
/// field, the block's length and count, and its payload.
fn block_crc(header_crc: &[u8], fields: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header_crc);
    hasher.update(fields);
    hasher.update(payload);
    hasher.finalize()
}

#[test]
fn a_hint_that_lies_about_its_segment_is_damage_to_verify_and_gone_after_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(START_MS);
    let cfg = || config(&clock);
    let store = Store::open(dir.path(), cfg()).expect("open");
    for index in 0..60 {
        acquire(&store, &ClaimRequest::new(&key(index), fingerprint("a"))).complete(b"done").expect("complete");
    }
    store.close().expect("close");
    // Rewrite the first entry's hash (after its kind byte) and seal the
    // block again with a correct CRC: a hint whose checks all pass but
    // which names another key. Open trusts it.
    let hint = hint_files(dir.path(), 0)[0].clone();
    let mut bytes = std::fs::read(&hint).expect("read");
    let (header, block) = bytes.split_at_mut(88);
    block[12 + 1] ^= 0xff;
    let payload_len = usize::try_from(u32::from_le_bytes(block[..4].try_into().expect("4 bytes"))).expect("small");
    let crc = block_crc(&header[84..88], &block[..8], &block[12..12 + payload_len]);
    block[8..12].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&hint, &bytes).expect("write");
    let report = idemkv::store::verify(dir.path()).expect("verify");
    assert!(report.damage.iter().any(|damage| damage.file == hint), "{:?}", report.damage);
    let repaired = idemkv::store::repair(dir.path()).expect("repair");
    assert!(repaired.dropped_nothing(), "{repaired:?}");
    assert!(!hint.exists());
    assert!(idemkv::store::verify(dir.path()).expect("verify").is_clean());
    let store = Store::open(dir.path(), cfg()).expect("open");
    assert_eq!(store.get(b"", key(0).as_bytes()).expect("get").expect("present").response, b"done");
}
