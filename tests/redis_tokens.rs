//! What the Redis backend's fencing tokens rest on, checked on a real
//! server: a key's token counter always outlives its record by the keep
//! time (after a claim, a finish within the lease, a late finish, a
//! renewal), and once both are gone a new token is still above every
//! earlier one (it is the server's time in µs).

#![cfg(all(feature = "tokio", feature = "redis"))]

mod common;

use common::redis::RedisServer;
use idemkv::redis::RedisBackend;
use idemkv::{BackendClaim, ClaimOptions, Config, Fingerprint, IdempotencyBackend, LeaseToken};
use std::time::Duration;

const KEEP: Duration = Duration::from_millis(1500);

/// Remaining life (ms) of the key of `(prefix, kind)` whose name ends in
/// `suffix` (`r` record, `n` counter), `-2` if absent.
fn pttl(server: &RedisServer, prefix: &str, suffix: &str) -> i64 {
    let names = server.cli(&["--raw", "keys", &format!("{prefix}:*:{suffix}")]).expect("keys");
    let Some(name) = names.lines().next().filter(|name| !name.is_empty()) else {
        return -2;
    };
    server.cli(&["pttl", name]).expect("pttl").trim().parse().expect("a number")
}

async fn claim(backend: &RedisBackend, options: ClaimOptions) -> LeaseToken {
    match backend.claim(b"", b"key", Fingerprint::of(b"body"), options).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// The counter lives at least `KEEP` (less a little for the time between
/// the two reads) beyond the record.
fn assert_counter_outlives(server: &RedisServer, prefix: &str, when: &str) {
    let (record, counter) = (pttl(server, prefix, "r"), pttl(server, prefix, "n"));
    assert!(record > 0, "{when}: the record lives ({record})");
    let keep = i64::try_from(KEEP.as_millis()).expect("small");
    assert!(counter >= record + keep - 50, "{when}: counter {counter} ms, record {record} ms, keep {keep} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counter_outlives_the_record_and_tokens_never_repeat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let connect = |prefix: &str| {
        let (url, prefix) = (server.url(), prefix.to_string());
        async move { RedisBackend::connect(&url, Config::new()).await.expect("connect").prefix(&prefix).token_keep(KEEP) }
    };
    let options = ClaimOptions::new().lease(Duration::from_millis(400)).ttl(Duration::from_millis(600));

    // A finish within the lease.
    let backend = connect("within").await;
    let first = claim(&backend, options).await;
    assert_counter_outlives(&server, "within", "after a claim");
    backend.complete(&first, b"done").await.expect("complete");
    assert_counter_outlives(&server, "within", "after a finish within the lease");

    // A late finish (the lease ended, nobody took the key over) and a
    // renewal.
    let backend = connect("late").await;
    let held = claim(&backend, options).await;
    backend.renew(&held, Duration::from_millis(800)).await.expect("renew");
    assert_counter_outlives(&server, "late", "after a renewal");
    tokio::time::sleep(Duration::from_millis(900)).await;
    backend.complete(&held, b"late").await.expect("a late finish of an untaken key");
    assert_counter_outlives(&server, "late", "after a late finish");

    // Record and counter both expire; the next token is still larger.
    let backend = connect("gone").await;
    let mut last = 0;
    for round in 0..2 {
        let token = claim(&backend, options).await;
        assert!(token.token > last, "round {round}: token {} after {last}", token.token);
        last = token.token;
        backend.complete(&token, b"done").await.expect("complete");
        // The counter goes at lease end + TTL + keep.
        tokio::time::sleep(Duration::from_millis(400 + 600 + 300) + KEEP).await;
        assert_eq!((pttl(&server, "gone", "r"), pttl(&server, "gone", "n")), (-2, -2), "both expired");
    }
}
