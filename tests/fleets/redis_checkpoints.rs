//! Checkpoints on a real Redis server: one stored before the server
//! is killed (SIGKILL, AOF with `appendfsync always`) and restarted is
//! handed to the holder that takes the key over after it; and a record
//! written before records had a checkpoint field reads as one without
//! a checkpoint, is taken over, and then stores one.

#![cfg(all(feature = "tokio", feature = "redis"))]

use crate::common::redis::RedisServer;
use idemkv::backend::redis::RedisBackend;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, Config, Fingerprint, LeaseToken, State,
};
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(300);

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60))
}

async fn acquire(backend: &RedisBackend, key: &[u8]) -> (LeaseToken, u32, bool, Option<Checkpoint>) {
    match backend.claim(b"", key, Fingerprint::of(b"body"), options()).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, checkpoint } => (token, attempt, recovered, checkpoint),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_point_survives_a_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let (first, _, _, _) = acquire(&backend, b"order-1").await;
    backend.checkpoint(&first, "charged", b"ch_1").await.expect("checkpoint");
    drop(backend);
    server.kill();
    server.restart();
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("reconnect");
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (second, attempt, recovered, resumed) = acquire(&backend, b"order-1").await;
    assert_eq!((attempt, recovered), (2, true));
    assert_eq!(resumed, Some(Checkpoint::new("charged", b"ch_1".to_vec())));
    assert!(second.token > first.token);
    assert!(matches!(backend.checkpoint(&first, "late", b"x").await, Err(idemkv::Error::LeaseLost { .. })));
}

/// Drops field 13 (the checkpoint) of every record, keeping its
/// expiry: the records as an earlier version wrote them.
const WITHOUT_FIELD_13: &str = r"
for _, name in ipairs(redis.call('KEYS', 'idemkv:{*}:r')) do
  local r = cmsgpack.unpack(redis.call('GET', name))
  r[13] = nil
  redis.call('SET', name, cmsgpack.pack(r), 'PX', redis.call('PTTL', name))
end
return 1
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_an_earlier_version_has_no_recovery_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
    let (first, _, _, _) = acquire(&backend, b"order-2").await;
    backend.checkpoint(&first, "charged", b"ch_2").await.expect("checkpoint");
    assert_eq!(server.cli(&["EVAL", WITHOUT_FIELD_13, "0"]).as_deref().map(str::trim), Some("1"));
    let record = backend.get(b"", b"order-2").await.expect("get").expect("present");
    assert_eq!((record.state, record.token, record.checkpoint), (State::Processing, first.token, None));
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let (second, attempt, recovered, resumed) = acquire(&backend, b"order-2").await;
    assert_eq!((attempt, recovered, resumed), (2, true, None));
    backend.checkpoint(&second, "ordered", b"o_2").await.expect("checkpoint");
    let record = backend.get(b"", b"order-2").await.expect("get").expect("present");
    assert_eq!(record.checkpoint, Some(Checkpoint::new("ordered", b"o_2".to_vec())));
    backend.complete(&second, b"201").await.expect("complete");
}
