//! A handler that runs past `respond_async_after` gets its caller a 202
//! with the `Location` of a status resource while it runs on (the actix
//! request still in its hands), and the status resource tells its answer
//! once it is kept.

use crate::server::{start, SLOW};
use idemkv::conformance::http::harness::{client, post, send};
use idemkv::http::LayerConfig;
use std::time::{Duration, Instant};

#[actix_web::test]
async fn a_long_run_is_answered_202_and_its_status_resource_tells_its_answer() {
    let config = LayerConfig::global().operations("/operations").respond_async_after(Duration::from_millis(300));
    let server = start(config).await;
    let client = client();
    let started = Instant::now();
    let accepted = send(post(&client, &server.url("/slow"), "long-1", "x")).await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    assert!(started.elapsed() < SLOW, "the 202 waited for the handler: {:?}", started.elapsed());
    let location = accepted.header("location").expect("a status resource").to_owned();
    let deadline = Instant::now() + 4 * SLOW;
    let done = loop {
        let status = send(client.get(server.url(&location))).await;
        if status.status != 202 || Instant::now() > deadline {
            break status;
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((done.status, done.body.as_str()), (201, "slow 1"), "{done:?}");
    assert_eq!(server.runs.get(), 1);
    server.stop().await;
}
