//! One contract, every backend: the same scenarios — the state table,
//! fencing, TTL, scopes, `claim_wait`, concurrent duplicates, limits,
//! renew, get and remove, checkpoints and reuse policies — run
//! against the embedded store, a standalone Redis server, a three-master
//! Redis Cluster and PostgreSQL (real servers, started here). Time is real on every backend (Redis's clock is the server's),
//! so leases and TTLs are short and waits bounded.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::{RedisCluster, RedisServer};
use idemkv::redis::RedisBackend;
use idemkv::{
    BackendClaim, Checkpoint, ClaimOptions, Config, Durability, Error, Fingerprint, IdempotencyBackend, LeaseToken,
    ReusePolicy, State,
};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_millis(400);
const TTL: Duration = Duration::from_millis(600);

/// What every backend is given: the limits the scenarios check.
fn config() -> Config {
    Config::new().response_bytes_max(4096)
}

/// The embedded store's, with its own setting on top (Buffered writes, for
/// speed), which a networked backend would refuse.
fn store_config() -> Config {
    config().durability(Durability::Buffered)
}

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60))
}

fn fp(text: &str) -> Fingerprint {
    Fingerprint::of(text.as_bytes())
}

/// Keys of one scenario on one target never meet another's.
struct Keys(String);

impl Keys {
    fn key(&self, name: &str) -> Vec<u8> {
        format!("{}-{name}", self.0).into_bytes()
    }
}

async fn acquire<B: IdempotencyBackend>(
    backend: &B,
    scope: &[u8],
    key: &[u8],
    options: ClaimOptions,
) -> (LeaseToken, u32, bool) {
    match backend.claim(scope, key, fp("body"), options).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, .. } => (token, attempt, recovered),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// [`acquire`] in the empty scope, with the checkpoint handed over.
async fn acquire_at<B: IdempotencyBackend>(
    backend: &B,
    key: &[u8],
    options: ClaimOptions,
) -> (LeaseToken, u32, bool, Option<Checkpoint>) {
    match backend.claim(b"", key, fp("body"), options).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, checkpoint } => (token, attempt, recovered, checkpoint),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn state_table<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("table");
    let (token, attempt, recovered) = acquire(backend, b"", &key, options()).await;
    assert_eq!((attempt, recovered), (1, false));
    match backend.claim(b"", &key, fp("body"), options()).await.expect("claim") {
        BackendClaim::InProgress { retry_after } => assert!(retry_after <= LEASE, "{retry_after:?}"),
        other => panic!("expected InProgress, got {other:?}"),
    }
    assert!(matches!(backend.claim(b"", &key, fp("other"), options()).await, Ok(BackendClaim::Mismatch)));
    backend.complete(&token, b"201 charged").await.expect("complete");
    match backend.claim(b"", &key, fp("body"), options()).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"201 charged"),
        other => panic!("expected Replay, got {other:?}"),
    }
    assert!(matches!(backend.claim(b"", &key, fp("other"), options()).await, Ok(BackendClaim::Mismatch)));
    assert!(matches!(backend.complete(&token, b"again").await, Err(Error::LeaseLost { .. })), "finished once");

    let failed = keys.key("failed");
    let (token, _, _) = acquire(backend, b"", &failed, options()).await;
    backend.fail(&token, b"402 declined").await.expect("fail");
    match backend.claim(b"", &failed, fp("body"), options()).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"402 declined"),
        other => panic!("expected the failure replayed, got {other:?}"),
    }

    let released = keys.key("released");
    let (first, _, _) = acquire(backend, b"", &released, options()).await;
    backend.release(&first).await.expect("release");
    let (second, attempt, recovered) = acquire(backend, b"", &released, options()).await;
    assert_eq!((attempt, recovered), (1, false), "released: absent again");
    assert!(second.token > first.token, "tokens of a key only grow: {} then {}", first.token, second.token);
}

