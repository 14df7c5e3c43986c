//! The tool's figures stay true after a crash: `idemkv load` killed with
//! SIGKILL (its active segments zero-filled ahead of their records, no
//! hint written at close) leaves a store whose `stats` counts the segment
//! files as long as they are, with the live bytes apart; whose hints
//! `verify` names when open would ignore them, with the reason; and whose
//! next writable open leaves no hint ignored.

use crate::support::{binary, idemkv, loaded_store, scratch, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The segment files of every shard.
fn segment_files(store: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for shard in std::fs::read_dir(store).expect("ls") {
        let shard = shard.expect("entry").path();
        if shard.is_dir() {
            let segments = std::fs::read_dir(&shard).expect("ls").map(|entry| entry.expect("entry").path());
            files.extend(segments.filter(|path| path.extension().is_some_and(|extension| extension == "seg")));
        }
    }
    files
}

fn file_bytes(files: &[PathBuf]) -> u64 {
    files.iter().map(|file| std::fs::metadata(file).expect("stat").len()).sum()
}

/// Runs `idemkv load` on `store` and kills it with SIGKILL once it has
/// written records into every shard (each active segment zero-filled past
/// its header), within a bound.
fn load_then_kill(store: &Path) {
    let path = store.to_str().expect("utf-8");
    let mut child = Command::new(binary())
        .args(["load", path, "--duration", "60", "--threads", "2", "--keys", "100000", "--value-bytes", "64"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn load");
    let started = Instant::now();
    loop {
        let written = store.join("MANIFEST").exists() && {
            let files = segment_files(store);
            files.len() == 4 && files.iter().all(|file| std::fs::metadata(file).is_ok_and(|meta| meta.len() > 64))
        };
        if written {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the load wrote nothing in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Some records more, so that the kill lands in the middle of the work.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the load must die by the signal: {status:?}");
}

/// The value of `"field":N` in a JSON line.
fn json_number(json: &str, field: &str) -> u64 {
    let at = json.find(&format!("\"{field}\":")).unwrap_or_else(|| panic!("no {field} in {json}"));
    let digits: String = json[at + field.len() + 3..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("a number")
}

#[test]
fn stats_after_a_kill_counts_the_segment_files_as_they_are() {
    let dir = scratch();
    let store = dir.path().join("store");
    load_then_kill(&store);
    let path = store.to_str().expect("utf-8");
    let on_disk = file_bytes(&segment_files(&store));
    let json = stdout(&idemkv(&["stats", path, "--format", "json"]));
    assert_eq!(json_number(&json, "disk_bytes"), on_disk, "{json}");
    let live = json_number(&json, "live_bytes");
    assert!(live > 0 && live < on_disk, "live bytes apart: {json}");
    let prometheus = stdout(&idemkv(&["stats", path, "--format", "prometheus"]));
    assert!(prometheus.contains(&format!("\nidemkv_disk_bytes {on_disk}\n")), "{on_disk}: {prometheus}");
    let text = stdout(&idemkv(&["stats", path]));
    assert!(text.contains(&format!("({on_disk} bytes) in segment files")), "{on_disk}: {text}");
    // The same through the library, read-only and writable.
    let config = idemkv::Config::new().compaction_interval(None);
    let reader = idemkv::Store::open_read_only(&store, config.clone()).expect("read-only open");
    assert_eq!(reader.stats().disk_bytes, on_disk);
    drop(reader);
    let writer = idemkv::Store::open(&store, config).expect("open");
    assert_eq!(writer.stats().disk_bytes, file_bytes(&segment_files(&store)));
    writer.close().expect("close");
}

#[test]
fn after_a_kill_the_next_writable_open_leaves_no_hint_ignored() {
    let dir = scratch();
    // A clean load first (hints written at close), then a killed one.
    let store = loaded_store(dir.path(), 2000);
    load_then_kill(&store);
    let path = store.to_str().expect("utf-8");
    for round in 0..2 {
        let compacted = idemkv(&["compact", path]);
        assert!(compacted.status.success(), "{}", stderr(&compacted));
        let verified = stdout(&idemkv(&["verify", path]));
        assert!(verified.contains(" 0 ignored by open"), "round {round}: {verified}");
        assert!(!verified.contains("hint ignored: "), "round {round}: {verified}");
    }
}

#[test]
fn verify_names_each_ignored_hint_and_why_and_a_writable_open_rewrites_it() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let hint = store.join("shard-0002/0000000001.hint");
    let bytes = std::fs::read(&hint).expect("read");
    std::fs::write(&hint, &bytes[..bytes.len() - 3]).expect("write");
    let verified = stdout(&idemkv(&["verify", path]));
    let line = verified.lines().find(|line| line.starts_with("hint ignored: ")).unwrap_or_else(|| panic!("{verified}"));
    assert!(line.contains(&hint.display().to_string()), "{line}");
    assert!(line.contains("the hint ends"), "the reason: {line}");
    assert!(line.contains("the next writable open"), "what happens to it: {line}");
    let compacted = idemkv(&["compact", path]);
    assert!(compacted.status.success(), "{}", stderr(&compacted));
    let verified = stdout(&idemkv(&["verify", path]));
    assert!(verified.contains("4 match their segments, 0 ignored by open"), "{verified}");
}
