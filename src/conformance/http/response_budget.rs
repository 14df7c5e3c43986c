//! Guards the response budget (the backend's limit on a stored response):
//! the handler's answer reaches its caller whatever its size. An answer
//! too large to keep runs once and goes out whole — body streamed or not —
//! and what is kept for the retries is the truth without the body: its
//! status and headers, replayed with `Idempotency-Replay: omitted` and an
//! empty body (its status alone when the headers are too large already).
//! An answer at the edge of the budget is kept whole or without its body,
//! and either way never runs twice.

use super::harness::{client, post as post_to, send, Counter, Reply};
use super::harness::{key, Served};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;

/// What the stored form of the handler's answer takes besides its body:
/// the format's prefix (4), status and header count (4), and
/// `content-type: application/octet-stream` (6 + 12 + 24).
const HEAD: usize = 8 + 6 + "content-type".len() + "application/octet-stream".len();

/// Answers 201 with as many bytes as the request body says.
async fn blob(State(runs): State<Counter>, body: String) -> impl IntoResponse {
    runs.bump();
    let len: usize = body.parse().expect("a length");
    (StatusCode::CREATED, [(CONTENT_TYPE, "application/octet-stream")], vec![b'x'; len])
}

/// Answers 201 with as many bytes as the request body says, streamed in
/// chunks of 1000 bytes, its length unknown until it ends.
async fn streamed(State(runs): State<Counter>, body: String) -> impl IntoResponse {
    runs.bump();
    let len: usize = body.parse().expect("a length");
    let chunks: Vec<Result<Vec<u8>, std::convert::Infallible>> =
        (0..len).step_by(1000).map(|at| Ok(vec![b'y'; (len - at).min(1000)])).collect();
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    (StatusCode::CREATED, [(CONTENT_TYPE, "application/octet-stream")], body)
}

/// The response budget: the backend's limit on a stored response.
fn budget<B: IdempotencyBackend>(backend: &B) -> usize {
    backend.limits().response_bytes_max
}

async fn server<B: IdempotencyBackend + Clone>(backend: &B, runs: &Counter) -> Served {
    let routes = Router::new().route("/blobs", post(blob)).route("/streams", post(streamed)).with_state(runs.clone());
    Served::start(backend, LayerConfig::global(), routes).await
}

/// The handler's answer, whole, told the first caller.
fn assert_whole(first: &Reply, byte: u8, len: usize, what: &str) {
    assert_eq!((first.status, first.replayed()), (201, false), "{what}: {:?}", summary(first));
    assert_eq!(first.header("idempotency-stored"), None, "{what}: kept, without its body");
    assert_eq!(first.header("content-type"), Some("application/octet-stream"), "{what}");
    assert!(first.body.len() == len && first.body.bytes().all(|got| got == byte), "{what}: {:?}", summary(first));
}

/// A retry of an answer kept without its body: its status and headers,
/// marked omitted, and no body.
fn assert_omitted(retry: &Reply, what: &str) {
    assert_eq!(
        (retry.status, retry.header("idempotency-replay"), retry.body.as_str()),
        (201, Some("omitted"), ""),
        "{what}: {:?}",
        summary(retry)
    );
}

/// An answer over the response budget (the backend's limit on a stored
/// response), body streamed or not, reaches its caller whole and runs once;
/// its retries get its status and headers, `Idempotency-Replay: omitted`,
/// and no body.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn over_budget<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let server = server(backend, &runs).await;
    let client = client();
    let over = budget(backend) - HEAD + 1;
    for (path, byte, len) in [("/blobs", b'x', over), ("/blobs", b'x', over + 36 * 1024), ("/streams", b'y', over * 3)]
    {
        let (url, what) = (server.url(path), format!("{path}, body of {len}"));
        let key = key(setting, &format!("large-{path}-{len}"));
        let before = runs.get();
        let first = send(post_to(&client, &url, &key, &len.to_string())).await;
        assert_whole(&first, byte, len, &what);
        for _ in 0..2 {
            let retry = send(post_to(&client, &url, &key, &len.to_string())).await;
            assert_omitted(&retry, &what);
            assert_eq!(retry.header("content-type"), Some("application/octet-stream"), "{what}: the headers kept");
        }
        assert_eq!(runs.get(), before + 1, "{what}: the handler ran once");
    }
    server.stop().await;
}