async fn fencing<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("fencing");
    let (stale, _, _) = acquire(backend, b"", &key, options()).await;
    tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
    let (fresh, attempt, recovered) = acquire(backend, b"", &key, options()).await;
    assert_eq!((attempt, recovered), (2, true));
    assert!(fresh.token > stale.token);
    assert!(matches!(backend.complete(&stale, b"late").await, Err(Error::LeaseLost { .. })));
    assert!(matches!(backend.renew(&stale, LEASE).await, Err(Error::LeaseLost { .. })));
    assert!(matches!(backend.release(&stale).await, Err(Error::LeaseLost { .. })));
    backend.complete(&fresh, b"done").await.expect("complete");
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!(
        (record.state, record.token, record.attempt, record.recovered),
        (State::Completed, fresh.token, 2, true)
    );
    assert_eq!(record.response, b"done");
}

async fn ttl<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("ttl");
    let short = ClaimOptions::new().lease(LEASE).ttl(TTL);
    let (first, _, _) = acquire(backend, b"", &key, short).await;
    backend.complete(&first, b"done").await.expect("complete");
    assert!(matches!(backend.claim(b"", &key, fp("body"), short).await, Ok(BackendClaim::Replay(_))));
    tokio::time::sleep(TTL + Duration::from_millis(300)).await;
    assert_eq!(backend.get(b"", &key).await.expect("get"), None, "expired");
    let (second, attempt, recovered) = acquire(backend, b"", &key, short).await;
    assert_eq!((attempt, recovered), (1, false), "expired: a fresh start");
    assert!(second.token > first.token, "no token repeats after expiry");
}

async fn scopes<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("scoped");
    let (a, _, _) = acquire(backend, b"tenant-a", &key, options()).await;
    let (b, _, _) = acquire(backend, b"tenant-b", &key, options()).await;
    backend.complete(&a, b"for a").await.expect("complete a");
    backend.complete(&b, b"for b").await.expect("complete b");
    for (scope, answer) in [(&b"tenant-a"[..], &b"for a"[..]), (b"tenant-b", b"for b")] {
        match backend.claim(scope, &key, fp("body"), options()).await.expect("claim") {
            BackendClaim::Replay(response) => assert_eq!(response, answer),
            other => panic!("expected Replay, got {other:?}"),
        }
    }
    assert_eq!(backend.get(b"tenant-c", &key).await.expect("get"), None);
}

async fn claim_wait<B: IdempotencyBackend + Clone>(backend: &B, keys: &Keys) {
    let key = keys.key("wait");
    let long = ClaimOptions::new().lease(Duration::from_secs(10)).ttl(Duration::from_secs(60));
    let (token, _, _) = acquire(backend, b"", &key, long).await;
    let waiter = {
        let (backend, key) = (backend.clone(), key.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = backend.claim(b"", &key, fp("body"), long.wait(Some(Duration::from_secs(8)))).await;
            (answer, started.elapsed())
        })
    };
    // Held for 1.6 s: the waiter's polls (if it were only polling) come
    // at 0.1, 0.3, 0.7, 1.5 and 2.5 s, so an answer well before 2.5 s
    // came from the finish's wake-up.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    backend.complete(&token, b"waited for").await.expect("complete");
    let completed = Instant::now();
    let (answer, wait_took) = waiter.await.expect("waiter");
    let after_finish = completed.elapsed();
    match answer.expect("claim_wait") {
        BackendClaim::Replay(response) => assert_eq!(response, b"waited for"),
        other => panic!("expected Replay after the wait, got {other:?}"),
    }
    assert!(wait_took >= Duration::from_millis(1500), "it waited for the holder: {wait_took:?}");
    assert!(after_finish < Duration::from_millis(500), "woken by the finish, not a poll: {after_finish:?} after it");

    let held = keys.key("wait-held");
    let (_token, _, _) = acquire(backend, b"", &held, long).await;
    let started = Instant::now();
    let answer = backend.claim(b"", &held, fp("body"), long.wait(Some(Duration::from_millis(200)))).await;
    assert!(matches!(answer, Ok(BackendClaim::InProgress { .. })), "{answer:?}");
    assert!(started.elapsed() >= Duration::from_millis(190), "waited its time: {:?}", started.elapsed());
}

