//! The outbox inside the caller's own PostgreSQL transaction: a business
//! row, the key's completion and its staged message commit together — the
//! relay then delivers the message once — or roll back together: no row,
//! nothing staged, nothing delivered, and the key is still held.

#![cfg(all(feature = "postgres", feature = "messaging"))]

use crate::common::postgres::PostgresServer;
use crate::common::Kept;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    messaging,
    messaging::{KeyDelivery, OutboxMessage, Relay, RelayConfig},
    Config, Fingerprint, LeaseToken,
};
use std::sync::Arc;
use std::time::Duration;

async fn acquire(backend: &PostgresBackend, key: &[u8]) -> LeaseToken {
    let options = ClaimOptions::new().lease(Duration::from_secs(5)).ttl(Duration::from_secs(60));
    match backend.claim(b"shop", key, Fingerprint::of(key), options).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Inserts the order row, completes the key with its event staged, in one
/// transaction; commits or rolls back.
async fn place(backend: &PostgresBackend, token: &LeaseToken, order: &str, commit: bool) {
    let mut client = backend.pool().get().await.expect("client");
    let transaction = client.transaction().await.expect("begin");
    transaction.execute("INSERT INTO orders (id) VALUES ($1)", &[&order]).await.expect("insert");
    let event = OutboxMessage::new("orders", format!("{order} placed").into_bytes());
    let stored = messaging::envelope(token, b"201 placed", &[event]).expect("envelope");
    backend.complete_in(&transaction, token, &stored).await.expect("complete_in");
    if commit {
        transaction.commit().await.expect("commit");
    } else {
        transaction.rollback().await.expect("rollback");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_commits_and_rolls_back_with_the_business_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let backend = Arc::new(PostgresBackend::connect(&server.url(), Config::new()).await.expect("connect"));
    let client = backend.pool().get().await.expect("client");
    client.batch_execute("CREATE TABLE orders (id text PRIMARY KEY)").await.expect("table");
    drop(client);
    let kept = Kept::default();
    let relay = Relay::new(Arc::clone(&backend), kept.clone(), RelayConfig::new(["shop"]));

    let token = acquire(&backend, b"order-1").await;
    place(&backend, &token, "order-1", false).await;
    assert_eq!(relay.sweep().await.expect("sweep").keys, 0, "rolled back: nothing staged");
    assert_eq!(relay.deliver_key(b"shop", b"order-1").await.expect("deliver"), None);
    let record = backend.get(b"shop", b"order-1").await.expect("get").expect("still held");
    assert_eq!(record.state, idemkv::State::Processing);

    place(&backend, &token, "order-1", true).await;
    assert_eq!(relay.sweep().await.expect("sweep").delivered, 1, "committed: staged and delivered");
    assert_eq!(relay.sweep().await.expect("sweep").delivered, 0, "once");
    assert_eq!(relay.deliver_key(b"shop", b"order-1").await.expect("deliver"), None::<KeyDelivery>);
    let delivered = kept.0.lock().expect("lock").clone();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].payload, b"order-1 placed");
    match backend.claim(b"shop", b"order-1", Fingerprint::of(b"order-1"), ClaimOptions::new()).await.expect("claim") {
        BackendClaim::Replay(stored) => assert_eq!(messaging::response_of(&stored), b"201 placed"),
        other => panic!("expected Replay, got {other:?}"),
    }
}
