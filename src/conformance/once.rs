//! [`RunOnce`]'s scenario: one run among concurrent callers, a closure
//! kept alive past its lease, release and failure, and the replay.

use super::contract::{fp, LEASE};
use super::Setting;
use crate::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend, RunOnce},
    Once, Outcome, ReusePolicy,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `RunOnce` over the backend: of eight concurrent calls of one key whose
/// closure runs for three leases, exactly one runs and keeps the key
/// (every other is told it is in progress, or replays); a released key
/// runs again as attempt 1; a failure is replayed, and rerun as attempt 2
/// under [`ReusePolicy::RetryFailed`]; a mismatch never runs.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn run_once<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let once = RunOnce::new(backend.clone()).lease(LEASE);
    let options = ClaimOptions::new().ttl(Duration::from_secs(60));
    let key = setting.key("run-once");
    let runs = Arc::new(AtomicU32::new(0));
    let mut callers = Vec::new();
    for _ in 0..8 {
        let (once, key, runs) = (once.clone(), key.clone(), Arc::clone(&runs));
        callers.push(tokio::spawn(async move {
            once.run(b"", &key, fp("body"), options, |attempt| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                assert_eq!((attempt.attempt, attempt.recovered), (1, false));
                tokio::time::sleep(LEASE * 3).await;
                Outcome::Complete(b"ran once".to_vec())
            })
            .await
            .expect("run")
        }));
    }
    // While the closure runs, past its first lease, the key stays held.
    tokio::time::sleep(LEASE * 2).await;
    match backend.claim(b"", &key, fp("body"), options).await.expect("claim") {
        BackendClaim::InProgress { .. } => {}
        other => panic!("the running closure's key was not kept: {other:?}"),
    }
    let mut ran = 0;
    for caller in callers {
        match caller.await.expect("caller") {
            Once::Ran(outcome) => {
                assert_eq!(outcome, Outcome::Complete(b"ran once".to_vec()));
                ran += 1;
            }
            Once::InProgress { retry_after } => assert!(retry_after <= LEASE, "{retry_after:?}"),
            other => panic!("a concurrent caller got {other:?}"),
        }
    }
    assert_eq!((ran, runs.load(Ordering::SeqCst)), (1, 1), "one call ran the closure");
    let replay = once.run(b"", &key, fp("body"), options, |_| async { unreachable!("replayed") }).await;
    assert_eq!(replay.expect("run"), Once::Replayed(b"ran once".to_vec()));
    let mismatch = once.run(b"", &key, fp("other"), options, |_| async { unreachable!("mismatch") }).await;
    assert_eq!(mismatch.expect("run"), Once::Mismatch);

    let key = setting.key("run-once-release");
    let released = once.run(b"", &key, fp("body"), options, |_| async { Outcome::Release }).await;
    assert_eq!(released.expect("run"), Once::Ran(Outcome::Release));
    assert_eq!(backend.get(b"", &key).await.expect("get"), None, "released");
    let failed = once
        .run(b"", &key, fp("body"), options, |attempt| async move {
            assert_eq!(attempt.attempt, 1, "a release does not count");
            Outcome::Fail(b"declined".to_vec())
        })
        .await;
    assert_eq!(failed.expect("run"), Once::Ran(Outcome::Fail(b"declined".to_vec())));
    let replayed = once.run(b"", &key, fp("body"), options, |_| async { unreachable!("replayed") }).await;
    assert_eq!(replayed.expect("run"), Once::Replayed(b"declined".to_vec()));
    let retry = options.reuse(ReusePolicy::RetryFailed);
    let rerun = once
        .run(b"", &key, fp("body"), retry, |attempt| async move {
            assert_eq!(attempt.attempt, 2, "the failure counted");
            Outcome::Complete(b"accepted".to_vec())
        })
        .await;
    assert_eq!(rerun.expect("run").response(), Some(&b"accepted"[..]));
}
