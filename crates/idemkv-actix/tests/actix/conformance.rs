//! The HTTP conformance scenarios of `idemkv::conformance::http` (their
//! `_on` forms) on the middleware: each serves its fixture on an
//! actix-web server behind it ([`Actix`]), over an embedded store of its
//! own, with the same steps and assertions as on the tower layer.
//!
//! Not here, and why (see `idemkv::conformance::http`, "Targets"):
//! `restart` and `restart_ttl` restart the backend under a served layer;
//! `dropped_request` drops the tower layer's own future, which no server
//! exposes (`client_disconnect` is its form over HTTP, and runs here);
//! `keepalive_blocking` blocks inside `block_in_place`, which actix-web's
//! current-thread workers refuse; the webhook scenarios test the tower
//! `WebhookLayer`, not this middleware.

use crate::target::Actix;
use idemkv::conformance::http as scenarios;
use idemkv::conformance::{Capabilities, Setting};
use idemkv::store::Quota;
use idemkv::{Config, Durability, Store};
use std::time::Duration;

/// The scope the quota scenario fills.
const QUOTA_SCOPE: &str = "quota-scope";

/// Its quota: two records; a refusal says to retry in 2.5 s.
fn quota() -> Quota {
    Quota::new().records(2).retry_after(Duration::from_millis(2500))
}

/// The middleware over a store of its own in a fresh directory, with the
/// settings the suite runs the tower layer under
/// (`tests/fleets/conformance.rs`): a 4 KiB response budget, a TTL of a
/// minute, buffered writes, and the quota of [`QUOTA_SCOPE`].
fn target() -> (Actix<Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config::new()
        .durability(Durability::Buffered)
        .response_bytes_max(4096)
        .default_ttl(Duration::from_secs(60))
        .scope_quota(QUOTA_SCOPE, quota());
    (Actix(Store::open(dir.path(), config).expect("open")), dir)
}

/// The keys of scenario `name`.
fn setting(name: &str) -> Setting {
    Setting::new(format!("actix-{name}-"))
}

/// A request sent twice with one key runs once.
#[actix_web::test]
async fn double_send() {
    let (target, _dir) = target();
    scenarios::double_send_on(&target, &setting("double_send")).await;
}

/// Eight concurrent sends with one key run once.
#[actix_web::test]
async fn concurrent_sends() {
    let (target, _dir) = target();
    scenarios::concurrent_sends_on(&target, &setting("concurrent_sends")).await;
}

/// Reused, missing, malformed keys and an oversized body are refused.
#[actix_web::test]
async fn refused_keys() {
    let (target, _dir) = target();
    scenarios::refused_keys_on(&target, &setting("refused_keys")).await;
}

/// A released 5xx lets the retry run.
#[actix_web::test]
async fn release_5xx() {
    let (target, _dir) = target();
    scenarios::release_5xx_on(&target, &setting("release_5xx")).await;
}

/// A client that hangs up does not cancel its handler.
#[actix_web::test]
async fn client_disconnect() {
    let (target, _dir) = target();
    scenarios::client_disconnect_on(&target, &setting("client_disconnect")).await;
}

/// A panicking handler keeps its key until its lease ends.
#[actix_web::test]
async fn handler_panic() {
    let (target, _dir) = target();
    scenarios::handler_panic_on(&target, &setting("handler_panic")).await;
}

/// A handler's `NotSpent` frees its key.
#[actix_web::test]
async fn not_spent() {
    let (target, _dir) = target();
    scenarios::not_spent_on(&target, &setting("not_spent")).await;
}

/// Two key fields are refused.
#[actix_web::test]
async fn two_key_fields() {
    let (target, _dir) = target();
    scenarios::two_key_fields_on(&target, &setting("two_key_fields")).await;
}

/// An sf-string key with an escape is one key.
#[actix_web::test]
async fn sf_string() {
    let (target, _dir) = target();
    scenarios::sf_string_on(&target, &setting("sf_string")).await;
}

/// Key parameters are refused.
#[actix_web::test]
async fn key_parameters() {
    let (target, _dir) = target();
    scenarios::key_parameters_on(&target, &setting("key_parameters")).await;
}

/// The router's own 404 and 405 marked `NotSpent` free the key.
#[actix_web::test]
async fn not_kept_routing() {
    let (target, _dir) = target();
    scenarios::not_kept_routing_on(&target, &setting("not_kept_routing")).await;
}

/// A handler's own 404 is kept.
#[actix_web::test]
async fn kept_handler_404() {
    let (target, _dir) = target();
    scenarios::kept_handler_404_on(&target, &setting("kept_handler_404")).await;
}

/// A handler's 400 and 422 free the key by default.
#[actix_web::test]
async fn not_kept_validation() {
    let (target, _dir) = target();
    scenarios::not_kept_validation_on(&target, &setting("not_kept_validation")).await;
}

/// A handler's 400 and 422 are kept when asked.
#[actix_web::test]
async fn kept_validation() {
    let (target, _dir) = target();
    scenarios::kept_validation_on(&target, &setting("kept_validation")).await;
}

/// A replay carries the stored headers.
#[actix_web::test]
async fn replay_headers() {
    let (target, _dir) = target();
    scenarios::replay_headers_on(&target, &setting("replay_headers")).await;
}

