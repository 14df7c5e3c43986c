//! `idemkv load --redis` run as a user would, against real servers started
//! here: the summary's figures agree with each other and with the server,
//! each run claims under a scope of its own, a Cluster is loaded through
//! `--redis-cluster`, and an unreachable server, a bad URL or a server
//! killed mid-run is a one-line error with exit 2, never a panic.
#![cfg(feature = "redis")]

use crate::common::redis::{free_port, RedisCluster, RedisServer};
use crate::support::{assert_fails, binary, idemkv, scratch, stderr, stdout};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A count of the summary (`3,260,114`) after `label` on the line that
/// starts with `line`.
fn figure(summary: &str, line: &str, label: &str) -> u64 {
    let text = summary.lines().find(|text| text.starts_with(line)).unwrap_or_else(|| panic!("no {line:?}: {summary}"));
    let after = text.split(label).nth(1).unwrap_or_else(|| panic!("no {label:?} in {text}"));
    let digits: String = after.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == ',').collect();
    digits.replace(',', "").parse().unwrap_or_else(|_| panic!("no number after {label:?} in {text}"))
}

/// Checks a clean run's summary: every claim answered once, some acquired,
/// no key held twice; returns the count acquired.
fn check_summary(output: &std::process::Output, target: &str) -> u64 {
    let text = stdout(output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(output));
    let first = text.lines().next().unwrap_or_default();
    let claims: u64 = first.split(' ').next().and_then(|count| count.replace(',', "").parse().ok()).expect(first);
    let answers: u64 =
        ["acquired", "replay", "in progress", "mismatch"].iter().map(|label| figure(&text, "answers: ", label)).sum();
    let acquired = figure(&text, "answers: ", "acquired");
    assert!(claims > 0 && acquired > 0, "{text}");
    assert_eq!(claims, answers, "each claim has one answer: {text}");
    assert_eq!(figure(&text, "answers: ", "mismatch"), 0, "{text}");
    assert!(text.contains(" on 8 tasks: "), "{text}");
    assert!(text.contains("claim latency: p50 "), "{text}");
    assert!(text.lines().any(|line| line.starts_with("redis: ") && line.contains(target)), "{text}");
    assert!(text.contains("fencing check: no key was ever held twice"), "{text}");
    acquired
}

#[test]
fn a_load_on_a_server_adds_up() {
    let dir = scratch();
    let server = RedisServer::start(&dir.path().join("redis"));
    let url = server.url();
    let args = ["load", "--redis", &url, "--duration", "1", "--tasks", "8", "--keys", "2000", "--ttl", "600"];
    let acquired = check_summary(&idemkv(&args), &url);
    // Each acquired key left its record on the server.
    let keys: u64 = server.cli(&["dbsize"]).and_then(|size| size.trim().parse().ok()).expect("dbsize");
    assert!(keys >= acquired, "{keys} keys on the server for {acquired} acquired");
    // A second run has a scope of its own: it acquires again instead of
    // replaying the first run's keys.
    check_summary(&idemkv(&args), &url);
}

#[test]
fn a_load_on_a_cluster_adds_up() {
    let dir = scratch();
    let cluster = RedisCluster::start(dir.path());
    let nodes = cluster.urls().join(",");
    let args = ["load", "--redis-cluster", &nodes, "--duration", "1", "--tasks", "8", "--keys", "2000"];
    check_summary(&idemkv(&args), &nodes);
}

#[test]
fn an_unreachable_server_or_a_bad_url_is_one_line_and_exit_2() {
    let nobody = format!("redis://127.0.0.1:{}", free_port());
    let output = idemkv(&["load", "--redis", &nobody, "--duration", "1"]);
    assert_fails(&output, 2, &format!("cannot connect to {nobody}: "), "unreachable");
    assert!(stdout(&output).is_empty(), "{}", stdout(&output));
    let output = idemkv(&["load", "--redis-cluster", &format!("{nobody},{nobody}"), "--duration", "1"]);
    assert_fails(&output, 2, "cannot connect to ", "unreachable cluster");
    for url in ["http://127.0.0.1:6379", "", "redis://:@:99999999"] {
        assert_fails(&idemkv(&["load", "--redis", url, "--duration", "1"]), 2, "--redis", url);
    }
    let cases: [&[&str]; 5] = [
        &["--redis", &nobody, "--threads", "4"],
        &["--redis", &nobody, "--durability", "sync"],
        &["--redis", &nobody, "--tasks", "0"],
        &["--redis", &nobody, "--ttl", "0"],
        &["some-dir", "--tasks", "4"],
    ];
    for case in cases {
        assert_fails(&idemkv(&[&["load"][..], case].concat()), 2, "--", &format!("{case:?}"));
    }
    // Usage errors, as clap words them.
    for case in [&["--redis", &nobody, "--redis-cluster", &nobody][..], &["some-dir", "--redis", &nobody]] {
        let output = idemkv(&[&["load"][..], case].concat());
        assert_eq!(output.status.code(), Some(2), "{case:?}");
        assert!(stderr(&output).starts_with("error: the argument "), "{case:?}: {}", stderr(&output));
    }
}

#[test]
fn a_server_killed_mid_run_stops_the_load_with_its_summary() {
    let dir = scratch();
    let mut server = RedisServer::start(&dir.path().join("redis"));
    let child = Command::new(binary())
        .args(["load", "--redis", &server.url(), "--duration", "30", "--tasks", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idemkv load");
    std::thread::sleep(Duration::from_millis(800));
    server.kill();
    let output = child.wait_with_output().expect("idemkv load ends");
    assert_fails(&output, 2, "load stopped early: ", "server killed");
    let text = stdout(&output);
    assert!(figure(&text, "answers: ", "acquired") > 0, "{text}");
    assert!(!text.contains("fencing check: no key"), "a failed run claims a clean check: {text}");
}
