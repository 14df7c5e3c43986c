//! Two instances of the payments example behind an imagined load balancer,
//! sharing one store on a real Redis server and one ledger directory: the
//! retry of a payment that reaches the other instance is replayed, not
//! charged again; the same key sent to both at the same moment is charged
//! once; a different body under a used key is refused on either instance.

#![cfg(all(feature = "tower", feature = "metrics", feature = "redis"))]

use crate::common::payments::{self, client, pay, Instance};
use crate::common::redis::RedisServer;
use std::path::Path;

/// An instance with its ledger in `dir` and the store on the Redis
/// server at `url`.
fn start(dir: &Path, url: &str) -> Instance {
    payments::start(dir, &["--redis", url], "store on Redis")
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
