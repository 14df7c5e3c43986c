//! Tenants named like idemkv's own records: a scope is data, never a path
//! into idemkv's records. Tenants named `idemkv.hold/<account>`,
//! `idemkv.version/<account>`, `idemkv.relay/<account>`,
//! `idemkv.inbox/<consumer>`, `idemkv.dead/<consumer>`,
//! `idemkv.redrive/<consumer>`, `idemkv.operation/<account>` (the scopes
//! under which idemkv once kept its own records) and near misses of them send keyed requests with the
//! names of another tenant's resources and of a consumer's messages as
//! their keys. The other tenant still holds, versions and writes its
//! resource (no 409, no 412); the status resource of a version is no
//! tenant's (404, never a 500 or a 202); the consumer's messages run once,
//! its dead letters are listed and re-driven; and every hostile tenant's
//! own request replays as its own.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, send, Reply};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::{IfMatch, LayerConfig};
use http::{Method, StatusCode};
use std::fmt::Write as _;

fn account_of(parts: &http::request::Parts) -> Option<Vec<u8>> {
    parts.uri.path().strip_prefix("/accounts/").map(|id| id.as_bytes().to_vec())
}

/// The `{id}` of `/accounts/{id}`.
fn id(request: &FixtureRequest) -> &str {
    request.path().strip_prefix("/accounts/").unwrap_or_default()
}

/// Accounts (held and versioned), a plain route, long operations.
async fn service<T: ServeTarget>(target: &T) -> Server<'_, T> {
    let text = |status: StatusCode, body: String| async move { FixtureAnswer::text(status, body) };
    let routes = Fixture::new()
        .route(Method::POST, "/accounts/{id}", move |request| {
            text(StatusCode::CREATED, format!("opened {}", id(&request)))
        })
        .route(Method::PATCH, "/accounts/{id}", move |request| {
            text(StatusCode::OK, format!("changed {}", id(&request)))
        })
        .route(Method::GET, "/accounts/{id}", move |request| text(StatusCode::OK, format!("account {}", id(&request))))
        .route(Method::POST, "/work", move |request| text(StatusCode::CREATED, format!("did {}", request.text())));
    let layer = LayerConfig::scoped(|parts| parts.headers.get("x-account").map(|account| account.as_bytes().to_vec()))
        .versioned_resource(account_of, IfMatch::Optional)
        .operations("/operations");
    Server::start(target, layer, routes).await
}

