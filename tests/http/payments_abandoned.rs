//! A long operation always ends, across a `kill -9`: the payments example
//! answers a payment sent with `Prefer: respond-async` 202 and a
//! `Location`, charges, and is killed (SIGKILL) before it writes the
//! order. A new server on the same store does not say "running" at that
//! `Location` forever: once the dead run's lease has lapsed it answers 500
//! `operation-abandoned`; the payment sent again with its key takes the
//! run over as recovered, resumes after the charge, and the `Location`
//! then tells its answer — one provider call, one order.

#![cfg(all(feature = "tower", feature = "metrics"))]

use crate::common::payments::{client, start_with};
use idemkv::conformance::http::harness::{read, Reply};
use std::path::Path;
use std::time::{Duration, Instant};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

const BODY: &str = r#"{"order":"o-9","amount":10}"#;

/// Sends the payment `order-9` of `acct-1`, asking to respond async.
async fn pay_async(client: &reqwest::Client, base: &str) -> Reply {
    let request = client
        .post(format!("{base}/payments"))
        .header("x-account", "acct-1")
        .header("idempotency-key", "order-9")
        .header("prefer", "respond-async")
        .body(BODY);
    read(request.send().await.expect("a response")).await
}

async fn status(client: &reqwest::Client, base: &str, location: &str) -> Reply {
    read(client.get(format!("{base}{location}")).header("x-account", "acct-1").send().await.expect("a response")).await
}

/// The status resource once it no longer says 202, within 15 s.
async fn settled(client: &reqwest::Client, base: &str, location: &str) -> Reply {
    let started = Instant::now();
    loop {
        let reply = status(client, base, location).await;
        if reply.status != 202 {
            return reply;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "still 202 after 15 s: {reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_killed_long_operation_is_told_abandoned_then_taken_over_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let client = client();
    let lease = [("PAYMENTS_LEASE_MS", "1500")];
    let holding = start_with(&data, &[], &[lease[0], ("PAYMENTS_HOLD_MS", "60000")], "store and ledger in");
    let accepted = pay_async(&client, &holding.base).await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    let location = accepted.header("location").expect("a status resource").to_owned();
    let started = Instant::now();
    while lines(&data.join("provider_calls.txt")).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "never charged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Charged; its checkpoint follows at once, then it waits a minute.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&client, &holding.base, &location).await.status, 202, "running");
    drop(holding); // SIGKILL, and reaped
    assert!(lines(&data.join("orders.txt")).is_empty(), "killed before the order");

    let restarted = start_with(&data, &[], &lease, "store and ledger in");
    let abandoned = settled(&client, &restarted.base, &location).await;
    assert_eq!(abandoned.status, 500, "{abandoned:?}");
    assert!(abandoned.body.contains("urn:idemkv:problem:operation-abandoned"), "{abandoned:?}");

    let retried = pay_async(&client, &restarted.base).await;
    assert!([201, 202].contains(&retried.status), "{retried:?}");
    let done = settled(&client, &restarted.base, &location).await;
    assert_eq!((done.status, done.replayed()), (201, true), "{done:?}");
    assert!(done.body.contains(r#""resumed":true"#) && done.body.contains(r#""attempt":2"#), "{done:?}");
    assert_eq!(lines(&data.join("provider_calls.txt")).len(), 1, "the provider was not called again");
    assert_eq!(lines(&data.join("orders.txt")), vec![format!("charge 1 {BODY}")], "the order, once");
}
