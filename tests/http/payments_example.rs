//! The payments example as a user runs it: the built binary on a free
//! loopback port, real HTTP requests, and a Prometheus scrape of its
//! `/metrics` in which the counters have moved. And on a busy port it says
//! so in one line, exits 2 and creates nothing.

#![cfg(all(feature = "tower", feature = "metrics"))]

use crate::common::payments::{client, example, pay, start};
use std::process::Command;

/// The values of the `name{labels} value` lines of a Prometheus text
/// scrape whose labels contain `label`, summed (counters are whole).
fn total(scrape: &str, name: &str, label: &str) -> u64 {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.split(['{', ' ']).next() == Some(name) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn metrics_are_scraped_from_the_running_example() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(&dir.path().join("data"), &[], "store and ledger in");
    let (client, base) = (client(), running.base.clone());
    let first = pay(&client, &running, "order-1", r#"{"amount":10}"#).await;
    assert_eq!((first.0, first.1), (201, false));
    assert_eq!(pay(&client, &running, "order-1", r#"{"amount":10}"#).await, (201, true, first.2.clone()));
    assert_eq!(pay(&client, &running, "order-1", r#"{"amount":99}"#).await.0, 422);
    let ledger = std::fs::read_to_string(dir.path().join("data").join("ledger.txt")).expect("ledger");
    assert_eq!(ledger.lines().count(), 1, "charged once");

    let scrape = client.get(format!("{base}/metrics")).send().await.expect("scrape");
    assert_eq!(scrape.status(), 200);
    let scrape = scrape.text().await.expect("scrape body");
    assert!(scrape.contains("# TYPE idempo_replay_total counter"), "{scrape}");
    assert_eq!(total(&scrape, "idempo_acquired_total", ""), 1, "{scrape}");
    assert_eq!(total(&scrape, "idempo_replay_total", ""), 1, "{scrape}");
    assert_eq!(total(&scrape, "idempo_mismatch_total", ""), 1, "{scrape}");
    assert_eq!(total(&scrape, "duplicate_detected_total", ""), 2, "{scrape}");
    assert_eq!(total(&scrape, "idempo_completed_total", ""), 1, "{scrape}");
    let responses = "idempo_http_responses_total";
    assert_eq!(total(&scrape, responses, r#"outcome="executed",status="201""#), 1, "{scrape}");
    assert_eq!(total(&scrape, responses, r#"outcome="replay",status="201""#), 1, "{scrape}");
    assert_eq!(total(&scrape, responses, r#"outcome="mismatch",status="422""#), 1, "{scrape}");
    // Claim latencies, by outcome: three claims in all.
    assert_eq!(total(&scrape, "idempo_claim_seconds_count", ""), 3, "{scrape}");
    drop(running);
}

#[test]
fn a_busy_port_is_one_line_and_creates_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("address");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let output = Command::new(example()).arg(&data).arg(address.to_string()).output().expect("run the example");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with(&format!("payments: cannot listen on {address}: ")), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!data.exists(), "nothing created");
}
