//! Every method of a versioned resource is checked: with the layer's
//! default guarded methods (POST, PATCH) and `IfMatch::Required`, a `PUT`
//! or `DELETE` without `If-Match` is 428 and with a stale tag 412, nothing
//! run; a `DELETE` steps the version, so a `PATCH` with the tag from
//! before it is 412. Requests that can never run (no `If-Match`) are
//! refused before they hold the resource, so sixteen of them never hold
//! off a writer that can. A `GET` or `HEAD` with `If-None-Match` naming
//! the current tag is 304 with the `ETag`, the handler not run.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, send, Counter, Reply};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{IfMatch, LayerConfig};
use http::{Method, StatusCode};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The service's accounts, and how often each kind of handler ran.
#[derive(Clone, Default)]
struct Accounts {
    values: Arc<Mutex<HashMap<String, String>>>,
    writes: Counter,
    reads: Counter,
}

/// The `{id}` of `/accounts/{id}`.
fn id(request: &FixtureRequest) -> &str {
    request.path().strip_prefix("/accounts/").unwrap_or_default()
}

/// Sets the account; a body `slow` holds it for 600 ms first.
async fn set(accounts: Accounts, request: FixtureRequest) -> FixtureAnswer {
    accounts.writes.bump();
    let body = request.text();
    if body == "slow" {
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    accounts.values.lock().insert(id(&request).to_owned(), body);
    FixtureAnswer::empty(StatusCode::OK)
}

/// Creates the account.
fn create(accounts: &Accounts, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    accounts.writes.bump();
    accounts.values.lock().insert(id(request).to_owned(), request.text());
    std::future::ready(FixtureAnswer::empty(StatusCode::CREATED))
}

/// Removes the account.
fn remove(accounts: &Accounts, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    accounts.writes.bump();
    accounts.values.lock().remove(id(request));
    std::future::ready(FixtureAnswer::empty(StatusCode::NO_CONTENT))
}

/// Reads the account.
fn read(accounts: &Accounts, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    accounts.reads.bump();
    let answer = match accounts.values.lock().get(id(request)) {
        Some(value) => FixtureAnswer::text(StatusCode::OK, value.clone()),
        None => FixtureAnswer::text(StatusCode::NOT_FOUND, String::new()),
    };
    std::future::ready(answer)
}

fn account_of(parts: &http::request::Parts) -> Option<Vec<u8>> {
    parts.uri.path().strip_prefix("/accounts/").map(|id| id.as_bytes().to_vec())
}

/// `/accounts/{id}`: POST creates, PUT and PATCH set, DELETE removes, GET
/// reads; the layer guards its default methods (POST and PATCH) with keys.
async fn accounts<T: ServeTarget>(target: &T) -> (Server<'_, T>, Accounts) {
    let accounts = Accounts::default();
    let [created, put, patched, deleted, read_by] = [(); 5].map(|()| accounts.clone());
    let routes = Fixture::new()
        .route(Method::POST, "/accounts/{id}", move |request| create(&created, &request))
        .route(Method::PUT, "/accounts/{id}", move |request| set(put.clone(), request))
        .route(Method::PATCH, "/accounts/{id}", move |request| set(patched.clone(), request))
        .route(Method::DELETE, "/accounts/{id}", move |request| remove(&deleted, &request))
        .route(Method::GET, "/accounts/{id}", move |request| read(&read_by, &request));
    let layer = LayerConfig::scoped(|parts| parts.headers.get("x-account").map(|account| account.as_bytes().to_vec()))
        .versioned_resource(account_of, IfMatch::Required);
    (Server::start(target, layer, routes).await, accounts)
}

/// A request of `method` on account `id` of tenant `acct-1`, with the
/// key and the `If-Match` given.
fn request<T: ServeTarget>(
    server: &Server<'_, T>,
    method: reqwest::Method,
    id: &str,
    key: Option<&str>,
    tag: Option<&str>,
) -> reqwest::RequestBuilder {
    request_at(&server.base, method, id, key, tag)
}

/// [`request`] to the server at `base`.
fn request_at(
    base: &str,
    method: reqwest::Method,
    id: &str,
    key: Option<&str>,
    tag: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut request = client().request(method, format!("{base}/accounts/{id}")).header("x-account", "acct-1");
    if let Some(key) = key {
        request = request.header("idempotency-key", key.to_owned());
    }
    if let Some(tag) = tag {
        request = request.header("if-match", tag.to_owned());
    }
    request
}

/// Every method of a versioned resource is checked: a `PUT` or `DELETE`
/// without `If-Match` is 428 and with a stale tag 412, nothing run; with
/// the current tag they run and step the version, so a tag from before a
/// `DELETE` is 412.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn every_method_checked<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    every_method_checked_on(&Tower(backend), setting).await;
}

