//! Conditional writes and one request at a time per resource: the payment
//! flow with `ETag` / `If-Match` and `Idempotency-Key` together (a retried
//! PATCH is a replay, not a 412; a stale or weak tag is a 412; none at all
//! a 428); writers racing on one resource lose no update; two requests
//! with different keys on one account never run at once (409
//! `resource-locked`, or a wait under `Prefer: wait`); a holder that died
//! is taken over with `recovered` after its lease.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, send, Reply};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{IfMatch, LayerConfig};
use http::{Method, StatusCode};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The service's own data: a value per payment.
type Payments = Arc<Mutex<HashMap<String, i64>>>;

fn payment_of(parts: &http::request::Parts) -> Option<Vec<u8>> {
    parts.uri.path().strip_prefix("/payments/").map(|id| id.as_bytes().to_vec())
}

/// The `{id}` of `/payments/{id}`.
fn id(request: &FixtureRequest) -> &str {
    request.path().strip_prefix("/payments/").unwrap_or_default()
}

/// Sets the payment the request names to its body, answering `status`.
fn set(payments: &Payments, request: &FixtureRequest, status: StatusCode) -> std::future::Ready<FixtureAnswer> {
    payments.lock().insert(id(request).to_owned(), request.text().parse().unwrap_or(0));
    std::future::ready(FixtureAnswer::empty(status))
}

/// A payments service: POST creates, PATCH sets, GET reads a value.
async fn payments<T: ServeTarget>(target: &T) -> (Server<'_, T>, Payments) {
    let payments = Payments::default();
    let (created, patched, read) = (Arc::clone(&payments), Arc::clone(&payments), Arc::clone(&payments));
    let routes = Fixture::new()
        .route(Method::POST, "/payments/{id}", move |request| set(&created, &request, StatusCode::CREATED))
        .route(Method::PATCH, "/payments/{id}", move |request| set(&patched, &request, StatusCode::OK))
        .route(Method::GET, "/payments/{id}", move |request| {
            let answer = match read.lock().get(id(&request)) {
                Some(value) => FixtureAnswer::text(StatusCode::OK, value.to_string()),
                None => FixtureAnswer::text(StatusCode::NOT_FOUND, String::new()),
            };
            std::future::ready(answer)
        });
    let layer = LayerConfig::scoped(|parts| parts.headers.get("x-account").map(|account| account.as_bytes().to_vec()))
        .methods(vec![http::Method::POST, http::Method::PATCH, http::Method::PUT, http::Method::DELETE])
        .require_key(false)
        .versioned_resource(payment_of, IfMatch::Required);
    (Server::start(target, layer, routes).await, payments)
}

/// A write of `body` to payment `id` as account `acct-1`.
fn write<T: ServeTarget>(
    server: &Server<'_, T>,
    method: reqwest::Method,
    id: &str,
    key: Option<&str>,
    tag: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    write_at(&server.base, method, id, key, tag, body)
}

/// [`write`] to the server at `base`.
fn write_at(
    base: &str,
    method: reqwest::Method,
    id: &str,
    key: Option<&str>,
    tag: Option<&str>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request =
        client().request(method, format!("{base}/payments/{id}")).header("x-account", "acct-1").body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key.to_owned());
    }
    if let Some(tag) = tag {
        request = request.header("if-match", tag.to_owned());
    }
    request
}

fn read<T: ServeTarget>(server: &Server<'_, T>, id: &str, account: &str) -> reqwest::RequestBuilder {
    read_at(&server.base, id, account)
}

fn read_at(base: &str, id: &str, account: &str) -> reqwest::RequestBuilder {
    client().get(format!("{base}/payments/{id}")).header("x-account", account.to_owned())
}

/// The payment flow with `ETag` / `If-Match` and `Idempotency-Key`
/// together: a retried PATCH is a replay, not a 412; a stale or weak tag is
/// a 412 and none at all a 428, nothing run and the key not spent; reads
/// carry the current tag, and `If-None-Match: *` creates only.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn etags<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    etags_on(&Tower(backend), setting).await;
}