/// A waited replay says its preference.
#[actix_web::test]
async fn waited_replay() {
    let (target, _dir) = target();
    scenarios::waited_replay_on(&target, &setting("waited_replay")).await;
}

/// An answer over the budget is kept without its body.
#[actix_web::test]
async fn over_budget() {
    let (target, _dir) = target();
    scenarios::over_budget_on(&target, &setting("over_budget")).await;
}

/// Answers at the edge of the budget run once.
#[actix_web::test]
async fn edge_of_budget() {
    let (target, _dir) = target();
    scenarios::edge_of_budget_on(&target, &setting("edge_of_budget")).await;
}

/// Headers over the budget keep the status alone.
#[actix_web::test]
async fn headers_over_budget() {
    let (target, _dir) = target();
    scenarios::headers_over_budget_on(&target, &setting("headers_over_budget")).await;
}

/// Keys are per tenant.
#[actix_web::test]
async fn tenant_scopes() {
    let (target, _dir) = target();
    scenarios::tenant_scopes_on(&target, &setting("tenant_scopes")).await;
}

/// Tenants named like idemkv's records reach none of them.
#[actix_web::test]
async fn hostile_tenants() {
    let (target, _dir) = target();
    scenarios::hostile_tenants_on(&target, &setting("hostile_tenants")).await;
}

/// Five hundred waiters on one key park no thread.
#[actix_web::test]
async fn waiters() {
    let (target, _dir) = target();
    scenarios::waiters_on(&target, &setting("waiters")).await;
}

/// The payment flow with `ETag`, `If-Match` and keys.
#[actix_web::test]
async fn etags() {
    let (target, _dir) = target();
    scenarios::etags_on(&target, &setting("etags")).await;
}

/// Racing writers lose no update.
#[actix_web::test]
async fn racing_writers() {
    let (target, _dir) = target();
    scenarios::racing_writers_on(&target, &setting("racing_writers")).await;
}

/// One request at a time per resource.
#[actix_web::test]
async fn one_per_resource() {
    let (target, _dir) = target();
    scenarios::one_per_resource_on(&target, &setting("one_per_resource")).await;
}

/// A dead holder's hold is taken over after its lease.
#[actix_web::test]
async fn hold_takeover() {
    let (target, _dir) = target();
    scenarios::hold_takeover_on(&target, &setting("hold_takeover")).await;
}

/// Every method of a versioned resource is checked.
#[actix_web::test]
async fn every_method_checked() {
    let (target, _dir) = target();
    scenarios::every_method_checked_on(&target, &setting("every_method_checked")).await;
}

/// Writers without `If-Match` never hold off a valid one.
#[actix_web::test]
async fn unconditional_writers() {
    let (target, _dir) = target();
    scenarios::unconditional_writers_on(&target, &setting("unconditional_writers")).await;
}

/// `If-None-Match` with the current tag is 304.
#[actix_web::test]
async fn not_modified() {
    let (target, _dir) = target();
    scenarios::not_modified_on(&target, &setting("not_modified")).await;
}

/// Respond-async is 202 with a status resource.
#[actix_web::test]
async fn respond_async() {
    let (target, _dir) = target();
    scenarios::respond_async_on(&target, &setting("respond_async")).await;
}

/// A run past `respond_async_after` is 202.
#[actix_web::test]
async fn async_after() {
    let (target, _dir) = target();
    scenarios::async_after_on(&target, &setting("async_after")).await;
}

/// An abandoned operation is told so and taken over.
#[actix_web::test]
async fn async_abandoned() {
    let (target, _dir) = target();
    scenarios::async_abandoned_on(&target, &setting("async_abandoned")).await;
}

/// An answer not kept is told at its Location.
#[actix_web::test]
async fn async_not_kept() {
    let (target, _dir) = target();
    scenarios::async_not_kept_on(&target, &setting("async_not_kept")).await;
}

/// Respond-async to no route is answered at once.
#[actix_web::test]
async fn async_no_route() {
    let (target, _dir) = target();
    scenarios::async_no_route_on(&target, &setting("async_no_route")).await;
}

/// Bytes that are no answer are never read as one.
#[actix_web::test]
async fn status_reads_answers() {
    let (target, _dir) = target();
    scenarios::status_reads_answers_on(&target, &setting("status_reads_answers")).await;
}

/// A handler twice as long as its lease keeps its key.
#[actix_web::test]
async fn keepalive() {
    let (target, _dir) = target();
    scenarios::keepalive_on(&target, &setting("keepalive")).await;
}

/// A body streamed for three leases keeps its key.
#[actix_web::test]
async fn keepalive_streaming() {
    let (target, _dir) = target();
    scenarios::keepalive_streaming_on(&target, &setting("keepalive_streaming")).await;
}

/// A new key in a scope at its quota is 429, kept keys still replay.
#[actix_web::test]
async fn quota_exceeded() {
    let (target, _dir) = target();
    let capabilities = Capabilities::<Store>::new().quota(QUOTA_SCOPE, quota());
    let limited = capabilities.quota_scope().expect("a quota").clone();
    scenarios::quota_on(&target, &setting("quota"), &limited).await;
    assert_eq!(target.0.stats().quota_refusals, 1, "the scenario's one refusal");
}

/// The streamed GET that the contract does not guard streams through.
#[actix_web::test]
async fn streamed_get() {
    let (target, _dir) = target();
    scenarios::streamed_get_on(&target).await;
}
