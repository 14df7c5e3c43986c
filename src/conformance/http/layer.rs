//! The idempotency layer over a backend: double sends, concurrent sends, a
//! reused key, a missing key, an oversized body, a restart of the backend
//! (and, on a movable clock, expiry), a 5xx released under
//! `FailurePolicy::ReleaseOnServerError`, and a request dropped
//! mid-handler whose handler still finishes.
//!
//! The restart and the dropped request run on the tower layer alone: the
//! restart swaps the backend under a served layer (a target is bound to
//! one backend), and the dropped request drops the layer's own future, a
//! tower `Service` call that no HTTP server exposes (on a real server the
//! same promise is `client_disconnect`'s, which runs on every target).

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::{key, Served};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::{Restart, Setting};
use crate::http::{FailurePolicy, IdempotencyLayer, LayerConfig};
use http::{Method, StatusCode};
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

async fn charge(ledger: Arc<Ledger>, request: FixtureRequest) -> FixtureAnswer {
    tokio::time::sleep(Duration::from_millis(150)).await;
    if ledger.fail_first.load(Ordering::SeqCst) > 0 {
        ledger.fail_first.fetch_sub(1, Ordering::SeqCst);
        return FixtureAnswer::text(StatusCode::SERVICE_UNAVAILABLE, "try again");
    }
    let number = ledger.charges.fetch_add(1, Ordering::SeqCst) + 1;
    FixtureAnswer::text(StatusCode::CREATED, format!("payment {number} for {}", request.text()))
}

/// `POST /payments`, charged to `ledger`.
fn payments(ledger: &Arc<Ledger>) -> Fixture {
    let ledger = Arc::clone(ledger);
    Fixture::new().route(Method::POST, "/payments", move |request| charge(Arc::clone(&ledger), request))
}

struct Payments<'t, T: ServeTarget> {
    url: String,
    ledger: Arc<Ledger>,
    server: Server<'t, T>,
}

async fn start<T: ServeTarget>(target: &T, ledger: Arc<Ledger>) -> Payments<'_, T> {
    start_with(target, ledger, LayerConfig::global()).await
}

async fn start_with<T: ServeTarget>(target: &T, ledger: Arc<Ledger>, layer: LayerConfig) -> Payments<'_, T> {
    let server = Server::start(target, layer, payments(&ledger)).await;
    Payments { url: server.url("/payments"), ledger, server }
}

impl<T: ServeTarget> Payments<'_, T> {
    /// Stops serving, so that nothing holds the backend any more.
    async fn stop(self) {
        self.server.stop().await;
    }
}

/// The payments on the tower layer over `backend`, owning nothing of it
/// (the restart swaps the backend while the client keeps its key).
struct TowerPayments {
    url: String,
    ledger: Arc<Ledger>,
    served: Served,
}

async fn start_tower<B: IdempotencyBackend + Clone>(backend: &B, ledger: Arc<Ledger>) -> TowerPayments {
    let (base, served) = Tower(backend).serve(LayerConfig::global(), payments(&ledger)).await;
    TowerPayments { url: format!("{base}/payments"), ledger, served }
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
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client")
}

/// A request sent twice with one key (the second as an sf-string) is
/// charged once; the second gets the first answer, marked a replay.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn double_send<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    double_send_on(&Tower(backend), setting).await;
}

/// [`double_send`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn double_send_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let server = start(target, Arc::default()).await;
    let client = client();
    let order = key(setting, "order-1");
    let first = send(&client, &server.url, Some(&order), "amount=10", &[]).await;
    let second = send(&client, &server.url, Some(&format!("\"{order}\"")), "amount=10", &[]).await;
    assert_eq!((first.0, first.2.as_deref()), (201, None));
    assert_eq!((second.0, &second.1, second.2.as_deref()), (201, &first.1, Some("true")));
    assert_eq!(server.ledger.charges.load(Ordering::SeqCst), 1);
    server.stop().await;
}

/// Eight concurrent sends with one key are charged once: each is the answer
/// or a 409 problem, and every one that asked to wait (`Prefer: wait`) gets
/// the answer.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn concurrent_sends<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    concurrent_sends_on(&Tower(backend), setting).await;
}

