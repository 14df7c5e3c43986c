//! Guards `Idempotency-Key-Expiry` over real HTTP: a client's expiry is
//! honoured up to the service's maximum — an answer asked to be kept two
//! hours runs again after them, one asked for a week still replays after
//! the layer's own hour — and the expiry in force is stated on the answer
//! and on its replays; one over the maximum is a 400 `expiry-too-long`
//! naming the maximum, a malformed one a 400 `expiry-invalid`, and
//! neither runs the handler nor spends the key. A maximum past the
//! backend's `duration_max` counts as the backend's.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter, Reply};
use idemkv::http::LayerConfig;
use idemkv::{Config, ManualClock};
use std::sync::Arc;
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clients_expiry_is_honoured_up_to_the_maximum_and_stated() {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("payment {}", runs.bump())) };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    let clock = ManualClock::new(1_700_000_000_000);
    let layer = LayerConfig::global().ttl(HOUR).expiry_max(7 * 24 * HOUR);
    let server = Server::start(Config::new().clock(Arc::new(clock.clone())), layer, routes).await;
    let (client, url) = (client(), server.url("/payments"));
    let pay = |key: &str, expiry: Option<&str>| {
        let request = post_to(&client, &url, key, "amount=10");
        send(match expiry {
            Some(expiry) => request.header("idempotency-key-expiry", expiry),
            None => request,
        })
    };
    let stated = |reply: &Reply| reply.header("idempotency-key-expiry").map(str::to_owned);

    let two_hours = pay("pay-1", Some("2h")).await;
    assert_eq!((two_hours.status, stated(&two_hours).as_deref()), (201, Some("2h")), "{two_hours:?}");
    let replay = pay("pay-1", Some("5m")).await;
    assert_eq!((replay.replayed(), stated(&replay).as_deref()), (true, Some("2h")), "as first stated: {replay:?}");
    let default = pay("pay-2", None).await;
    assert_eq!((default.status, stated(&default).as_deref()), (201, Some("1h")), "the layer's: {default:?}");

    let too_long = pay("pay-3", Some("8d")).await;
    assert!(too_long.is_problem(400, "expiry-too-long"), "{too_long:?}");
    assert!(too_long.body.contains(r#""code":"expiry-too-long""#), "{}", too_long.body);
    assert!(too_long.body.contains("is 7d;"), "the maximum is named: {}", too_long.body);
    for malformed in ["tomorrow", "0s", "1.5h", "24 hours"] {
        let refused = pay("pay-3", Some(malformed)).await;
        assert!(refused.is_problem(400, "expiry-invalid"), "{malformed}: {refused:?}");
        assert!(refused.body.contains(r#""code":"expiry-invalid""#), "{}", refused.body);
    }
    assert_eq!(runs.get(), 2, "refused expiries run nothing");
    let week = pay("pay-3", Some("168h")).await;
    assert_eq!((week.status, week.replayed(), stated(&week).as_deref()), (201, false, Some("7d")), "{week:?}");

    clock.advance(2 * HOUR + Duration::from_secs(1));
    let again = pay("pay-1", Some("2h")).await;
    assert_eq!((again.status, again.replayed()), (201, false), "two hours passed: it runs again: {again:?}");
    let kept = pay("pay-3", Some("168h")).await;
    assert_eq!((kept.replayed(), &kept.body), (true, &week.body), "a week asked, past the layer's hour: {kept:?}");
    let lapsed = pay("pay-2", None).await;
    assert!(!lapsed.replayed(), "the layer's hour passed: {lapsed:?}");
    assert_eq!(runs.get(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maximum_past_the_backends_longest_counts_as_the_backends() {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("payment {}", runs.bump())) };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    let layer = LayerConfig::global().ttl(HOUR).expiry_max(7 * 24 * HOUR);
    let server = Server::start(Config::new().duration_max(48 * HOUR), layer, routes).await;
    let (client, url) = (client(), server.url("/payments"));
    let pay = |key: &str, expiry: &str| {
        send(post_to(&client, &url, key, "amount=10").header("idempotency-key-expiry", expiry))
    };

    let too_long = pay("pay-1", "3d").await;
    assert!(too_long.is_problem(400, "expiry-too-long"), "not the backend's refusal: {too_long:?}");
    assert!(too_long.body.contains("is 2d;"), "the backend's longest is named: {}", too_long.body);
    assert_eq!(runs.get(), 0, "nothing ran");
    let longest = pay("pay-1", "2d").await;
    assert_eq!((longest.status, longest.header("idempotency-key-expiry")), (201, Some("2d")), "{longest:?}");
    assert_eq!(runs.get(), 1);
}
