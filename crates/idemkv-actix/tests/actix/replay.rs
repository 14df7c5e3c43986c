//! A new key runs its handler once; a retry replays the same status,
//! headers and body; a duplicate sent while the first runs gets 409; a
//! handler's `NotSpent` frees the key.

use crate::server::start;
use idemkv::conformance::http::harness::{client, post, send};
use idemkv::http::LayerConfig;
use std::time::Duration;

#[actix_web::test]
async fn a_new_key_runs_once_and_a_retry_replays_its_answer() {
    let server = start(LayerConfig::global()).await;
    let client = client();
    let url = server.url("/payments");
    let first = send(post(&client, &url, "\"order-1\"", "amount=10")).await;
    let again = send(post(&client, &url, "\"order-1\"", "amount=10")).await;
    assert_eq!(
        (first.status, first.body.as_str(), first.replayed()),
        (201, "payment 1 of 9 bytes", false),
        "{first:?}"
    );
    assert_eq!((again.status, again.body.as_str(), again.replayed()), (201, "payment 1 of 9 bytes", true), "{again:?}");
    assert_eq!(again.header("x-run"), Some("1"), "the handler's own header is replayed: {again:?}");
    assert_eq!(again.header("idempotency-replay"), Some("true"), "{again:?}");
    assert_eq!(server.runs.get(), 1, "the retry ran the handler again");
    let other = send(post(&client, &url, "\"order-2\"", "amount=10")).await;
    assert_eq!((other.status, other.replayed()), (201, false), "{other:?}");
    assert_eq!(server.runs.get(), 2);
    server.stop().await;
}

#[actix_web::test]
async fn a_duplicate_sent_while_the_first_runs_is_409_in_progress() {
    let server = start(LayerConfig::global()).await;
    let client = client();
    let url = server.url("/slow");
    let first = actix_web::rt::spawn(send(post(&client, &url, "\"slow-1\"", "x")));
    server.runs.reach(1, Duration::from_secs(5), "the first run").await;
    let duplicate = send(post(&client, &url, "\"slow-1\"", "x")).await;
    assert!(duplicate.is_problem(409, "in-progress"), "{duplicate:?}");
    assert!(duplicate.header("retry-after").is_some(), "a 409 says when to retry: {duplicate:?}");
    let first = first.await.expect("the first request");
    assert_eq!((first.status, first.body.as_str()), (201, "slow 1"), "{first:?}");
    let retry = send(post(&client, &url, "\"slow-1\"", "x")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "slow 1", true), "{retry:?}");
    assert_eq!(server.runs.get(), 1);
    server.stop().await;
}

#[actix_web::test]
async fn prefer_wait_waits_for_the_first_and_replays_it() {
    let server = start(LayerConfig::global()).await;
    let client = client();
    let url = server.url("/slow");
    let first = actix_web::rt::spawn(send(post(&client, &url, "\"slow-2\"", "x")));
    server.runs.reach(1, Duration::from_secs(5), "the first run").await;
    let waited = send(post(&client, &url, "\"slow-2\"", "x").header("prefer", "wait=10")).await;
    assert_eq!((waited.status, waited.body.as_str(), waited.replayed()), (201, "slow 1", true), "{waited:?}");
    assert_eq!(waited.header("preference-applied"), Some("wait=10"), "{waited:?}");
    assert_eq!(first.await.expect("the first request").status, 201);
    assert_eq!(server.runs.get(), 1);
    server.stop().await;
}

#[actix_web::test]
async fn a_response_marked_not_spent_frees_its_key() {
    let server = start(LayerConfig::global()).await;
    let client = client();
    let url = server.url("/not-spent");
    let first = send(post(&client, &url, "\"busy-1\"", "x")).await;
    let again = send(post(&client, &url, "\"busy-1\"", "x")).await;
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (503, "try again", false), "{first:?}");
    assert_eq!((again.status, again.replayed()), (503, false), "NotSpent freed the key: {again:?}");
    assert_eq!(server.runs.get(), 2, "each attempt ran");
    server.stop().await;
}