/// [`every_method_checked`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn every_method_checked_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, accounts) = accounts(target).await;
    let (id, k) = (key(setting, "acct"), |name: &str| key(setting, name));
    let tag = |version: u32| format!("\"{id}-v{version}\"");
    let (put, delete, patch) = (reqwest::Method::PUT, reqwest::Method::DELETE, reqwest::Method::PATCH);
    let created = send(request(&server, reqwest::Method::POST, &id, Some(&k("create")), None).body("10")).await;
    assert_eq!((created.status, created.header("etag")), (201, Some(tag(1).as_str())), "{created:?}");

    for method in [put.clone(), delete.clone()] {
        let bare = send(request(&server, method.clone(), &id, None, None).body("20")).await;
        assert!(bare.is_problem(428, "precondition-required"), "{method} without If-Match: {bare:?}");
        let stale = send(request(&server, method.clone(), &id, None, Some(&format!("\"{id}-v999\""))).body("20")).await;
        assert!(stale.is_problem(412, "precondition-failed"), "{method} with a stale tag: {stale:?}");
    }
    assert_eq!((accounts.writes.get(), accounts.values.lock()[&id].as_str()), (1, "10"), "nothing ran");

    // A PUT with the current tag runs and steps the version.
    let set = send(request(&server, put, &id, None, Some(&tag(1))).body("20")).await;
    assert_eq!((set.status, set.header("etag")), (200, Some(tag(2).as_str())), "{set:?}");
    let deleted = send(request(&server, delete.clone(), &id, None, Some(&tag(2)))).await;
    assert_eq!((deleted.status, deleted.header("etag")), (204, None), "{deleted:?}");
    // The tag from before the DELETE no longer matches: the account is not
    // brought back, nor deleted twice.
    let revived = send(request(&server, patch, &id, Some(&k("revive")), Some(&tag(2))).body("30")).await;
    assert!(revived.is_problem(412, "precondition-failed"), "{revived:?}");
    let again = send(request(&server, delete, &id, None, Some(&tag(2)))).await;
    assert!(again.is_problem(412, "precondition-failed"), "{again:?}");
    assert_eq!(accounts.writes.get(), 3, "the POST, the PUT and the DELETE");
    assert!(!accounts.values.lock().contains_key(&id), "still deleted");
    server.stop().await;
}

/// While a writer with the current tag holds a versioned resource, requests
/// without `If-Match` are 428 at once, not 409 `resource-locked`; and in
/// rounds of sixteen of them sent with one valid writer, the valid writer
/// is never held off.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn unconditional_writers<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    unconditional_writers_on(&Tower(backend), setting).await;
}

