//! Checkpoints over HTTP, as a user runs the payments example: the
//! server dies between its two steps (charged, order not yet written), a
//! new server on the same store takes the key over once the lease ends, and
//! the retry resumes at the order, with no second call to the provider.

#![cfg(all(feature = "tower", feature = "metrics"))]

use crate::common::payments::{client, pay, start, start_with};
use std::path::Path;
use std::time::{Duration, Instant};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test]
async fn a_retry_after_a_crash_between_the_steps_resumes_without_a_second_charge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let body = r#"{"order":"o-1","amount":10}"#;
    let client = client();
    let env = [("PAYMENTS_CRASH_AFTER", "charged"), ("PAYMENTS_LEASE_MS", "1500")];
    let mut crashing = start_with(&data, &[], &env, "store and ledger in");
    let sent = client
        .post(format!("{}/payments", crashing.base))
        .header("x-account", "acct-1")
        .header("idempotency-key", "order-1")
        .body(body)
        .send()
        .await;
    assert!(sent.is_err(), "the server died before it answered: {sent:?}");
    assert!(!crashing.wait_for_exit(Duration::from_secs(10)).success(), "aborted between the steps");
    drop(crashing);
    assert_eq!(lines(&data.join("provider_calls.txt")).len(), 1, "charged before the crash");
    assert!(lines(&data.join("orders.txt")).is_empty(), "no order before the crash");

    let restarted = start_with(&data, &[], &[("PAYMENTS_LEASE_MS", "1500")], "store and ledger in");
    let started = Instant::now();
    let (status, replayed, answer) = loop {
        let answer = pay(&client, &restarted, "order-1", body).await;
        if answer.0 != 409 {
            break answer;
        }
        // The crashed run's lease still runs: it is not taken over early.
        assert!(started.elapsed() < Duration::from_secs(15), "the lease never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((status, replayed), (201, false), "{answer}");
    assert!(answer.contains(r#""resumed":true"#) && answer.contains(r#""payment":1"#), "{answer}");
    assert!(answer.contains(r#""attempt":2"#), "the run that took over: {answer}");
    assert_eq!(lines(&data.join("provider_calls.txt")).len(), 1, "the provider was not called again");
    assert_eq!(lines(&data.join("ledger.txt")).len(), 1, "charged once");
    assert_eq!(lines(&data.join("orders.txt")), vec![format!("charge 1 {body}")], "the order, once");
    assert_eq!(pay(&client, &restarted, "order-1", body).await, (201, true, answer), "then replayed");
}

#[tokio::test]
async fn a_run_that_does_not_crash_charges_once_and_does_not_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let running = start(&data, &[], "store and ledger in");
    let client = client();
    let (status, _, answer) = pay(&client, &running, "order-2", r#"{"order":"o-2"}"#).await;
    assert_eq!(status, 201);
    assert!(answer.contains(r#""resumed":false"#) && answer.contains(r#""attempt":1"#), "{answer}");
    assert_eq!(lines(&data.join("provider_calls.txt")).len(), 1);
    assert_eq!(lines(&data.join("orders.txt")).len(), 1);
}