/// Answers at the edge of the response budget (exactly it, a byte over, a
/// little under) are kept whole or without their body, and never run twice.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn edge_of_budget<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let server = server(backend, &runs).await;
    let client = client();
    let url = server.url("/blobs");
    let budget = budget(backend);
    // Exactly the budget, one byte over it, and a little under it.
    for (case, len) in [budget - HEAD, budget - HEAD + 1, budget - HEAD - 1, budget - HEAD - 40].into_iter().enumerate()
    {
        let (key, what) = (key(setting, &format!("blob-edge-{case}")), format!("body of {len}"));
        let before = runs.get();
        let first = send(post_to(&client, &url, &key, &len.to_string())).await;
        assert_whole(&first, b'x', len, &what);
        let retry = send(post_to(&client, &url, &key, &len.to_string())).await;
        let kept = retry.header("idempotency-replay") == Some("true");
        if kept {
            assert_eq!((retry.status, &retry.body), (201, &first.body), "{what}: {:?}", summary(&retry));
        } else {
            assert_omitted(&retry, &what);
        }
        assert!(kept || len > budget - HEAD - 40, "{what}: well within the budget, kept whole");
        assert!(!kept || len <= budget - HEAD, "{what}: over the budget, kept whole");
        assert_eq!(runs.get(), before + 1, "{what}: the handler ran twice");
        println!("body of {len} bytes (stored form {} of {budget}): kept whole {kept}", len + HEAD);
    }
    server.stop().await;
}

fn summary(reply: &Reply) -> (u16, Option<&str>, Option<&str>, usize) {
    (reply.status, reply.header("idempotency-replay"), reply.header("idempotency-stored"), reply.body.len())
}

/// Answers 201 with an empty body and one header as long as the request
/// body says: cookies, CSP and Link headers past a small budget.
async fn headers(State(runs): State<Counter>, body: String) -> impl IntoResponse {
    runs.bump();
    let len: usize = body.parse().expect("a length");
    (StatusCode::CREATED, [("x-policy", "p".repeat(len))], "created")
}

/// Headers alone over the response budget reach the caller whole; what is
/// kept is the status alone, marked omitted, and no retry runs again, even
/// past the lease.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn headers_over_budget<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let runs = Counter::default();
    let routes = Router::new().route("/policies", post(headers)).with_state(runs.clone());
    let lease = std::time::Duration::from_secs(1);
    let layer = LayerConfig::global().lease(lease);
    let server = Served::start(backend, layer, routes).await;
    let client = client();
    let url = server.url("/policies");
    let over = budget(backend) + 904;
    for (name, len) in [("headers-over", over), ("headers-far-over", 200_000)] {
        let key = &key(setting, name);
        let before = runs.get();
        let first = send(post_to(&client, &url, key, &len.to_string())).await;
        assert_eq!((first.status, first.body.as_str()), (201, "created"), "{len}: {:?}", summary(&first));
        assert_eq!(first.header("x-policy").map(str::len), Some(len), "{len}: the header reached the caller");
        assert_eq!(first.header("idempotency-stored"), None, "{len}: its status was kept");
        // Past the lease: an answer left unstored would run again now.
        setting.pass(lease + lease / 2).await;
        let retry = send(post_to(&client, &url, key, &len.to_string())).await;
        assert_omitted(&retry, &format!("headers of {len}"));
        assert_eq!(retry.header("x-policy"), None, "{len}: the headers were not kept");
        assert_eq!(runs.get(), before + 1, "{len}: the handler ran twice");
    }
    server.stop().await;
}
