//! Guards the response budget (the backend's limit on a stored
//! response): an answer too large to keep runs once and is answered, and
//! kept, as a 500 `response-too-large` that the retry gets replayed; an
//! answer at the edge of the budget is either kept or that 500, and either
//! way it is never run twice.

use super::{key, Served};
use crate::common::http::{client, post as post_to, send, Counter, Reply};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use idemkv::conformance::Setting;
use idemkv::http::LayerConfig;
use idemkv::IdempotencyBackend;

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

/// The response budget: the backend's limit on a stored response.
fn budget<B: IdempotencyBackend>(backend: &B) -> usize {
    backend.limits().response_bytes_max
}

async fn server<B: IdempotencyBackend + Clone>(backend: &B, runs: &Counter) -> Served {
    let routes = Router::new().route("/blobs", post(blob)).with_state(runs.clone());
    Served::start(backend, LayerConfig::global(), routes).await
}

pub async fn a_response_over_the_budget_is_replayed_as_a_500<B: IdempotencyBackend + Clone>(
    backend: &B,
    setting: &Setting,
) {
    let runs = Counter::default();
    let server = server(backend, &runs).await;
    let client = client();
    let url = server.url("/blobs");
    let len = (budget(backend) + 36 * 1024).to_string();
    let blob = key(setting, "blob-large");

    let first = send(post_to(&client, &url, &blob, &len)).await;
    assert!(first.is_problem(500, "response-too-large"), "{:?}", (first.status, &first.headers));
    assert!(!first.replayed());
    assert_eq!(first.header("idempotency-stored"), None, "the 500 was not kept: {first:?}");
    let retry = send(post_to(&client, &url, &blob, &len)).await;
    assert!(retry.is_problem(500, "response-too-large"), "{:?}", (retry.status, &retry.headers));
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(runs.get(), 1, "the handler ran once");
}

pub async fn responses_at_the_edge_of_the_budget_run_once<B: IdempotencyBackend + Clone>(
    backend: &B,
    setting: &Setting,
) {
    let runs = Counter::default();
    let server = server(backend, &runs).await;
    let client = client();
    let url = server.url("/blobs");
    let budget = budget(backend);
    // Exactly the budget, one byte over it, and a little under it.
    for (case, len) in [budget - HEAD, budget - HEAD + 1, budget - HEAD - 1, budget - HEAD - 40].into_iter().enumerate()
    {
        let key = key(setting, &format!("blob-edge-{case}"));
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
        println!("body of {len} bytes (stored form {} of {budget}): kept {kept}", len + HEAD);
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
pub async fn headers_alone_over_the_budget_are_kept_as_a_500<B: IdempotencyBackend + Clone>(
    backend: &B,
    setting: &Setting,
) {
    let runs = Counter::default();
    let routes = Router::new().route("/policies", post(headers)).with_state(runs.clone());
    let lease = std::time::Duration::from_secs(1);
    let layer = LayerConfig::global().lease(lease);
    let server = Served::start(backend, layer, routes).await;
    let client = client();
    let url = server.url("/policies");
    let over = budget(backend) + 904;
    for (name, len) in [("headers-over", over), ("headers-far-over", 1_100_000)] {
        let key = &key(setting, name);
        let before = runs.get();
        let first = send(post_to(&client, &url, key, &len.to_string())).await;
        assert!(first.is_problem(500, "response-too-large"), "{len}: {:?}", summary(&first));
        assert_eq!(first.header("idempotency-stored"), None, "{len}: the 500 was not kept");
        // Past the lease: an answer left unstored would run again now.
        setting.pass(lease + lease / 2).await;
        let retry = send(post_to(&client, &url, key, &len.to_string())).await;
        assert!(retry.is_problem(500, "response-too-large") && retry.replayed(), "{len}: {:?}", summary(&retry));
        assert_eq!(runs.get(), before + 1, "{len}: the handler ran twice");
    }
}
