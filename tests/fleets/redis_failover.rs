//! A failover on real servers: a primary and its replica (`--replicaof`),
//! 16 tasks of claims and completions on the primary, the replica stalled
//! (SIGSTOP: a link that stopped moving) and the primary killed with
//! SIGKILL in the middle, then the replica promoted (`REPLICAOF NO ONE`)
//! and the backend connected to it.
//!
//! With `wait_for_replicas(1, ..)` every completion the backend
//! acknowledged replays from the promoted server, no key ran twice, and an
//! acknowledged claim is never handed out afresh; a transition the replica
//! did not acknowledge answered `NotReplicated` instead of success. Without
//! it, the same failover loses acknowledged completions: the check below
//! counts them, and their retries would run again. On a Cluster each
//! `WAIT` goes to the key's own master.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::crash_load::{check_after_restart, load_then_stop, Acknowledged};
use crate::common::redis::{RedisCluster, RedisServer};
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Config, Error, Fingerprint, State,
};
use std::time::Duration;

/// How long the replica stays stalled before the primary dies: longer than
/// the kernel's socket buffers take to fill at the load's rate, so the
/// primary holds acknowledged writes the replica never gets.
const STALL: Duration = Duration::from_secs(2);

/// A primary and its replica, the load on the primary, the stall, the
/// kill, the promotion: what was acknowledged and the promoted server.
async fn failover(dir: &std::path::Path, wait: bool) -> (Acknowledged, RedisServer) {
    let mut primary = RedisServer::start(&dir.join("primary"));
    let replica = RedisServer::start_replica(&dir.join("replica"), &primary);
    let mut backend = RedisBackend::connect(&primary.url(), Config::new()).await.expect("connect");
    if wait {
        backend = backend.wait_for_replicas(1, Duration::from_millis(500));
    }
    let seen = load_then_stop(backend, || {
        replica.signal("STOP");
        std::thread::sleep(STALL);
        primary.kill();
        replica.signal("CONT");
    })
    .await;
    replica.promote();
    (seen, replica)
}

/// The acknowledged completions the promoted server does not replay.
async fn lost(backend: &RedisBackend, seen: &Acknowledged) -> usize {
    let mut lost = 0;
    for (key, _) in seen.completed() {
        let record = backend.get(b"", key.as_bytes()).await.expect("get");
        if !record.is_some_and(|record| record.state == State::Completed) {
            lost += 1;
        }
    }
    lost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_completions_survive_a_failover_with_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (seen, promoted) = failover(dir.path(), true).await;
    let backend = RedisBackend::connect(&promoted.url(), Config::new()).await.expect("connect to the promoted");
    assert_eq!(lost(&backend, &seen).await, 0);
    check_after_restart(&backend, &seen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_a_failover_loses_acknowledged_completions() {
    const TRIES: usize = 3;
    let mut losses = Vec::new();
    for _ in 0..TRIES {
        let dir = tempfile::tempdir().expect("tempdir");
        let (seen, promoted) = failover(dir.path(), false).await;
        let backend = RedisBackend::connect(&promoted.url(), Config::new()).await.expect("connect to the promoted");
        let lost = lost(&backend, &seen).await;
        losses.push(lost);
        if lost > 0 {
            println!("without WAIT: {lost} of {} acknowledged completions lost", seen.completed().count());
            return;
        }
    }
    panic!("no acknowledged completion was lost in {TRIES} failovers without WAIT: {losses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_acknowledge_is_not_replicated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let primary = RedisServer::start(&dir.path().join("primary"));
    let replica = RedisServer::start_replica(&dir.path().join("replica"), &primary);
    let backend = RedisBackend::connect(&primary.url(), Config::new())
        .await
        .expect("connect")
        .wait_for_replicas(1, Duration::from_millis(200));
    let fingerprint = Fingerprint::of(b"body");
    let BackendClaim::Acquired { token, .. } =
        backend.claim(b"", b"k", fingerprint, ClaimOptions::new()).await.expect("claim, replicated")
    else {
        panic!("a fresh key is acquired");
    };
    replica.signal("STOP");
    let error = backend.complete(&token, b"done").await.expect_err("the replica is stalled");
    assert!(
        matches!(error, Error::NotReplicated { operation: "complete", acknowledged: 0, required: 1, .. }),
        "{error}"
    );
    // Written on the primary all the same: it replays from there.
    let again = backend.claim(b"", b"k", fingerprint, ClaimOptions::new()).await.expect("claim again");
    assert!(matches!(&again, BackendClaim::Replay(response) if response == b"done"), "{again:?}");
    // Two replicas asked of a server with one: never acknowledged.
    replica.signal("CONT");
    let greedy = backend.wait_for_replicas(2, Duration::from_millis(100));
    let error = greedy.claim(b"", b"k2", fingerprint, ClaimOptions::new()).await.expect_err("two replicas");
    assert!(matches!(error, Error::NotReplicated { operation: "claim", acknowledged: 1, required: 2, .. }), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_waits_on_the_keys_own_master() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start(dir.path());
    let backend = cluster.connect(Config::new()).await.expect("connect");
    let backend = backend.wait_for_replicas(1, Duration::from_millis(50));
    // Keys on every master: the script and its WAIT reach the key's node
    // (a WAIT elsewhere would be a routing error, not an answer of 0).
    for n in 0..12 {
        let key = format!("key-{n}");
        let error = backend
            .claim(b"", key.as_bytes(), Fingerprint::of(b"body"), ClaimOptions::new())
            .await
            .expect_err("no master has a replica");
        assert!(matches!(error, Error::NotReplicated { operation: "claim", acknowledged: 0, .. }), "{error}");
        let answer = backend.claim(b"", key.as_bytes(), Fingerprint::of(b"body"), ClaimOptions::new()).await;
        assert!(matches!(answer, Ok(BackendClaim::InProgress { .. })), "held on its master: {answer:?}");
    }
}
