//! A system that refuses new threads does not make the store panic: opening
//! (which recovers shards on helper threads) and `sync` of several dirty
//! shards (which fsyncs them on helper threads) do the work on the calling
//! thread instead.
//!
//! Regression test for "Storage integrity" item 8: `std::thread::scope`'s
//! `spawn` panics when the OS refuses a thread. The test re-executes its own
//! binary with `RUST_MIN_STACK` so large that no thread can be created
//! (every stack allocation fails), and the child checks the store there.

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use std::path::Path;
use std::process::Command;

const CHILD_DIR: &str = "IDEMKV_THREADS_REFUSED_DIR";

fn config() -> Config {
    Config::new().shards(4).durability(Durability::Buffered).compaction_interval(None)
}

/// Dirties every shard, syncs, closes, reopens and checks the records.
#[cfg_attr(not(target_os = "linux"), expect(dead_code, reason = "the test runs on Linux only"))]
fn child(dir: &Path) {
    assert!(std::thread::Builder::new().spawn(|| ()).is_err(), "the system still grants threads");
    let store = Store::open(dir, config()).expect("open without helper threads");
    for n in 0..64 {
        let key = format!("key-{n}");
        let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, Fingerprint::of(b"r"))).expect("claim")
        else {
            panic!("a new key is acquired");
        };
        lease.complete(key.as_bytes()).expect("complete");
    }
    store.sync().expect("sync without helper threads");
    store.close().expect("close");
    let store = Store::open(dir, config()).expect("reopen without helper threads");
    assert_eq!(store.iter().count(), 64);
    println!("CHILD-OK");
}

// Linux: a stack too large for the address space makes thread creation
// fail with EAGAIN there; other systems may refuse the size differently.
#[cfg(target_os = "linux")]
#[test]
fn open_and_sync_survive_a_system_that_refuses_threads() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            &crate::common::test_name(module_path!(), "open_and_sync_survive_a_system_that_refuses_threads"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        // 2^60 bytes: no address space holds such a stack.
        .env("RUST_MIN_STACK", (1u64 << 60).to_string())
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && stdout.contains("CHILD-OK"), "child failed:\n{stdout}\n{stderr}");
}
