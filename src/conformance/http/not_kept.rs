//! Guards what is not kept: by default a handler's 400 or 422 frees the
//! key (the corrected request or the retry runs), and with
//! `keep_validation_failures(true)` they are kept and replayed. A
//! handler's own 404 is kept like any answer — a `POST
//! /orders/{id}/cancel` that did its work and answered 404 runs once for
//! three tries — while the router's own 404 and 405, marked `NotSpent` by
//! its fallbacks, free the key for the corrected request.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use http::{Method, StatusCode};

/// `bad` is a 400, `unprocessable` a 422, anything else a 201.
fn validate(runs: &Counter, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    let run = runs.bump();
    let status = match request.text().as_str() {
        "bad" => StatusCode::BAD_REQUEST,
        "unprocessable" => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::CREATED,
    };
    std::future::ready(FixtureAnswer::text(status, format!("run {run}")))
}

/// `POST /payments`, validated.
fn payments(runs: &Counter) -> Fixture {
    let runs = runs.clone();
    Fixture::new().route(Method::POST, "/payments", move |request| validate(&runs, &request))
}

async fn server<'t, T: ServeTarget>(target: &'t T, runs: &Counter, layer: LayerConfig) -> Server<'t, T> {
    Server::start(target, layer, payments(runs)).await
}

/// Cancels an order that was already gone: the work is done (a refund
/// issued, say), and the answer is 404.
fn cancellations(runs: &Counter) -> Fixture {
    let runs = runs.clone();
    Fixture::new().route(Method::POST, "/orders/{id}/cancel", move |_| {
        let run = runs.bump();
        std::future::ready(FixtureAnswer::text(StatusCode::NOT_FOUND, format!("no open order; refund {run} issued")))
    })
}

/// The router's own 404 and 405, marked `NotSpent` by its fallbacks (the
/// fixture's [`unrouted_not_spent`](Fixture::unrouted_not_spent)), do not
/// spend the key: the corrected request runs.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn not_kept_routing<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    not_kept_routing_on(&Tower(backend), setting).await;
}

/// [`not_kept_routing`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn not_kept_routing_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server = Server::start(target, LayerConfig::global(), payments(&runs).unrouted_not_spent()).await;
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
    server.stop().await;
}

/// A handler's own 404 is kept like any answer and runs once for three
/// tries; without the router's `NotSpent`, its 404 is kept too.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn kept_handler_404<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    kept_handler_404_on(&Tower(backend), setting).await;
}

/// [`kept_handler_404`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn kept_handler_404_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server = Server::start(target, LayerConfig::global(), cancellations(&runs).unrouted_not_spent()).await;
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
    let unmarked = Server::start(target, LayerConfig::global(), cancellations(&runs)).await;
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
    not_kept_validation_on(&Tower(backend), setting).await;
}

/// [`not_kept_validation`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn not_kept_validation_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server = server(target, &runs, LayerConfig::global()).await;
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
    server.stop().await;
}

/// With `keep_validation_failures(true)` a handler's 400 or 422 is kept and
/// replayed, and the key is spent.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn kept_validation<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    kept_validation_on(&Tower(backend), setting).await;
}

/// [`kept_validation`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn kept_validation_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server = server(target, &runs, LayerConfig::global().keep_validation_failures(true)).await;
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
    server.stop().await;
}