async fn duplicates<B: IdempotencyBackend + Clone>(backend: &B, keys: &Keys) {
    let key = keys.key("duplicates");
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (backend, key) = (backend.clone(), key.clone());
            tokio::spawn(async move { backend.claim(b"", &key, fp("body"), options()).await })
        })
        .collect();
    let mut acquired = Vec::new();
    for task in tasks {
        match task.await.expect("task").expect("claim") {
            BackendClaim::Acquired { token, .. } => acquired.push(token),
            BackendClaim::InProgress { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(acquired.len(), 1, "exactly one of 32 concurrent duplicates runs");
    backend.complete(&acquired[0], b"once").await.expect("complete");
}

async fn limits<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let too_long = vec![b'k'; backend.limits().key_bytes_max + 1];
    assert!(matches!(backend.claim(b"", &too_long, fp("body"), options()).await, Err(Error::KeyTooLong { .. })));
    assert!(matches!(backend.claim(b"", b"", fp("body"), options()).await, Err(Error::KeyEmpty)));
    let key = keys.key("limits");
    let (token, _, _) = acquire(backend, b"", &key, options()).await;
    let large = vec![0; backend.limits().response_bytes_max + 1];
    assert!(matches!(backend.complete(&token, &large).await, Err(Error::ResponseTooLarge { .. })));
    backend.complete(&token, b"small").await.expect("the lease still holds after a refused response");
    let zero = ClaimOptions::new().lease(Duration::ZERO);
    assert!(matches!(
        backend.claim(b"", &keys.key("zero"), fp("body"), zero).await,
        Err(Error::InvalidDuration { .. })
    ));
}

async fn renew_get_remove<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("renew");
    assert_eq!(backend.get(b"", &key).await.expect("get"), None);
    let (token, _, _) = acquire(backend, b"", &key, options()).await;
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!((record.state, record.token, record.attempt), (State::Processing, token.token, 1));
    assert!(record.response.is_empty());
    backend.renew(&token, Duration::from_secs(5)).await.expect("renew");
    tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
    assert!(
        matches!(backend.claim(b"", &key, fp("body"), options()).await, Ok(BackendClaim::InProgress { .. })),
        "renewed past the first lease"
    );
    assert!(backend.remove(b"", &key).await.expect("remove"));
    assert!(!backend.remove(b"", &key).await.expect("remove again"));
    assert!(
        matches!(backend.complete(&token, b"late").await, Err(Error::LeaseLost { .. })),
        "removed under its holder"
    );
    let (after, attempt, _) = acquire(backend, b"", &key, options()).await;
    assert_eq!(attempt, 1);
    assert!(after.token > token.token);
}

fn point(step: &str, payload: &[u8]) -> Checkpoint {
    Checkpoint::new(step, payload.to_vec())
}

async fn stored_point<B: IdempotencyBackend>(backend: &B, key: &[u8]) -> Option<Checkpoint> {
    backend.get(b"", key).await.expect("get").and_then(|record| record.checkpoint)
}

