//! Guards the reading of `Idempotency-Key` over the wire: two fields are
//! refused, an RFC 9651 sf-string with an escape is one key (run once,
//! then replayed), and parameters are refused with a message that says so.

use super::harness::{client, post as post_to, send};
use super::harness::{key, Served};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{Attempt, LayerConfig};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use std::sync::Arc;

/// The keys the handler was run with.
type Seen = Arc<parking_lot::Mutex<Vec<Vec<u8>>>>;

async fn create(State(seen): State<Seen>, Extension(attempt): Extension<Attempt>) -> (StatusCode, String) {
    let mut seen = seen.lock();
    seen.push(attempt.key);
    (StatusCode::CREATED, format!("payment {}", seen.len()))
}

async fn server<B: IdempotencyBackend + Clone>(backend: &B, seen: &Seen) -> Served {
    let routes = Router::new().route("/payments", post(create)).with_state(Arc::clone(seen));
    Served::start(backend, LayerConfig::global(), routes).await
}

/// Two `Idempotency-Key` fields are refused (400 `key-repeated`), the
/// handler not run.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn two_key_fields<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let seen = Seen::default();
    let server = server(backend, &seen).await;
    let client = client();
    let (order_a, order_b) = (key(setting, "order-a"), key(setting, "order-b"));
    let two = post_to(&client, &server.url("/payments"), &order_a, "amount=1").header("Idempotency-Key", order_b);
    let refused = send(two).await;
    assert!(refused.is_problem(400, "key-repeated"), "{refused:?}");
    assert!(seen.lock().is_empty(), "the handler ran");
}

/// An RFC 9651 sf-string key with an escape is one key, the unescaped
/// string: run once, then replayed.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn sf_string<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let seen = Seen::default();
    let server = server(backend, &seen).await;
    let client = client();
    let url = server.url("/payments");
    let prefix = key(setting, "");
    let escaped = format!(r#""{prefix}a\"b""#);
    let first = send(post_to(&client, &url, &escaped, "amount=1")).await;
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");
    assert_eq!(*seen.lock(), [format!(r#"{prefix}a"b"#).into_bytes()], "the key is the unescaped string");
    let again = send(post_to(&client, &url, &escaped, "amount=1")).await;
    assert_eq!((again.status, again.replayed(), &again.body), (201, true, &first.body), "{again:?}");
    assert_eq!(seen.lock().len(), 1, "the same key ran twice");
}

/// Parameters on the key are refused (400 `key-invalid`, saying so), the
/// handler not run.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn key_parameters<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let seen = Seen::default();
    let server = server(backend, &seen).await;
    let client = client();
    let with_parameter = format!(r#""{}";v=1"#, key(setting, "abc"));
    let refused = send(post_to(&client, &server.url("/payments"), &with_parameter, "amount=1")).await;
    assert!(refused.is_problem(400, "key-invalid"), "{refused:?}");
    assert!(refused.body.to_lowercase().contains("parameters"), "{}", refused.body);
    assert!(seen.lock().is_empty(), "the handler ran");
}
