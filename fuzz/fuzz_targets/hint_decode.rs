//! Arbitrary bytes as a segment's hint file, read the way open reads hints:
//! never a panic, an out-of-bounds read, a length-driven allocation or a
//! hang; a hint that is used lists frames inside its segment, in order.
//! Edits of a valid hint behind recomputed CRCs reach the decoding that the
//! CRCs guard.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Edit a valid hint (else use `raw`).
    edit_sample: bool,
    /// Recompute the header and block CRCs before reading.
    fix_crcs: bool,
    /// (offset, value) byte edits of the valid hint.
    edits: Vec<(u16, u8)>,
    /// Bytes to cut off its end.
    cut: u16,
    raw: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let hint = if input.edit_sample {
        let mut hint = idemkv::testing::fuzzing::sample_hint();
        for (at, value) in &input.edits {
            let len = hint.len();
            if len > 0 {
                hint[usize::from(*at) % len] = *value;
            }
        }
        let keep = hint.len().saturating_sub(usize::from(input.cut));
        hint.truncate(keep);
        hint
    } else {
        input.raw
    };
    if let Some(entries) = idemkv::testing::fuzzing::read_hint(&hint, input.fix_crcs) {
        assert!(entries <= 12, "the segment has 12 frames");
    }
});
