//! Long operations: `Prefer: respond-async` answered 202 with `Location`
//! of a status resource while the handler runs on; the status resource
//! 202 with `Retry-After` while it runs, the kept answer once done; a
//! retry of the request the same 202, then the replay; a handler past the
//! configured time answered 202 without the preference; the status
//! resource visible only in its scope.

use super::{key, Served};
use crate::common::http::{client, send, Counter, Reply};
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::Setting;
use idemkv::http::LayerConfig;
use idemkv::IdempotencyBackend;
use std::time::Duration;

/// Reports that take as many ms as their body says; 202 past a second.
async fn reports<B: IdempotencyBackend + Clone>(backend: &B) -> (Served, Counter) {
    let runs = Counter::default();
    let routes = Router::new()
        .route(
            "/reports",
            post(|Extension(runs): Extension<Counter>, body: String| async move {
                runs.bump();
                let millis = body.parse().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(millis)).await;
                (StatusCode::CREATED, format!("report after {millis} ms"))
            }),
        )
        .layer(Extension(runs.clone()));
    let layer = LayerConfig::scoped(|parts| parts.headers.get("x-account").map(|account| account.as_bytes().to_vec()))
        .operations("/operations")
        .respond_async_after(Duration::from_secs(1));
    (Served::start(backend, layer, routes).await, runs)
}

fn report(server: &Served, key: &str, millis: u64) -> reqwest::RequestBuilder {
    client()
        .post(server.url("/reports"))
        .header("x-account", "acct-1")
        .header("idempotency-key", key.to_owned())
        .body(millis.to_string())
}

fn status(server: &Served, location: &str, account: &str) -> reqwest::RequestBuilder {
    client().get(server.url(location)).header("x-account", account.to_owned())
}

/// The status resource once it is no longer 202, within a few seconds.
async fn finished(server: &Served, location: &str) -> Reply {
    let mut reply = send(status(server, location, "acct-1")).await;
    for _ in 0..100 {
        if reply.status != 202 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        reply = send(status(server, location, "acct-1")).await;
    }
    reply
}

pub async fn respond_async_answers_202_and_the_status_resource_follows_the_run<B: IdempotencyBackend + Clone>(
    backend: &B,
    setting: &Setting,
) {
    let (server, runs) = reports(backend).await;
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

pub async fn a_run_past_the_configured_time_is_answered_202<B: IdempotencyBackend + Clone>(
    backend: &B,
    setting: &Setting,
) {
    let (server, runs) = reports(backend).await;
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
