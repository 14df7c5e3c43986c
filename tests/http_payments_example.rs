//! The payments example as a user runs it: the built binary on a free
//! loopback port, real HTTP requests, and a Prometheus scrape of its
//! `/metrics` in which the counters have moved. And on a busy port it says
//! so in one line, exits 2 and creates nothing.

#![cfg(all(feature = "tower", feature = "metrics"))]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The example binary, which `cargo test` builds beside the tests
/// (`target/<profile>/examples/payments`).
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile.join("examples").join("payments");
    assert!(
        path.is_file(),
        "{} not built: `cargo test --all-features` builds it (a `--test` filter does not; \
         add `--example payments`)",
        path.display()
    );
    path
}

/// Kills the example when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let mut child = Command::new(example())
        .arg(dir.path().join("data"))
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let stdout = child.stdout.take().expect("stdout");
    let running = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("the line printed at start");
    let base = line.split_whitespace().find(|word| word.starts_with("http://")).expect("address").trim_end_matches(',');
    let base = base.to_string();

    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().expect("client");
    let pay = |key: &'static str, body: &'static str| {
        client
            .post(format!("{base}/payments"))
            .header("x-account", "acct-1")
            .header("idempotency-key", key)
            .body(body)
            .send()
    };
    assert_eq!(pay("order-1", r#"{"amount":10}"#).await.expect("first").status(), 201);
    let again = pay("order-1", r#"{"amount":10}"#).await.expect("retry");
    assert_eq!(again.status(), 201);
    assert_eq!(
        again.headers().get("idempotency-replay").map(reqwest::header::HeaderValue::as_bytes),
        Some(&b"true"[..])
    );
    assert_eq!(pay("order-1", r#"{"amount":99}"#).await.expect("reused").status(), 422);
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
