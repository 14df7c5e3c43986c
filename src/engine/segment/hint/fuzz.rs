//! Hints as untrusted input, for the `hint_decode` fuzz target: arbitrary
//! bytes as the hint of a small, fixed segment on an in-memory disk, read
//! the way open reads them.

use super::reader::{self, Described, Opened};
use super::{block_crc, HintBuilder, HintEntry, BLOCK_HEADER_BYTES, HEADER_BYTES, OFFSET_CRC};
use crate::engine::frame::{self, read_u32};
use crate::engine::segment::header::SegmentHeader;
use crate::fingerprint::Fingerprint;
use crate::io::{PowerCutStorage, Storage, StorageFile};
use crate::record::{Header, Kind, State};
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/fuzz";
const SHARD: u32 = 0;
const SEGMENT: u32 = 1;
const LSN_FLOOR: u64 = 5;

/// The fixed segment: twelve frames of six keys, every kind.
fn segment(storage: &PowerCutStorage) -> (Arc<dyn StorageFile>, Vec<HintEntry>) {
    let path = crate::engine::segment::segment_path(Path::new(DIR), SEGMENT);
    let file = storage.open(&path, true).expect("an in-memory file");
    let mut bytes = SegmentHeader { shard: SHARD, segment: SEGMENT, lsn_floor: LSN_FLOOR }.encode().to_vec();
    let kinds = [Kind::Put(State::Processing), Kind::Put(State::Completed), Kind::Tombstone, Kind::Put(State::Failed)];
    let mut entries = Vec::new();
    for n in 0..12u64 {
        let key = [b'k', b'0' + u8::try_from(n / 2).unwrap_or(0)];
        let kind = kinds[usize::try_from(n).unwrap_or(0) % kinds.len()];
        let header = Header {
            kind,
            keyspace: crate::keyspace::Keyspace::Caller,
            recovered: false,
            attempt: 1,
            lsn: LSN_FLOOR + n * 2,
            token: LSN_FLOOR + n,
            fingerprint: Fingerprint::of(&key),
            created_ms: 1,
            updated_ms: 2 + n,
            deadline_ms: if kind == Kind::Tombstone { 0 } else { 1_000 + n * 100 },
            ttl_ms: 7,
            scope_len: 0,
            key_len: 2,
            response_len: 0,
        };
        let offset = bytes.len() as u64;
        frame::encode(&header, b"", &key, b"", &mut bytes);
        entries.push(HintEntry::of_frame(
            u128::from(n) << 70 | u128::from(n),
            &header,
            offset,
            bytes.len() as u64 - offset,
        ));
    }
    file.write_all_at(&bytes, 0).expect("an in-memory write");
    (file, entries)
}

/// A valid hint of the fixed segment, for a fuzzer to start from.
#[must_use]
pub(crate) fn sample() -> Vec<u8> {
    let storage = disk();
    let (file, entries) = segment(&storage);
    let mut builder = HintBuilder::new(SHARD, SEGMENT, LSN_FLOOR);
    for entry in &entries {
        builder.push(entry, 0, entry.is_claim());
    }
    let end = entries.last().map_or(0, |last| last.offset + last.len);
    builder.write(&storage, Path::new(DIR), &*file, end).expect("an in-memory hint");
    read_file(&storage, &super::hint_path(Path::new(DIR), SEGMENT))
}

fn disk() -> PowerCutStorage {
    let storage = PowerCutStorage::new();
    storage.create_dir_all(Path::new(DIR)).expect("an in-memory folder");
    storage
}

fn read_file(storage: &PowerCutStorage, path: &Path) -> Vec<u8> {
    let file = storage.open(path, false).expect("the file just written");
    let mut bytes = vec![0; usize::try_from(file.len().unwrap_or(0)).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0).expect("an in-memory read");
    bytes
}

/// Makes the header's and the blocks' CRCs right, as far as the block
/// lengths lead, so that a fuzzer reaches the decoding behind them.
fn fix_crcs(hint: &mut [u8]) {
    if hint.len() < HEADER_BYTES {
        return;
    }
    let crc = crc32fast::hash(&hint[..OFFSET_CRC]);
    hint[OFFSET_CRC..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    let mut at = HEADER_BYTES;
    while at + BLOCK_HEADER_BYTES <= hint.len() {
        let payload = read_u32(hint, at) as usize;
        let body = at + BLOCK_HEADER_BYTES;
        let Some(end) = body.checked_add(payload).filter(|end| *end <= hint.len()) else { return };
        let crc = block_crc(crc, &hint[at..at + 8], &hint[body..end]);
        hint[at + 8..body].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

/// Reads `hint` as the hint of the fixed segment; `Some(entries)` when
/// open would use it whole. Every entry of an accepted hint lies inside the
/// segment, in order.
pub(crate) fn read(hint: &[u8], fix: bool) -> Option<usize> {
    let storage = disk();
    let (file, _) = segment(&storage);
    let mut hint = hint.to_vec();
    if fix {
        fix_crcs(&mut hint);
    }
    let path = super::hint_path(Path::new(DIR), SEGMENT);
    let written = storage.open(&path, true).and_then(|created| created.write_all_at(&hint, 0));
    written.expect("an in-memory write");
    let len = file.len().ok()?;
    let described =
        Described { file: &*file, shard: SHARD, segment: SEGMENT, lsn_floor: LSN_FLOOR, len, durable_end: len };
    let Opened::Usable(mut reader) = reader::open(&storage, Path::new(DIR), &described) else { return None };
    let mut entries = Vec::new();
    let mut count = 0;
    let mut offset = crate::engine::segment::header::HEADER_BYTES as u64;
    while reader.next_block(&mut entries).ok()? {
        for entry in &entries {
            assert_eq!(entry.offset, offset, "entries are contiguous");
            offset += entry.len;
            assert!(offset <= len, "an entry past the segment");
            count += 1;
        }
    }
    Some(count)
}
