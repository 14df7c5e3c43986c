//! Guards what the layer does when the store fails to keep an answer: a
//! completion refused by a full disk is tried again while the lease is
//! held, the key stays in progress meanwhile (a duplicate gets 409, never
//! a second run), and once the disk has room the answer is stored and
//! replayed. The layer once gave up at the first failure: the lease
//! lapsed, and the next retry ran the handler a second time.
#![cfg(all(feature = "tower", feature = "testing"))]

use crate::common::http::Server;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter};
use idemkv::http::LayerConfig;
use idemkv::io::{Fault, FaultyStorage, StdStorage};
use idemkv::{Config, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs the side effect, then fills the disk just before answering; the
/// disk gets its room back a second later.
async fn charge(State((runs, storage)): State<(Counter, FaultyStorage)>) -> (StatusCode, String) {
    let run = runs.bump();
    storage.fail_after(0, Fault::NoSpace);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        storage.clear();
    });
    (StatusCode::CREATED, format!("charge {run}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_refused_by_a_full_disk_is_stored_later_and_runs_once() {
    let runs = Counter::default();
    let storage = FaultyStorage::new(Arc::new(StdStorage));
    let dir = tempfile::tempdir().expect("tempdir");
    // Sync (the default): records go to the file with pwrite, which a full
    // disk refuses.
    let store = Store::open(dir.path(), Config::new().storage(Arc::new(storage.clone()))).expect("open");
    let routes = Router::new().route("/charges", post(charge)).with_state((runs.clone(), storage.clone()));
    let layer = idemkv::http::IdempotencyLayer::new(store.clone(), LayerConfig::global().lease(Duration::from_secs(3)));
    let server = Server::serve(routes.layer(layer), store, dir).await;
    let client = client();
    let url = server.url("/charges");

    let first = send(post_to(&client, &url, "charge-1", "amount=5")).await;
    assert_eq!((first.status, first.body.as_str()), (201, "charge 1"), "{first:?}");
    assert_eq!(first.header("idempotency-stored"), Some("false"), "the disk was full when it answered: {first:?}");
    assert!(storage.faults_fired() > 0, "the full disk refused a write");
    let duplicate = send(post_to(&client, &url, "charge-1", "amount=5")).await;
    assert!(duplicate.is_problem(409, "in-progress"), "the key must stay in progress: {duplicate:?}");

    // Retries, as a client would, until the answer is no longer in
    // progress: the stored answer, well within ten seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let retry = loop {
        let retry = send(post_to(&client, &url, "charge-1", "amount=5")).await;
        if retry.status != 409 || Instant::now() > deadline {
            break retry;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "charge 1", true), "{retry:?}");
    assert_eq!(runs.get(), 1, "the handler ran twice");
}
