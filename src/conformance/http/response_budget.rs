//! Guards the response budget (the backend's limit on a stored response):
//! the handler's answer reaches its caller whatever its size. An answer
//! too large to keep runs once and goes out whole — body streamed or not —
//! and what is kept for the retries is the truth without the body: its
//! status and headers, replayed with `Idempotency-Replay: omitted` and an
//! empty body (its status alone when the headers are too large already).
//! An answer at the edge of the budget is kept whole or without its body,
//! and either way never runs twice.

use super::fixture::{Fixture, FixtureAnswer, FixtureRequest};
use super::harness::key;
use super::harness::{client, post as post_to, send, Counter, Reply};
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::conformance::Setting;
use crate::http::LayerConfig;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Method, StatusCode};

/// What the stored form of the handler's answer takes besides its body:
/// the format's prefix (4), status and header count (4), and
/// `content-type: application/octet-stream` (6 + 12 + 24).
const HEAD: usize = 8 + 6 + "content-type".len() + "application/octet-stream".len();

/// The length the request's body says.
fn length(runs: &Counter, request: &FixtureRequest) -> usize {
    runs.bump();
    request.text().parse().expect("a length")
}

const OCTETS: HeaderValue = HeaderValue::from_static("application/octet-stream");

/// Answers 201 with as many bytes as the request body says.
fn blob(runs: &Counter, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    let len = length(runs, request);
    std::future::ready(FixtureAnswer::bytes(StatusCode::CREATED, vec![b'x'; len]).header(CONTENT_TYPE, OCTETS))
}

/// Answers 201 with as many bytes as the request body says, streamed in
/// chunks of 1000 bytes, its length unknown until it ends.
fn streamed(runs: &Counter, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    let len = length(runs, request);
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        (0..len).step_by(1000).map(|at| Ok(Bytes::from(vec![b'y'; (len - at).min(1000)]))).collect();
    let body = Box::pin(futures_util::stream::iter(chunks));
    std::future::ready(FixtureAnswer::streamed(StatusCode::CREATED, body).header(CONTENT_TYPE, OCTETS))
}

/// The response budget: the backend's limit on a stored response.
fn budget<B: IdempotencyBackend>(backend: &B) -> usize {
    backend.limits().response_bytes_max
}

async fn server<'t, T: ServeTarget>(target: &'t T, runs: &Counter) -> Server<'t, T> {
    let (blobs, streams) = (runs.clone(), runs.clone());
    let routes = Fixture::new().route(Method::POST, "/blobs", move |request| blob(&blobs, &request)).route(
        Method::POST,
        "/streams",
        move |request| streamed(&streams, &request),
    );
    Server::start(target, LayerConfig::global(), routes).await
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
    over_budget_on(&Tower(backend), setting).await;
}

/// [`over_budget`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn over_budget_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server = server(target, &runs).await;
    let client = client();
    let over = budget(target.backend()) - HEAD + 1;
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
    edge_of_budget_on(&Tower(backend), setting).await;
}

/// [`edge_of_budget`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn edge_of_budget_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let server = server(target, &runs).await;
    let client = client();
    let url = server.url("/blobs");
    let budget = budget(target.backend());
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
fn headers(runs: &Counter, request: &FixtureRequest) -> std::future::Ready<FixtureAnswer> {
    let len = length(runs, request);
    let policy = HeaderValue::from_str(&"p".repeat(len)).expect("visible ASCII");
    std::future::ready(
        FixtureAnswer::text(StatusCode::CREATED, "created").header(HeaderName::from_static("x-policy"), policy),
    )
}

/// Headers alone over the response budget reach the caller whole; what is
/// kept is the status alone, marked omitted, and no retry runs again, even
/// past the lease.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn headers_over_budget<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    headers_over_budget_on(&Tower(backend), setting).await;
}

/// [`headers_over_budget`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn headers_over_budget_on<T: ServeTarget>(target: &T, setting: &Setting) {
    let runs = Counter::default();
    let counted = runs.clone();
    let routes = Fixture::new().route(Method::POST, "/policies", move |request| headers(&counted, &request));
    let lease = std::time::Duration::from_secs(1);
    let layer = LayerConfig::global().lease(lease);
    let server = Server::start(target, layer, routes).await;
    let client = client();
    let url = server.url("/policies");
    let over = budget(target.backend()) + 904;
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
