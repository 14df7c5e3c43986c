//! What the Redis backend's fencing tokens rest on, checked on a real
//! server: Redis keeps a record `keep` beyond its live time (after a claim,
//! a renewal, a finish, a release), so a new token grows from the last
//! one; once Redis has dropped it, a new token is still above every earlier
//! one (it is the server's time in µs).

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint, LeaseToken,
};
use std::time::Duration;

const KEEP: Duration = Duration::from_millis(1500);

/// Remaining life (ms) of the record of prefix `prefix`, `-2` if absent.
fn pttl(server: &RedisServer, prefix: &str) -> i64 {
    let names = server.cli(&["--raw", "keys", &format!("{prefix}:*:r")]).expect("keys");
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

/// Redis keeps the record `KEEP` beyond `live_ms` more of live time
/// (less a little for the time the calls took).
fn assert_kept(server: &RedisServer, prefix: &str, live_ms: i64, when: &str) {
    let left = pttl(server, prefix);
    let keep = i64::try_from(KEEP.as_millis()).expect("small");
    assert!(
        left > live_ms + keep - 200 && left <= live_ms + keep,
        "{when}: {left} ms left, live {live_ms} + keep {keep}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_outlive_their_life_by_keep_and_tokens_never_repeat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let connect = |prefix: &str| {
        let (url, prefix) = (server.url(), prefix.to_string());
        async move { RedisBackend::connect(&url, Config::new()).await.expect("connect").prefix(&prefix).token_keep(KEEP) }
    };
    let options = ClaimOptions::new().lease(Duration::from_millis(400)).ttl(Duration::from_millis(600));

    // Processing lives lease + TTL; finished, TTL; released, nothing.
    let backend = connect("kept").await;
    let first = claim(&backend, options).await;
    assert_kept(&server, "kept", 1000, "after a claim");
    backend.renew(&first, Duration::from_millis(800)).await.expect("renew");
    assert_kept(&server, "kept", 1400, "after a renewal");
    backend.complete(&first, b"done").await.expect("complete");
    assert_kept(&server, "kept", 600, "after a finish");
    let released = connect("released").await;
    let held = claim(&released, options).await;
    released.release(&held).await.expect("release");
    assert_kept(&server, "released", 0, "after a release");
    let again = claim(&released, options).await;
    assert!(again.token > held.token, "after a release: {} then {}", held.token, again.token);

    // Past its TTL the record is absent (a fresh attempt 1) but its token
    // is still there to grow from; once Redis dropped it too, the next
    // token is still larger.
    let backend = connect("gone").await;
    let mut last = 0;
    for (round, pause) in [Duration::from_millis(800), Duration::from_millis(800) + KEEP].into_iter().enumerate() {
        let token = claim(&backend, options).await;
        assert!(token.token > last, "round {round}: token {} after {last}", token.token);
        last = token.token;
        backend.complete(&token, b"done").await.expect("complete");
        tokio::time::sleep(pause).await;
        assert_eq!(backend.get(b"", b"key").await.expect("get"), None, "round {round}: expired");
    }
    assert_eq!(pttl(&server, "gone"), -2, "dropped by Redis after TTL + keep");
    let token = claim(&backend, options).await;
    assert!(token.token > last, "after Redis dropped the record: {} after {last}", token.token);
}
