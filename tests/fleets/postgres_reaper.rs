//! The reaper on a real server: `reap` deletes expired rows in bounded
//! batches and leaves live ones (processing or finished), and the
//! background reaper empties the table of expired rows by itself.

#![cfg(feature = "postgres")]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::{PostgresBackend, PostgresOptions, Reaping};
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Fingerprint,
};
use std::time::{Duration, Instant};

async fn rows(backend: &PostgresBackend) -> i64 {
    let client = backend.pool().get().await.expect("client");
    client.query_one("SELECT count(*) FROM idempo_store", &[]).await.expect("count").get(0)
}

async fn claim_complete(backend: &PostgresBackend, key: &str, options: ClaimOptions) {
    match backend.claim(b"", key.as_bytes(), Fingerprint::of(b"body"), options).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => backend.complete(&token, b"done").await.expect("complete"),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_are_reaped_in_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    // No elected reaper: this test counts what `reap` deletes itself.
    let options = PostgresOptions::new().reaping(Reaping::Off);
    let client = server.url().parse().expect("url");
    let backend = PostgresBackend::connect_with_options(client, Config::new(), options).await.expect("connect");
    // Writing the 32 rows takes well under the second before the first
    // finished row expires; abandoned claims expire 2 s after their claim.
    let short = ClaimOptions::new().lease(Duration::from_secs(1)).ttl(Duration::from_secs(1));
    let started = Instant::now();
    let long = ClaimOptions::new().lease(Duration::from_secs(60)).ttl(Duration::from_secs(600));
    for n in 0..25 {
        claim_complete(&backend, &format!("short-{n}"), short).await;
    }
    // Abandoned claims expire too (lease + TTL).
    for n in 0..5 {
        let answer = backend.claim(b"", format!("abandoned-{n}").as_bytes(), Fingerprint::of(b"body"), short).await;
        assert!(matches!(answer, Ok(BackendClaim::Acquired { .. })), "{answer:?}");
    }
    let abandoned = Instant::now();
    claim_complete(&backend, "live-finished", long).await;
    let held = backend.claim(b"", b"live-held", Fingerprint::of(b"body"), long).await.expect("claim");
    assert!(matches!(held, BackendClaim::Acquired { .. }));
    assert_eq!(rows(&backend).await, 32);
    assert!(started.elapsed() < Duration::from_millis(900), "the rows were written in time: {:?}", started.elapsed());
    assert_eq!(backend.reap(10).await.expect("reap"), 0, "nothing has expired yet");

    // Every short row has expired 2 s after the last abandoned claim, however
    // long the writes took on a loaded machine.
    tokio::time::sleep((abandoned + Duration::from_millis(2300)).saturating_duration_since(Instant::now())).await;
    assert_eq!(backend.reap(10).await.expect("reap"), 10, "one bounded batch");
    assert_eq!(backend.reap(10).await.expect("reap"), 10);
    assert_eq!(backend.reap(100).await.expect("reap"), 10, "the rest");
    assert_eq!(backend.reap(100).await.expect("reap"), 0);
    assert_eq!(rows(&backend).await, 2, "the live rows stay");
    assert!(backend.get(b"", b"live-finished").await.expect("get").is_some());
    assert!(backend.get(b"", b"live-held").await.expect("get").is_some());

    // The background reaper, in batches of 7.
    for n in 0..20 {
        claim_complete(&backend, &format!("background-{n}"), short).await;
    }
    let reaper = backend.spawn_reaper(Duration::from_millis(100), 7);
    let reaping = Instant::now();
    while rows(&backend).await > 2 && reaping.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows(&backend).await, 2, "the background reaper deleted the expired rows");
    drop(reaper);
}

/// A completion after its lease ended (no takeover came) moves the row's
/// expiry past the bound the reaper goes by; the bound follows, so the row
/// is neither reaped early nor missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_completed_after_its_lease_is_reaped_at_its_own_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let options = PostgresOptions::new().reaping(Reaping::Off);
    let client = server.url().parse().expect("url");
    let backend = PostgresBackend::connect_with_options(client, Config::new(), options).await.expect("connect");
    let claimed = Instant::now();
    let late = ClaimOptions::new().lease(Duration::from_millis(300)).ttl(Duration::from_millis(1500));
    let BackendClaim::Acquired { token, .. } =
        backend.claim(b"", b"late", Fingerprint::of(b"body"), late).await.expect("claim")
    else {
        panic!("a fresh key is acquired");
    };
    // Past the lease (at 0.3 s), before the claim's expiry (at 1.8 s).
    tokio::time::sleep(Duration::from_millis(800)).await;
    backend.complete(&token, b"done").await.expect("the token still holds: nothing took the key over");
    let completed = Instant::now();
    assert!(completed - claimed < Duration::from_millis(1700), "completed in time: {:?}", completed - claimed);
    // Past the claim's bound (1.8 s), before the completion's expiry
    // (completion + 1.5 s, at least 2.3 s).
    tokio::time::sleep((claimed + Duration::from_secs(2)).saturating_duration_since(Instant::now())).await;
    if completed.elapsed() < Duration::from_millis(1400) {
        assert_eq!(backend.reap(10).await.expect("reap"), 0, "the row lives until its completion's expiry");
        assert!(backend.get(b"", b"late").await.expect("get").is_some(), "still replayed");
    }
    tokio::time::sleep((completed + Duration::from_millis(1700)).saturating_duration_since(Instant::now())).await;
    assert_eq!(backend.reap(10).await.expect("reap"), 1, "reaped once expired");
    assert_eq!(rows(&backend).await, 0);
}
