//! Guards the parts of a fingerprint besides the body, over real HTTP: a
//! header the service includes (an API version) makes a retry that
//! changed it another request — 422 `key-reused` — while a header it
//! does not include may change; a query parameter it ignores (a tracking
//! tag) may come and go, and the retry replays; any other parameter
//! still counts.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use axum::extract::State;
use axum::http::header::HeaderName;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, send, Counter};
use idemkv::fingerprint::RequestFingerprint;
use idemkv::http::LayerConfig;
use idemkv::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_included_header_counts_and_an_ignored_parameter_does_not() {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("payment {}", runs.bump())) };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    let fingerprint = RequestFingerprint::bytes()
        .header(HeaderName::from_static("x-api-version"))
        .ignore_query("utm_source")
        .build()
        .expect("rules");
    let server = Server::start(Config::new(), LayerConfig::global().fingerprint(fingerprint), routes).await;
    let client = client();
    let post = |path: &str, key: &str, version: &str| {
        let request = client.post(server.url(path)).header("idempotency-key", key).body("amount=10");
        request.header("x-api-version", version).header("x-request-id", format!("{path}{version}"))
    };

    let first = send(post("/payments?dry_run=0", "pay-1", "2024-01")).await;
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");
    let other_version = send(post("/payments?dry_run=0", "pay-1", "2025-06")).await;
    assert!(other_version.is_problem(422, "key-reused"), "an included header changed: {other_version:?}");
    let tracked = send(post("/payments?utm_source=mail&dry_run=0", "pay-1", "2024-01")).await;
    assert_eq!((tracked.status, tracked.replayed(), &tracked.body), (201, true, &first.body), "{tracked:?}");
    let other_parameter = send(post("/payments?dry_run=1", "pay-1", "2024-01")).await;
    assert!(other_parameter.is_problem(422, "key-reused"), "{other_parameter:?}");
    assert_eq!(runs.get(), 1);
}
