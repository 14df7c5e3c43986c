//! Guards the lease of a handler that blocks a runtime worker outright
//! (`std::thread::sleep`, no `block_in_place`) for three leases: the
//! layer's keeper renews it from its own thread, so a claim of the same
//! key mid-run finds it in progress, and the handler runs once.
//!
//! A worker blocked that way can also stall the runtime's I/O driver
//! (tokio polls it from an idle worker; none may be idle when the blocked
//! one last held it), so nothing here waits on that runtime while the
//! handler blocks: the test's own thread sleeps, and it claims the key
//! straight on the embedded store, which needs no runtime. The HTTP
//! conformance scenario `keepalive_blocking` runs on every backend with
//! `block_in_place`, as tokio asks of blocking code.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter};
use idemkv::http::LayerConfig;
use idemkv::{Claim, ClaimRequest, Config, State as RecordState};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(2);

/// Blocks its worker for three leases.
async fn blocking(State(runs): State<Counter>) -> (StatusCode, String) {
    let run = runs.bump();
    std::thread::sleep(3 * LEASE);
    (StatusCode::CREATED, format!("payment {run}"))
}

#[test]
fn a_handler_that_blocks_its_worker_keeps_its_lease_and_runs_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let runs = Counter::default();
    let routes = Router::new().route("/payments", post(blocking)).with_state(runs.clone());
    let server = runtime.block_on(Server::start(Config::new(), LayerConfig::global().lease(LEASE), routes));
    let client = client();
    let url = server.url("/payments");
    let first = runtime.spawn(send(post_to(&client, &url, "order-blocking", "amount=1")));

    let deadline = Instant::now() + Duration::from_secs(10);
    while runs.get() < 1 {
        assert!(Instant::now() < deadline, "the handler did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    // Past the first lease, well before the handler returns.
    std::thread::sleep(LEASE + LEASE / 2);
    let record = server.store.get(b"", b"order-blocking").expect("get").expect("the key is held");
    assert_eq!(record.state, RecordState::Processing, "{record:?}");
    let claim =
        server.store.claim(&ClaimRequest::new("order-blocking", record.fingerprint).lease(LEASE)).expect("claim");
    assert!(started.elapsed() < 3 * LEASE, "the claim came after the handler returned: the check proves nothing");
    assert!(matches!(claim, Claim::InProgress { attempt: 1, .. }), "the lease lapsed mid-run: {claim:?}");

    let first = runtime.block_on(first).expect("join");
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (201, "payment 1", false), "{first:?}");
    assert_eq!(first.header("idempotency-stored"), None, "the answer was not kept: {first:?}");
    let retry = runtime.block_on(send(post_to(&client, &url, "order-blocking", "amount=1")));
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "payment 1", true), "{retry:?}");
    assert_eq!(runs.get(), 1, "the handler ran twice");
    drop(server);
    runtime.shutdown_timeout(Duration::from_secs(5));
}
