//! `idemkv load` run as a user would, with the inputs that used to panic or
//! abort (after creating the store directory), a reader that closes the
//! pipe early, and latencies that must not be clamped to a tiny bound.
#![cfg(feature = "cli")]

use std::io::Read;
use std::process::{Command, Output, Stdio};

fn idemkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkv")).args(args).output().expect("run idemkv")
}

#[test]
fn arguments_out_of_range_are_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let path = store.to_str().expect("utf-8");
    let cases: [&[&str]; 7] = [
        &["--duration", "nan"],
        &["--duration", "inf"],
        &["--duration", "1e30"],
        &["--duration", "1e19"],
        &["--keys", "18446744073709551615"],
        &["--keys", "1000000000000"],
        &["--threads", "100000"],
    ];
    for case in cases {
        let mut args = vec!["load", path];
        args.extend_from_slice(case);
        let output = idemkv(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{case:?}: {stderr}");
        assert!(stderr.starts_with("idemkv: --"), "{case:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{case:?}: {stderr}");
        assert!(!store.exists(), "{case:?} created the store directory");
    }
}

#[test]
fn a_reader_that_closes_the_pipe_ends_list_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let path = path.to_str().expect("utf-8");
    let loaded = idemkv(&["load", path, "--duration", "0.3", "--threads", "2", "--keys", "3000"]);
    assert!(loaded.status.success(), "{}", String::from_utf8_lossy(&loaded.stderr));
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemkv"))
        .args(["list", path, "--limit", "3000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Read one line's worth, then close the pipe like `head -1`.
    let mut first = [0u8; 16];
    child.stdout.take().expect("stdout").read_exact(&mut first).expect("first bytes");
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn sync_latencies_are_not_clamped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let path = path.to_str().expect("utf-8");
    let output =
        idemkv(&["load", path, "--duration", "0.5", "--threads", "1", "--keys", "1000", "--durability", "sync"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let p50 = text.lines().find(|line| line.starts_with("claim latency p50: ")).expect("a p50 line");
    // Every Sync claim waits for an fsync: far above the old 2 ns clamp.
    assert!(!p50.ends_with("ns"), "{p50}");
}
