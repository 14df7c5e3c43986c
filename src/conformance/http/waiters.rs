//! Guards the async `Prefer: wait`: 500 duplicates waiting on one key whose
//! handler is still running park no thread, so a request with another key
//! is answered at once; the handler runs once and every waiter gets its
//! answer replayed. A request that waits alone gets the replay too,
//! however long it waited. (The embedded store's own test runs this
//! scenario and then checks the store's counts: each waiting request one
//! claim answered by a replay, never a conflict, and no waiter polling.)

use super::harness::{client, post as post_to, send, Counter};
use super::harness::{key, Served};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{IdempotencyLayer, LayerConfig};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const WAITERS: u32 = 500;

#[derive(Default)]
struct Shared {
    /// Requests that reached the server (counted outside the layer).
    arrived: Counter,
    started: Counter,
    finished: Counter,
    /// Lets the slow handler end once the test has measured the other key.
    release: Notify,
}

/// Takes 2 s, and longer until the test says so (20 s at most).
async fn slow(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    let run = shared.started.bump();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _released_or_not = tokio::time::timeout(Duration::from_secs(20), shared.release.notified()).await;
    shared.finished.bump();
    (StatusCode::CREATED, format!("payment {run}"))
}

async fn arrive(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    shared.arrived.bump();
    next.run(request).await
}

/// 500 duplicates waiting (`Prefer: wait`) on one key whose handler still
/// runs park no thread: a request with another key is answered at once, the
/// handler runs once, and every waiter gets its answer replayed. Then one
/// request that waits alone, a while, while the first runs: it gets the
/// replay, and the handler runs once.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn waiters<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    crowd(backend, setting).await;
    alone(backend, setting).await;
}

/// The slow handler at `/payments` and a quick one at `/quick` behind the
/// layer over `backend`, arrivals counted outside the layer.
async fn serve<B: IdempotencyBackend + Clone>(backend: &B) -> (Served, Arc<Shared>) {
    let shared = Arc::new(Shared::default());
    let app = Router::new()
        .route("/payments", post(slow))
        .route("/quick", post(|| async { (StatusCode::CREATED, "quick") }))
        .with_state(Arc::clone(&shared))
        .layer(IdempotencyLayer::new(backend.clone(), LayerConfig::global()))
        .layer(middleware::from_fn_with_state(Arc::clone(&shared), arrive));
    (Served::serve(app).await, shared)
}

/// The 500 waiters and the other key.
async fn crowd<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let (server, shared) = serve(backend).await;
    let (crowd, other_key) = (key(setting, "order-crowd"), key(setting, "order-other"));
    let client = client();
    let url = server.url("/payments");

    let first = tokio::spawn(send(post_to(&client, &url, &crowd, "amount=1")));
    shared.started.reach(1, Duration::from_secs(10), "the first request's handler started").await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| tokio::spawn(send(post_to(&client, &url, &crowd, "amount=1").header("Prefer", "wait=30"))))
        .collect();
    shared.arrived.reach(WAITERS + 1, Duration::from_secs(20), "every waiter reached the server").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(shared.finished.get(), 0, "the handler is still running, the waiters are waiting");

    let started = Instant::now();
    let other = send(post_to(&client, &server.url("/quick"), &other_key, "amount=2")).await;
    let took = started.elapsed();
    assert_eq!((other.status, other.body.as_str(), other.replayed()), (201, "quick", false), "{other:?}");
    assert!(took < Duration::from_secs(1), "another key waited behind the crowd: {took:?}");
    assert_eq!(shared.finished.get(), 0, "the crowd was still waiting when the other key was answered");

    shared.release.notify_one();
    let first = first.await.expect("join");
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (201, "payment 1", false), "{first:?}");
    let mut replayed = 0;
    let mut refused = Vec::new();
    for waiter in waiters {
        let reply = waiter.await.expect("join");
        if reply.status == 201 && reply.replayed() && reply.body == first.body {
            replayed += 1;
        } else {
            refused.push(reply);
        }
    }
    assert_eq!(shared.started.get(), 1, "the handler ran once");
    // The default cap is 1024 waiters per key: all 500 wait and get the answer.
    assert_eq!(replayed, WAITERS, "{} waiters did not get the replay, e.g. {:?}", refused.len(), refused.first());
    server.stop().await;
}

/// One request that waits (`Prefer: wait=10`) half a second while the
/// first runs: the replay, and one run.
async fn alone<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let (server, shared) = serve(backend).await;
    let client = client();
    let (url, order) = (server.url("/payments"), key(setting, "order-wait"));
    let first = tokio::spawn(send(post_to(&client, &url, &order, "amount=1")));
    shared.started.reach(1, Duration::from_secs(10), "the first request's handler started").await;
    let waiter = tokio::spawn(send(post_to(&client, &url, &order, "amount=1").header("Prefer", "wait=10")));
    shared.arrived.reach(2, Duration::from_secs(20), "the waiting request reached the server").await;
    // Its claim found the key in progress; let it wait a while.
    tokio::time::sleep(Duration::from_millis(500)).await;
    shared.release.notify_one();

    let first = first.await.expect("join");
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");
    let second = waiter.await.expect("join");
    assert_eq!((second.status, second.replayed(), &second.body), (201, true, &first.body), "{second:?}");
    assert_eq!(shared.started.get(), 1, "the handler ran once");
    server.stop().await;
}
