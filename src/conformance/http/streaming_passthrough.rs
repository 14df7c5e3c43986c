//! Guards the pass-through of requests the layer does not guard: a
//! streamed GET behind a router-wide layer reaches the client as it is
//! produced, not buffered until its end.
use super::fixture::{Fixture, FixtureAnswer};
use super::harness::client;
use super::target::{ServeTarget, Server, Tower};
use crate::backend::IdempotencyBackend;
use crate::http::LayerConfig;
use bytes::Bytes;
use futures_util::stream;
use http::{Method, StatusCode};
use std::time::{Duration, Instant};

/// A chunk, a 2 s pause, another chunk.
fn ticker() -> std::future::Ready<FixtureAnswer> {
    let chunks = stream::unfold(0, |sent| async move {
        let chunk = match sent {
            0 => "first;",
            1 => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                "second"
            }
            _ => return None,
        };
        Some((Ok::<_, std::io::Error>(Bytes::from_static(chunk.as_bytes())), sent + 1))
    });
    std::future::ready(FixtureAnswer::streamed(StatusCode::OK, Box::pin(chunks)))
}

/// A streamed GET behind a router-wide layer (a request the layer does not
/// guard) reaches the client as it is produced, not buffered until its end.
///
/// # Panics
/// When the layer over the backend answers otherwise.
pub async fn streamed_get<B: IdempotencyBackend + Clone>(backend: &B) {
    streamed_get_on(&Tower(backend)).await;
}

/// [`streamed_get`] on any target.
///
/// # Panics
/// When the target answers otherwise.
pub async fn streamed_get_on<T: ServeTarget>(target: &T) {
    let routes =
        Fixture::new()
            .route(Method::GET, "/ticks", |_| ticker())
            .route(Method::POST, "/payments", |_| async { FixtureAnswer::text(StatusCode::CREATED, "ok") });
    let server = Server::start(target, LayerConfig::global(), routes).await;
    let client = client();

    let started = Instant::now();
    let mut response = client.get(server.url("/ticks")).send().await.expect("send");
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.expect("read").expect("a first chunk");
    let first_at = started.elapsed();
    let mut body = first.to_vec();
    while let Some(chunk) = response.chunk().await.expect("read") {
        body.extend_from_slice(&chunk);
    }
    let end_at = started.elapsed();
    assert_eq!(String::from_utf8(body).expect("utf-8"), "first;second");
    assert!(first_at < Duration::from_secs(1), "the first chunk waited for the stream's end: {first_at:?}");
    assert!(end_at >= Duration::from_millis(1900), "the stream did not pause, the test proves nothing: {end_at:?}");
    assert!(response.headers().get("idempotency-replay").is_none());
    server.stop().await;
}
