//! The scenarios of checkpoints and reuse policies.

use super::contract::{acquire_at, fp, options, LEASE};
use super::Setting;
use crate::{
    backend::{BackendClaim, IdempotencyBackend},
    Checkpoint, Error, ReusePolicy, State,
};
use std::time::Duration;

fn point(step: &str, payload: &[u8]) -> Checkpoint {
    Checkpoint::new(step, payload.to_vec())
}

async fn stored_point<B: IdempotencyBackend>(backend: &B, key: &[u8]) -> Option<Checkpoint> {
    backend.get(b"", key).await.expect("get").and_then(|record| record.checkpoint)
}

/// A checkpoint goes to the holder that takes the key over, and
/// stays in the record for the one after; a renewal keeps it and the lease
/// end stays; a stale holder's is refused; a completion drops it.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn recovery_points<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("resume");
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

    setting.pass(LEASE + Duration::from_millis(150)).await;
    let (second, attempt, recovered, resumed) = acquire_at(backend, &key, options()).await;
    assert_eq!((attempt, recovered, resumed), (2, true, Some(point("charged", b"ch_1"))), "the takeover resumes");
    assert!(matches!(backend.checkpoint(&first, "late", b"x").await, Err(Error::LeaseLost { .. })), "stale");
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!(
        (record.token, record.checkpoint),
        (second.token, Some(point("charged", b"ch_1"))),
        "nothing of the stale one"
    );

    setting.pass(LEASE + Duration::from_millis(150)).await;
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
/// stale holder's next one is refused, and the next claim starts without
/// one.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn recovery_points_dropped<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("released");
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

    let expiring = setting.key("expired");
    let short = crate::backend::ClaimOptions::new().lease(Duration::from_millis(200)).ttl(Duration::from_millis(300));
    let (token, _, _, _) = acquire_at(backend, &expiring, short).await;
    backend.checkpoint(&token, "charged", b"ch").await.expect("checkpoint");
    setting.pass(Duration::from_millis(800)).await;
    assert!(matches!(backend.checkpoint(&token, "late", b"x").await, Err(Error::LeaseLost { .. })), "expired");
    let (_, attempt, recovered, fresh) = acquire_at(backend, &expiring, short).await;
    assert_eq!((attempt, recovered, fresh), (1, false, None), "expired: a fresh start");
}

/// A refused checkpoint is a typed error and stores nothing: one over
/// the response limit (step + payload + 1), an empty step, a step of 256
/// bytes; one exactly at the limit, and a 254-byte step, are stored.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn recovery_point_limits<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("limits");
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

/// What a claim of a finished key gets under each reuse policy: a failure
/// is replayed by default and run again (attempt 2, a greater token,
/// nothing half-done carried over) under [`ReusePolicy::RetryFailed`]; a
/// completion is always replayed; a mismatch stays a mismatch.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn reuse_policies<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let retry = options().reuse(ReusePolicy::RetryFailed);
    let key = setting.key("failed");
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
