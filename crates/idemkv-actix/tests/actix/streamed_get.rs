//! A request the layer does not guard streams through untouched: the
//! client reads the first chunk of a streamed answer while the handler is
//! still producing the rest.

use crate::server::{start, SLOW};
use idemkv::conformance::http::harness::client;
use idemkv::http::LayerConfig;
use std::time::Instant;

#[actix_web::test]
async fn an_unguarded_answer_streams_through() {
    let server = start(LayerConfig::global()).await;
    let started = Instant::now();
    let mut response = client().get(server.url("/stream")).send().await.expect("send");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers().get("content-length"), None, "a stream of unknown length: {response:?}");
    let first = response.chunk().await.expect("a chunk").expect("the first chunk");
    assert_eq!(&first[..], b"first ");
    assert!(started.elapsed() < SLOW, "the first chunk waited for the whole body: {:?}", started.elapsed());
    let mut rest = Vec::new();
    while let Some(chunk) = response.chunk().await.expect("a chunk") {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"second");
    server.stop().await;
}