/// A checkpoint goes to the holder that takes the key over, and
/// stays in the record for the one after; a stale holder's is refused.
async fn checkpoints<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("resume");
    let (first, _, _, none) = acquire_at(backend, &key, options()).await;
    assert_eq!(none, None, "a fresh claim has no checkpoint");
    let before = backend.get(b"", &key).await.expect("get").expect("present");
    backend.checkpoint(&first, "reserved", b"r_1").await.expect("checkpoint");
    backend.checkpoint(&first, "charged", b"ch_1").await.expect("checkpoint");
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!(
        (record.state, record.token, record.checkpoint.clone()),
        (State::Processing, first.token, Some(point("charged", b"ch_1")))
    );
    assert!(record.response.is_empty());
    assert!(record.deadline_ms.abs_diff(before.deadline_ms) <= 5, "the lease end stays: {record:?} {before:?}");
    backend.renew(&first, LEASE).await.expect("renew");
    assert_eq!(stored_point(backend, &key).await, Some(point("charged", b"ch_1")), "a renewal keeps it");

    tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
    let (second, attempt, recovered, resumed) = acquire_at(backend, &key, options()).await;
    assert_eq!((attempt, recovered, resumed), (2, true, Some(point("charged", b"ch_1"))), "the takeover resumes");
    assert!(matches!(backend.checkpoint(&first, "late", b"x").await, Err(Error::LeaseLost { .. })), "stale");
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!(
        (record.token, record.checkpoint),
        (second.token, Some(point("charged", b"ch_1"))),
        "nothing of the stale one"
    );

    tokio::time::sleep(LEASE + Duration::from_millis(150)).await;
    let (third, attempt, recovered, resumed) = acquire_at(backend, &key, options()).await;
    assert_eq!((attempt, recovered, resumed), (3, true, Some(point("charged", b"ch_1"))), "carried over twice");
    assert!(matches!(backend.checkpoint(&second, "late", b"x").await, Err(Error::LeaseLost { .. })));
    backend.checkpoint(&third, "ordered", b"o_1").await.expect("checkpoint");
    assert_eq!(stored_point(backend, &key).await, Some(point("ordered", b"o_1")));
    backend.complete(&third, b"201 ordered").await.expect("complete");
    assert!(matches!(backend.checkpoint(&third, "after", b"x").await, Err(Error::LeaseLost { .. })), "finished");
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!((record.state, record.checkpoint, record.response), (State::Completed, None, b"201 ordered".to_vec()));
}

/// Releasing, removing or expiring a key drops its checkpoint: the
/// next claim starts without one.
async fn checkpoints_dropped<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("released");
    let (token, _, _, _) = acquire_at(backend, &key, options()).await;
    backend.checkpoint(&token, "validated", b"v").await.expect("checkpoint");
    backend.release(&token).await.expect("release");
    assert!(matches!(backend.checkpoint(&token, "late", b"x").await, Err(Error::LeaseLost { .. })), "released");
    let (token, attempt, recovered, fresh) = acquire_at(backend, &key, options()).await;
    assert_eq!((attempt, recovered, fresh), (1, false, None), "released: a fresh start");
    assert_eq!(stored_point(backend, &key).await, None);

    backend.checkpoint(&token, "validated", b"v").await.expect("checkpoint");
    assert!(backend.remove(b"", &key).await.expect("remove"));
    assert!(matches!(backend.checkpoint(&token, "late", b"x").await, Err(Error::LeaseLost { .. })), "removed");
    assert_eq!(acquire_at(backend, &key, options()).await.3, None, "removed: a fresh start");

    let expiring = keys.key("expired");
    let short = ClaimOptions::new().lease(Duration::from_millis(200)).ttl(Duration::from_millis(300));
    let (token, _, _, _) = acquire_at(backend, &expiring, short).await;
    backend.checkpoint(&token, "charged", b"ch").await.expect("checkpoint");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(matches!(backend.checkpoint(&token, "late", b"x").await, Err(Error::LeaseLost { .. })), "expired");
    let (_, attempt, recovered, fresh) = acquire_at(backend, &expiring, short).await;
    assert_eq!((attempt, recovered, fresh), (1, false, None), "expired: a fresh start");
}

/// A refused checkpoint is a typed error and stores nothing.
async fn recovery_point_limits<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let key = keys.key("limits");
    let max = backend.limits().response_bytes_max;
    let (token, _, _, _) = acquire_at(backend, &key, options()).await;
    backend.checkpoint(&token, "kept", b"k").await.expect("checkpoint");
    let too_large = backend.checkpoint(&token, "s", &vec![7; max - 1]).await;
    assert!(matches!(too_large, Err(Error::CheckpointTooLarge { len, max: limit }) if len == max + 1 && limit == max));
    assert!(matches!(backend.checkpoint(&token, "", b"x").await, Err(Error::InvalidCheckpoint { .. })));
    assert!(matches!(backend.checkpoint(&token, &"s".repeat(256), b"").await, Err(Error::InvalidCheckpoint { .. })));
    assert_eq!(stored_point(backend, &key).await, Some(point("kept", b"k")), "nothing stored");
    backend.checkpoint(&token, "s", &vec![7; max - 2]).await.expect("step + payload + 1 = the limit");
    assert_eq!(stored_point(backend, &key).await, Some(point("s", &vec![7; max - 2])));
    backend.checkpoint(&token, &"é".repeat(127), b"").await.expect("a 254-byte step");
    backend.complete(&token, b"done").await.expect("complete");
}

