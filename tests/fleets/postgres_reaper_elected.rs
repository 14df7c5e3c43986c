//! The elected reaper on a real PostgreSQL server: two backends on one
//! database, both with the default-on reaper; exactly one holds the
//! schema's advisory lock at a time (each backend says so, and the
//! server's `pg_locks` shows one holder among the two reaper sessions);
//! expired rows are deleted by it alone within a bounded time; when the
//! reaping backend drops, its session ends, the server releases the lock
//! and the other takes over and reaps.

#![cfg(feature = "postgres")]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::{PostgresBackend, PostgresOptions, Reaping};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint,
};
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_millis(100);
/// How long anything the test waits for may take: far more than the few
/// intervals it needs.
const PATIENCE: Duration = Duration::from_secs(15);

async fn connect(url: &str) -> PostgresBackend {
    let options = PostgresOptions::new().pool_size(4).reaping(Reaping::every(INTERVAL).batch(7));
    PostgresBackend::connect_with_options(url.parse().expect("url"), Config::new(), options).await.expect("connect")
}

/// Sessions named `idemkv-reaper`, and how many of them hold an advisory
/// lock.
async fn reaper_sessions(backend: &PostgresBackend) -> (i64, i64) {
    let client = backend.pool().get().await.expect("client");
    let row = client
        .query_one(
            "SELECT count(DISTINCT a.pid), count(DISTINCT l.pid) FROM pg_stat_activity a \
             LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted \
             WHERE a.application_name = 'idemkv-reaper'",
            &[],
        )
        .await
        .expect("sessions");
    (row.get(0), row.get(1))
}

async fn rows(backend: &PostgresBackend) -> i64 {
    let client = backend.pool().get().await.expect("client");
    client.query_one("SELECT count(*) FROM idempo_store", &[]).await.expect("count").get(0)
}

/// `count` keys completed with a 100 ms TTL: expired 100 ms later.
async fn expiring(backend: &PostgresBackend, prefix: &str, count: u32) {
    let short = ClaimOptions::new().lease(Duration::from_millis(100)).ttl(Duration::from_millis(100));
    for n in 0..count {
        let key = format!("{prefix}-{n}");
        match backend.claim(b"", key.as_bytes(), Fingerprint::of(b"body"), short).await.expect("claim") {
            BackendClaim::Acquired { token, .. } => backend.complete(&token, b"done").await.expect("complete"),
            other => panic!("expected Acquired, got {other:?}"),
        }
    }
}

/// Waits (bounded) until `done` holds; whether it did.
async fn until(mut done: impl AsyncFnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < PATIENCE {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_reaps_and_another_takes_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let (first, second) = (connect(&server.url()).await, connect(&server.url()).await);
    assert!(until(async || first.reaping() || second.reaping()).await, "one of them takes the lock");
    assert!(until(async || reaper_sessions(&first).await == (2, 1)).await, "two reaper sessions, one holder");
    // Sampled over many intervals: never both, never neither.
    for _ in 0..40 {
        assert!(first.reaping() ^ second.reaping(), "exactly one reaps");
        tokio::time::sleep(INTERVAL / 4).await;
    }
    let (leader, follower) = if first.reaping() { (first, second) } else { (second, first) };
    let long = ClaimOptions::new().ttl(Duration::from_secs(600));
    match leader.claim(b"", b"live", Fingerprint::of(b"body"), long).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => leader.complete(&token, b"kept").await.expect("complete"),
        other => panic!("expected Acquired, got {other:?}"),
    }
    expiring(&leader, "a", 20).await;
    expiring(&follower, "b", 20).await;
    assert!(until(async || rows(&leader).await == 1).await, "the 40 expired rows are reaped: {}", rows(&leader).await);
    // The count moves after the delete commits: the rows can be seen gone
    // an instant before the last batch is counted.
    assert!(until(async || leader.reaped() >= 40).await, "the leader deleted them: {}", leader.reaped());
    assert_eq!(follower.reaped(), 0, "the follower deleted none");
    assert!(!follower.reaping());

    drop(leader);
    assert!(until(async || follower.reaping()).await, "the follower takes the lock once the leader's session ends");
    assert!(until(async || reaper_sessions(&follower).await == (1, 1)).await, "one session left, holding the lock");
    expiring(&follower, "c", 20).await;
    assert!(until(async || rows(&follower).await == 1).await, "the new leader reaps: {}", rows(&follower).await);
    assert!(until(async || follower.reaped() >= 20).await, "{}", follower.reaped());
    assert!(follower.get(b"", b"live").await.expect("get").is_some(), "the live row stays");
}
