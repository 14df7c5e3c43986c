//! `complete_in` inside the caller's transaction, on a real server: the
//! business row and the key's completion commit together (the retry
//! replays and the row exists) or roll back together (no row, the key is
//! still held, and the retry after the lease is a `recovered` attempt).

#![cfg(feature = "postgres")]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Error, Fingerprint, LeaseToken, State,
};
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(400);

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60))
}

async fn acquire(backend: &PostgresBackend, key: &[u8]) -> (LeaseToken, u32, bool) {
    match backend.claim(b"shop", key, Fingerprint::of(b"charge 10"), options()).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, .. } => (token, attempt, recovered),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn charges(backend: &PostgresBackend, order: &str) -> i64 {
    let client = backend.pool().get().await.expect("client");
    let row = client.query_one("SELECT count(*) FROM charges WHERE order_id = $1", &[&order]).await.expect("count");
    row.get(0)
}

/// Charges `order` and completes the key in one transaction; commits or
/// rolls back.
async fn charge(backend: &PostgresBackend, token: &LeaseToken, order: &str, commit: bool) {
    let mut client = backend.pool().get().await.expect("client");
    let transaction = client.transaction().await.expect("begin");
    transaction.execute("INSERT INTO charges (order_id, cents) VALUES ($1, 1000)", &[&order]).await.expect("insert");
    backend.complete_in(&transaction, token, b"201 charged").await.expect("complete_in");
    if commit {
        transaction.commit().await.expect("commit");
    } else {
        transaction.rollback().await.expect("rollback");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_commits_and_rolls_back_with_the_business_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let backend = PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let client = backend.pool().get().await.expect("client");
    client.batch_execute("CREATE TABLE charges (order_id text NOT NULL, cents bigint NOT NULL)").await.expect("table");
    drop(client);

    // Commit: the charge exists and the retry replays.
    let (token, _, _) = acquire(&backend, b"order-1").await;
    charge(&backend, &token, "order-1", true).await;
    assert_eq!(charges(&backend, "order-1").await, 1);
    match backend.claim(b"shop", b"order-1", Fingerprint::of(b"charge 10"), options()).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"201 charged"),
        other => panic!("expected Replay after the commit, got {other:?}"),
    }
    assert!(matches!(backend.complete(&token, b"again").await, Err(Error::LeaseLost { .. })));

    // Rollback: no charge, the key still held by the token.
    let (token, _, _) = acquire(&backend, b"order-2").await;
    charge(&backend, &token, "order-2", false).await;
    assert_eq!(charges(&backend, "order-2").await, 0, "the charge rolled back");
    let record = backend.get(b"shop", b"order-2").await.expect("get").expect("present");
    assert_eq!((record.state, record.token), (State::Processing, token.token), "the key is still held");
    assert!(
        matches!(
            backend.claim(b"shop", b"order-2", Fingerprint::of(b"charge 10"), options()).await,
            Ok(BackendClaim::InProgress { .. })
        ),
        "within the lease the retry waits"
    );
    tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
    let (retry, attempt, recovered) = acquire(&backend, b"order-2").await;
    assert_eq!((attempt, recovered), (2, true), "after the lease the retry is a recovered attempt");
    assert!(retry.token > token.token);
    charge(&backend, &retry, "order-2", true).await;
    assert_eq!(charges(&backend, "order-2").await, 1, "charged once");

    // A stale token inside a transaction: LeaseLost, and nothing commits.
    let mut client = backend.pool().get().await.expect("client");
    let transaction = client.transaction().await.expect("begin");
    let lost = backend.fail_in(&transaction, &token, b"late").await;
    assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{lost:?}");
    transaction.rollback().await.expect("rollback");
}
