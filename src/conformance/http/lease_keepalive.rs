//! Guards the lease keep-alive: a handler that runs twice as long as its
//! lease keeps its key (a duplicate mid-run gets 409, not a second run),
//! its answer is stored, and the retry after it replays that answer — and
//! so does a handler that blocks its thread for three leases, and one
//! whose body streams for three leases after its head was answered (the
//! keep-alive once ran in the handler's task and stopped at the head).
//! Renewals run in real time, so these need a backend on real time.
//!
//! The blocking handler runs on the tower layer alone: it blocks inside
//! tokio's `block_in_place`, which a multi-threaded runtime allows and a
//! server whose workers are each a current-thread runtime (actix-web's)
//! refuses with a panic; blocking such a worker outright would stop
//! every request it serves, not only the handler's.

use super::fixture::{Fixture, FixtureAnswer};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use bytes::Bytes;
use http::{Method, StatusCode};
use std::future::Future;
use std::time::Duration;

/// Runs 2.2 s: more than twice the 1 s lease.
async fn long(runs: Counter) -> FixtureAnswer {
    let run = runs.bump();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}"))
}

/// `POST /payments` answered by `answering`, its runs counted in `runs`.
fn payments<F, A>(runs: &Counter, answering: F) -> Fixture
where
    F: Fn(Counter) -> A + Send + Sync + 'static,
    A: Future<Output = FixtureAnswer> + Send + 'static,
{
    let runs = runs.clone();
    Fixture::new().route(Method::POST, "/payments", move |_| answering(runs.clone()))
}

/// A handler twice as long as its lease keeps its key (a duplicate mid-run
/// gets 409, not a second run), its answer is kept and the retry replays
/// it: the layer renews the lease, in real time.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn keepalive<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    keepalive_on(&Tower(backend), setting).await;
}

/// [`keepalive`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn keepalive_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server =
        Server::start(target, LayerConfig::global().lease(Duration::from_secs(1)), payments(&runs, long)).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-long");

    let first = tokio::spawn(send(post_to(&client, &url, &order, "amount=1")));
    runs.reach(1, Duration::from_secs(10), "the handler started").await;
    // Past the 1 s lease: without renewals this duplicate would take over.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let duplicate = send(post_to(&client, &url, &order, "amount=1")).await;
    assert!(duplicate.is_problem(409, "in-progress"), "{duplicate:?}");
    assert!(duplicate.header("retry-after").is_some(), "{duplicate:?}");
    assert_eq!(runs.get(), 1, "the duplicate ran the handler again");

    let first = first.await.expect("join");
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (201, "payment 1", false), "{first:?}");
    assert_eq!(first.header("idempotency-stored"), None, "the answer was not kept: {first:?}");

    let retry = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "payment 1", true), "{retry:?}");
    assert_eq!(runs.get(), 1, "the handler ran once");
    server.stop().await;
}

/// Blocks its thread (a synchronous driver, CPU-bound work) for 6 s:
/// three times the 2 s lease. Nothing in its task can renew meanwhile.
/// It blocks inside `block_in_place`, as tokio asks: a worker blocked
/// without it can stall the runtime's I/O driver, and then no duplicate
/// (nor a networked backend's renewal) is served until it returns.
/// `tests/http/blocking_handler.rs` blocks outright, on the embedded
/// store, and checks the lease from outside the runtime.
async fn blocking(runs: Counter) -> FixtureAnswer {
    let run = runs.bump();
    tokio::task::block_in_place(|| std::thread::sleep(Duration::from_secs(6)));
    FixtureAnswer::text(StatusCode::CREATED, format!("payment {run}"))
}

/// Answers its head at once and streams its body over 6 s: three times
/// the 2 s lease (a proxied upstream body, an export).
async fn streaming(runs: Counter) -> FixtureAnswer {
    let run = runs.bump();
    let chunks = futures_util::stream::unfold(0u32, move |sent| async move {
        if sent == 6 {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((Ok::<_, std::io::Error>(Bytes::from(format!("part {sent} of payment {run};"))), sent + 1))
    });
    FixtureAnswer::streamed(StatusCode::CREATED, Box::pin(chunks))
}

/// A duplicate sent 3 s into the first request — past its 2 s lease —
/// must get 409, the first its own answer stored, the retry after it the
/// replay, and the handler must have run once.
async fn runs_once_past_its_lease<T: ServeTarget>(target: &T, routes: Fixture, runs: &Counter, key: &str) -> String {
    let server = Server::start(target, LayerConfig::global().lease(Duration::from_secs(2)), routes).await;
    let client = client();
    let url = server.url("/payments");
    let first = tokio::spawn(send(post_to(&client, &url, key, "amount=1")));
    runs.reach(1, Duration::from_secs(10), "the handler started").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let duplicate = send(post_to(&client, &url, key, "amount=1")).await;
    assert!(duplicate.is_problem(409, "in-progress"), "the lease lapsed: {duplicate:?}");
    let first = first.await.expect("join");
    assert_eq!((first.status, first.replayed()), (201, false), "{first:?}");
    assert_eq!(first.header("idempotency-stored"), None, "the answer was not kept: {first:?}");
    let retry = send(post_to(&client, &url, key, "amount=1")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, first.body.as_str(), true), "{retry:?}");
    assert_eq!(runs.get(), 1, "the handler ran twice");
    server.stop().await;
    first.body
}

/// A handler that blocks its thread (inside `block_in_place`) for three
/// leases runs once: a duplicate past the lease is 409 and the retry after
/// it a replay.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn keepalive_blocking<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let body =
        runs_once_past_its_lease(&Tower(backend), payments(&runs, blocking), &runs, &key(setting, "order-blocking"))
            .await;
    assert_eq!(body, "payment 1");
}

/// A handler whose body streams for three leases after its head was
/// answered runs once: the keep-alive outlives the head.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn keepalive_streaming<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    keepalive_streaming_on(&Tower(backend), setting).await;
}

/// [`keepalive_streaming`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn keepalive_streaming_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let routes = payments(&runs, streaming);
    let body = runs_once_past_its_lease(target, routes, &runs, &key(setting, "order-streaming")).await;
    assert!(body.starts_with("part 0 of payment 1;") && body.ends_with("part 5 of payment 1;"), "{body}");
}
