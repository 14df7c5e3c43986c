//! The relay's HTTP sink through the retry layer, against a real HTTP
//! server on loopback: each message is posted with its id as the
//! `Idempotency-Key`, every retry of it (after 503s) with the same key and
//! body; messages of one key arrive in order; a 404 makes a dead letter at
//! once, without retries.

#![cfg(feature = "messaging")]

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkv::client::{Backoff, RetryLayer, RetryPolicy};
use idemkv::{
    backend::ClaimOptions,
    messaging::{HttpSink, KeyDelivery, Outbox, OutboxMessage, Produced, Relay, RelayConfig},
    Config, Durability, Fingerprint, Store,
};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tower::Layer;

/// Every attempt the server saw: destination, key, body, status sent.
type Seen = Arc<Mutex<Vec<(String, String, Vec<u8>, u16)>>>;

/// 503 for the first two attempts of each key at `flaky`, 404 at
/// `missing`, 200 otherwise.
async fn hook(
    State(seen): State<Seen>,
    Path(destination): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let key = headers.get("idempotency-key").and_then(|key| key.to_str().ok()).unwrap_or_default().to_owned();
    let mut seen = seen.lock();
    let before = seen.iter().filter(|(_, earlier, _, _)| *earlier == key).count();
    let status = match destination.as_str() {
        "missing" => StatusCode::NOT_FOUND,
        "flaky" if before < 2 => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::OK,
    };
    seen.push((destination, key, body.to_vec(), status.as_u16()));
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_posted_once_each_with_their_id_as_the_key() {
    let seen = Seen::default();
    let app = Router::new().route("/hooks/{destination}", post(hook)).with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path(), Config::new().durability(Durability::Buffered)).expect("open"));
    let outbox = Outbox::shared(Arc::clone(&store));
    let policy = RetryPolicy::new().backoff(Backoff::new(Duration::from_millis(5), Duration::from_millis(20)));
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let sink = HttpSink::new(format!("http://{address}/hooks/"), RetryLayer::new(policy).layer(http));
    let relay = Relay::new(Arc::clone(&store), sink, RelayConfig::new(["shop"]));

    for (key, destination) in [(&b"order-1"[..], "flaky"), (b"order-2", "missing")] {
        let messages = vec![
            OutboxMessage::new(destination, format!("{destination} first").into_bytes()),
            OutboxMessage::new(destination, format!("{destination} second").into_bytes()),
        ];
        let produced = Produced::Complete { response: b"201".to_vec(), messages };
        outbox.run(b"shop", key, Fingerprint::of(key), ClaimOptions::new(), |_| async { produced }).await.expect("run");
    }
    assert_eq!(relay.deliver_key(b"shop", b"order-1").await.expect("deliver"), Some(KeyDelivery::Done(2)));
    assert_eq!(relay.deliver_key(b"shop", b"order-2").await.expect("deliver"), Some(KeyDelivery::Dead));

    let seen = seen.lock().clone();
    let flaky: Vec<_> = seen.iter().filter(|(destination, ..)| destination == "flaky").collect();
    assert_eq!(flaky.len(), 6, "two messages, three attempts each: {seen:?}");
    for (attempts, body) in [(&flaky[..3], &b"flaky first"[..]), (&flaky[3..], b"flaky second")] {
        let key = &attempts[0].1;
        assert!(key.starts_with("ob-") && key.ends_with(if body == b"flaky first" { "-0" } else { "-1" }), "{key}");
        assert!(attempts.iter().all(|(_, same, sent, _)| same == key && sent == body), "{attempts:?}");
        assert_eq!(attempts.iter().map(|attempt| attempt.3).collect::<Vec<_>>(), [503, 503, 200]);
    }
    let missing: Vec<_> = seen.iter().filter(|(destination, ..)| destination == "missing").collect();
    assert_eq!(missing.len(), 1, "a 404 is not retried, and the second message waits: {missing:?}");
}