/// [`concurrent_sends`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn concurrent_sends_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let server = start(target, Arc::default()).await;
    let client = client();
    let order = key(setting, "order-2");
    let sends: Vec<_> = (0..8)
        .map(|index| {
            let (client, url, order) = (client.clone(), server.url.clone(), order.clone());
            tokio::spawn(async move {
                // Half of them ask to wait for the first request's answer.
                let headers: &[(&str, &str)] = if index % 2 == 0 { &[("Prefer", "wait=5")] } else { &[] };
                send(&client, &url, Some(&order), "amount=20", headers).await
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

/// A reused key with another body is 422 and reveals nothing of the stored
/// answer; a missing key is 400 `key-missing`; an over-long or unclosed key
/// is 400; a body over 1 MiB is 413 and spends nothing.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn refused_keys<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    refused_keys_on(&Tower(backend), setting).await;
}

/// [`refused_keys`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn refused_keys_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let server = start(target, Arc::default()).await;
    let client = client();
    let order = key(setting, "order-3");
    assert_eq!(send(&client, &server.url, Some(&order), "amount=30", &[]).await.0, 201);
    let reused = send(&client, &server.url, Some(&order), "amount=31", &[]).await;
    assert_eq!(reused.0, 422, "{reused:?}");
    assert!(!reused.1.contains("payment"), "a mismatch never reveals the stored response: {reused:?}");
    let missing = send(&client, &server.url, None, "amount=30", &[]).await;
    assert_eq!(missing.0, 400);
    assert!(missing.1.contains("urn:idemkv:problem:key-missing"), "{missing:?}");
    let long = "k".repeat(300);
    assert_eq!(send(&client, &server.url, Some(&long), "amount=30", &[]).await.0, 400);
    let unclosed = format!("\"{}", key(setting, "unclosed"));
    assert_eq!(send(&client, &server.url, Some(&unclosed), "amount=30", &[]).await.0, 400);
    // Bodies are buffered up to 1 MiB; beyond that a clear 413, nothing stored.
    let huge = "x".repeat((1 << 20) + 1);
    let order_huge = key(setting, "order-huge");
    let too_large = send(&client, &server.url, Some(&order_huge), &huge, &[]).await;
    assert_eq!(too_large.0, 413, "{:?}", &too_large.1);
    assert_eq!(send(&client, &server.url, Some(&order_huge), "amount=1", &[]).await.0, 201);
    assert_eq!(server.ledger.charges.load(Ordering::SeqCst), 2);
    server.stop().await;
}

/// Answers once, restarts the backend, and checks that the restarted
/// server replays without charging; the backend after the restart, the
/// client and the key.
async fn restart_replays<B: IdempotencyBackend + Clone>(
    backend: B,
    restart: &mut Restart<B>,
    setting: &Setting,
) -> (B, TowerPayments, reqwest::Client, String) {
    let client = client();
    let order = key(setting, "order-4");
    let server = start_tower(&backend, Arc::default()).await;
    let first = send(&client, &server.url, Some(&order), "amount=40", &[]).await;
    assert_eq!(first.0, 201);
    server.served.stop().await;
    let backend = restart(backend).await;

    let ledger = Arc::new(Ledger::default());
    let server = start_tower(&backend, Arc::clone(&ledger)).await;
    let again = send(&client, &server.url, Some(&order), "amount=40", &[]).await;
    assert_eq!((again.0, &again.1, again.2.as_deref()), (201, &first.1, Some("true")));
    assert_eq!(ledger.charges.load(Ordering::SeqCst), 0, "the restarted server replayed");
    (backend, server, client, order)
}

/// A kept answer is replayed, and nothing charged again, by a server on the
/// backend after a restart
/// ([`Capabilities::persistence`](crate::conformance::Capabilities::persistence));
/// returns the restarted backend.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn restart<B: IdempotencyBackend + Clone>(backend: B, restart: &mut Restart<B>, setting: &Setting) -> B {
    let (backend, server, _, _) = restart_replays(backend, restart, setting).await;
    server.served.stop().await;
    backend
}

/// [`restart`], and after the backend's default TTL (a minute, moved on its
/// clock) the key runs again; returns the restarted backend.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn restart_ttl<B: IdempotencyBackend + Clone>(backend: B, restart: &mut Restart<B>, setting: &Setting) -> B {
    let (backend, server, client, order) = restart_replays(backend, restart, setting).await;
    setting.pass(Duration::from_secs(61)).await;
    let expired = send(&client, &server.url, Some(&order), "amount=40", &[]).await;
    assert_eq!((expired.0, expired.2.as_deref()), (201, None));
    assert_eq!(server.ledger.charges.load(Ordering::SeqCst), 1, "after the TTL the key runs again");
    server.served.stop().await;
    backend
}

/// Under `FailurePolicy::ReleaseOnServerError` a 5xx frees the key before
/// it goes out: the retry runs at once.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn release_5xx<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    release_5xx_on(&Tower(backend), setting).await;
}

/// [`release_5xx`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn release_5xx_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let ledger = Arc::new(Ledger::default());
    ledger.fail_first.store(1, Ordering::SeqCst);
    let layer = LayerConfig::global().failure_policy(FailurePolicy::ReleaseOnServerError);
    let server = start_with(target, Arc::clone(&ledger), layer).await;
    let client = client();
    let order = key(setting, "order-5");
    let failed = send(&client, &server.url, Some(&order), "amount=50", &[]).await;
    assert_eq!(failed.0, 503);
    // The key was released before the 503 went out: the retry runs at once.
    let retried = send(&client, &server.url, Some(&order), "amount=50", &[]).await;
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

/// A request whose caller is dropped mid-handler (its future cancelled)
/// does not cancel the handler: it runs to its end in a task of its own,
/// its answer is kept, and the retry is a replay.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn dropped_request<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    use tower::{Layer, Service};
    let slow = Slow::default();
    let mut service = IdempotencyLayer::new(backend.clone(), LayerConfig::global()).layer(slow.clone());
    let order = key(setting, "order-6");
    let request = || {
        axum::http::Request::post("/payments")
            .header("Idempotency-Key", &order)
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
        let record = backend.get(b"", order.as_bytes()).await.expect("get");
        if let Some(record) = record.filter(|record| record.state.is_terminal()) {
            break record;
        }
        assert!(std::time::Instant::now() < deadline, "the handler's answer was never kept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(stored.state, crate::State::Completed);
    std::future::poll_fn(|context| service.poll_ready(context)).await.expect("ready");
    let retried = service.call(request()).await.expect("infallible");
    assert_eq!(retried.headers().get("idempotency-replay").map(axum::http::HeaderValue::as_bytes), Some(&b"true"[..]));
    assert_eq!(slow.0.load(Ordering::SeqCst), 1, "the handler ran once");
}