/// What a claim of a finished key gets under each reuse policy.
async fn reuse_policies<B: IdempotencyBackend>(backend: &B, keys: &Keys) {
    let retry = options().reuse(ReusePolicy::RetryFailed);
    let key = keys.key("failed");
    let (first, _, _, _) = acquire_at(backend, &key, options()).await;
    backend.checkpoint(&first, "declined", b"d").await.expect("checkpoint");
    backend.fail(&first, b"402 declined").await.expect("fail");
    let failed = backend.get(b"", &key).await.expect("get").expect("present");
    match backend.claim(b"", &key, fp("body"), options()).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"402 declined", "the default replays"),
        other => panic!("expected Replay, got {other:?}"),
    }
    assert!(matches!(backend.claim(b"", &key, fp("other"), retry).await, Ok(BackendClaim::Mismatch)));
    let (second, attempt, recovered, resumed) = acquire_at(backend, &key, retry).await;
    assert_eq!((attempt, recovered, resumed), (2, false, None), "run again, nothing half-done");
    assert!(second.token > first.token);
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!((record.state, record.attempt, record.token), (State::Processing, 2, second.token));
    assert!(record.response.is_empty() && record.checkpoint.is_none());
    assert!(record.created_ms >= failed.created_ms);
    assert!(matches!(backend.claim(b"", &key, fp("body"), retry).await, Ok(BackendClaim::InProgress { .. })));
    assert!(matches!(backend.fail(&first, b"late").await, Err(Error::LeaseLost { .. })), "superseded");
    backend.complete(&second, b"201 charged").await.expect("complete");
    match backend.claim(b"", &key, fp("body"), retry).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"201 charged", "completed: always replayed"),
        other => panic!("expected Replay, got {other:?}"),
    }
}

/// Every scenario, in turn, on `backend`; keys prefixed with `target`.
async fn conformance<B: IdempotencyBackend + Clone>(backend: B, target: &str) {
    let keys = |scenario: &str| Keys(format!("{target}-{scenario}"));
    state_table(&backend, &keys("state_table")).await;
    fencing(&backend, &keys("fencing")).await;
    ttl(&backend, &keys("ttl")).await;
    scopes(&backend, &keys("scopes")).await;
    claim_wait(&backend, &keys("claim_wait")).await;
    duplicates(&backend, &keys("duplicates")).await;
    limits(&backend, &keys("limits")).await;
    renew_get_remove(&backend, &keys("renew_get_remove")).await;
    checkpoints(&backend, &keys("checkpoints")).await;
    checkpoints_dropped(&backend, &keys("checkpoints_dropped")).await;
    recovery_point_limits(&backend, &keys("recovery_point_limits")).await;
    reuse_policies(&backend, &keys("reuse_policies")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = idemkv::Store::open(dir.path(), store_config()).expect("open");
    conformance(store, "embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_standalone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), config()).await.expect("connect");
    conformance(backend, "standalone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || RedisCluster::start(&dir)
    })
    .await
    .expect("cluster");
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let backend = RedisBackend::connect_cluster(&nodes, config()).await.expect("connect");
    conformance(backend, "cluster").await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = crate::common::postgres::PostgresServer::start(dir.path());
    let backend = idemkv::postgres::PostgresBackend::connect(&server.url(), config()).await.expect("connect");
    conformance(backend, "postgres").await;
}
