//! Guards natural keys over real HTTP: two requests with one
//! `external_payment_id` are one payment whatever `Idempotency-Key` each
//! carries, or none — the handler runs once and the second is replayed;
//! another id runs again; a request without the field, or with one that
//! is no key, is a 400 problem with its stable `code`, and nothing runs
//! for it; a path segment serves as the key of `POST /orders/{id}/pay`;
//! a header's natural key lives in its request's scope.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter};
use idemkv::fingerprint::{NaturalKey, RequestFingerprint};
use idemkv::http::{Attempt, LayerConfig};
use idemkv::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_external_payment_id_is_one_payment_whatever_its_header_key() {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>, Extension(attempt): Extension<Attempt>| async move {
        let key = String::from_utf8_lossy(&attempt.key).into_owned();
        (StatusCode::CREATED, format!("payment {} under {key}", runs.bump()))
    };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    let natural = NaturalKey::json("/external_payment_id").expect("pointer");
    let fingerprint = RequestFingerprint::json().build().expect("rules");
    let layer = LayerConfig::global().natural_key(natural).fingerprint(fingerprint);
    let server = Server::start(Config::new(), layer, routes).await;
    let (client, url) = (client(), server.url("/payments"));

    let body = r#"{"external_payment_id":"ext-1","amount":10,"currency":"EUR"}"#;
    let first = send(post_to(&client, &url, "click-1", body)).await;
    assert_eq!((first.status, first.replayed(), first.body.as_str()), (201, false, "payment 1 under ext-1"));
    // The second click: another header key, the same id.
    let second = send(post_to(&client, &url, "click-2", body)).await;
    assert_eq!((second.status, second.replayed(), &second.body), (201, true, &first.body), "{second:?}");
    // No header at all, the body re-serialised: the same payment.
    let bare =
        send(client.post(&url).body(r#"{ "currency": "EUR", "amount": 10.0, "external_payment_id": "ext-1" }"#)).await;
    assert_eq!((bare.status, bare.replayed(), &bare.body), (201, true, &first.body), "{bare:?}");
    // The same id for another amount is another request under one key.
    let other_amount = send(post_to(&client, &url, "click-3", &body.replace("10", "11"))).await;
    assert!(other_amount.is_problem(422, "key-reused"), "{other_amount:?}");

    // Another id runs, under the header key of the first click.
    let next = send(post_to(&client, &url, "click-1", &body.replace("ext-1", "ext-2"))).await;
    assert_eq!((next.status, next.replayed(), next.body.as_str()), (201, false, "payment 2 under ext-2"));
    assert_eq!(runs.get(), 2);

    let refusals = [
        (r#"{"amount":10}"#.to_owned(), "natural-key-missing"),
        (r#"{"external_payment_id":"","amount":10}"#.to_owned(), "natural-key-missing"),
        (r#"{"external_payment_id":{"id":1},"amount":10}"#.to_owned(), "natural-key-invalid"),
        (r#"{"external_payment_id":"caf\u00e9"}"#.to_owned(), "natural-key-invalid"),
        (format!(r#"{{"external_payment_id":"{}"}}"#, "e".repeat(256)), "natural-key-invalid"),
        ("external_payment_id=ext-3".to_owned(), "body-not-json"),
    ];
    for (body, code) in refusals {
        let refused = send(post_to(&client, &url, "click-4", &body)).await;
        assert!(refused.is_problem(400, code), "{body}: {refused:?}");
        assert!(refused.body.contains(&format!(r#""code":"{code}""#)), "{}", refused.body);
    }
    assert_eq!(runs.get(), 2, "nothing ran for what was refused");
    // A number is a key too, in its one spelling.
    let number = send(client.post(&url).body(r#"{"external_payment_id":42,"amount":1}"#)).await;
    assert_eq!((number.status, number.body.as_str()), (201, "payment 3 under 42"));
    let again = send(client.post(&url).body(r#"{"external_payment_id":4.2e1,"amount":1}"#)).await;
    assert_eq!((again.status, again.replayed()), (201, true), "{again:?}");
    assert_eq!(runs.get(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_path_segment_is_the_key_of_an_orders_payment() {
    let runs = Counter::default();
    let pay = |State(runs): State<Counter>, Path(order): Path<String>| async move {
        (StatusCode::OK, format!("order {order} paid, run {}", runs.bump()))
    };
    let routes = Router::new().route("/orders/{order}/pay", post(pay)).with_state(runs.clone());
    let layer = LayerConfig::global().natural_key(NaturalKey::path_segment(1));
    let server = Server::start(Config::new(), layer, routes).await;
    let client = client();

    let url = server.url("/orders/o-1/pay");
    let first = send(post_to(&client, &url, "click-1", "")).await;
    assert_eq!((first.status, first.replayed(), first.body.as_str()), (200, false, "order o-1 paid, run 1"));
    let second = send(post_to(&client, &url, "click-2", "")).await;
    assert_eq!((second.status, second.replayed(), &second.body), (200, true, &first.body), "{second:?}");
    let bare = send(client.post(&url)).await;
    assert_eq!((bare.status, bare.replayed()), (200, true), "{bare:?}");

    let other = send(post_to(&client, &server.url("/orders/o-2/pay"), "click-1", "")).await;
    assert_eq!((other.status, other.replayed(), other.body.as_str()), (200, false, "order o-2 paid, run 2"));

    let missing = send(post_to(&client, &server.url("/orders"), "click-3", "")).await;
    assert!(missing.is_problem(400, "natural-key-missing"), "{missing:?}");
    assert!(missing.body.contains(r#""code":"natural-key-missing""#), "{}", missing.body);
    assert_eq!(runs.get(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_header_natural_key_lives_in_its_tenants_scope() {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("run {}", runs.bump())) };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    let tenant =
        |request: &axum::http::request::Parts| request.headers.get("x-tenant").map(|tenant| tenant.as_bytes().to_vec());
    let natural = NaturalKey::header(axum::http::HeaderName::from_static("x-merchant-reference"));
    let server = Server::start(Config::new(), LayerConfig::scoped(tenant).natural_key(natural), routes).await;
    let (client, url) = (client(), server.url("/payments"));
    let pay = |tenant: &str, reference: &str, key: &str| {
        post_to(&client, &url, key, "{}").header("x-tenant", tenant).header("x-merchant-reference", reference)
    };

    let first = send(pay("t-1", "ref-1", "a")).await;
    assert_eq!((first.status, first.replayed(), first.body.as_str()), (201, false, "run 1"));
    let again = send(pay("t-1", "ref-1", "b")).await;
    assert_eq!((again.status, again.replayed(), &again.body), (201, true, &first.body), "{again:?}");
    // Another tenant's reference of the same name is its own.
    let other_tenant = send(pay("t-2", "ref-1", "a")).await;
    assert_eq!((other_tenant.status, other_tenant.replayed(), other_tenant.body.as_str()), (201, false, "run 2"));

    let missing = send(post_to(&client, &url, "a", "{}").header("x-tenant", "t-1")).await;
    assert!(missing.is_problem(400, "natural-key-missing"), "{missing:?}");
    let twice = send(pay("t-1", "ref-2", "a").header("x-merchant-reference", "ref-3")).await;
    assert!(twice.is_problem(400, "natural-key-invalid"), "{twice:?}");
    assert_eq!(runs.get(), 2);
}
