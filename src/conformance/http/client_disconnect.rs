//! Guards a client that disconnects mid-handler over real HTTP: the handler
//! is not cancelled, it finishes, its answer is kept, and the retry replays
//! it without a second run.

use super::fixture::{Fixture, FixtureAnswer};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use http::{Method, StatusCode};
use std::time::Duration;

#[derive(Clone, Default)]
struct Runs {
    started: Counter,
    finished: Counter,
}

/// Takes 1 s.
async fn slow(runs: Runs) -> FixtureAnswer {
    let run = runs.started.bump();
    tokio::time::sleep(Duration::from_secs(1)).await;
    runs.finished.bump();
    FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}"))
}

/// A client that hangs up mid-handler does not cancel the handler: it
/// finishes, its answer is kept, and the retry gets it replayed without a
/// second run.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn client_disconnect<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    client_disconnect_on(&Tower(backend), setting).await;
}

/// [`client_disconnect`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn client_disconnect_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Runs::default();
    let counted = runs.clone();
    let routes = Fixture::new().route(Method::POST, "/payments", move |_| slow(counted.clone()));
    let server = Server::start(target, LayerConfig::global(), routes).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-gone");

    let gave_up = post_to(&client, &url, &order, "amount=1").timeout(Duration::from_millis(200)).send().await;
    let error = gave_up.expect_err("a 1 s handler cannot answer within 200 ms");
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(runs.started.get(), 1, "the handler had started");
    assert_eq!(runs.finished.get(), 0, "the client left before the handler ended");

    runs.finished.reach(1, Duration::from_secs(10), "the handler of the dropped request finished").await;
    // Waits (bounded) for the answer to be kept if the retry is quicker.
    let retry = send(post_to(&client, &url, &order, "amount=1").header("Prefer", "wait=10")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "payment 1", true), "{retry:?}");
    assert_eq!(runs.started.get(), 1, "the handler ran once");
    server.stop().await;
}
