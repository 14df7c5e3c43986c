//! A handler that panics does not take its worker down: the key stays in
//! progress until its lease ends (a retry meanwhile gets 409, never a
//! second run), then the next attempt runs with its `Attempt` saying it
//! recovers an earlier one, as under the tower layer.

use crate::server::start;
use idemkv::conformance::http::harness::{client, post, send};
use idemkv::http::LayerConfig;
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(2);

#[actix_web::test]
async fn a_panicking_handler_leaves_its_key_in_progress_until_its_lease_ends() {
    let server = start(LayerConfig::global().lease(LEASE)).await;
    let client = client();
    let url = server.url("/fragile");
    let failed = send(post(&client, &url, "fragile-1", "x")).await;
    assert_eq!(failed.status, 500, "{failed:?}");
    let early = send(post(&client, &url, "fragile-1", "x")).await;
    assert!(early.is_problem(409, "in-progress"), "the key is in progress until its lease ends: {early:?}");
    let deadline = Instant::now() + 5 * LEASE;
    let recovered = loop {
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
        let retry = send(post(&client, &url, "fragile-1", "x")).await;
        if retry.status != 409 || Instant::now() > deadline {
            break retry;
        }
    };
    assert_eq!((recovered.status, recovered.body.as_str()), (201, "attempt 2, recovered true"), "{recovered:?}");
    assert_eq!(server.runs.get(), 2, "one run died, one recovered it");
    server.stop().await;
}
