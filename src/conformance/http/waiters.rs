//! Guards the async `Prefer: wait`: 500 duplicates waiting on one key whose
//! handler is still running park no thread, so a request with another key
//! is answered at once; the handler runs once and every waiter gets its
//! answer replayed. A request that waits alone gets the replay too,
//! however long it waited. (The embedded store's own test runs this
//! scenario and then checks the store's counts: each waiting request one
//! claim answered by a replay, never a conflict, and no waiter polling.)

use super::fixture::{Fixture, FixtureAnswer};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const WAITERS: u32 = 500;

#[derive(Default)]
struct Shared {
    started: Counter,
    finished: Counter,
    /// Lets the slow handler end once the test has measured the other key.
    release: Notify,
}

/// Takes 2 s, and longer until the test says so (20 s at most).
async fn slow(shared: Arc<Shared>) -> FixtureAnswer {
    let run = shared.started.bump();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _released_or_not = tokio::time::timeout(Duration::from_secs(20), shared.release.notified()).await;
    shared.finished.bump();
    FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}"))
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
    waiters_on(&Tower(backend), setting).await;
}

/// [`waiters`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn waiters_on<T: ServeTarget>(target: &T, setting: &Setting) {
    crowd(target, setting).await;
    alone(target, setting).await;
}

/// The slow handler at `/payments` and a quick one at `/quick` behind the
/// contract on `target`; arrivals are counted outside it, in the
/// fixture's [`arrivals`](Fixture::arrivals).
async fn serve<T: ServeTarget>(target: &T) -> (Server<'_, T>, Arc<Shared>, Counter) {
    let shared = Arc::new(Shared::default());
    let running = Arc::clone(&shared);
    let fixture = Fixture::new().route(Method::POST, "/payments", move |_| slow(Arc::clone(&running))).route(
        Method::POST,
        "/quick",
        |_| async { FixtureAnswer::text(StatusCode::CREATED, "quick") },
    );
    let arrived = fixture.arrivals().clone();
    (Server::start(target, LayerConfig::global(), fixture).await, shared, arrived)
}

/// The 500 waiters and the other key.
async fn crowd<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, shared, arrived) = serve(target).await;
    let (crowd, other_key) = (key(setting, "order-crowd"), key(setting, "order-other"));
    let client = client();
    let url = server.url("/payments");

    let first = tokio::spawn(send(post_to(&client, &url, &crowd, "amount=1")));
    shared.started.reach(1, Duration::from_secs(10), "the first request's handler started").await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| tokio::spawn(send(post_to(&client, &url, &crowd, "amount=1").header("Prefer", "wait=30"))))
        .collect();
    arrived.reach(WAITERS + 1, Duration::from_secs(20), "every waiter reached the server").await;
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
async fn alone<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, shared, arrived) = serve(target).await;
    let client = client();
    let (url, order) = (server.url("/payments"), key(setting, "order-wait"));
    let first = tokio::spawn(send(post_to(&client, &url, &order, "amount=1")));
    shared.started.reach(1, Duration::from_secs(10), "the first request's handler started").await;
    let waiter = tokio::spawn(send(post_to(&client, &url, &order, "amount=1").header("Prefer", "wait=10")));
    arrived.reach(2, Duration::from_secs(20), "the waiting request reached the server").await;
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
