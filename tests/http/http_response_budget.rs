//! Guards the response budget: an answer too large to keep runs once and
//! is answered, and kept, as a 500 `response-too-large` that the retry gets
//! replayed; an answer at the edge of the budget is either kept or that
//! 500, and either way it is never run twice.
#![cfg(feature = "tower")]

use crate::common::http::{client, post as post_to, send, Counter, Reply, Server};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use idemkv::http::LayerConfig;
use idemkv::Config;

const BUDGET: usize = 64 * 1024;
/// What the stored form of the handler's answer takes besides its body:
/// status and header count (4), and `content-type: application/octet-stream`
/// (6 + 12 + 24).
const HEAD: usize = 4 + 6 + "content-type".len() + "application/octet-stream".len();

/// Answers 201 with as many bytes as the request body says.
async fn blob(State(runs): State<Counter>, body: String) -> impl IntoResponse {
    runs.bump();
    let len: usize = body.parse().expect("a length");
    (StatusCode::CREATED, [(CONTENT_TYPE, "application/octet-stream")], vec![b'x'; len])
}

async fn server(runs: &Counter) -> Server {
    let routes = Router::new().route("/blobs", post(blob)).with_state(runs.clone());
    Server::start(Config::new().response_bytes_max(BUDGET), LayerConfig::global(), routes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_response_over_the_budget_is_answered_and_replayed_as_a_500() {
    let runs = Counter::default();
    let server = server(&runs).await;
    let client = client();
    let url = server.url("/blobs");
    let len = (100 * 1024).to_string();

    let first = send(post_to(&client, &url, "blob-large", &len)).await;
    assert!(first.is_problem(500, "response-too-large"), "{:?}", (first.status, &first.headers));
    assert!(!first.replayed());
    assert_eq!(first.header("idempotency-stored"), None, "the 500 was not kept: {first:?}");
    let retry = send(post_to(&client, &url, "blob-large", &len)).await;
    assert!(retry.is_problem(500, "response-too-large"), "{:?}", (retry.status, &retry.headers));
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(runs.get(), 1, "the handler ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn responses_at_the_edge_of_the_budget_are_never_run_twice() {
    let runs = Counter::default();
    let server = server(&runs).await;
    let client = client();
    let url = server.url("/blobs");
    // Exactly the budget, one byte over it, and a little under it.
    for (case, len) in [BUDGET - HEAD, BUDGET - HEAD + 1, BUDGET - HEAD - 1, BUDGET - HEAD - 40].into_iter().enumerate()
    {
        let key = format!("blob-edge-{case}");
        let before = runs.get();
        let first = send(post_to(&client, &url, &key, &len.to_string())).await;
        let kept = first.status == 201;
        if kept {
            assert_eq!(first.body.len(), len, "body of {len}");
            assert_eq!(first.header("idempotency-stored"), None, "body of {len}: 201 sent but not kept");
        } else {
            assert!(first.is_problem(500, "response-too-large"), "body of {len}: {:?}", summary(&first));
        }
        let retry = send(post_to(&client, &url, &key, &len.to_string())).await;
        assert_eq!(
            (retry.status, retry.replayed(), retry.body == first.body),
            (first.status, true, true),
            "body of {len}: first {:?}, retry {:?}",
            summary(&first),
            summary(&retry)
        );
        assert_eq!(runs.get(), before + 1, "body of {len}: the handler ran twice");
        println!("body of {len} bytes (stored form {} of {BUDGET}): kept {kept}", len + HEAD);
    }
}

fn summary(reply: &Reply) -> (u16, Option<&str>, Option<&str>, usize) {
    (reply.status, reply.problem_type(), reply.header("idempotency-stored"), reply.body.len())
}

/// Answers 201 with an empty body and one header as long as the request
/// body says: cookies, CSP and Link headers past a small budget.
async fn headers(State(runs): State<Counter>, body: String) -> impl IntoResponse {
    runs.bump();
    let len: usize = body.parse().expect("a length");
    (StatusCode::CREATED, [("x-policy", "p".repeat(len))], "")
}

/// Headers alone over the budget once saturated the body's budget to 0 and
/// skipped the too-large path: the store refused the answer, the client got
/// `Idempotency-Stored: false` and every retry after the lease ran the
/// handler again. They take the too-large path like a long body does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn headers_alone_over_the_budget_are_kept_as_a_500() {
    let runs = Counter::default();
    let routes = Router::new().route("/policies", post(headers)).with_state(runs.clone());
    let lease = std::time::Duration::from_secs(1);
    let layer = LayerConfig::global().lease(lease);
    let server = Server::start(Config::new().response_bytes_max(4096), layer, routes).await;
    let client = client();
    let url = server.url("/policies");
    for (key, len) in [("headers-over", 5000), ("headers-far-over", 1_100_000)] {
        let before = runs.get();
        let first = send(post_to(&client, &url, key, &len.to_string())).await;
        assert!(first.is_problem(500, "response-too-large"), "{len}: {:?}", summary(&first));
        assert_eq!(first.header("idempotency-stored"), None, "{len}: the 500 was not kept");
        // Past the lease: an answer left unstored would run again now.
        tokio::time::sleep(lease + lease / 2).await;
        let retry = send(post_to(&client, &url, key, &len.to_string())).await;
        assert!(retry.is_problem(500, "response-too-large") && retry.replayed(), "{len}: {:?}", summary(&retry));
        assert_eq!(runs.get(), before + 1, "{len}: the handler ran twice");
    }
}
