//! Long operations: `Prefer: respond-async` answered 202 with `Location`
//! of a status resource while the handler runs on; the status resource
//! 202 with `Retry-After` while it runs, the kept answer once done; a
//! retry of the request the same 202, then the replay; a handler past the
//! configured time answered 202 without the preference; the status
//! resource visible only in its scope. An operation always ends: a run
//! that died (a panic) is told `operation-abandoned` once its lease
//! lapsed, and its retry takes it over as recovered; an answer the key
//! does not keep (a 422, a `NotSpent` 503) is told at its `Location`
//! while the key stays free, to its scope alone; a request to no route is answered at once,
//! never 202; bytes that are no answer are never read as one.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, send, Counter, Reply};
use super::target::{ServeTarget, Server, Tower};
use crate::conformance::Setting;
use crate::http::LayerConfig;
use crate::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Fingerprint,
};
use http::{Method, StatusCode};
use parking_lot::Mutex;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A report that takes as many ms as the request's body says.
async fn report_run(runs: Counter, request: FixtureRequest) -> FixtureAnswer {
    runs.bump();
    let millis = request.text().parse().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(millis)).await;
    FixtureAnswer::text(StatusCode::CREATED, format!("report after {millis} ms"))
}

/// Reports that take as many ms as their body says; 202 past a second.
async fn reports<T: ServeTarget>(target: &T) -> (Server<'_, T>, Counter) {
    let runs = Counter::default();
    let counted = runs.clone();
    let routes = Fixture::new().route(Method::POST, "/reports", move |request| report_run(counted.clone(), request));
    let layer = LayerConfig::scoped(|parts| parts.headers.get("x-account").map(|account| account.as_bytes().to_vec()))
        .operations("/operations")
        .respond_async_after(Duration::from_secs(1));
    (Server::start(target, layer, routes).await, runs)
}

fn report<T: ServeTarget>(server: &Server<'_, T>, key: &str, millis: u64) -> reqwest::RequestBuilder {
    client()
        .post(server.url("/reports"))
        .header("x-account", "acct-1")
        .header("idempotency-key", key.to_owned())
        .body(millis.to_string())
}

fn status<T: ServeTarget>(server: &Server<'_, T>, location: &str, account: &str) -> reqwest::RequestBuilder {
    client().get(server.url(location)).header("x-account", account.to_owned())
}

/// The status resource once it is no longer 202, within a few seconds.
async fn finished<T: ServeTarget>(server: &Server<'_, T>, location: &str) -> Reply {
    not_running(server, location, 100, || tokio::time::sleep(Duration::from_millis(100))).await
}

/// The status resource once it is no longer 202, asked every fifth of
/// `lease` for up to three leases more: a keeper that renewed the lease
/// just before the run's death was handled (a loaded machine can delay
/// that past a renewal) moves the lapse by up to a lease.
async fn lapsed<T: ServeTarget>(server: &Server<'_, T>, location: &str, setting: &Setting, lease: Duration) -> Reply {
    not_running(server, location, 15, || setting.pass(lease / 5)).await
}

/// The status resource, asked again after each `wait` while it is 202, at
/// most `waits` times.
async fn not_running<T, W, F>(server: &Server<'_, T>, location: &str, waits: usize, mut wait: W) -> Reply
where
    T: ServeTarget,
    W: FnMut() -> F,
    F: Future<Output = ()>,
{
    let mut reply = send(status(server, location, "acct-1")).await;
    for _ in 0..waits {
        if reply.status != 202 {
            break;
        }
        wait().await;
        reply = send(status(server, location, "acct-1")).await;
    }
    reply
}

/// `Prefer: respond-async` is answered 202 with `Location` of a status
/// resource while the handler runs on: the status resource is 202 with
/// `Retry-After` while it runs and the kept answer once done, a retry the
/// same 202 then the replay, and no other scope (nor a made-up id) sees it.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn respond_async<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    respond_async_on(&Tower(backend), setting).await;
}

/// [`respond_async`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn respond_async_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, runs) = reports(target).await;
    let r1 = key(setting, "r1");
    let accepted = send(report(&server, &r1, 2_000).header("prefer", "respond-async")).await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    assert_eq!(accepted.header("preference-applied"), Some("respond-async"));
    let location = accepted.header("location").expect("a status resource").to_owned();
    assert!(location.starts_with("/operations/"), "{location}");

    let running = send(status(&server, &location, "acct-1")).await;
    assert_eq!((running.status, running.header("location")), (202, Some(location.as_str())), "{running:?}");
    assert!(running.header("retry-after").is_some());
    let retried = send(report(&server, &r1, 2_000).header("prefer", "respond-async")).await;
    assert_eq!((retried.status, retried.header("location")), (202, Some(location.as_str())), "the same 202");
    // Another scope sees nothing; nor does a made-up or malformed id.
    for (path, account) in
        [(location.as_str(), "acct-2"), ("/operations/00ff", "acct-1"), ("/operations/xyz", "acct-1")]
    {
        assert!(send(status(&server, path, account)).await.is_problem(404, "operation-unknown"), "{path} {account}");
    }

    let done = finished(&server, &location).await;
    assert_eq!((done.status, done.body.as_str()), (201, "report after 2000 ms"));
    let replayed = send(report(&server, &r1, 2_000)).await;
    assert_eq!((replayed.status, replayed.replayed()), (201, true), "the replay after");
    assert_eq!(runs.get(), 1, "ran once");
    server.stop().await;
}

