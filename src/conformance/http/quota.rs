//! A new key in a scope at its quota is answered 429 Too Many Requests
//! with `Retry-After` (from the quota) and a `quota-exceeded` problem; the
//! handler does not run. Retries of keys already kept still replay, and
//! other tenants are not affected. Leaves the scope as empty as it found
//! it.

use super::fixture::{Fixture, FixtureAnswer};
use super::harness::key;
use super::harness::{client, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::{QuotaScope, Setting};
use crate::http::LayerConfig;
use http::{Method, StatusCode};

/// A new key in a scope at its quota
/// ([`Capabilities::quota`](crate::conformance::Capabilities::quota)) is
/// 429 `quota-exceeded` with `Retry-After` from the quota, the handler not
/// run; kept keys still replay, other tenants are not affected, and a key
/// freed by an operator makes room. Leaves the scope as empty as it found
/// it.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn quota<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting, quota: &QuotaScope) {
    quota_on(&Tower(backend), setting, quota).await;
}

/// [`quota`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn quota_on<T: ServeTarget>(target: &T, setting: &Setting, quota: &QuotaScope) {
    let runs = Counter::default();
    let counted = runs.clone();
    let fixture = Fixture::new().route(Method::POST, "/payments", move |_| {
        let run = counted.bump();
        async move { FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}")) }
    });
    let layer = LayerConfig::scoped(|request| request.headers.get("x-account").map(|value| value.as_bytes().to_vec()));
    let server = Server::start(target, layer, fixture).await;
    let backend = target.backend();
    let client = client();
    let url = server.url("/payments");
    let limited = String::from_utf8(quota.scope().to_vec()).expect("a visible ASCII scope");
    let other = format!("{limited}-other");
    let pay = |account: &str, key: &str| {
        client.post(&url).header("X-Account", account).header("Idempotency-Key", key).body("amount=10")
    };
    let limit = quota.records();
    let orders: Vec<String> = (1..=limit + 1).map(|index| key(setting, &format!("order-{index}"))).collect();

    for order in &orders[..orders.len() - 1] {
        assert_eq!(send(pay(&limited, order)).await.status, 201);
    }
    let refused = send(pay(&limited, &orders[orders.len() - 1])).await;
    assert!(refused.is_problem(429, "quota-exceeded"), "{refused:?}");
    let seconds = quota.retry_after().as_millis().div_ceil(1000).to_string();
    assert_eq!(refused.header("retry-after"), Some(seconds.as_str()), "whole seconds, rounded up");
    assert!(refused.body.contains(r#""status":429"#), "{}", refused.body);
    assert_eq!(u64::from(runs.get()), limit, "the refused request did not run");

    // A retry of a kept request replays; another tenant has its own quota.
    let retried = send(pay(&limited, &orders[0])).await;
    assert!(retried.replayed() && retried.status == 201, "{retried:?}");
    assert_eq!(send(pay(&other, &orders[orders.len() - 1])).await.status, 201);
    assert_eq!(u64::from(runs.get()), limit + 1);

    // Freed by an operator, the tenant's next key runs.
    let freed = &orders[orders.len() - 2];
    assert!(backend.remove(quota.scope(), freed.as_bytes()).await.expect("remove"));
    assert_eq!(send(pay(&limited, &orders[orders.len() - 1])).await.status, 201);
    for order in orders.iter().filter(|order| *order != freed) {
        assert!(backend.remove(quota.scope(), order.as_bytes()).await.expect("remove"), "{order} was kept");
    }
    server.stop().await;
}
