//! `idemkv load` stopped by an I/O error (here a file-size limit, as a full
//! disk would) still prints its summary, so the count of acknowledged
//! claims is not lost, and exits 2 with the error in one line.

use crate::support::{binary, scratch};
use std::process::Command;

#[test]
fn a_load_stopped_by_a_write_error_prints_its_summary() {
    let dir = scratch();
    let store = dir.path().join("store");
    let path = store.to_str().expect("utf-8");
    // Writes past 1 MiB fail with EFBIG (the signal that would kill the
    // process instead is ignored, and stays ignored across exec).
    let script = format!(
        "trap '' XFSZ; ulimit -f 1024; exec {} load {path} --duration 5 --keys 1000000 --replay-ratio 0",
        binary()
    );
    let output = Command::new("bash").args(["-c", &script]).output().expect("run bash");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.starts_with("idemkv: load stopped early: ") && stderr.contains("File too large"), "{stderr}");
    let answers = stdout.lines().find(|line| line.starts_with("answers: acquired ")).expect("a summary");
    assert!(!answers.starts_with("answers: acquired 0,"), "{answers}");
    assert!(stdout.contains("claim latency: p50 "), "{stdout}");
    assert!(!stdout.contains("fencing check: no key"), "a failed run claims a clean check: {stdout}");
}
