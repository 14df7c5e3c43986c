use super::*;
use crate::engine::frame;
use crate::engine::segment::header::SegmentHeader;
use crate::engine::segment::hint::reader::Opened;
use crate::fingerprint::Fingerprint;
use crate::io::{StdStorage, Storage, StorageFile};
use crate::record::Header;
use std::sync::Arc;

#[test]
fn varints_and_zigzag_round_trip() {
    for value in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
        let mut out = Vec::new();
        put_varint(&mut out, value);
        let mut at = 0;
        assert_eq!(get_varint(&out, &mut at), Some(value));
        assert_eq!(at, out.len());
        for cut in 0..out.len() {
            assert_eq!(get_varint(&out[..cut], &mut 0), None, "{value} cut at {cut}");
        }
        assert_eq!(unzigzag(zigzag(value)), value);
    }
    assert!(zigzag(1) < 4 && zigzag(u64::MAX) < 4, "small either way");
    // Eleven bytes, or a tenth byte with more than one bit: not a u64.
    assert_eq!(get_varint(&[0xff; 11], &mut 0), None);
    let mut too_big = vec![0xff; 9];
    too_big.push(0x02);
    assert_eq!(get_varint(&too_big, &mut 0), None);
}

fn header(kind: Kind, lsn: u64, token: u64, key: &[u8]) -> Header {
    Header {
        keyspace: crate::keyspace::Keyspace::Caller,
        kind,
        recovered: false,
        attempt: 1,
        lsn,
        token,
        fingerprint: Fingerprint::of(b"f"),
        created_ms: 1_000,
        updated_ms: 1_000 + lsn,
        deadline_ms: if kind == Kind::Tombstone { 0 } else { 90_000 + lsn * 7 },
        ttl_ms: 5_000,
        scope_len: 0,
        key_len: u16::try_from(key.len()).expect("small"),
        response_len: 0,
    }
}

/// A segment of `count` frames in a temporary folder, its file, and the
/// hint entries of its frames.
fn segment(count: u64) -> (tempfile::TempDir, Arc<dyn StorageFile>, Vec<HintEntry>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = crate::engine::segment::segment_path(dir.path(), 3);
    let file = StdStorage.open(&path, true).expect("create");
    let mut bytes = SegmentHeader { shard: 1, segment: 3, lsn_floor: 10 }.encode().to_vec();
    let kinds = [Kind::Put(State::Processing), Kind::Put(State::Completed), Kind::Tombstone, Kind::Put(State::Failed)];
    let mut entries = Vec::new();
    for n in 0..count {
        let key = format!("key-{}", n / 2);
        let lsn = 10 + n * 3;
        let kind = kinds[usize::try_from(n).expect("small") % kinds.len()];
        let token = if n % 2 == 0 { lsn } else { lsn - 3 };
        let frame = header(kind, lsn, token, key.as_bytes());
        let offset = bytes.len() as u64;
        frame::encode(&frame, b"", key.as_bytes(), b"", &mut bytes);
        let hash = u128::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
        entries.push(HintEntry::of_frame(hash, &frame, offset, bytes.len() as u64 - offset));
    }
    file.write_all_at(&bytes, 0).expect("write");
    (dir, file, entries)
}

fn build(dir: &std::path::Path, file: &dyn StorageFile, entries: &[HintEntry]) {
    let mut builder = HintBuilder::new(1, 3, 10);
    for entry in entries {
        builder.push(entry, 1_000 + entry.lsn, entry.is_claim());
    }
    let end = entries.last().map_or(crate::engine::segment::header::HEADER_BYTES as u64, |last| last.offset + last.len);
    builder.write(&StdStorage, dir, file, end).expect("write hint");
}

fn described(file: &dyn StorageFile) -> Described<'_> {
    let len = file.len().expect("len");
    Described { file, shard: 1, segment: 3, lsn_floor: 10, len, durable_end: len }
}

/// Everything the hint beside `file` lists, or why it is not used.
fn read_all(dir: &std::path::Path, file: &dyn StorageFile) -> Result<Vec<HintEntry>, &'static str> {
    match open(&StdStorage, dir, &described(file)) {
        Opened::Missing => Err("missing"),
        Opened::Ignored(reason) => Err(reason),
        Opened::Usable(mut reader) => {
            let mut entries = Vec::new();
            while let Some(entry) = reader.next_entry()? {
                entries.push(entry);
            }
            Ok(entries)
        }
    }
}

#[test]
fn a_hint_lists_every_frame_of_its_segment() {
    // Several blocks' worth of entries, of every kind.
    let (dir, file, entries) = segment(9_000);
    build(dir.path(), &*file, &entries);
    assert_eq!(read_all(dir.path(), &*file), Ok(entries));
    let (empty_dir, empty, none) = segment(0);
    build(empty_dir.path(), &*empty, &none);
    assert_eq!(read_all(empty_dir.path(), &*empty), Ok(Vec::new()));
}

