//! Entry points for the fuzz targets in `fuzz/`: the raw decoders, which
//! are otherwise private. Not part of the supported API.

/// Decodes `bytes` as one record frame; `Some(frame length)` when whole
/// and valid. Never panics, whatever the bytes.
#[must_use]
pub fn decode_record(bytes: &[u8]) -> Option<usize> {
    let (header, length) = crate::engine::frame::decode(bytes).ok()?;
    // A decoded frame's parts lie inside it.
    let (scope, key, response) = header.body(&bytes[..length]);
    assert_eq!(crate::format::FRAME_PREFIX_BYTES + scope.len() + key.len() + response.len(), length);
    Some(length)
}

/// Decodes `bytes` as a segment header.
#[must_use]
pub fn decode_segment_header(bytes: &[u8]) -> bool {
    crate::engine::segment::header::SegmentHeader::decode(bytes).is_ok()
}

/// Decodes `bytes` as a manifest.
#[must_use]
pub fn decode_manifest(bytes: &[u8]) -> bool {
    crate::engine::manifest::Manifest::decode(std::path::Path::new("MANIFEST"), bytes).is_ok()
}

/// A valid segment header for shard `shard`, segment `segment`, so that
/// fuzzers can build plausible segment files.
#[must_use]
pub fn segment_header(shard: u32, segment: u32, lsn_floor: u64) -> Vec<u8> {
    crate::engine::segment::header::SegmentHeader { shard, segment, lsn_floor }.encode().to_vec()
}

/// A valid catalog for shard `shard` naming segments `first..=last`, so
/// that fuzzers can build plausible shard folders.
#[must_use]
pub fn catalog(shard: u32, first: u32, last: u32) -> Vec<u8> {
    crate::engine::segment::catalog::Catalog { shard, first, last }.encode().to_vec()
}

/// A valid manifest for `shards` shards.
#[must_use]
pub fn manifest(shards: u32) -> Vec<u8> {
    let version = crate::format::FormatVersion::CURRENT;
    crate::engine::manifest::Manifest { shards, hash_key: [1, 2], version }.encode().to_vec()
}

/// Reads `hint` as the hint file of a small fixed segment (on an in-memory
/// disk), the way open reads hints: `Some(entries)` when open would use it
/// whole. With `fix_crcs` the header's and the blocks' CRCs are first made
/// right, so that a fuzzer reaches the decoding behind them. Never panics
/// on any input.
#[must_use]
pub fn read_hint(hint: &[u8], fix_crcs: bool) -> Option<usize> {
    crate::engine::segment::hint::fuzz::read(hint, fix_crcs)
}

/// A valid hint of the segment [`read_hint`] reads against.
#[must_use]
pub fn sample_hint() -> Vec<u8> {
    crate::engine::segment::hint::fuzz::sample()
}
