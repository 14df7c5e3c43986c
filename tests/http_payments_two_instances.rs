//! Two instances of the payments example behind an imagined load balancer,
//! sharing one store on a real Redis server and one ledger directory: the
//! retry of a payment that reaches the other instance is replayed, not
//! charged again; the same key sent to both at the same moment is charged
//! once; a different body under a used key is refused on either instance.

#![cfg(all(feature = "tower", feature = "metrics", feature = "redis"))]

mod common;

use common::redis::RedisServer;
use reqwest::header::HeaderValue;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
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
         `cargo build --all-features --example payments` first)",
        path.display()
    );
    path
}

/// One running instance, killed when the test ends, however it ends.
struct Instance {
    child: Child,
    base: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts an instance on a free port with the ledger in `dir` and the
/// store on the Redis server at `url`; its base URL is read from the line
/// it prints at start.
fn start(dir: &Path, url: &str) -> Instance {
    let mut child = Command::new(example())
        .arg(dir)
        .arg("127.0.0.1:0")
        .args(["--redis", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let stdout = child.stdout.take().expect("stdout");
    let mut instance = Instance { child, base: String::new() };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("the line printed at start");
    let base = line.split_whitespace().find(|word| word.starts_with("http://"));
    instance.base = base.unwrap_or_else(|| panic!("no address in {line:?}")).trim_end_matches(',').to_string();
    assert!(line.contains("store on Redis"), "{line}");
    instance
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20)).build().expect("client")
}

/// POSTs a payment; its status, whether it was a replay, and its body.
async fn pay(client: &reqwest::Client, instance: &Instance, key: &str, body: &str) -> (u16, bool, String) {
    let response = client
        .post(format!("{}/payments", instance.base))
        .header("x-account", "acct-1")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .expect("a response");
    let replay = response.headers().get("idempotency-replay").map(HeaderValue::as_bytes) == Some(&b"true"[..]);
    (response.status().as_u16(), replay, response.text().await.expect("a body"))
}

fn ledger(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("ledger.txt")).unwrap_or_default()
}

#[tokio::test]
async fn a_retry_sent_to_the_other_instance_is_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&dir.path().join("redis"));
    let data = dir.path().join("data");
    let (a, b) = (start(&data, &server.url()), start(&data, &server.url()));
    let client = client();

    let first = pay(&client, &a, "order-1", r#"{"amount":10}"#).await;
    assert_eq!((first.0, first.1), (201, false), "{first:?}");
    let retry = pay(&client, &b, "order-1", r#"{"amount":10}"#).await;
    assert_eq!(retry, (201, true, first.2.clone()), "B replays A's answer");
    assert_eq!(ledger(&data).lines().count(), 1, "charged once: {}", ledger(&data));

    // A different request under the used key, on either instance.
    assert_eq!(pay(&client, &b, "order-1", r#"{"amount":99}"#).await.0, 422);
    assert_eq!(pay(&client, &a, "order-1", r#"{"amount":99}"#).await.0, 422);
    assert_eq!(ledger(&data).lines().count(), 1, "{}", ledger(&data));
    // The records are on Redis: no store directory beside the ledger.
    assert!(!data.join("idempotency").exists(), "a store directory was created");
    drop((a, b));
}

#[tokio::test]
async fn the_same_key_on_both_instances_at_once_is_charged_once() {
    const KEYS: usize = 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&dir.path().join("redis"));
    let data = dir.path().join("data");
    let (a, b) = (start(&data, &server.url()), start(&data, &server.url()));
    let client = client();

    let pairs = (0..KEYS).map(|index| {
        let (client, a, b) = (&client, &a, &b);
        async move {
            let (key, body) = (format!("order-{index}"), format!(r#"{{"amount":{index},"order":"order-{index}"}}"#));
            tokio::join!(pay(client, a, &key, &body), pay(client, b, &key, &body))
        }
    });
    let answers = futures_util::future::join_all(pairs).await;

    let ledger = ledger(&data);
    let mut in_progress = 0;
    for (index, (from_a, from_b)) in answers.into_iter().enumerate() {
        let charged = ledger.lines().filter(|line| line.contains(&format!(r#""order":"order-{index}""#))).count();
        assert_eq!(charged, 1, "order-{index} charged {charged} times:\n{ledger}");
        // One of the two ran the payment; the other replayed its answer or
        // found it in progress.
        let (first, other) = if from_a.0 == 201 && !from_a.1 { (from_a, from_b) } else { (from_b, from_a) };
        assert_eq!((first.0, first.1), (201, false), "order-{index}: no first answer: {first:?} {other:?}");
        match other {
            (409, false, _) => in_progress += 1,
            (201, true, ref body) => assert_eq!(*body, first.2, "order-{index}: the replay differs"),
            other => panic!("order-{index}: {other:?} beside the first answer {first:?}"),
        }
        // Once finished, the key replays on both instances.
        let key = format!("order-{index}");
        let body = format!(r#"{{"amount":{index},"order":"order-{index}"}}"#);
        for instance in [&a, &b] {
            assert_eq!(pay(&client, instance, &key, &body).await, (201, true, first.2.clone()), "order-{index}");
        }
    }
    assert_eq!(ledger.lines().count(), KEYS, "{ledger}");
    println!("{in_progress} of {KEYS} duplicates found their key in progress, the others replayed");
    drop((a, b));
}
