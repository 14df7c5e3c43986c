//! Guards the lease keep-alive: a handler that runs twice as long as its
//! lease keeps its key (a duplicate mid-run gets 409, not a second run),
//! its answer is stored, and the retry after it replays that answer.
#![cfg(feature = "tower")]

mod common;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use common::http::{client, post as post_to, send, Counter, Server};
use idemkv::http::LayerConfig;
use idemkv::Config;
use std::time::Duration;

/// Runs 2.2 s: more than twice the 1 s lease.
async fn long(State(runs): State<Counter>) -> (StatusCode, String) {
    let run = runs.bump();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    (StatusCode::CREATED, format!("payment {run}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_twice_as_long_as_its_lease_runs_once() {
    let runs = Counter::default();
    let routes = Router::new().route("/payments", post(long)).with_state(runs.clone());
    let server = Server::start(Config::new(), LayerConfig::global().lease(Duration::from_secs(1)), routes).await;
    let client = client();
    let url = server.url("/payments");

    let first = tokio::spawn(send(post_to(&client, &url, "order-long", "amount=1")));
    runs.reach(1, Duration::from_secs(10), "the handler started").await;
    // Past the 1 s lease: without renewals this duplicate would take over.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let duplicate = send(post_to(&client, &url, "order-long", "amount=1")).await;
    assert!(duplicate.is_problem(409, "in-progress"), "{duplicate:?}");
    assert!(duplicate.header("retry-after").is_some(), "{duplicate:?}");
    assert_eq!(runs.get(), 1, "the duplicate ran the handler again");

    let first = first.await.expect("join");
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (201, "payment 1", false), "{first:?}");
    assert_eq!(first.header("idempotency-stored"), None, "the answer was not kept: {first:?}");

    let retry = send(post_to(&client, &url, "order-long", "amount=1")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "payment 1", true), "{retry:?}");
    assert_eq!(runs.get(), 1, "the handler ran once");
}