/// A handler past `respond_async_after` is answered 202 without being
/// asked, one in time with its own answer; the status resource follows the
/// run.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn async_after<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    async_after_on(&Tower(backend), setting).await;
}

/// [`async_after`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn async_after_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, runs) = reports(target).await;
    let quick = send(report(&server, &key(setting, "quick"), 0)).await;
    assert_eq!((quick.status, quick.body.as_str()), (201, "report after 0 ms"), "done in time: its own answer");
    let slow_key = key(setting, "slow");
    let slow = send(report(&server, &slow_key, 3_000)).await;
    assert_eq!(slow.status, 202, "{slow:?}");
    assert_eq!(slow.header("preference-applied"), None, "not asked for");
    let location = slow.header("location").expect("location").to_owned();
    let again = send(report(&server, &slow_key, 3_000)).await;
    assert_eq!((again.status, again.header("location")), (202, Some(location.as_str())));
    let done = finished(&server, &location).await;
    assert_eq!((done.status, done.body.as_str()), (201, "report after 3000 ms"));
    assert_eq!(runs.get(), 2);
    server.stop().await;
}

/// The attempts of the fragile handler, in order.
type Seen = Arc<Mutex<Vec<(u32, bool)>>>;

/// Dies half-way on its first run (after it waited on something, so that
/// its caller was answered 202), answers 201 after.
async fn fragile(seen: Seen, request: FixtureRequest) -> FixtureAnswer {
    tokio::time::sleep(Duration::from_millis(50)).await;
    let Some(attempt) = request.attempt else {
        return FixtureAnswer::text(StatusCode::INTERNAL_SERVER_ERROR, "no attempt");
    };
    let run = {
        let mut seen = seen.lock();
        seen.push((attempt.attempt, attempt.recovered));
        seen.len()
    };
    assert!(run > 1, "the first run dies half-way");
    FixtureAnswer::text(
        StatusCode::CREATED,
        format!("report on attempt {}, recovered {}", attempt.attempt, attempt.recovered),
    )
}

/// Checks that wait a little, then answer as their body says: `invalid`
/// a 422 (not kept by default), `busy` a 503 marked `NotSpent`, else 201.
async fn check(runs: Counter, request: FixtureRequest) -> FixtureAnswer {
    runs.bump();
    tokio::time::sleep(Duration::from_millis(50)).await;
    match request.text().as_str() {
        "invalid" => FixtureAnswer::text(StatusCode::UNPROCESSABLE_ENTITY, "the amount is not a number"),
        "busy" => FixtureAnswer::text(StatusCode::SERVICE_UNAVAILABLE, "try again").not_spent(),
        body => FixtureAnswer::text(StatusCode::CREATED, format!("checked {body}")),
    }
}

fn account(parts: &http::request::Parts) -> Option<Vec<u8>> {
    parts.headers.get("x-account").map(|account| account.as_bytes().to_vec())
}

/// A POST of `body` to `path` with `key`, asking to respond async.
fn async_post<T: ServeTarget>(server: &Server<'_, T>, path: &str, key: &str, body: &str) -> reqwest::RequestBuilder {
    client()
        .post(server.url(path))
        .header("x-account", "acct-1")
        .header("idempotency-key", key.to_owned())
        .header("prefer", "respond-async")
        .body(body.to_owned())
}

/// A long operation whose run died (a panic) is told `operation-abandoned`
/// at its status resource once its lease lapsed, and its retry takes it
/// over as a recovered second attempt.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn async_abandoned<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    async_abandoned_on(&Tower(backend), setting).await;
}

/// [`async_abandoned`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn async_abandoned_on<T: ServeTarget>(target: &T, setting: &Setting) {
    // On a movable clock the lease is 5 s, moved past at once; on real
    // time 1 s, slept through.
    let lease = if setting.clock().is_some() { Duration::from_secs(5) } else { Duration::from_secs(1) };
    let seen = Seen::default();
    let noted = Arc::clone(&seen);
    let routes = Fixture::new().route(Method::POST, "/fragile", move |request| fragile(Arc::clone(&noted), request));
    let layer = LayerConfig::scoped(account).lease(lease).operations("/operations");
    let server = Server::start(target, layer, routes).await;
    let f1 = key(setting, "f1");

    let accepted = send(async_post(&server, "/fragile", &f1, "")).await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let location = accepted.header("location").expect("a status resource").to_owned();
    for _ in 0..200 {
        if !seen.lock().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*seen.lock(), [(1, false)], "the first run died");
    // Its lease still runs: nobody may take it over yet.
    assert_eq!(send(status(&server, &location, "acct-1")).await.status, 202);
    setting.pass(lease + lease / 5).await;
    let abandoned = lapsed(&server, &location, setting, lease).await;
    assert!(abandoned.is_problem(500, "operation-abandoned"), "{abandoned:?}");
    assert_eq!(send(status(&server, &location, "acct-1")).await.status, 500, "it stays so until the key runs");

    let retried = send(async_post(&server, "/fragile", &f1, "")).await;
    assert_eq!((retried.status, retried.header("location")), (202, Some(location.as_str())), "{retried:?}");
    let done = finished(&server, &location).await;
    assert_eq!((done.status, done.body.as_str()), (201, "report on attempt 2, recovered true"), "{done:?}");
    assert_eq!(*seen.lock(), [(1, false), (2, true)], "taken over as a recovered second attempt");
    server.stop().await;
}

