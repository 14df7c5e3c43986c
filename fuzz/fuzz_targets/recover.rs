//! Arbitrary bytes written as segment files and a manifest on an in-memory
//! disk, then `Store::open`: a store or a typed error, never a panic or a
//! hang; every record an opened store serves passed its CRC (reads re-check
//! it).
#![no_main]

use arbitrary::Arbitrary;
use idemkv::io::Storage;
use idemkv::{Config, Durability, Store};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

#[path = "scratch.rs"]
mod scratch;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Use a valid manifest (else `raw_manifest`).
    valid_manifest: bool,
    raw_manifest: Vec<u8>,
    /// Segment files of shard 0: (give a valid header, body bytes).
    segments: Vec<(bool, Vec<u8>)>,
}

fuzz_target!(|input: Input| {
    // The files live in memory (a power-cut disk that is never cut).
    let dir = scratch::directory();
    let storage = scratch::disk(dir);
    let manifest = if input.valid_manifest { idemkv::testing::fuzzing::manifest(1) } else { input.raw_manifest };
    scratch::write(&storage, &dir.join("MANIFEST"), &manifest);
    let shard = dir.join("shard-0000");
    storage.create_dir_all(&shard).expect("mkdir");
    let count = u32::try_from(input.segments.len().clamp(1, 4)).expect("small");
    scratch::write(&storage, &shard.join("CATALOG"), &idemkv::testing::fuzzing::catalog(0, 1, count));
    storage.sync_dir(dir).expect("sync dir");
    for (index, (valid_header, body)) in input.segments.iter().take(4).enumerate() {
        let id = u32::try_from(index + 1).expect("small");
        let mut bytes = if *valid_header { idemkv::testing::fuzzing::segment_header(0, id, 1) } else { Vec::new() };
        bytes.extend_from_slice(body);
        scratch::write(&storage, &shard.join(format!("{id:010}.seg")), &bytes);
    }
    let config =
        Config::new().durability(Durability::Buffered).compaction_interval(None).storage(Arc::new(storage.clone()));
    if let Ok(store) = Store::open(dir, config) {
        for record in &store {
            // Every record served was read back and CRC-checked; an error is
            // allowed (a typed one), a panic is not.
            let _ = record;
        }
        let _ = store.compact();
    }
});
