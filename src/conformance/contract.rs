//! The claim contract's scenarios: the state table, fencing, TTLs,
//! scopes, waits, concurrent duplicates, limits, renewals, late finishes,
//! exact lease ends and expiries, and quotas.

use super::{QuotaScope, Setting};
use crate::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, Error, Fingerprint, LeaseToken, State,
};
use std::time::{Duration, Instant};

/// The lease of most scenarios: short, so that a takeover comes soon.
pub(super) const LEASE: Duration = Duration::from_millis(400);
/// The TTL of the expiry scenarios.
const TTL: Duration = Duration::from_millis(600);

/// The claim options of most scenarios.
pub(super) fn options() -> ClaimOptions {
    ClaimOptions::new().lease(LEASE).ttl(Duration::from_secs(60))
}

/// The fingerprint of a request with body `text`.
pub(super) fn fp(text: &str) -> Fingerprint {
    Fingerprint::of(text.as_bytes())
}

/// Claims `(scope, key)`, which must be acquired: the token, attempt and
/// whether it recovered.
pub(super) async fn acquire<B: IdempotencyBackend>(
    backend: &B,
    scope: &[u8],
    key: &[u8],
    options: ClaimOptions,
) -> (LeaseToken, u32, bool) {
    let (token, attempt, recovered, _) = acquire_in(backend, scope, key, options).await;
    (token, attempt, recovered)
}

/// [`acquire`] in the empty scope, with the checkpoint handed over.
pub(super) async fn acquire_at<B: IdempotencyBackend>(
    backend: &B,
    key: &[u8],
    options: ClaimOptions,
) -> (LeaseToken, u32, bool, Option<Checkpoint>) {
    acquire_in(backend, b"", key, options).await
}

async fn acquire_in<B: IdempotencyBackend>(
    backend: &B,
    scope: &[u8],
    key: &[u8],
    options: ClaimOptions,
) -> (LeaseToken, u32, bool, Option<Checkpoint>) {
    match backend.claim(scope, key, fp("body"), options).await.expect("claim") {
        BackendClaim::Acquired { token, attempt, recovered, checkpoint } => (token, attempt, recovered, checkpoint),
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Claims `key` in the empty scope, which must replay `expected`.
async fn replays<B: IdempotencyBackend>(backend: &B, key: &[u8], options: ClaimOptions, expected: &[u8], why: &str) {
    match backend.claim(b"", key, fp("body"), options).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, expected, "{why}"),
        other => panic!("expected Replay ({why}), got {other:?}"),
    }
}

/// Every row of the contract's table: acquired, in progress, mismatch
/// (in progress and finished), replay of a completion and of a failure,
/// released back to absent with a greater token, and a finished lease that
/// cannot finish twice.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn state_table<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("table");
    let (token, attempt, recovered) = acquire(backend, b"", &key, options()).await;
    assert_eq!((attempt, recovered), (1, false));
    match backend.claim(b"", &key, fp("body"), options()).await.expect("claim") {
        BackendClaim::InProgress { retry_after } => assert!(retry_after <= LEASE, "{retry_after:?}"),
        other => panic!("expected InProgress, got {other:?}"),
    }
    assert!(matches!(backend.claim(b"", &key, fp("other"), options()).await, Ok(BackendClaim::Mismatch)));
    backend.complete(&token, b"201 charged").await.expect("complete");
    replays(backend, &key, options(), b"201 charged", "completed").await;
    assert!(matches!(backend.claim(b"", &key, fp("other"), options()).await, Ok(BackendClaim::Mismatch)));
    assert!(matches!(backend.complete(&token, b"again").await, Err(Error::LeaseLost { .. })), "finished once");

    let failed = setting.key("failed");
    let (token, _, _) = acquire(backend, b"", &failed, options()).await;
    backend.fail(&token, b"402 declined").await.expect("fail");
    replays(backend, &failed, options(), b"402 declined", "the failure replayed").await;

    let released = setting.key("released");
    let (first, _, _) = acquire(backend, b"", &released, options()).await;
    backend.release(&first).await.expect("release");
    let (second, attempt, recovered) = acquire(backend, b"", &released, options()).await;
    assert_eq!((attempt, recovered), (1, false), "released: absent again");
    assert!(second.token > first.token, "tokens of a key only grow: {} then {}", first.token, second.token);
}

/// A holder whose lease ended is taken over (attempt 2, recovered, a
/// greater token); the stale token can no longer complete, renew or
/// release, and the record names the new holder.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn fencing<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("fencing");
    let (stale, _, _) = acquire(backend, b"", &key, options()).await;
    setting.pass(LEASE + Duration::from_millis(150)).await;
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

