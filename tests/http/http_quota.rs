//! A new key in a scope at its quota is answered 429 Too Many Requests
//! with `Retry-After` (from the quota) and a `quota-exceeded` problem; the
//! handler does not run. Retries of keys already kept still replay, and
//! other tenants are not affected.
#![cfg(feature = "tower")]

use crate::common::http::{client, send, Counter, Server};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::http::LayerConfig;
use idemkv::{Config, Quota};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_at_its_quota_gets_429_with_retry_after() {
    let runs = Counter::default();
    let routes = Router::new()
        .route(
            "/payments",
            post(
                |State(runs): State<Counter>| async move { (StatusCode::CREATED, format!("payment {}", runs.bump())) },
            ),
        )
        .with_state(runs.clone());
    let config = Config::new().quota(Quota::new().records(2).retry_after(Duration::from_millis(2500)));
    let layer = LayerConfig::scoped(|request| request.headers.get("x-account").map(|value| value.as_bytes().to_vec()));
    let server = Server::start(config, layer, routes).await;
    let client = client();
    let url = server.url("/payments");
    let pay = |account: &str, key: &str| {
        client.post(&url).header("X-Account", account).header("Idempotency-Key", key).body("amount=10")
    };

    assert_eq!(send(pay("acct-1", "order-1")).await.status, 201);
    assert_eq!(send(pay("acct-1", "order-2")).await.status, 201);
    let refused = send(pay("acct-1", "order-3")).await;
    assert!(refused.is_problem(429, "quota-exceeded"), "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("3"), "whole seconds, rounded up");
    assert!(refused.body.contains(r#""status":429"#), "{}", refused.body);
    assert_eq!(runs.get(), 2, "the refused request did not run");

    // A retry of a kept request replays; another tenant has its own quota.
    let retried = send(pay("acct-1", "order-1")).await;
    assert!(retried.replayed() && retried.status == 201, "{retried:?}");
    assert_eq!(send(pay("acct-2", "order-3")).await.status, 201);
    assert_eq!(runs.get(), 3);
    assert_eq!(server.store.stats().quota_refusals, 1);

    // Freed by an operator, the tenant's next key runs.
    assert!(server.store.remove(b"acct-1", b"order-2").expect("remove"));
    assert_eq!(send(pay("acct-1", "order-3")).await.status, 201);
}
