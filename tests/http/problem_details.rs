//! Guards problem details: a store failure is a 503 `store-unavailable`
//! `application/problem+json` whose body carries no internal error text
//! (no store path, no "closed") with `Retry-After`, and the handler does
//! not run.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter};
use idemkv::http::LayerConfig;
use idemkv::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closed_store_is_a_503_without_internal_detail() {
    let runs = Counter::default();
    let routes = Router::new()
        .route(
            "/payments",
            post(
                |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("payment {}", runs.bump())) },
            ),
        )
        .with_state(runs.clone());
    let server = Server::start(Config::new(), LayerConfig::global(), routes).await;
    let client = client();
    let url = server.url("/payments");
    assert_eq!(send(post_to(&client, &url, "order-1", "amount=1")).await.status, 201);

    let path = server.store.path().to_string_lossy().into_owned();
    server.store.clone().close().expect("close");
    let refused = send(post_to(&client, &url, "order-2", "amount=2")).await;
    assert!(refused.is_problem(503, "store-unavailable"), "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"), "nothing ran, so it says when to retry: {refused:?}");
    assert!(refused.body.contains(r#""status":503"#), "{}", refused.body);
    assert!(!refused.body.contains(&path), "the store path leaked: {}", refused.body);
    assert!(!refused.body.to_lowercase().contains("closed"), "the internal error leaked: {}", refused.body);
    assert_eq!(runs.get(), 1, "the handler ran without its claim");
}