/// [`etags`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn etags_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, payments) = payments(target).await;
    let (id, k) = (key(setting, "p"), |name: &str| key(setting, name));
    let tag = |version: u32| format!("\"{id}-v{version}\"");
    let (post, patch, put) = (reqwest::Method::POST, reqwest::Method::PATCH, reqwest::Method::PUT);
    let created = send(write(&server, post, &id, Some(&k("k1")), None, "10")).await;
    assert_eq!((created.status, created.header("etag")), (201, Some(tag(1).as_str())), "{created:?}");
    let patched = send(write(&server, patch.clone(), &id, Some(&k("k2")), Some(&tag(1)), "20")).await;
    assert_eq!((patched.status, patched.header("etag")), (200, Some(tag(2).as_str())));
    // The same PATCH retried with its key: the replay, with the ETag it first returned.
    let retried = send(write(&server, patch.clone(), &id, Some(&k("k2")), Some(&tag(1)), "20")).await;
    assert_eq!((retried.status, retried.header("etag"), retried.replayed()), (200, Some(tag(2).as_str()), true));
    // A stale tag, a weak one, none: refused, nothing run.
    let stale = send(write(&server, patch.clone(), &id, Some(&k("k3")), Some(&tag(1)), "99")).await;
    assert!(stale.is_problem(412, "precondition-failed"), "{stale:?}");
    let weak = send(write(&server, patch.clone(), &id, Some(&k("k4")), Some(&format!("W/{}", tag(2))), "99")).await;
    assert!(weak.is_problem(412, "precondition-failed"), "{weak:?}");
    let bare = send(write(&server, patch.clone(), &id, Some(&k("k5")), None, "99")).await;
    assert!(bare.is_problem(428, "precondition-required"), "{bare:?}");
    assert_eq!(payments.lock()[&id], 20, "only the two writes that held");
    // A refused key was not spent: the same key with the current tag runs.
    let fixed = send(write(&server, patch, &id, Some(&k("k3")), Some(&tag(2)), "30")).await;
    assert_eq!((fixed.status, fixed.header("etag")), (200, Some(tag(3).as_str())));
    // Reads carry the current tag; another account sees no version.
    let current = send(read(&server, &id, "acct-1")).await;
    assert_eq!((current.status, current.body.as_str(), current.header("etag")), (200, "30", Some(tag(3).as_str())));
    assert_eq!(send(read(&server, &id, "acct-2")).await.header("etag"), None);
    // `If-None-Match: *`: create only.
    let again = send(write(&server, put, &id, None, Some(&tag(3)), "40").header("if-none-match", "*")).await;
    assert!(again.is_problem(412, "precondition-failed"), "{again:?}");
    server.stop().await;
}

/// Eight writers, each reading the value and its tag, then writing the
/// value plus one with `If-Match` (a read-modify-write that loses updates
/// without it), retrying on 412 and 409: the final value is the count of
/// writes that succeeded.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn racing_writers<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    racing_writers_on(&Tower(backend), setting).await;
}

/// [`racing_writers`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn racing_writers_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, payments) = payments(target).await;
    let id = key(setting, "counter");
    assert_eq!(
        send(write(&server, reqwest::Method::POST, &id, Some(&key(setting, "create")), None, "0")).await.status,
        201
    );
    let (writers, per_writer) = (8, 5);
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let (base, id, prefix) = (server.base.clone(), id.clone(), key(setting, "w"));
            tokio::spawn(async move {
                let mut done = 0;
                for round in 0..200 {
                    if done == per_writer {
                        break;
                    }
                    let current: Reply = send(read_at(&base, &id, "acct-1")).await;
                    let value: i64 = current.body.parse().expect("a value");
                    let tag = current.header("etag").expect("a tag").to_owned();
                    let key = format!("{prefix}{writer}-{round}");
                    let body = (value + 1).to_string();
                    let reply = send(write_at(&base, reqwest::Method::PATCH, &id, Some(&key), Some(&tag), &body)).await;
                    match reply.status {
                        200 => done += 1,
                        409 | 412 => {}
                        other => panic!("unexpected {other}: {reply:?}"),
                    }
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        let done = task.await.expect("writer");
        assert_eq!(done, per_writer, "each writer got its writes in within its rounds");
        total += done;
    }
    assert_eq!(payments.lock()[&id], i64::from(total), "no update lost");
    let current = send(read(&server, &id, "acct-1")).await;
    assert_eq!(current.header("etag"), Some(format!("\"{id}-v{}\"", total + 1).as_str()));
    server.stop().await;
}

/// How many transfers run at once on each account, the most seen on
/// each, and how many started in all.
#[derive(Default)]
struct Running {
    now: Mutex<HashMap<String, u32>>,
    most: Mutex<HashMap<String, u32>>,
    started: AtomicU32,
}

impl Running {
    /// Waits (at most 10 s) until `count` transfers have started.
    async fn started(&self, count: u32) {
        for _ in 0..1000 {
            if self.started.load(Ordering::SeqCst) >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{count} transfers never started");
    }
}

fn account_of(parts: &http::request::Parts) -> Option<Vec<u8>> {
    let path = parts.uri.path().strip_prefix("/accounts/")?;
    Some(path.split('/').next()?.as_bytes().to_vec())
}

/// A transfer on the account the request names: counted while it runs
/// (600 ms), answered with its hold's token.
async fn run_transfer(running: Arc<Running>, request: FixtureRequest) -> FixtureAnswer {
    let Some(hold) = &request.hold else {
        return FixtureAnswer::text(StatusCode::INTERNAL_SERVER_ERROR, "no hold");
    };
    let account = request.path().strip_prefix("/accounts/").and_then(|path| path.split('/').next());
    let account = account.unwrap_or_default().to_owned();
    let now = {
        let mut now = running.now.lock();
        let count = now.entry(account.clone()).or_default();
        *count += 1;
        *count
    };
    {
        let mut most = running.most.lock();
        let seen = most.entry(account.clone()).or_default();
        *seen = (*seen).max(now);
    }
    running.started.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(600)).await;
    *running.now.lock().entry(account).or_default() -= 1;
    FixtureAnswer::text(StatusCode::OK, format!("moved under hold {}", hold.token))
}

/// A transfer that dies holding its account when its body says `crash`,
/// else answers whether its hold was taken over.
fn fragile_transfer(request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    assert!(request.body != "crash", "the handler dies holding the account");
    let answer = match &request.hold {
        Some(hold) => FixtureAnswer::text(StatusCode::OK, format!("recovered={}", hold.recovered)),
        None => FixtureAnswer::text(StatusCode::INTERNAL_SERVER_ERROR, "no hold"),
    };
    std::future::ready(answer)
}

/// Two requests with different keys on one account never run at once: the
/// second is 409 `resource-locked` with `Retry-After` (and runs when sent
/// again), or under `Prefer: wait` waits its turn; another account never
/// waits for it.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn one_per_resource<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    one_per_resource_on(&Tower(backend), setting).await;
}