#[test]
fn every_flipped_byte_and_every_truncation_is_refused() {
    let (dir, file, entries) = segment(40);
    build(dir.path(), &*file, &entries);
    let path = hint_path(dir.path(), 3);
    let good = std::fs::read(&path).expect("read");
    for byte in 0..good.len() {
        let mut damaged = good.clone();
        damaged[byte] ^= 0x08;
        std::fs::write(&path, &damaged).expect("write");
        assert!(read_all(dir.path(), &*file).is_err(), "flip at {byte} accepted");
    }
    for cut in 0..good.len() {
        std::fs::write(&path, &good[..cut]).expect("write");
        assert!(read_all(dir.path(), &*file).is_err(), "cut at {cut} accepted");
    }
    let mut longer = good.clone();
    longer.extend_from_slice(&[0; 12]);
    std::fs::write(&path, &longer).expect("write");
    assert!(read_all(dir.path(), &*file).is_err(), "trailing bytes accepted");
    std::fs::write(&path, &good).expect("write");
    assert_eq!(read_all(dir.path(), &*file), Ok(entries));
}

#[test]
fn a_hint_of_a_prefix_is_used_and_a_stale_one_is_not() {
    let (dir, file, entries) = segment(30);
    // A hint of the first 20 frames: the segment grew after it (the active
    // segment at close, then more writes).
    build(dir.path(), &*file, &entries[..20]);
    assert_eq!(read_all(dir.path(), &*file), Ok(entries[..20].to_vec()));
    // Not past the durable mark of an active segment.
    let mut active = described(&*file);
    active.durable_end = entries[19].offset;
    assert!(matches!(open(&StdStorage, dir.path(), &active), Opened::Ignored(_)));
    // Rewritten: the frame where the hint ends is now another one.
    let mut bytes = std::fs::read(crate::engine::segment::segment_path(dir.path(), 3)).expect("read");
    let start = usize::try_from(entries[2].offset).expect("small");
    let end = usize::try_from(entries[3].offset).expect("small");
    bytes.drain(start..end);
    file.set_len(0).expect("truncate");
    file.write_all_at(&bytes, 0).expect("rewrite");
    assert!(read_all(dir.path(), &*file).is_err(), "a hint of the segment before its rewrite was used");
    // Cut before the hint's end.
    file.set_len(entries[10].offset).expect("cut");
    assert!(read_all(dir.path(), &*file).is_err());
}

#[test]
fn a_hint_of_another_segment_or_version_is_ignored() {
    let (dir, file, entries) = segment(10);
    build(dir.path(), &*file, &entries);
    let mut other = described(&*file);
    other.segment = 4;
    std::fs::copy(hint_path(dir.path(), 3), hint_path(dir.path(), 4)).expect("copy");
    assert!(matches!(open(&StdStorage, dir.path(), &other), Opened::Ignored(_)));
    let mut later = described(&*file);
    later.lsn_floor = 1 << 33;
    assert!(matches!(open(&StdStorage, dir.path(), &later), Opened::Ignored(_)));
    // Another version, its header CRC correct: ignored, not an error.
    let path = hint_path(dir.path(), 3);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[OFFSET_VERSION] = VERSION + 1;
    let crc = crc32fast::hash(&bytes[..OFFSET_CRC]);
    bytes[OFFSET_CRC..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).expect("write");
    assert_eq!(read_all(dir.path(), &*file), Err("hint of another version"));
}

#[test]
fn a_builder_gives_up_on_frames_out_of_order() {
    let (dir, file, entries) = segment(5);
    let mut builder = HintBuilder::new(1, 3, 10);
    builder.push(&entries[0], 0, true);
    builder.push(&entries[2], 0, true);
    assert!(builder.write(&StdStorage, dir.path(), &*file, entries[2].offset + entries[2].len).is_err());
    assert!(!hint_path(dir.path(), 3).exists());
    assert!(HintBuilder::off().write(&StdStorage, dir.path(), &*file, 64).is_err());
}

#[test]
fn names_round_trip() {
    let path = hint_path(std::path::Path::new("/s"), 42);
    assert_eq!(parse_hint_name(&path), Some(42));
    assert!(is_temp_name(&temp_path(std::path::Path::new("/s"), 42)));
    assert_eq!(parse_hint_name(&temp_path(std::path::Path::new("/s"), 42)), None);
    assert_eq!(parse_hint_name(std::path::Path::new("/s/0000000042.seg")), None);
    assert_eq!(crate::engine::segment::parse_segment_name(&path), None);
}

#[cfg(feature = "testing")]
#[test]
fn the_fuzz_entry_reads_its_sample_and_survives_edits() {
    let sample = fuzz::sample();
    assert_eq!(fuzz::read(&sample, false), Some(12));
    assert_eq!(fuzz::read(&sample, true), Some(12));
    // Every single-byte change behind right CRCs: a typed refusal or a
    // hint whose entries stay inside the segment, never a panic.
    for at in 0..sample.len() {
        for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut edited = sample.clone();
            edited[at] = value;
            let _ = fuzz::read(&edited, true);
        }
    }
}