/// A completed record replays until its TTL, then reads absent, and the
/// next claim starts afresh with a greater token.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn ttl<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("ttl");
    let short = ClaimOptions::new().lease(LEASE).ttl(TTL);
    let (first, _, _) = acquire(backend, b"", &key, short).await;
    backend.complete(&first, b"done").await.expect("complete");
    assert!(matches!(backend.claim(b"", &key, fp("body"), short).await, Ok(BackendClaim::Replay(_))));
    setting.pass(TTL + Duration::from_millis(300)).await;
    assert_eq!(backend.get(b"", &key).await.expect("get"), None, "expired");
    let (second, attempt, recovered) = acquire(backend, b"", &key, short).await;
    assert_eq!((attempt, recovered), (1, false), "expired: a fresh start");
    assert!(second.token > first.token, "no token repeats after expiry");
}

/// One key in two scopes is two records, each with its own answer; a
/// third scope has none.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn scopes<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("scoped");
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

/// A claim that waits ([`ClaimOptions::wait`]) while the key is held gets
/// the holder's answer as soon as it finishes — woken by the finish, not by
/// a poll — and one whose wait runs out gets `InProgress` after waiting
/// its time. The waits are real whatever the backend's clock.
///
/// # Panics
/// When the backend answers otherwise, or the waiter woke late.
pub async fn claim_wait<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let key = setting.key("wait");
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

    let held = setting.key("wait-held");
    let (_token, _, _) = acquire(backend, b"", &held, long).await;
    let started = Instant::now();
    let answer = backend.claim(b"", &held, fp("body"), long.wait(Some(Duration::from_millis(200)))).await;
    assert!(matches!(answer, Ok(BackendClaim::InProgress { .. })), "{answer:?}");
    assert!(started.elapsed() >= Duration::from_millis(190), "waited its time: {:?}", started.elapsed());
}

/// Of 32 concurrent claims of one key, exactly one acquires; the others
/// find it in progress.
///
/// # Panics
/// When more or fewer than one acquire, or a claim fails.
pub async fn duplicates<B: IdempotencyBackend + Clone>(backend: &B, setting: &Setting) {
    let key = setting.key("duplicates");
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

/// Input past the backend's [`limits`](IdempotencyBackend::limits) is a
/// typed error that changes nothing: a key too long, an empty key, a
/// response too large (the lease still holds after it), a zero lease.
///
/// # Panics
/// When the backend accepts such input or answers another error.
pub async fn limits<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let too_long = vec![b'k'; backend.limits().key_bytes_max + 1];
    assert!(matches!(backend.claim(b"", &too_long, fp("body"), options()).await, Err(Error::KeyTooLong { .. })));
    assert!(matches!(backend.claim(b"", b"", fp("body"), options()).await, Err(Error::KeyEmpty)));
    let key = setting.key("limits");
    let (token, _, _) = acquire(backend, b"", &key, options()).await;
    let large = vec![0; backend.limits().response_bytes_max + 1];
    assert!(matches!(backend.complete(&token, &large).await, Err(Error::ResponseTooLarge { .. })));
    backend.complete(&token, b"small").await.expect("the lease still holds after a refused response");
    let zero = ClaimOptions::new().lease(Duration::ZERO);
    assert!(matches!(
        backend.claim(b"", &setting.key("zero"), fp("body"), zero).await,
        Err(Error::InvalidDuration { .. })
    ));
}

/// `get` shows a held record; a renewal keeps the key past its first
/// lease, and the backend's `now_ms` falls between the record's times and
/// its new lease end; `remove` takes it away under its holder (who then gets
/// `LeaseLost`) and says whether anything was removed; the next claim
/// starts afresh with a greater token.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn renew_get_remove<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let key = setting.key("renew");
    assert_eq!(backend.get(b"", &key).await.expect("get"), None);
    let (token, _, _) = acquire(backend, b"", &key, options()).await;
    let record = backend.get(b"", &key).await.expect("get").expect("present");
    assert_eq!((record.state, record.token, record.attempt), (State::Processing, token.token, 1));
    assert!(record.response.is_empty());
    backend.renew(&token, Duration::from_secs(5)).await.expect("renew");
    // The backend's now is on the clock of its records' times.
    let renewed = backend.get(b"", &key).await.expect("get").expect("present");
    let now = backend.now_ms().await.expect("now_ms");
    assert!(renewed.created_ms <= now && renewed.updated_ms <= now, "{renewed:?} written by {now}");
    let left = renewed.deadline_ms.checked_sub(now).expect("the renewed lease runs");
    assert!(left > 0 && left <= 5_001, "{left} ms of a 5 s lease left at {now}");
    setting.pass(LEASE + Duration::from_millis(150)).await;
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

/// A holder whose lease ended but whom nobody took over may still finish
/// (until lease end + TTL): its completion is stored and replayed, and so
/// is a late failure.
///
/// # Panics
/// When the backend refuses the late finish or answers otherwise.
pub async fn late_finish<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let (completed, failed) = (setting.key("completed"), setting.key("failed"));
    let (late_completion, _, _) = acquire(backend, b"", &completed, options()).await;
    let (late_failure, _, _) = acquire(backend, b"", &failed, options()).await;
    setting.pass(LEASE + Duration::from_millis(150)).await;
    let record = backend.get(b"", &completed).await.expect("get").expect("an ended lease is still present");
    assert_eq!((record.state, record.token), (State::Processing, late_completion.token));
    backend.complete(&late_completion, b"201 late").await.expect("a late holder not taken over completes");
    backend.fail(&late_failure, b"402 late").await.expect("a late holder not taken over fails");
    replays(backend, &completed, options(), b"201 late", "the late completion").await;
    replays(backend, &failed, options(), b"402 late", "the late failure").await;
}

