//! Guards the reading of `Idempotency-Key` over the wire: two fields are
//! refused, an RFC 9651 sf-string with an escape is one key (run once,
//! then replayed), and parameters are refused with a message that says so.
#![cfg(feature = "tower")]

use crate::common::http::{client, post as post_to, send, Server};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Extension, Router};
use idemkv::http::{Attempt, LayerConfig};
use idemkv::Config;
use std::sync::Arc;

/// The keys the handler was run with.
type Seen = Arc<parking_lot::Mutex<Vec<Vec<u8>>>>;

async fn create(State(seen): State<Seen>, Extension(attempt): Extension<Attempt>) -> (StatusCode, String) {
    let mut seen = seen.lock();
    seen.push(attempt.key);
    (StatusCode::CREATED, format!("payment {}", seen.len()))
}

async fn server(seen: &Seen) -> Server {
    let routes = Router::new().route("/payments", post(create)).with_state(Arc::clone(seen));
    Server::start(Config::new(), LayerConfig::global(), routes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_key_fields_are_refused() {
    let seen = Seen::default();
    let server = server(&seen).await;
    let client = client();
    let two = post_to(&client, &server.url("/payments"), "order-a", "amount=1").header("Idempotency-Key", "order-b");
    let refused = send(two).await;
    assert!(refused.is_problem(400, "key-repeated"), "{refused:?}");
    assert!(seen.lock().is_empty(), "the handler ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_sf_string_with_an_escape_is_one_key() {
    let seen = Seen::default();
    let server = server(&seen).await;
    let client = client();
    let url = server.url("/payments");
    let first = send(post_to(&client, &url, r#""a\"b""#, "amount=1")).await;
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");
    assert_eq!(*seen.lock(), [br#"a"b"#.to_vec()], "the key is the unescaped string");
    let again = send(post_to(&client, &url, r#""a\"b""#, "amount=1")).await;
    assert_eq!((again.status, again.replayed(), &again.body), (201, true, &first.body), "{again:?}");
    assert_eq!(seen.lock().len(), 1, "the same key ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parameters_on_the_key_are_refused_with_a_clear_message() {
    let seen = Seen::default();
    let server = server(&seen).await;
    let client = client();
    let refused = send(post_to(&client, &server.url("/payments"), r#""abc";v=1"#, "amount=1")).await;
    assert!(refused.is_problem(400, "key-invalid"), "{refused:?}");
    assert!(refused.body.to_lowercase().contains("parameters"), "{}", refused.body);
    assert!(seen.lock().is_empty(), "the handler ran");
}
