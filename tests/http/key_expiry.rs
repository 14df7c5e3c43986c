//! Guards `Idempotency-Key-Expiry` over real HTTP: a client's expiry is
//! honoured up to the service's maximum — an answer asked to be kept two
//! hours runs again after them, one asked for a week still replays after
//! the layer's own hour — and the expiry in force is stated on the answer
//! and on its replays; one over the maximum is a 400 `expiry-too-long`
//! naming the maximum, a malformed one a 400 `expiry-invalid`, and
//! neither runs the handler nor spends the key. A maximum past the
//! backend's `duration_max` counts as the backend's. A long operation
//! states its expiry in force on every answer that stands for its key:
//! its 202, a retry's 202 (the first request's expiry, whatever the
//! retry asks), its status resource while it runs, and its answer there
//! and in replays.
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
use tokio::sync::Notify;

const HOUR: Duration = Duration::from_secs(3600);

/// The expiry `reply` states.
fn stated(reply: &Reply) -> Option<&str> {
    reply.header("idempotency-key-expiry")
}

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

    let two_hours = pay("pay-1", Some("2h")).await;
    assert_eq!((two_hours.status, stated(&two_hours)), (201, Some("2h")), "{two_hours:?}");
    let replay = pay("pay-1", Some("5m")).await;
    assert_eq!((replay.replayed(), stated(&replay)), (true, Some("2h")), "as first stated: {replay:?}");
    let default = pay("pay-2", None).await;
    assert_eq!((default.status, stated(&default)), (201, Some("1h")), "the layer's: {default:?}");

    let too_long = pay("pay-3", Some("8d")).await;
    assert!(too_long.is_problem(400, "expiry-too-long"), "{too_long:?}");
    assert!(too_long.body.contains(r#""code":"expiry-too-long""#), "{}", too_long.body);
    assert!(too_long.body.contains("is 7d;"), "the maximum is named: {}", too_long.body);
    let past_any_clock = pay("pay-3", Some("99999999999999999999d")).await;
    assert!(past_any_clock.is_problem(400, "expiry-too-long"), "a whole number, however long: {past_any_clock:?}");
    for malformed in ["tomorrow", "0s", "1.5h", "24 hours"] {
        let refused = pay("pay-3", Some(malformed)).await;
        assert!(refused.is_problem(400, "expiry-invalid"), "{malformed}: {refused:?}");
        assert!(refused.body.contains(r#""code":"expiry-invalid""#), "{}", refused.body);
    }
    assert_eq!(runs.get(), 2, "refused expiries run nothing");
    let week = pay("pay-3", Some("168h")).await;
    assert_eq!((week.status, week.replayed(), stated(&week)), (201, false, Some("7d")), "{week:?}");

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

/// What the long operations' handler shares: its runs, and the gate each
/// run waits at until the test opens it.
#[derive(Clone, Default)]
struct Gated {
    runs: Counter,
    gate: Arc<Notify>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_operation_states_its_expiry_on_its_202s_and_status_resource() {
    let gated = Gated::default();
    let report = |State(gated): State<Gated>| async move {
        gated.gate.notified().await;
        (StatusCode::CREATED, format!("report {}", gated.runs.bump()))
    };
    let routes = Router::new().route("/reports", post(report)).with_state(gated.clone());
    let layer = LayerConfig::global().ttl(HOUR).expiry_max(7 * 24 * HOUR).operations("/operations");
    let server = Server::start(Config::new(), layer, routes).await;
    let (client, url) = (client(), server.url("/reports"));
    let ask = |key: &str, expiry: Option<&str>| {
        let request = post_to(&client, &url, key, "pages=3").header("prefer", "respond-async");
        send(match expiry {
            Some(expiry) => request.header("idempotency-key-expiry", expiry),
            None => request,
        })
    };
    let status = |location: &str| send(client.get(server.url(location)));

    let accepted = ask("report-1", Some("2h")).await;
    assert_eq!((accepted.status, stated(&accepted)), (202, Some("2h")), "{accepted:?}");
    let location = accepted.header("location").expect("a status resource");
    let retried = ask("report-1", Some("5m")).await;
    assert_eq!((retried.status, stated(&retried)), (202, Some("2h")), "the first's: {retried:?}");
    let running = status(location).await;
    assert_eq!((running.status, stated(&running)), (202, Some("2h")), "{running:?}");
    let default = ask("report-2", None).await;
    assert_eq!((default.status, stated(&default)), (202, Some("1h")), "the layer's: {default:?}");
    let default_location = default.header("location").expect("a status resource");
    let default_running = status(default_location).await;
    assert_eq!((default_running.status, stated(&default_running)), (202, Some("1h")));

    gated.gate.notify_waiters();
    gated.runs.reach(2, Duration::from_secs(10), "both reports ran").await;
    for (location, key, expiry) in [(location, "report-1", "2h"), (default_location, "report-2", "1h")] {
        let mut done = status(location).await;
        for _ in 0..100 {
            if done.status != 202 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            done = status(location).await;
        }
        assert_eq!((done.status, done.replayed(), stated(&done)), (201, true, Some(expiry)), "{done:?}");
        let replay = ask(key, Some("30m")).await;
        assert_eq!((replay.status, replay.replayed(), stated(&replay)), (201, true, Some(expiry)));
    }
    assert_eq!(gated.runs.get(), 2, "each ran once");
}