/// An answer the key does not keep (a 422, a `NotSpent` 503) is told at its
/// `Location` to its scope alone while the key stays free: the corrected
/// request runs under the same `Location`.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn async_not_kept<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    async_not_kept_on(&Tower(backend), setting).await;
}

/// [`async_not_kept`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn async_not_kept_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let counted = runs.clone();
    let routes = Fixture::new().route(Method::POST, "/checks", move |request| check(counted.clone(), request));
    let server = Server::start(target, LayerConfig::scoped(account).operations("/operations"), routes).await;
    let (c1, c2) = (key(setting, "c1"), key(setting, "c2"));

    let accepted = send(async_post(&server, "/checks", &c1, "invalid")).await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let location = accepted.header("location").expect("location").to_owned();
    for _ in 0..2 {
        let told = finished(&server, &location).await;
        assert_eq!((told.status, told.body.as_str()), (422, "the amount is not a number"), "{told:?}");
        assert_eq!((told.header("idempotency-stored"), told.replayed()), (Some("false"), false), "{told:?}");
    }
    // A tenant named like the told answers' old scope neither reads the
    // told answer nor finds its own key taken by it.
    let hostile = "idemkv.operation/acct-1";
    let peek = send(client().get(server.url(&location)).header("x-account", hostile)).await;
    assert!(peek.is_problem(404, "operation-unknown"), "another tenant reads nothing: {peek:?}");
    let own =
        || client().post(server.url("/checks")).header("x-account", hostile).header("idempotency-key", c1.clone());
    let ran = send(own().body("7")).await;
    assert_eq!((ran.status, ran.body.as_str()), (201, "checked 7"), "the tenant's own key: {ran:?}");
    assert!(send(own().body("7")).await.replayed(), "and its own replay");
    // The key was not spent: the corrected request runs, and its Location
    // tells it.
    let corrected = send(async_post(&server, "/checks", &c1, "10")).await;
    assert_eq!((corrected.status, corrected.header("location")), (202, Some(location.as_str())), "{corrected:?}");
    let done = finished(&server, &location).await;
    assert_eq!((done.status, done.body.as_str(), done.replayed()), (201, "checked 10", true), "{done:?}");

    let busy = send(async_post(&server, "/checks", &c2, "busy")).await;
    let location = busy.header("location").expect("location").to_owned();
    let told = finished(&server, &location).await;
    assert_eq!((told.status, told.body.as_str(), told.header("idempotency-stored")), (503, "try again", Some("false")));
    assert_eq!(runs.get(), 4);
    server.stop().await;
}

/// `Prefer: respond-async` to no route is answered at once (404), never
/// 202.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn async_no_route<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    async_no_route_on(&Tower(backend), setting).await;
}

/// [`async_no_route`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn async_no_route_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, runs) = reports(target).await;
    let missed = send(async_post(&server, "/reprots", &key(setting, "typo"), "2000")).await;
    assert_eq!(missed.status, 404, "no 202 for a run that never ran: {missed:?}");
    assert_eq!((missed.header("location"), missed.header("preference-applied")), (None, None));
    assert_eq!(runs.get(), 0);
    server.stop().await;
}

/// Bytes under a key that are no answer of the layer — another writer's in
/// the same scope — are a 500 `stored-unreadable` at its status resource,
/// never read as a status.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn status_reads_answers<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    status_reads_answers_on(&Tower(backend), setting).await;
}

/// [`status_reads_answers`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn status_reads_answers_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, _runs) = reports(target).await;
    let backend = target.backend();
    for (name, bytes) in [("letter", &[0x01u8, 0x03, 0, 0][..]), ("progress", b"{\"sent\":3}"), ("empty", b"")] {
        let key = key(setting, name);
        let claimed = backend.claim(b"acct-1", key.as_bytes(), Fingerprint::of(b"other"), ClaimOptions::new()).await;
        let Ok(BackendClaim::Acquired { token, .. }) = claimed else { panic!("{name}: {claimed:?}") };
        backend.complete(&token, bytes).await.expect("complete");
        let hex = key.bytes().fold(String::new(), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        });
        let read = send(status(&server, &format!("/operations/{hex}"), "acct-1")).await;
        assert!(read.is_problem(500, "stored-unreadable"), "{name}: {read:?}");
    }
    server.stop().await;
}
