//! Guards a handler that panics: the answer is a 500 `handler-failed`, the
//! key stays in progress (an immediate retry is a 409, not a silent second
//! run), and after the lease ends the retry runs as a recovered second
//! attempt. Also guards `NotSpent`: the handler's word frees the key.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, post as post_to, send};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{Attempt, LayerConfig};
use http::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// The attempts the handler was run with, in order.
type Seen = Arc<parking_lot::Mutex<Vec<(u32, bool)>>>;

/// Notes the run's attempt; how many runs there were.
fn note(seen: &Seen, attempt: &Attempt) -> usize {
    let mut seen = seen.lock();
    seen.push((attempt.attempt, attempt.recovered));
    seen.len()
}

/// What the handler answers when the layer gave it no attempt.
fn no_attempt() -> FixtureAnswer {
    FixtureAnswer::text(StatusCode::INTERNAL_SERVER_ERROR, "no attempt")
}

/// Panics on its first run, answers 201 after.
async fn fragile(seen: Seen, request: FixtureRequest) -> FixtureAnswer {
    let Some(attempt) = &request.attempt else {
        return no_attempt();
    };
    assert!(note(&seen, attempt) > 1, "the first run fails half-way");
    FixtureAnswer::text(StatusCode::CREATED, format!("payment on attempt {}", attempt.attempt))
}

/// `POST /payments` answered by `answering` with what it has seen.
fn payments<F, A>(seen: &Seen, answering: F) -> Fixture
where
    F: Fn(Seen, FixtureRequest) -> A + Send + Sync + 'static,
    A: std::future::Future<Output = FixtureAnswer> + Send + 'static,
{
    let seen = Arc::clone(seen);
    Fixture::new().route(Method::POST, "/payments", move |request| answering(Arc::clone(&seen), request))
}

/// A handler that panics is answered 500 `handler-failed` (the panic
/// message not leaked), its key stays in progress (an immediate retry is
/// 409, not a second run), and after the lease the retry runs as a
/// recovered second attempt, then replays.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn handler_panic<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    handler_panic_on(&Tower(backend), setting).await;
}

/// [`handler_panic`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn handler_panic_on<T: ServeTarget>(target: &T, setting: &Setting) {
    // On a movable clock the lease is 5 s, moved past at once; on real
    // time 1 s, slept through.
    let lease = if setting.clock().is_some() { Duration::from_secs(5) } else { Duration::from_secs(1) };
    let seen = Seen::default();
    let server = Server::start(target, LayerConfig::global().lease(lease), payments(&seen, fragile)).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-p");

    let failed = send(post_to(&client, &url, &order, "amount=1")).await;
    assert!(failed.is_problem(500, "handler-failed"), "{failed:?}");
    assert!(!failed.body.contains("half-way"), "the panic message leaked: {}", failed.body);

    let early = send(post_to(&client, &url, &order, "amount=1")).await;
    assert!(early.is_problem(409, "in-progress"), "{early:?}");
    assert!(early.header("retry-after").is_some(), "{early:?}");
    assert_eq!(*seen.lock(), [(1, false)], "the retry ran before the lease ended");

    setting.pass(lease + lease / 5).await;
    let recovered = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((recovered.status, recovered.replayed()), (201, false), "{recovered:?}");
    assert_eq!(*seen.lock(), [(1, false), (2, true)], "the second run knows it is a recovered second attempt");
    let replay = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((replay.status, replay.replayed(), &replay.body), (201, true, &recovered.body), "{replay:?}");
    assert_eq!(seen.lock().len(), 2);
    server.stop().await;
}

/// Says "nothing happened" on its first run, answers 201 after.
async fn not_yet(seen: Seen, request: FixtureRequest) -> FixtureAnswer {
    let Some(attempt) = &request.attempt else {
        return no_attempt();
    };
    match note(&seen, attempt) {
        1 => FixtureAnswer::text(StatusCode::SERVICE_UNAVAILABLE, "try again").not_spent(),
        _ => FixtureAnswer::text(StatusCode::CREATED, "charged"),
    }
}

/// A handler's `NotSpent` answer frees the key: the retry runs the handler,
/// and its answer is kept and replayed.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn not_spent<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    not_spent_on(&Tower(backend), setting).await;
}

/// [`not_spent`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn not_spent_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let seen = Seen::default();
    let server = Server::start(target, LayerConfig::global(), payments(&seen, not_yet)).await;
    let client = client();
    let url = server.url("/payments");
    let order = key(setting, "order-n");

    let first = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (503, "try again", false), "{first:?}");
    let retry = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "charged", false), "{retry:?}");
    assert_eq!(seen.lock().len(), 2, "the retry ran the handler");
    let replay = send(post_to(&client, &url, &order, "amount=1")).await;
    assert_eq!((replay.status, replay.body.as_str(), replay.replayed()), (201, "charged", true), "{replay:?}");
    assert_eq!(seen.lock().len(), 2);
    server.stop().await;
}
