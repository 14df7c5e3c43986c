//! When the Redis backend's finish publishes, counted on a real server
//! (`INFO commandstats` counts the commands a script runs): never for a key
//! no caller waits on, once for a key a waiting caller marked — and that
//! waiter is woken by it. (The conformance scenario `claim_wait` checks the
//! wake-up's timing on every backend.)

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint, LeaseToken,
};
use std::time::{Duration, Instant};

/// `PUBLISH` calls the server has run, scripts' included.
fn publishes(server: &RedisServer) -> u64 {
    let stats = server.cli(&["info", "commandstats"]).expect("info");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_publish:calls="))
        .map_or(0, |rest| rest.split(',').next().expect("calls").parse().expect("a count"))
}

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(10)).ttl(Duration::from_secs(60))
}

async fn acquire(backend: &RedisBackend, key: &[u8]) -> LeaseToken {
    match backend.claim(b"", key, Fingerprint::of(b"body"), options()).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_publishes_only_when_a_waiter_marked_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");

    // Completions, failures, releases and a duplicate that does not wait.
    for n in 0..10 {
        let key = format!("alone-{n}");
        let token = acquire(&backend, key.as_bytes()).await;
        let duplicate = backend.claim(b"", key.as_bytes(), Fingerprint::of(b"body"), options()).await;
        assert!(matches!(duplicate, Ok(BackendClaim::InProgress { .. })), "{duplicate:?}");
        match n % 3 {
            0 => backend.complete(&token, b"done").await.expect("complete"),
            1 => backend.fail(&token, b"failed").await.expect("fail"),
            _ => backend.release(&token).await.expect("release"),
        }
    }
    assert_eq!(publishes(&server), 0, "nobody waited: nothing to publish");

    let token = acquire(&backend, b"waited").await;
    let waiter = {
        let backend = backend.clone();
        tokio::spawn(async move {
            let wait = options().wait(Some(Duration::from_secs(20)));
            backend.claim(b"", b"waited", Fingerprint::of(b"body"), wait).await
        })
    };
    // The waiter has marked the key and subscribed to its channel.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cli(&["--raw", "pubsub", "channels"]).expect("channels").trim().is_empty() {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    backend.complete(&token, b"waited for").await.expect("complete");
    let answer = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("woken").expect("join");
    assert!(matches!(answer, Ok(BackendClaim::Replay(ref response)) if response == b"waited for"), "{answer:?}");
    assert_eq!(publishes(&server), 1, "one waiter marked the key: one publish");
}
