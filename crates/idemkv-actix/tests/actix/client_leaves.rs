//! A client that hangs up while its handler runs does not cancel the
//! handler: it runs to its end on the actix worker, its answer is kept,
//! and the retry replays it without a second run.

use crate::server::{start, SLOW};
use idemkv::conformance::http::harness::{client, post, send};
use idemkv::http::LayerConfig;
use std::time::Duration;

#[actix_web::test]
async fn a_handler_whose_client_left_runs_to_its_end_and_is_replayed() {
    let server = start(LayerConfig::global()).await;
    let url = server.url("/slow");
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().expect("client");
    let gone = post(&impatient, &url, "left-1", "x").send().await;
    assert!(gone.is_err(), "the client was to give up first: {gone:?}");
    actix_web::rt::time::sleep(SLOW + Duration::from_millis(700)).await;
    let retry = send(post(&client(), &url, "left-1", "x")).await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "slow 1", true), "{retry:?}");
    assert_eq!(server.runs.get(), 1, "the handler ran again");
    server.stop().await;
}
