//! The idempotency layer in front of a real axum server on 127.0.0.1, driven
//! by a real HTTP client: double sends, concurrent sends, a reused key, a
//! missing key, an oversized body, a restart on the same directory, expiry,
//! a 5xx released under `FailurePolicy::ReleaseOnServerError`, and a
//! request dropped mid-handler whose handler still finishes.
#![cfg(feature = "tower")]

use axum::{body::Bytes, extract::State, http::StatusCode, routing::post, Router};
use idemkv::http::{FailurePolicy, IdempotencyLayer, LayerConfig};
use idemkv::{Config, Durability, ManualClock, Store};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The "side effect": charges counted, and the first `fail_first` calls
/// answer 503 without charging.
#[derive(Default)]
struct Ledger {
    charges: AtomicU32,
    fail_first: AtomicU32,
}

async fn charge(State(ledger): State<Arc<Ledger>>, body: Bytes) -> (StatusCode, String) {
    tokio::time::sleep(Duration::from_millis(150)).await;
    if ledger.fail_first.load(Ordering::SeqCst) > 0 {
        ledger.fail_first.fetch_sub(1, Ordering::SeqCst);
        return (StatusCode::SERVICE_UNAVAILABLE, "try again".into());
    }
    let number = ledger.charges.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::CREATED, format!("payment {number} for {}", String::from_utf8_lossy(&body)))
}