/// [`unconditional_writers`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn unconditional_writers_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, accounts) = accounts(target).await;
    let id = key(setting, "busy");
    let created =
        send(request(&server, reqwest::Method::POST, &id, Some(&key(setting, "create")), None).body("0")).await;
    assert_eq!(created.status, 201, "{created:?}");
    let bad = |name: String| {
        let (base, id) = (server.base.clone(), id.clone());
        tokio::spawn(
            async move { send(request_at(&base, reqwest::Method::PATCH, &id, Some(&name), None).body("x")).await },
        )
    };
    let statuses = |replies: Vec<Reply>| replies.iter().map(|reply| reply.status).collect::<Vec<_>>();

    let slow = {
        let (base, id, key) = (server.base.clone(), id.clone(), key(setting, "slow"));
        tokio::spawn(async move {
            send(request_at(&base, reqwest::Method::PATCH, &id, Some(&key), Some(&format!("\"{id}-v1\""))).body("slow"))
                .await
        })
    };
    accounts.writes.reach(2, Duration::from_secs(10), "the slow writer holds the account").await;
    let mut replies = Vec::new();
    for writer in 0..16 {
        replies.push(bad(key(setting, &format!("held-{writer}"))).await.expect("writer"));
    }
    assert_eq!(statuses(replies), vec![428; 16], "refused at once, not held off");
    let slow = slow.await.expect("slow writer");
    assert_eq!((slow.status, slow.header("etag")), (200, Some(format!("\"{id}-v2\"").as_str())), "{slow:?}");

    for round in 0..5u32 {
        let writers: Vec<_> = (0..16).map(|writer| bad(key(setting, &format!("r{round}-{writer}")))).collect();
        let tag = format!("\"{id}-v{}\"", round + 2);
        let valid = send(
            request(&server, reqwest::Method::PATCH, &id, Some(&key(setting, &format!("valid-{round}"))), Some(&tag))
                .body(format!("v{round}")),
        )
        .await;
        assert_eq!(valid.status, 200, "round {round}: the valid writer was held off: {valid:?}");
        let mut replies = Vec::new();
        for writer in writers {
            replies.push(writer.await.expect("writer"));
        }
        assert_eq!(statuses(replies), vec![428; 16], "round {round}");
    }
    assert_eq!(accounts.writes.get(), 2 + 5, "the creation, the slow write and one valid write a round");
    server.stop().await;
}

/// A `GET` or `HEAD` with `If-None-Match` naming the current tag (strong or
/// weak) is 304 with the `ETag`, the handler not run; another tag reads,
/// and a stale `If-Match` is 412.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn not_modified<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    not_modified_on(&Tower(backend), setting).await;
}

/// [`not_modified`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn not_modified_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let (server, accounts) = accounts(target).await;
    let id = key(setting, "cached");
    let created =
        send(request(&server, reqwest::Method::POST, &id, Some(&key(setting, "create")), None).body("10")).await;
    let current = created.header("etag").expect("a tag").to_owned();
    let read = |method: reqwest::Method, name: &'static str, tag: &str| {
        send(request(&server, method, &id, None, None).header(name, tag.to_owned()))
    };

    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        let cached = read(method.clone(), "if-none-match", &current).await;
        assert_eq!((cached.status, cached.header("etag"), cached.body.as_str()), (304, Some(current.as_str()), ""));
        let weak = read(method.clone(), "if-none-match", &format!("W/{current}")).await;
        assert_eq!(weak.status, 304, "If-None-Match compares weakly: {weak:?}");
    }
    assert_eq!(accounts.reads.get(), 0, "a 304 does not run the handler");
    let stale = read(reqwest::Method::GET, "if-none-match", &format!("\"{id}-v0\"")).await;
    assert_eq!((stale.status, stale.header("etag"), stale.body.as_str()), (200, Some(current.as_str()), "10"));
    let head = read(reqwest::Method::HEAD, "if-none-match", "\"other\"").await;
    assert_eq!((head.status, head.header("etag")), (200, Some(current.as_str())));
    let unmatched = read(reqwest::Method::GET, "if-match", &format!("\"{id}-v0\"")).await;
    assert!(unmatched.is_problem(412, "precondition-failed"), "{unmatched:?}");
    assert_eq!(accounts.reads.get(), 2, "the two reads that ran");
    server.stop().await;
}