fn request<T: ServeTarget>(
    server: &Server<'_, T>,
    method: reqwest::Method,
    path: &str,
    tenant: &str,
) -> reqwest::RequestBuilder {
    client().request(method, server.url(path)).header("x-account", tenant.to_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// Every name of idemkv's old prefixes for the tenant `owner` and for
/// `consumer`, and near misses of them.
fn hostile_names(owner: &str, consumer: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (prefix, name) in [
        ("idemkv.hold/", owner),
        ("idemkv.version/", owner),
        ("idemkv.relay/", owner),
        ("idemkv.inbox/", consumer),
        ("idemkv.dead/", consumer),
        ("idemkv.redrive/", consumer),
        ("idemkv.operation/", owner),
    ] {
        let bare = prefix.trim_end_matches('/');
        names.extend([
            format!("{prefix}{name}"),
            format!("{bare}{name}"),
            format!("{bare}.{name}"),
            format!("{}{name}", prefix.to_uppercase()),
            prefix.to_owned(),
        ]);
    }
    names
}

/// A hostile tenant's keyed POST of `/work` with `key`: its own record,
/// run once and replayed.
async fn hostile_post<T: ServeTarget>(server: &Server<'_, T>, tenant: &str, key: &str) {
    let post = || request(server, reqwest::Method::POST, "/work", tenant).header("idempotency-key", key.to_owned());
    let first = send(post().body(key.to_owned())).await;
    assert_eq!(first.status, 201, "{tenant} {key}: {first:?}");
    let again = send(post().body(key.to_owned())).await;
    assert!(again.replayed() && again.body == first.body, "{tenant} {key}: its own replay: {again:?}");
}

/// The account's owner holds, versions and writes it.
async fn owner_writes<T: ServeTarget>(
    server: &Server<'_, T>,
    owner: &str,
    account: &str,
    setting: &Setting,
    round: usize,
) -> Reply {
    let path = format!("/accounts/{account}");
    let opened = send(
        request(server, reqwest::Method::PATCH, &path, owner)
            .header("idempotency-key", key(setting, &format!("w{round}"))),
    )
    .await;
    assert_eq!(opened.status, 200, "round {round}: the owner's write: {opened:?}");
    let read = send(request(server, reqwest::Method::GET, &path, owner)).await;
    let tag = read.header("etag").unwrap_or_else(|| panic!("round {round}: an ETag: {read:?}")).to_owned();
    let matched = send(
        request(server, reqwest::Method::PATCH, &path, owner)
            .header("idempotency-key", key(setting, &format!("m{round}")))
            .header("if-match", tag.clone()),
    )
    .await;
    assert_eq!(matched.status, 200, "round {round}: If-Match {tag} matches: {matched:?}");
    matched
}

/// Tenants named like idemkv's own records (`idemkv.hold/<account>`,
/// `idemkv.operation/<account>`, `idemkv.inbox/<consumer>`, ... and near
/// misses) reach nothing of it: another tenant still holds, versions and
/// writes its resource, the status resource of a version is no tenant's
/// (404), each hostile tenant's request replays as its own, and (with
/// `messaging`) a consumer's messages run once and its dead letters are
/// listed and re-driven.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn hostile_tenants<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    hostile_tenants_on(&Tower(backend), setting).await;
}

/// [`hostile_tenants`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn hostile_tenants_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let server = service(target).await;
    let (owner, account) = (key(setting, "owner"), key(setting, "acct"));
    let consumer: String =
        key(setting, "ledger").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    owner_writes(&server, &owner, &account, setting, 0).await;
    let names = hostile_names(&owner, &consumer);
    for (round, tenant) in names.iter().enumerate() {
        // The account's hold and version are no tenant's operation.
        let location = format!("/operations/{}", hex(account.as_bytes()));
        let status = send(request(&server, reqwest::Method::GET, &location, tenant)).await;
        assert_eq!(status.status, 404, "{tenant}: the status resource of the owner's account: {status:?}");
        // The names of the owner's account and of the consumer's messages
        // as keys, each the tenant's own record.
        for key in [account.clone(), format!("msg-{round}")] {
            hostile_post(&server, tenant, &key).await;
        }
        owner_writes(&server, &owner, &account, setting, round + 1).await;
    }
    #[cfg(feature = "messaging")]
    messages_run_once(target.backend(), &consumer, names.len()).await;
    server.stop().await;
}

/// The consumer's messages `msg-N` (which every hostile tenant used as a
/// key) each run once through the inbox; one that fails is dead-lettered,
/// listed and re-driven.
#[cfg(feature = "messaging")]
async fn messages_run_once<B: IdempotencyBackend + Clone>(backend: &B, consumer: &str, count: usize) {
    use crate::messaging::{Delivery, Handled, Inbox};
    let inbox = Inbox::new(backend.clone()).max_attempts(1);
    for round in 0..count {
        let id = format!("msg-{round}");
        let delivery = inbox.handle(consumer, id.as_bytes(), b"credit", |_| async { Handled::Processed }).await;
        assert_eq!(delivery.expect("handle"), Delivery::Processed, "{id} runs");
    }
    let failing = inbox.handle(consumer, b"msg-0-failing", b"debit", |_| async { Handled::Failed("declined".into()) });
    assert!(matches!(failing.await.expect("handle"), Delivery::DeadLettered { .. }));
    let letters = inbox.dead_letters(consumer, None, 10).await.expect("listed");
    assert_eq!(letters.iter().map(|letter| letter.message_id.as_slice()).collect::<Vec<_>>(), [&b"msg-0-failing"[..]]);
    assert!(inbox.retry_dead_letter(consumer, b"msg-0-failing").await.expect("queued"));
    let redriven = inbox.redrive(consumer, |_| async { Handled::Processed }).await.expect("redrive");
    assert_eq!(redriven.processed, 1, "{redriven:?}");
}
