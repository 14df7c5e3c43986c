//! Guards a handler that panics: the answer is a 500 `handler-failed`, the
//! key stays in progress (an immediate retry is a 409, not a silent second
//! run), and after the lease ends the retry runs as a recovered second
//! attempt. Also guards `NotSpent`: the handler's word frees the key.
#![cfg(feature = "tower")]

use crate::common::http::{client, post as post_to, send, Server};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use idemkv::http::{Attempt, LayerConfig, NotSpent};
use idemkv::{Config, ManualClock};
use std::sync::Arc;
use std::time::Duration;

/// The attempts the handler was run with, in order.
type Seen = Arc<parking_lot::Mutex<Vec<(u32, bool)>>>;

/// Panics on its first run, answers 201 after.
async fn fragile(State(seen): State<Seen>, Extension(attempt): Extension<Attempt>) -> (StatusCode, String) {
    let run = {
        let mut seen = seen.lock();
        seen.push((attempt.attempt, attempt.recovered));
        seen.len()
    };
    assert!(run > 1, "the first run fails half-way");
    (StatusCode::CREATED, format!("payment on attempt {}", attempt.attempt))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicked_run_holds_its_key_until_the_lease_ends_then_runs_recovered() {
    let clock = ManualClock::new(crate::common::START_MS);
    let seen = Seen::default();
    let routes = Router::new().route("/payments", post(fragile)).with_state(Arc::clone(&seen));
    let config = Config::new().clock(Arc::new(clock.clone()));
    let server = Server::start(config, LayerConfig::global().lease(Duration::from_secs(5)), routes).await;
    let client = client();
    let url = server.url("/payments");

    let failed = send(post_to(&client, &url, "order-p", "amount=1")).await;
    assert!(failed.is_problem(500, "handler-failed"), "{failed:?}");
    assert!(!failed.body.contains("half-way"), "the panic message leaked: {}", failed.body);

    let early = send(post_to(&client, &url, "order-p", "amount=1")).await;
    assert!(early.is_problem(409, "in-progress"), "{early:?}");
    assert!(early.header("retry-after").is_some(), "{early:?}");
    assert_eq!(*seen.lock(), [(1, false)], "the retry ran before the lease ended");

    clock.advance(Duration::from_secs(6));
    let recovered = send(post_to(&client, &url, "order-p", "amount=1")).await;
    assert_eq!((recovered.status, recovered.replayed()), (201, false), "{recovered:?}");
    assert_eq!(*seen.lock(), [(1, false), (2, true)], "the second run knows it is a recovered second attempt");
    let replay = send(post_to(&client, &url, "order-p", "amount=1")).await;
    assert_eq!((replay.status, replay.replayed(), &replay.body), (201, true, &recovered.body), "{replay:?}");
    assert_eq!(seen.lock().len(), 2);
}

/// Says "nothing happened" on its first run, answers 201 after.
async fn not_yet(State(seen): State<Seen>, Extension(attempt): Extension<Attempt>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let run = {
        let mut seen = seen.lock();
        seen.push((attempt.attempt, attempt.recovered));
        seen.len()
    };
    if run == 1 {
        (StatusCode::SERVICE_UNAVAILABLE, Extension(NotSpent), "try again").into_response()
    } else {
        (StatusCode::CREATED, "charged").into_response()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_not_spent_answer_frees_the_key() {
    let seen = Seen::default();
    let routes = Router::new().route("/payments", post(not_yet)).with_state(Arc::clone(&seen));
    let server = Server::start(Config::new(), LayerConfig::global(), routes).await;
    let client = client();
    let url = server.url("/payments");

    let first = send(post_to(&client, &url, "order-n", "amount=1")).await;
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (503, "try again", false), "{first:?}");
    let retry = send(post_to(&client, &url, "order-n", "amount=1")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "charged", false), "{retry:?}");
    assert_eq!(seen.lock().len(), 2, "the retry ran the handler");
    let replay = send(post_to(&client, &url, "order-n", "amount=1")).await;
    assert_eq!((replay.status, replay.body.as_str(), replay.replayed()), (201, "charged", true), "{replay:?}");
    assert_eq!(seen.lock().len(), 2);
}