struct Server {
    url: String,
    ledger: Arc<Ledger>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(dir: &Path, clock: &ManualClock, ledger: Arc<Ledger>) -> Server {
    start_with(dir, clock, ledger, LayerConfig::global()).await
}

async fn start_with(dir: &Path, clock: &ManualClock, ledger: Arc<Ledger>, layer: LayerConfig) -> Server {
    let config =
        Config::new().durability(Durability::Sync).clock(Arc::new(clock.clone())).default_ttl(Duration::from_secs(60));
    let store = Store::open(dir, config).expect("open store");
    let app = Router::new()
        .route("/payments", post(charge))
        .with_state(Arc::clone(&ledger))
        .layer(IdempotencyLayer::new(store, layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/payments", listener.local_addr().expect("address"));
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    Server { url, ledger, task }
}

impl Server {
    /// Stops serving and drops the store (releasing its directory lock).
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        // Connections held by the client pool may keep the router (and the
        // store) alive a little longer; give them a moment to close.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn send(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Option<String>) {
    let mut request = client.post(url).body(body.to_string());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotency-replay").map(|value| value.to_str().expect("ascii").to_string());
    (status, response.text().await.expect("body"), replayed)
}

fn client() -> reqwest::Client {
    // No pooled connections: a restarted server must not meet old sockets.
    reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn double_send_charges_once_and_replays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_767_225_600_000);
    let server = start(dir.path(), &clock, Arc::default()).await;
    let client = client();
    let first = send(&client, &server.url, Some("order-1"), "amount=10", &[]).await;
    let second = send(&client, &server.url, Some("\"order-1\""), "amount=10", &[]).await;
    assert_eq!((first.0, first.2.as_deref()), (201, None));
    assert_eq!((second.0, &second.1, second.2.as_deref()), (201, &first.1, Some("true")));
    assert_eq!(server.ledger.charges.load(Ordering::SeqCst), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sends_execute_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_767_225_600_000);
    let server = start(dir.path(), &clock, Arc::default()).await;
    let client = client();
    let sends: Vec<_> = (0..8)
        .map(|index| {
            let (client, url) = (client.clone(), server.url.clone());
            tokio::spawn(async move {
                // Half of them ask to wait for the first request's answer.
                let headers: &[(&str, &str)] = if index % 2 == 0 { &[("Prefer", "wait=5")] } else { &[] };
                send(&client, &url, Some("order-2"), "amount=20", headers).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for handle in sends {
        answers.push(handle.await.expect("join"));
    }
    assert_eq!(server.ledger.charges.load(Ordering::SeqCst), 1, "{answers:?}");
    let created: Vec<_> = answers.iter().filter(|answer| answer.0 == 201).collect();
    assert!(answers.iter().all(|answer| answer.0 == 201 || answer.0 == 409), "{answers:?}");
    assert!(created.iter().all(|answer| answer.1 == created[0].1), "{answers:?}");
    for conflict in answers.iter().filter(|answer| answer.0 == 409) {
        assert!(conflict.1.contains("\"status\":409"), "{conflict:?}");
    }
    // Every request that asked to wait got the final answer.
    assert!(created.len() >= 4, "{answers:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_key_missing_key_and_bad_key_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_767_225_600_000);
    let server = start(dir.path(), &clock, Arc::default()).await;
    let client = client();
    assert_eq!(send(&client, &server.url, Some("order-3"), "amount=30", &[]).await.0, 201);
    let reused = send(&client, &server.url, Some("order-3"), "amount=31", &[]).await;
    assert_eq!(reused.0, 422, "{reused:?}");
    assert!(!reused.1.contains("payment"), "a mismatch never reveals the stored response: {reused:?}");
    let missing = send(&client, &server.url, None, "amount=30", &[]).await;
    assert_eq!(missing.0, 400);
    assert!(missing.1.contains("urn:idemkv:problem:key-missing"), "{missing:?}");
    let long = "k".repeat(300);
    assert_eq!(send(&client, &server.url, Some(&long), "amount=30", &[]).await.0, 400);
    assert_eq!(send(&client, &server.url, Some("\"unclosed"), "amount=30", &[]).await.0, 400);
    // Bodies are buffered up to 1 MiB; beyond that a clear 413, nothing stored.
    let huge = "x".repeat((1 << 20) + 1);
    let too_large = send(&client, &server.url, Some("order-huge"), &huge, &[]).await;
    assert_eq!(too_large.0, 413, "{:?}", &too_large.1);
    assert_eq!(send(&client, &server.url, Some("order-huge"), "amount=1", &[]).await.0, 201);
    assert_eq!(server.ledger.charges.load(Ordering::SeqCst), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_survives_a_restart_and_expires_by_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_767_225_600_000);
    let client = client();
    let server = start(dir.path(), &clock, Arc::default()).await;
    let first = send(&client, &server.url, Some("order-4"), "amount=40", &[]).await;
    assert_eq!(first.0, 201);
    server.stop().await;

    let ledger = Arc::new(Ledger::default());
    let server = start(dir.path(), &clock, Arc::clone(&ledger)).await;
    let again = send(&client, &server.url, Some("order-4"), "amount=40", &[]).await;
    assert_eq!((again.0, &again.1, again.2.as_deref()), (201, &first.1, Some("true")));
    assert_eq!(ledger.charges.load(Ordering::SeqCst), 0, "the restarted server replayed");
    clock.advance(Duration::from_secs(61));
    let expired = send(&client, &server.url, Some("order-4"), "amount=40", &[]).await;
    assert_eq!((expired.0, expired.2.as_deref()), (201, None));
    assert_eq!(ledger.charges.load(Ordering::SeqCst), 1, "after the TTL the key runs again");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_releases_the_key_so_a_retry_runs_when_the_policy_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_767_225_600_000);
    let ledger = Arc::new(Ledger::default());
    ledger.fail_first.store(1, Ordering::SeqCst);
    let layer = LayerConfig::global().failure_policy(FailurePolicy::ReleaseOnServerError);
    let server = start_with(dir.path(), &clock, Arc::clone(&ledger), layer).await;
    let client = client();
    let failed = send(&client, &server.url, Some("order-5"), "amount=50", &[]).await;
    assert_eq!(failed.0, 503);
    // The key was released before the 503 went out: the retry runs at once.
    let retried = send(&client, &server.url, Some("order-5"), "amount=50", &[]).await;
    assert_eq!((retried.0, retried.2.as_deref()), (201, None), "{retried:?}");
    assert_eq!(ledger.charges.load(Ordering::SeqCst), 1);
    server.stop().await;
}

/// An inner service that takes a while, to be cancelled mid-way; it counts
/// the runs that reached their end.
#[derive(Clone, Default)]
struct Slow(Arc<AtomicU32>);

impl tower::Service<axum::http::Request<axum::body::Body>> for Slow {
    type Response = axum::http::Response<axum::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: axum::http::Request<axum::body::Body>) -> Self::Future {
        let finished = Arc::clone(&self.0);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            finished.fetch_add(1, Ordering::SeqCst);
            Ok(axum::http::Response::new(axum::body::Body::from("late")))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_request_does_not_cancel_the_handler_and_the_retry_replays() {
    use tower::{Layer, Service};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new()).expect("open");
    let slow = Slow::default();
    let mut service = IdempotencyLayer::new(store.clone(), LayerConfig::global()).layer(slow.clone());
    let request = || {
        axum::http::Request::post("/payments")
            .header("Idempotency-Key", "order-6")
            .body(axum::body::Body::from("amount=60"))
            .expect("request")
    };
    std::future::poll_fn(|context| service.poll_ready(context)).await.expect("ready");
    // The client gives up: the in-flight future is dropped.
    let cancelled = tokio::time::timeout(Duration::from_millis(100), service.call(request())).await;
    assert!(cancelled.is_err(), "the slow handler cannot have answered");
    // The handler runs on in its own task, and its answer is kept.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let stored = loop {
        if let Some(record) = store.get(b"", b"order-6").expect("get").filter(|record| record.state.is_terminal()) {
            break record;
        }
        assert!(std::time::Instant::now() < deadline, "the handler's answer was never kept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(stored.state, idemkv::State::Completed);
    std::future::poll_fn(|context| service.poll_ready(context)).await.expect("ready");
    let retried = service.call(request()).await.expect("infallible");
    assert_eq!(retried.headers().get("idempotency-replay").map(axum::http::HeaderValue::as_bytes), Some(&b"true"[..]));
    assert_eq!(slow.0.load(Ordering::SeqCst), 1, "the handler ran once");
}
