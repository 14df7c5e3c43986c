//! A PostgreSQL backend's connections are made and driven on the runtime
//! the backend was connected on, not on whichever runtime first used
//! them. A connection first used from another runtime that then stops
//! being polled — an actix-web worker's after its server stopped, a
//! runtime whose thread is busy — still answers every other caller, and
//! so does the connection that listens for waiters.

#![cfg(all(feature = "tokio", feature = "postgres"))]

use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use idemkv::{Config, Fingerprint};
use std::time::Duration;

/// A runtime of its own that runs `future` to its end and is then kept,
/// never polled again (as a stopped server's worker runtime is).
fn on_a_runtime_left_idle<F: std::future::Future>(future: F) -> (tokio::runtime::Runtime, F::Output) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let output = runtime.block_on(future);
    (runtime, output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_first_used_on_an_idle_runtime_still_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(dir.path());
    let client = server.url().parse().expect("url");
    // One connection, so that every call below takes the same one.
    let backend = PostgresBackend::connect_with(client, 1, Config::new()).await.expect("connect");
    // The connection opened while connecting is let go: the next call
    // opens the pool's only connection, from the other runtime.
    let _ = backend.pool().retain(|_, _| false);

    let fingerprint = Fingerprint::of(b"POST /payments amount=1");
    let elsewhere = backend.clone();
    let (idle, first) = std::thread::spawn(move || {
        on_a_runtime_left_idle(elsewhere.claim(b"runtimes", b"order-1", fingerprint, ClaimOptions::new()))
    })
    .join()
    .expect("thread");
    assert!(matches!(first, Ok(BackendClaim::Acquired { .. })), "{first:?}");

    // That runtime is never polled again; the connection still answers.
    let bound = Duration::from_secs(20);
    for order in ["order-1", "order-2"] {
        let claim = backend.claim(b"runtimes", order.as_bytes(), fingerprint, ClaimOptions::new());
        let claim = tokio::time::timeout(bound, claim).await.expect("the claim answers");
        assert!(
            matches!(claim, Ok(BackendClaim::InProgress { .. } | BackendClaim::Acquired { .. })),
            "{order}: {claim:?}"
        );
    }
    idle.shutdown_background();
}
