//! The `idemkv` binary, run as a user would: every subcommand, bad
//! arguments, a missing directory, a directory that is not a store, a
//! damaged segment, and a directory held by a live store.
#![cfg(feature = "cli")]

use std::path::Path;
use std::process::{Command, Output};

fn idemkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkv")).args(args).output().expect("run idemkv")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A store with some load in it.
fn loaded_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let path = store.to_str().expect("utf-8 path").to_string();
    let output =
        idemkv(&["load", &path, "--duration", "0.5", "--threads", "2", "--keys", "500", "--value-bytes", "64"]);
    assert!(output.status.success(), "load failed: {}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("fencing check: no key was ever held twice"), "{text}");
    assert!(text.contains("acquired 500"), "{text}");
    (dir, path)
}

#[test]
fn load_then_stats_in_three_formats() {
    let (_dir, path) = loaded_store();
    let text = stdout(&idemkv(&["stats", &path]));
    assert!(text.contains("records_completed                500"), "{text}");
    let json = stdout(&idemkv(&["stats", &path, "--format", "json"]));
    assert!(json.trim().starts_with('{') && json.contains("\"records_completed\":500"), "{json}");
    let prometheus = stdout(&idemkv(&["stats", &path, "--format", "prometheus"]));
    assert!(prometheus.contains("# TYPE idemkv_shards gauge\nidemkv_shards 4"), "{prometheus}");
}

#[test]
fn get_and_list_show_records() {
    let (_dir, path) = loaded_store();
    let output = idemkv(&["get", &path, "load-0000000000000007"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("state=Completed") && text.contains(&format!("response: {}", "v".repeat(64))), "{text}");
    let missing = idemkv(&["get", &path, "no-such-key", "--scope", "nobody"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("no live record"));
    let listed = stdout(&idemkv(&["list", &path, "--state", "completed", "--limit", "7"]));
    assert_eq!(listed.lines().count(), 7, "{listed}");
    let none = stdout(&idemkv(&["list", &path, "--state", "processing"]));
    assert_eq!(none.lines().count(), 0, "{none}");
}

#[test]
fn verify_and_compact_a_clean_store() {
    let (_dir, path) = loaded_store();
    let output = idemkv(&["verify", &path]);
    assert!(output.status.success());
    assert!(stdout(&output).contains("1000 records") && stdout(&output).contains("clean"), "{}", stdout(&output));
    let output = idemkv(&["compact", &path]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("segments dropped 0"), "{}", stdout(&output));
}

#[test]
fn verify_reports_a_damaged_segment_with_file_and_offset() {
    let (_dir, path) = loaded_store();
    let segment = Path::new(&path).join("shard-0000/0000000001.seg");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[64 + 20] ^= 0xFF; // inside the first record (after the 64-byte header)
    std::fs::write(&segment, bytes).expect("write");
    let output = idemkv(&["verify", &path]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(text.contains(&format!("DAMAGE: {} offset 64", segment.display())), "{text}");
}

#[test]
fn bad_arguments_missing_and_foreign_directories_fail_cleanly() {
    let bad = idemkv(&["load"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("Usage"), "{}", stderr(&bad));
    let bad_ratio = idemkv(&["load", "/tmp/x", "--replay-ratio", "3"]);
    assert_eq!(bad_ratio.status.code(), Some(2));
    assert!(stderr(&bad_ratio).starts_with("idemkv: "), "{}", stderr(&bad_ratio));
    let unknown = idemkv(&["frobnicate"]);
    assert_eq!(unknown.status.code(), Some(2));

    let missing = idemkv(&["stats", "/nonexistent/idemkv"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("not an idemkv store"), "{}", stderr(&missing));
    let foreign = tempfile::tempdir().expect("tempdir");
    std::fs::write(foreign.path().join("notes.txt"), b"mine").expect("write");
    let path = foreign.path().to_str().expect("utf-8");
    for command in ["stats", "verify", "compact"] {
        let output = idemkv(&[command, path]);
        assert_eq!(output.status.code(), Some(2), "{command}");
        assert!(stderr(&output).contains("not an idemkv store"), "{command}: {}", stderr(&output));
        assert!(!stderr(&output).contains("panicked"), "{command}");
    }
}

#[test]
fn a_directory_held_by_a_live_store_names_the_holder() {
    let (_dir, path) = loaded_store();
    let store = idemkv::Store::open(&path, idemkv::Config::new()).expect("open");
    let output = idemkv(&["stats", &path]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(message.contains(&format!("process {}", std::process::id())), "{message}");
    // verify reads without the lock.
    assert!(idemkv(&["verify", &path]).status.success());
    drop(store);
}
