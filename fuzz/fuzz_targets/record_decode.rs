//! Arbitrary bytes into the record, segment-header and manifest decoders:
//! never a panic, an out-of-bounds read, a length-driven allocation or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(length) = idemkv::testing::fuzzing::decode_record(data) {
        assert!(length <= data.len());
    }
    let _ = idemkv::testing::fuzzing::decode_segment_header(data);
    let _ = idemkv::testing::fuzzing::decode_manifest(data);
});
