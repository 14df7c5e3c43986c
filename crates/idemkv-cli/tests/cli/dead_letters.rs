//! `idemkv dead-letters` run as an operator would, on the letters a
//! service's inbox quarantined: listed (text and JSON, paged), one queued
//! for re-driving — which the service's next re-drive then processes once
//! — one dropped; an unknown letter exits 1, a bad consumer name or a
//! missing store exits 2, both with one line and never a panic. On a store
//! directory and on a real Redis server.

use crate::support::{assert_fails, idemkv, scratch, stdout};
use idemkv::{
    backend::IdempotencyBackend,
    messaging::{Delivery, Handled, Inbox},
    Config, Store,
};

/// Quarantines messages `m-1` and `m-2` of consumer `billing` (one
/// attempt each).
async fn quarantine<B: IdempotencyBackend>(inbox: &Inbox<B>) {
    for (id, payload) in [(&b"m-1"[..], &b"{\"amount\":10}"[..]), (b"m-2", b"%%%")] {
        let delivery = inbox.handle("billing", id, payload, |_| async { Handled::Failed("unparsable".into()) });
        assert!(matches!(delivery.await.expect("handle"), Delivery::DeadLettered { attempts: 1, .. }));
    }
}

/// The listing, retry and drop on `target` (`--dir DIR`, `--redis URL`),
/// then the service's re-drive through the inbox `service` gives (a store
/// is opened only then: the tool takes its lock).
async fn operate<B: IdempotencyBackend>(target: &[&str], service: impl FnOnce() -> Inbox<B>) {
    let run = |args: &[&str]| idemkv(&[&["dead-letters"], args, target].concat());
    let listed = run(&["list", "--consumer", "billing"]);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    let text = stdout(&listed);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().next().unwrap_or_default().starts_with("id=\"m-1\" attempts=1 dead="), "{text}");
    assert!(text.contains("payload=13 bytes error=\"unparsable\""), "{text}");
    let page = stdout(&run(&["list", "--consumer", "billing", "--after", "m-1", "--format", "json"]));
    let letter: serde_json::Value = serde_json::from_str(page.trim()).expect("one JSON line");
    assert_eq!((letter["message_id"].as_str(), letter["payload"].as_str()), (Some("m-2"), Some("%%%")), "{page}");

    let queued = run(&["retry", "--consumer", "billing", "m-1"]);
    assert_eq!(queued.status.code(), Some(0), "{queued:?}");
    assert!(stdout(&queued).contains("queued \"m-1\" to be re-driven"), "{queued:?}");
    assert_eq!(run(&["drop", "--consumer", "billing", "m-2"]).status.code(), Some(0));
    assert!(stdout(&run(&["list", "--consumer", "billing"])).is_empty(), "both left the list");
    assert_fails(&run(&["drop", "--consumer", "billing", "m-2"]), 1, "has no dead letter \"m-2\"", "dropped twice");
    assert_fails(&run(&["retry", "--consumer", "billing", "m-9"]), 1, "has no dead letter \"m-9\"", "unknown");
    assert_fails(&run(&["list", "--consumer", "bad name"]), 2, "invalid consumer name", "bad consumer");

    let inbox = service();
    // The service re-drives: m-1 runs once with its payload.
    let redriven = inbox
        .redrive("billing", |message| async move {
            assert_eq!(message.payload, b"{\"amount\":10}");
            Handled::Processed
        })
        .await
        .expect("redrive");
    assert_eq!(redriven.processed, 1);
    let never = |_| async { unreachable!("quarantined or processed") };
    assert_eq!(inbox.handle("billing", b"m-1", b"{\"amount\":10}", never).await.expect("handle"), Delivery::Duplicate);
    assert_eq!(inbox.handle("billing", b"m-2", b"%%%", never).await.expect("handle"), Delivery::Quarantined);
}

#[tokio::test]
async fn on_a_store_directory() {
    let dir = scratch();
    let path = dir.path().join("store");
    quarantine(&Inbox::new(Store::open(&path, Config::new()).expect("open")).max_attempts(1)).await;
    // The service has stopped: the operator acts, then it starts again.
    operate(&["--dir", path.to_str().expect("utf-8")], || Inbox::new(Store::open(&path, Config::new()).expect("open")))
        .await;
    let missing = dir.path().join("no-such-store");
    let listed = idemkv(&["dead-letters", "list", "--consumer", "billing", "--dir", missing.to_str().expect("utf-8")]);
    assert_fails(&listed, 2, "does not exist", "missing store");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_a_redis_server() {
    use crate::common::redis::RedisServer;
    let dir = scratch();
    let server = RedisServer::start(dir.path());
    let backend = idemkv::backend::redis::RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let inbox = Inbox::new(backend).max_attempts(1);
    quarantine(&inbox).await;
    operate(&["--redis", &server.url()], || inbox.clone()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_a_redis_cluster() {
    use crate::common::redis::RedisCluster;
    let dir = scratch();
    let cluster = RedisCluster::start_async(dir.path()).await;
    let inbox = Inbox::new(cluster.connect(Config::new()).await.expect("connect")).max_attempts(1);
    quarantine(&inbox).await;
    operate(&["--redis-cluster", &cluster.urls().join(",")], || inbox.clone()).await;
}
