//! The span of a guarded request, over real HTTP: every guarded request
//! runs in a `tracing` span `idempotent_request` with its key and the
//! layer's outcome (`executed`, `replay`, `mismatch`), `attempt` and
//! `recovered` once acquired, and its scope only when the layer says so;
//! what the handler logs sits in that span. The subscriber is the
//! thread's default and the runtime has one thread, so that the server's
//! tasks report to it; each test runs in a process of its own, since
//! tracing caches whether a span's callsite is wanted for the whole
//! process, and a test on another thread that sent a request first (with
//! no subscriber) could have it cached as unwanted.
#![cfg(feature = "tower")]

use crate::common::http::Server;
use crate::common::spans::KeepSpans;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::http::harness::{client, post as post_to, send, Counter};
use idemkv::http::LayerConfig;
use idemkv::Config;
use tracing_subscriber::layer::SubscriberExt;

const SPAN: &str = "idempotent_request";

async fn payments(layer: LayerConfig) -> (Server, Counter) {
    let runs = Counter::default();
    let charge = |State(runs): State<Counter>| async move {
        tracing::info!("charging");
        (StatusCode::CREATED, format!("payment {}", runs.bump()))
    };
    let routes = Router::new().route("/payments", post(charge)).with_state(runs.clone());
    (Server::start(Config::new(), layer, routes).await, runs)
}

#[test]
fn a_guarded_request_runs_in_a_span_with_its_key_and_outcome() {
    crate::common::own_process(module_path!(), "a_guarded_request_runs_in_a_span_with_its_key_and_outcome", || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(key_and_outcome());
    });
}

async fn key_and_outcome() {
    let keep = KeepSpans::new(&[SPAN]);
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(keep.clone()));
    let (server, runs) = payments(LayerConfig::global()).await;
    let (client, url) = (client(), server.url("/payments"));

    let first = send(post_to(&client, &url, "pay-1", "amount=10")).await;
    let replay = send(post_to(&client, &url, "pay-1", "amount=10")).await;
    let mismatch = send(post_to(&client, &url, "pay-1", "amount=11")).await;
    assert_eq!((first.status, replay.replayed(), mismatch.status), (201, true, 422));
    assert_eq!(runs.get(), 1);

    let seen = keep.seen(SPAN);
    assert_eq!(seen.len(), 3, "one span a request: {seen:?}");
    let outcomes: Vec<_> = seen.iter().map(|span| (span.field("key"), span.field("outcome"))).collect();
    let key = Some("pay-1");
    assert_eq!(outcomes, [(key, Some("executed")), (key, Some("replay")), (key, Some("mismatch"))]);
    assert_eq!((seen[0].field("attempt"), seen[0].field("recovered")), (Some("1"), Some("false")), "{seen:?}");
    assert_eq!(seen[0].lines("charging"), 1, "the handler's line sits in its request's span: {seen:?}");
    assert_eq!(seen[1].field("attempt"), None, "a replay acquires nothing: {seen:?}");
    assert!(seen.iter().all(|span| span.field("scope").is_none()), "no scope unless allowed: {seen:?}");
}

#[test]
fn the_scope_is_in_the_span_only_when_the_layer_allows() {
    crate::common::own_process(module_path!(), "the_scope_is_in_the_span_only_when_the_layer_allows", || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(scope_when_allowed());
    });
}

async fn scope_when_allowed() {
    let keep = KeepSpans::new(&[SPAN]);
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(keep.clone()));
    let layer = LayerConfig::scoped(|request| request.headers.get("x-tenant").map(|tenant| tenant.as_bytes().to_vec()))
        .span_scope(true);
    let (server, _runs) = payments(layer).await;
    let (client, url) = (client(), server.url("/payments"));

    let paid = send(post_to(&client, &url, "pay-2", "amount=10").header("x-tenant", "acme")).await;
    assert_eq!(paid.status, 201, "{paid:?}");
    let seen = keep.seen(SPAN);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].field("key"), seen[0].field("scope")), (Some("pay-2"), Some("acme")), "{seen:?}");
}
