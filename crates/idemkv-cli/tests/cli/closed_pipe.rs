//! A reader that goes away early (`idemkv list DIR | head -1`) ends every
//! command quietly with its own exit code — never a panic, never exit 101.
//! Real shell pipelines, and a reader that closes before anything is
//! written.

use crate::support::{binary, loaded_store, pipeline, scratch};

#[test]
fn every_command_ends_quietly_when_its_reader_goes_away() {
    let dir = scratch();
    // Enough records that `list` writes far more than a pipe holds.
    let store = loaded_store(dir.path(), 3000);
    let path = store.to_str().expect("utf-8");
    let idemkv = binary();
    let fresh = dir.path().join("fresh");
    let fresh = fresh.to_str().expect("utf-8");
    let cases = [
        (format!("{idemkv} list {path} --limit 3000 | head -1"), 0),
        (format!("{idemkv} list {path} --limit 3000 | head -n 0"), 0),
        (format!("{idemkv} stats {path} | head -1"), 0),
        (format!("{idemkv} stats {path} --format prometheus | head -n 0"), 0),
        (format!("{idemkv} get {path} load-0000000000000001 | head -n 0"), 0),
        (format!("{idemkv} verify {path} | head -n 0"), 0),
        (format!("{idemkv} compact {path} | head -n 0"), 0),
        (format!("{idemkv} repair {path} | head -n 0"), 0),
        (format!("{idemkv} load {fresh} --duration 0.3 --keys 1000 | head -1"), 0),
        (format!("{idemkv} load {fresh} --duration 0.3 --keys 1000 | head -n 0"), 0),
        (format!("{idemkv} --help | head -n 0"), 0),
        // The exit code of the command stands: an absent key is still 1.
        (format!("{idemkv} get {path} no-such-key | head -n 0"), 1),
    ];
    for (command, code) in cases {
        let (status, stderr) = pipeline(&command);
        assert_eq!(status, code, "{command}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{command}: {stderr}");
    }
}
