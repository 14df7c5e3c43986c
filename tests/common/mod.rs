//! Helpers shared by the integration tests.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Lease, ManualClock, Record, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The manual clock starts here (2026-01-01), far from zero.
pub const START_MS: u64 = 1_767_225_600_000;

/// A config with a manual clock and buffered writes (fast for tests).
pub fn config(clock: &ManualClock) -> Config {
    Config::new().shards(4).durability(Durability::Buffered).clock(Arc::new(clock.clone()))
}

pub fn open(dir: &Path, clock: &ManualClock) -> Store {
    Store::open(dir, config(clock)).expect("open store")
}

pub fn fingerprint(text: &str) -> Fingerprint {
    Fingerprint::of(text.as_bytes())
}

pub fn acquire(store: &Store, request: &ClaimRequest<'_>) -> Lease {
    match store.claim(request).expect("claim") {
        Claim::Acquired(lease) => lease,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

pub fn replay(store: &Store, request: &ClaimRequest<'_>) -> Record {
    match store.claim(request).expect("claim") {
        Claim::Replay(record) => record,
        other => panic!("expected Replay, got {other:?}"),
    }
}

/// A relay's sink that keeps what it is given, in order.
#[cfg(feature = "messaging")]
#[derive(Clone, Default)]
pub struct Kept(pub Arc<std::sync::Mutex<Vec<idemkv::messaging::Staged>>>);

#[cfg(feature = "messaging")]
impl idemkv::messaging::Sink for Kept {
    async fn deliver(&self, message: &idemkv::messaging::Staged) -> Result<(), idemkv::messaging::SinkError> {
        self.0.lock().expect("lock").push(message.clone());
        Ok(())
    }
}

/// The public HTTP harness (a real axum server behind the idempotency
/// layer) over a store in a fresh directory.
#[cfg(feature = "conformance-http")]
pub mod http;

/// The files of a directory as they stand.
pub mod snapshot;

/// A disk whose fsyncs can be held at a gate, and failed, and whose
/// segment writes can be counted.
pub mod gated;

/// Real PostgreSQL servers.
#[cfg(feature = "postgres")]
pub mod postgres;

/// The examples' binaries, built if need be. (Every example needs tokio;
/// the tool's tests, which have the tool's features, run none.)
#[cfg(feature = "tokio")]
pub mod examples;

/// The payments example, run as a user runs it.
#[cfg(all(feature = "tower", feature = "metrics"))]
pub mod payments;

/// A load on a networked backend stopped hard, and the check after.
#[cfg(feature = "tokio")]
pub mod crash_load;

/// Real Redis servers.
#[cfg(feature = "redis")]
pub mod redis;

/// A server started on ports chosen free, again elsewhere when one was
/// taken (Redis's and PostgreSQL's).
#[cfg(any(feature = "redis", feature = "postgres"))]
pub mod server_start;

/// The spans a test's requests and calls made, with their fields and lines.
#[cfg(feature = "tracing")]
pub mod spans;

/// The name the test harness gives test `name` of the module at
/// `module_path` (`module_path!()`): its path in the test binary, without
/// the binary's own name. For a test that runs itself again in a child.
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_binary, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}

/// Runs `body` in a process of its own: the test binary run again for
/// test `name` of the module at `module_path` alone, so that what `body`
/// installs for the whole process (a `metrics` recorder) is its only one
/// even when other tests share the binary. A failure of the child fails
/// the test.
pub fn own_process(module_path: &str, name: &str, body: impl FnOnce()) {
    const CHILD: &str = "IDEMKV_TEST_OWN_PROCESS";
    let test = test_name(module_path, name);
    if std::env::var(CHILD).is_ok_and(|running| running == test) {
        body();
        return;
    }
    let status = std::process::Command::new(std::env::current_exe().expect("current exe"))
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(CHILD, &test)
        .status()
        .expect("run the test in a process of its own");
    assert!(status.success(), "{test} failed in its own process: {status}");
}

/// Where the records of a segment end: the writer zero-fills the active
/// segment ahead of its records, so its file length says nothing. Every
/// record the tests write ends in a non-zero byte (a key or a response).
pub fn records_end(path: &Path) -> u64 {
    let bytes = std::fs::read(path).expect("read segment");
    bytes.iter().rposition(|byte| *byte != 0).map_or(0, |last| last as u64 + 1)
}

/// The segment files of shard `shard` of the store in `dir`, oldest first
/// (not its catalog).
pub fn segment_files(dir: &Path, shard: u32) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir.join(format!("shard-{shard:04}")))
        .expect("ls")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    segments.sort();
    segments
}

/// The hint files of shard `shard` of the store in `dir`, oldest first.
pub fn hint_files(dir: &Path, shard: u32) -> Vec<PathBuf> {
    let mut hints: Vec<PathBuf> = std::fs::read_dir(dir.join(format!("shard-{shard:04}")))
        .expect("ls")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "hint"))
        .collect();
    hints.sort();
    hints
}

/// Deletes every hint file of the store in `dir`, so that the next open
/// replays every segment from the log; returns how many there were.
pub fn delete_hints(dir: &Path) -> usize {
    let mut deleted = 0;
    for shard in std::fs::read_dir(dir).expect("ls") {
        let shard = shard.expect("entry").path();
        let Some(id) = shard.file_name().and_then(|name| name.to_str()?.strip_prefix("shard-")?.parse().ok()) else {
            continue;
        };
        for hint in hint_files(dir, id) {
            std::fs::remove_file(hint).expect("remove hint");
            deleted += 1;
        }
    }
    deleted
}

/// Copies directory `from` into `to`, recursively (a fixture into a
/// fresh directory: opening writes to a store).
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("ls") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}
