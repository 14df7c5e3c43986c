//! What the middleware refuses, as the tower layer does: another request
//! under a key (422), no key (400 when required, passed through when
//! not), a body over the limit (413), and a store that fails the claim
//! (503, nothing run).

use crate::server::start;
use idemkv::conformance::http::harness::{client, post, send};
use idemkv::http::LayerConfig;

#[actix_web::test]
async fn another_body_under_a_used_key_is_422_key_reused() {
    let server = start(LayerConfig::global()).await;
    let client = client();
    let url = server.url("/payments");
    assert_eq!(send(post(&client, &url, "order-7", "amount=10")).await.status, 201);
    let reused = send(post(&client, &url, "order-7", "amount=99")).await;
    assert!(reused.is_problem(422, "key-reused"), "{reused:?}");
    assert_eq!(reused.header("content-type"), Some("application/problem+json"), "{reused:?}");
    assert_eq!(server.runs.get(), 1, "the mismatch ran the handler");
    server.stop().await;
}

#[actix_web::test]
async fn no_key_is_400_when_required_and_passes_through_when_not() {
    let required = start(LayerConfig::global()).await;
    let client = client();
    let missing = send(client.post(required.url("/payments")).body("amount=1")).await;
    assert!(missing.is_problem(400, "key-missing"), "{missing:?}");
    let repeated =
        send(post(&client, &required.url("/payments"), "a", "amount=1").header("idempotency-key", "b")).await;
    assert!(repeated.is_problem(400, "key-repeated"), "{repeated:?}");
    assert_eq!(required.runs.get(), 0, "a refused request ran");
    required.stop().await;

    let optional = start(LayerConfig::global().require_key(false)).await;
    let url = optional.url("/payments");
    let first = send(client.post(&url).body("amount=1")).await;
    let second = send(client.post(&url).body("amount=1")).await;
    assert_eq!((first.status, second.status, second.replayed()), (201, 201, false), "{second:?}");
    assert_eq!(optional.runs.get(), 2, "unkeyed requests run each time");
    optional.stop().await;
}

#[actix_web::test]
async fn a_store_that_fails_the_claim_is_503_and_nothing_runs() {
    let server = start(LayerConfig::global()).await;
    let client = client();
    let url = server.url("/payments");
    assert_eq!(send(post(&client, &url, "order-1", "amount=1")).await.status, 201);
    server.store.clone().close().expect("close");
    let refused = send(post(&client, &url, "order-2", "amount=2")).await;
    assert!(refused.is_problem(503, "store-unavailable"), "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"), "nothing ran, so it says when to retry: {refused:?}");
    assert!(!refused.body.to_lowercase().contains("closed"), "the internal error leaked: {}", refused.body);
    assert_eq!(server.runs.get(), 1, "the handler ran without its claim");
    server.stop().await;
}

#[actix_web::test]
async fn a_body_over_the_limit_is_413_and_nothing_runs() {
    let server = start(LayerConfig::global().request_bytes_max(64)).await;
    let client = client();
    let url = server.url("/payments");
    let refused = send(post(&client, &url, "big-1", &"x".repeat(64 * 1024))).await;
    assert!(refused.is_problem(413, "body-too-large"), "{refused:?}");
    let within = send(post(&client, &url, "big-2", &"x".repeat(64))).await;
    assert_eq!((within.status, within.body.as_str()), (201, "payment 1 of 64 bytes"), "{within:?}");
    assert_eq!(server.runs.get(), 1, "the body over the limit ran the handler");
    server.stop().await;
}