/// Lease ends and expiries to the millisecond, on a clock the scenario
/// moves: a lease runs until its end (`retry_after` counts down to 1 ms)
/// and is taken over at it; a renewal moves the end; a completed record
/// replays until its expiry and is absent at it; an abandoned Processing
/// record lives until lease end + TTL.
///
/// # Panics
/// When the backend answers otherwise, or `setting` has no movable clock.
pub async fn lease_boundaries<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    assert!(setting.clock().is_some(), "lease_boundaries needs a movable clock");
    let ms = Duration::from_millis;
    let exact = ClaimOptions::new().lease(ms(1000)).ttl(ms(2000));

    let lease = setting.key("lease");
    let (first, _, _) = acquire(backend, b"", &lease, exact).await;
    setting.pass(ms(500)).await;
    backend.renew(&first, ms(1000)).await.expect("renew");
    setting.pass(ms(999)).await;
    match backend.claim(b"", &lease, fp("body"), exact).await.expect("claim") {
        BackendClaim::InProgress { retry_after } => assert_eq!(retry_after, ms(1), "renewed to 1.5 s, at 1.499 s"),
        other => panic!("expected InProgress 1 ms before the renewed lease end, got {other:?}"),
    }
    setting.pass(ms(1)).await;
    let (second, attempt, recovered) = acquire(backend, b"", &lease, exact).await;
    assert_eq!((attempt, recovered), (2, true), "taken over at the lease end");
    backend.complete(&second, b"done").await.expect("complete");
    setting.pass(ms(1999)).await;
    replays(backend, &lease, exact, b"done", "1 ms before its expiry").await;
    setting.pass(ms(1)).await;
    assert_eq!(backend.get(b"", &lease).await.expect("get"), None, "absent at its expiry");

    let abandoned = setting.key("abandoned");
    let (held, _, _) = acquire(backend, b"", &abandoned, exact).await;
    setting.pass(ms(2999)).await;
    let record = backend.get(b"", &abandoned).await.expect("get").expect("present until lease end + TTL");
    assert_eq!((record.state, record.token), (State::Processing, held.token));
    setting.pass(ms(1)).await;
    assert_eq!(backend.get(b"", &abandoned).await.expect("get"), None, "abandoned: absent at lease end + TTL");
    let (fresh, attempt, recovered) = acquire(backend, b"", &abandoned, exact).await;
    assert_eq!((attempt, recovered), (1, false), "an expired lease is a fresh start");
    assert!(fresh.token > held.token);
    backend.release(&fresh).await.expect("release");
}

/// A scope at its record quota refuses a new key with
/// [`Error::QuotaExceeded`] (with the quota's `retry_after`), and nothing
/// else: a retry of a kept key replays, another scope is not limited by
/// it, and a removed key frees its place. Leaves the scope empty.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn quota_refusals<B: IdempotencyBackend>(backend: &B, setting: &Setting, quota: &QuotaScope) {
    let scope = quota.scope();
    let keys: Vec<Vec<u8>> = (0..=quota.records()).map(|index| setting.key(&format!("quota-{index}"))).collect();
    let (last, kept) = keys.split_last().expect("at least one key");
    for (index, key) in kept.iter().enumerate() {
        let (token, _, _) = acquire(backend, scope, key, options()).await;
        backend.complete(&token, format!("answer {index}").as_bytes()).await.expect("complete");
    }
    let refused = backend.claim(scope, last, fp("body"), options()).await;
    assert!(
        matches!(refused, Err(Error::QuotaExceeded { max, used, retry_after, .. })
            if max == quota.records() && used == quota.records() && retry_after == quota.retry_after()),
        "a new key in a full scope: {refused:?}"
    );
    match backend.claim(scope, &kept[0], fp("body"), options()).await.expect("a kept key in a full scope") {
        BackendClaim::Replay(response) => assert_eq!(response, b"answer 0"),
        other => panic!("expected the kept answer replayed, got {other:?}"),
    }
    let other_scope = [scope, b"-other"].concat();
    let (other, _, _) = acquire(backend, &other_scope, last, options()).await;
    backend.release(&other).await.expect("release");
    assert!(backend.remove(scope, &kept[0]).await.expect("remove"), "the kept key was there");
    let (freed, _, _) = acquire(backend, scope, last, options()).await;
    backend.release(&freed).await.expect("release");
    for key in &kept[1..] {
        assert!(backend.remove(scope, key).await.expect("remove"), "the kept key was there");
    }
}