/// [`one_per_resource`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn one_per_resource_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let running = Arc::new(Running::default());
    let counted = Arc::clone(&running);
    let routes = Fixture::new()
        .route(Method::POST, "/accounts/{id}/transfers", move |request| run_transfer(Arc::clone(&counted), request));
    let server = Server::start(target, LayerConfig::global().resource(account_of), routes).await;
    let (a, b) = (key(setting, "a"), key(setting, "b"));
    let transfer = |account: &str, name: &str| {
        client()
            .post(server.url(&format!("/accounts/{account}/transfers")))
            .header("idempotency-key", key(setting, name))
    };

    // The second is sent once the first runs (holds the account).
    let (first, second) = tokio::join!(send(transfer(&a, "t1")), async {
        running.started(1).await;
        send(transfer(&a, "t2")).await
    });
    assert_eq!(first.status, 200, "{first:?}");
    assert!(second.is_problem(409, "resource-locked"), "{second:?}");
    assert!(second.header("retry-after").is_some());
    // Refused before it ran: t2 runs when sent again.
    assert_eq!(send(transfer(&a, "t2")).await.status, 200);

    // Under Prefer: wait the second on a waits its turn; b never waits for a.
    let (one, two, other) = tokio::join!(
        send(transfer(&a, "t3")),
        async {
            running.started(3).await;
            send(transfer(&a, "t4").header("prefer", "wait=10")).await
        },
        async {
            running.started(3).await;
            send(transfer(&b, "t5")).await
        },
    );
    assert_eq!((one.status, two.status, other.status), (200, 200, 200), "{two:?}");
    assert_eq!(running.most.lock().get(&a), Some(&1), "never two on one account");
    assert_eq!(running.most.lock().get(&b), Some(&1));
    server.stop().await;
}

/// The hold of a handler that died (a panic) lapses after its lease, in
/// real time: the next request on the account is taken over as `recovered`,
/// the one after it not.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn hold_takeover<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    hold_takeover_on(&Tower(backend), setting).await;
}

/// [`hold_takeover`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn hold_takeover_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let routes = Fixture::new().route(Method::POST, "/accounts/{id}/transfers", |request| fragile_transfer(&request));
    let layer = LayerConfig::global().lease(Duration::from_secs(2)).resource(account_of);
    let server = Server::start(target, layer, routes).await;
    let account = key(setting, "a");
    let transfer = |name: &str, body: &str| {
        client()
            .post(server.url(&format!("/accounts/{account}/transfers")))
            .header("idempotency-key", key(setting, name))
            .body(body.to_owned())
    };
    assert_eq!(send(transfer("c1", "crash")).await.status, 500);
    let busy = send(transfer("c2", "ok")).await;
    assert!(busy.is_problem(409, "resource-locked"), "held until its lease ends: {busy:?}");
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    let taken_over = send(transfer("c2", "ok")).await;
    assert_eq!((taken_over.status, taken_over.body.as_str()), (200, "recovered=true"));
    assert_eq!(send(transfer("c3", "ok")).await.body, "recovered=false", "released normally after that");
    server.stop().await;
}
