//! Guards the reading of `Idempotency-Key` over the wire: two fields are
//! refused, an RFC 9651 sf-string with an escape is one key (run once,
//! then replayed), and parameters are refused with a message that says so.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, post as post_to, send};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use http::{Method, StatusCode};
use std::sync::Arc;

/// The keys the handler was run with.
type Seen = Arc<parking_lot::Mutex<Vec<Vec<u8>>>>;

fn create(seen: &Seen, request: FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    let Some(attempt) = request.attempt else {
        return std::future::ready(FixtureAnswer::text(StatusCode::INTERNAL_SERVER_ERROR, "no attempt"));
    };
    let mut seen = seen.lock();
    seen.push(attempt.key);
    std::future::ready(FixtureAnswer::text(StatusCode::CREATED, format!("payment {}", seen.len())))
}

async fn server<'t, T: ServeTarget>(target: &'t T, seen: &Seen) -> Server<'t, T> {
    let seen = Arc::clone(seen);
    let fixture = Fixture::new().route(Method::POST, "/payments", move |request| create(&seen, request));
    Server::start(target, LayerConfig::global(), fixture).await
}

/// Two `Idempotency-Key` fields are refused (400 `key-repeated`), the
/// handler not run.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn two_key_fields<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    two_key_fields_on(&Tower(backend), setting).await;
}

/// [`two_key_fields`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn two_key_fields_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let seen = Seen::default();
    let server = server(target, &seen).await;
    let client = client();
    let (order_a, order_b) = (key(setting, "order-a"), key(setting, "order-b"));
    let two = post_to(&client, &server.url("/payments"), &order_a, "amount=1").header("Idempotency-Key", order_b);
    let refused = send(two).await;
    assert!(refused.is_problem(400, "key-repeated"), "{refused:?}");
    assert!(seen.lock().is_empty(), "the handler ran");
    server.stop().await;
}

/// An RFC 9651 sf-string key with an escape is one key, the unescaped
/// string: run once, then replayed.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn sf_string<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    sf_string_on(&Tower(backend), setting).await;
}

/// [`sf_string`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn sf_string_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let seen = Seen::default();
    let server = server(target, &seen).await;
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
    server.stop().await;
}

/// Parameters on the key are refused (400 `key-invalid`, saying so), the
/// handler not run.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn key_parameters<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    key_parameters_on(&Tower(backend), setting).await;
}

/// [`key_parameters`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn key_parameters_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let seen = Seen::default();
    let server = server(target, &seen).await;
    let client = client();
    let with_parameter = format!(r#""{}";v=1"#, key(setting, "abc"));
    let refused = send(post_to(&client, &server.url("/payments"), &with_parameter, "amount=1")).await;
    assert!(refused.is_problem(400, "key-invalid"), "{refused:?}");
    assert!(refused.body.to_lowercase().contains("parameters"), "{}", refused.body);
    assert!(seen.lock().is_empty(), "the handler ran");
    server.stop().await;
}
