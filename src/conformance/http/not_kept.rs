//! Guards what is not kept: by default a handler's 400 or 422 frees the
//! key (the corrected request or the retry runs), and with
//! `keep_validation_failures(true)` they are kept and replayed. A
//! handler's own 404 is kept like any answer — a `POST
//! /orders/{id}/cancel` that did its work and answered 404 runs once for
//! three tries — while the router's own 404 and 405, marked `NotSpent` by
//! its fallbacks, free the key for the corrected request.

use super::harness::{client, post as post_to, send, Counter};
use super::harness::{key, Served};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{LayerConfig, NotSpent};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Extension, Router};

/// `bad` is a 400, `unprocessable` a 422, anything else a 201.
async fn validate(State(runs): State<Counter>, body: String) -> (StatusCode, String) {
    let run = runs.bump();
    let status = match body.as_str() {
        "bad" => StatusCode::BAD_REQUEST,
        "unprocessable" => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::CREATED,
    };
    (status, format!("run {run}"))
}

async fn server<B: IdempotencyBackend + Clone>(backend: &B, runs: &Counter, layer: LayerConfig) -> Served {
    let routes = Router::new().route("/payments", post(validate)).with_state(runs.clone());
    Served::start(backend, layer, routes).await
}

/// The router's own answers when no handler runs, marked: nothing happened.
async fn no_route() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, Extension(NotSpent))
}

async fn no_method() -> impl IntoResponse {
    (StatusCode::METHOD_NOT_ALLOWED, Extension(NotSpent))
}

/// Cancels an order that was already gone: the work is done (a refund
/// issued, say), and the answer is 404.
async fn cancel(State(runs): State<Counter>) -> (StatusCode, String) {
    let run = runs.bump();
    (StatusCode::NOT_FOUND, format!("no open order; refund {run} issued"))
}

/// The router's own 404 and 405, marked `NotSpent` by its fallbacks, do not
/// spend the key: the corrected request runs.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn not_kept_routing<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let routes = Router::new()
        .route("/payments", post(validate))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .with_state(runs.clone());
    let server = Served::start(backend, LayerConfig::global(), routes).await;
    let client = client();
    let (order_404, order_405) = (key(setting, "order-404"), key(setting, "order-405"));

    let missed = send(post_to(&client, &server.url("/paymnets"), &order_404, "amount=1")).await;
    assert_eq!(missed.status, 404, "{missed:?}");
    let corrected = send(post_to(&client, &server.url("/payments"), &order_404, "amount=1")).await;
    assert_eq!((corrected.status, corrected.replayed()), (201, false), "the 404 was kept: {corrected:?}");

    let wrong_method =
        send(client.patch(server.url("/payments")).header("Idempotency-Key", &order_405).body("amount=1")).await;
    assert_eq!(wrong_method.status, 405, "{wrong_method:?}");
    let corrected = send(post_to(&client, &server.url("/payments"), &order_405, "amount=1")).await;
    assert_eq!((corrected.status, corrected.replayed()), (201, false), "the 405 was kept: {corrected:?}");
    assert_eq!(runs.get(), 2, "only the corrected requests reached the handler");
}

/// A handler's own 404 is kept like any answer and runs once for three
/// tries; without the router's `NotSpent`, its 404 is kept too.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn kept_handler_404<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let routes = Router::new()
        .route("/orders/{id}/cancel", post(cancel))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .with_state(runs.clone());
    let server = Served::start(backend, LayerConfig::global(), routes).await;
    let client = client();
    let url = server.url("/orders/o-1/cancel");
    let cancel = key(setting, "cancel-o-1");

    let first = send(post_to(&client, &url, &cancel, "")).await;
    assert_eq!((first.status, first.replayed(), first.body.as_str()), (404, false, "no open order; refund 1 issued"));
    for attempt in 2..=3 {
        let retry = send(post_to(&client, &url, &cancel, "")).await;
        assert_eq!((retry.status, retry.replayed(), &retry.body), (404, true, &first.body), "try {attempt}: {retry:?}");
    }
    assert_eq!(runs.get(), 1, "the handler's 404 is its answer: one refund for three tries");
    // Without the router's word, its own 404 is kept too: never a second
    // run on a guess.
    let unmarked = Served::start(
        backend,
        LayerConfig::global(),
        Router::new().route("/orders/{id}/cancel", post(cancel)).with_state(runs.clone()),
    )
    .await;
    let typo = key(setting, "cancel-typo");
    let missed = send(post_to(&client, &unmarked.url("/order/o-2/cancel"), &typo, "")).await;
    assert_eq!(missed.status, 404, "{missed:?}");
    let again = send(post_to(&client, &unmarked.url("/order/o-2/cancel"), &typo, "")).await;
    assert_eq!((again.status, again.replayed()), (404, true), "{again:?}");
    assert_eq!(runs.get(), 1);
    unmarked.stop().await;
    server.stop().await;
}

/// By default a handler's 400 or 422 frees the key: the retry runs again,
/// and a corrected request may use the key.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn not_kept_validation<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let server = server(backend, &runs, LayerConfig::global()).await;
    let client = client();
    let url = server.url("/payments");

    for (name, invalid, status) in [("order-400", "bad", 400), ("order-422", "unprocessable", 422)] {
        let key = key(setting, name);
        let before = runs.get();
        let first = send(post_to(&client, &url, &key, invalid)).await;
        assert_eq!((first.status, first.replayed()), (status, false), "{first:?}");
        let retry = send(post_to(&client, &url, &key, invalid)).await;
        assert_eq!((retry.status, retry.replayed()), (status, false), "the {status} was replayed: {retry:?}");
        assert_eq!(runs.get(), before + 2, "the retry of a {status} ran the handler again");
        // A corrected request may use the key.
        let corrected = send(post_to(&client, &url, &key, "amount=1")).await;
        assert_eq!((corrected.status, corrected.replayed()), (201, false), "{corrected:?}");
    }
}

/// With `keep_validation_failures(true)` a handler's 400 or 422 is kept and
/// replayed, and the key is spent.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn kept_validation<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let server = server(backend, &runs, LayerConfig::global().keep_validation_failures(true)).await;
    let client = client();
    let url = server.url("/payments");

    for (name, invalid, status) in [("order-400", "bad", 400), ("order-422", "unprocessable", 422)] {
        let key = key(setting, name);
        let before = runs.get();
        let first = send(post_to(&client, &url, &key, invalid)).await;
        assert_eq!((first.status, first.replayed()), (status, false), "{first:?}");
        let retry = send(post_to(&client, &url, &key, invalid)).await;
        assert_eq!((retry.status, retry.replayed(), &retry.body), (status, true, &first.body), "{retry:?}");
        assert_eq!(runs.get(), before + 1, "the {status} was kept and replayed");
        // The key is spent: another request with it is a reused key.
        let other = send(post_to(&client, &url, &key, "amount=1")).await;
        assert!(other.is_problem(422, "key-reused"), "{other:?}");
        assert_eq!(runs.get(), before + 1);
    }
}
