//! A networked backend's connections are made and driven on the runtime
//! the backend was connected on, not on whichever runtime first used
//! them. A connection opened (PostgreSQL's pool) or reopened (Redis's
//! reconnection) from another runtime that then stops being polled — an
//! actix-web worker's after its server stopped, a runtime whose thread is
//! busy — still answers every other caller.

#![cfg(all(feature = "tokio", feature = "postgres", feature = "redis"))]

use crate::common::postgres::PostgresServer;
use crate::common::redis::RedisServer;
use idemkv::backend::postgres::PostgresBackend;
use idemkv::backend::redis::RedisBackend;
use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use idemkv::{Config, Fingerprint};
use std::time::Duration;

/// How long a call on the test's runtime may take: far more than an
/// answer needs, and more than the backends' own call timeouts (5 s).
const BOUND: Duration = Duration::from_secs(20);

/// A runtime of its own that runs `future` to its end and is then kept,
/// never polled again (as a stopped server's worker runtime is).
fn on_a_runtime_left_idle<F: std::future::Future>(future: F) -> (tokio::runtime::Runtime, F::Output) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let output = runtime.block_on(future);
    (runtime, output)
}

/// `order-1` (in progress) and `order-2` (fresh) claimed from the test's
/// runtime, each answered within [`BOUND`].
async fn claims_answer(backend: &impl IdempotencyBackend, fingerprint: Fingerprint) {
    for order in ["order-1", "order-2"] {
        let claim = backend.claim(b"runtimes", order.as_bytes(), fingerprint, ClaimOptions::new());
        let claim = tokio::time::timeout(BOUND, claim).await.expect("the claim answers");
        assert!(
            matches!(claim, Ok(BackendClaim::InProgress { .. } | BackendClaim::Acquired { .. })),
            "{order}: {claim:?}"
        );
    }
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
    claims_answer(&backend, fingerprint).await;
    idle.shutdown_background();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reconnected_on_an_idle_runtime_still_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    // The backend's connection is lost with the server; the next call
    // finds it lost and reconnects.
    server.kill();
    server.restart();

    let fingerprint = Fingerprint::of(b"POST /payments amount=1");
    let elsewhere = backend.clone();
    let (idle, answered) = std::thread::spawn(move || {
        on_a_runtime_left_idle(async move {
            for _ in 0..100 {
                if elsewhere.claim(b"runtimes", b"order-1", fingerprint, ClaimOptions::new()).await.is_ok() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        })
    })
    .join()
    .expect("thread");
    assert!(answered, "a call on the other runtime was answered after the restart");

    // That runtime is never polled again; the reconnected connection
    // still answers.
    claims_answer(&backend, fingerprint).await;
    idle.shutdown_background();
}
