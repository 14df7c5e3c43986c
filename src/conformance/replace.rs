//! The compare-and-set's scenario: [`IdempotencyBackend::replace`].

use super::contract::{acquire, fp, options};
use super::Setting;
use crate::{
    backend::{BackendClaim, IdempotencyBackend},
    Error, State,
};

/// Only a live Completed record whose answer is the one expected has it
/// replaced; everything else about the record stays, and a replay answers
/// the new answer. Of callers racing from one answer, one wins.
///
/// # Panics
/// When the backend answers otherwise.
pub async fn replace<B: IdempotencyBackend>(backend: &B, setting: &Setting) {
    let scope = setting.key("replaced");
    assert!(!backend.replace(&scope, b"absent", b"", b"x").await.expect("replace"), "an absent key");

    let (held, _, _) = acquire(backend, &scope, b"running", options()).await;
    assert!(!backend.replace(&scope, b"running", b"", b"x").await.expect("replace"), "a Processing key");
    backend.fail(&held, b"failed").await.expect("fail");
    assert!(!backend.replace(&scope, b"running", b"failed", b"x").await.expect("replace"), "a Failed key");

    let (token, _, _) = acquire(backend, &scope, b"done", options()).await;
    backend.complete(&token, b"v1").await.expect("complete");
    let before = backend.get(&scope, b"done").await.expect("get").expect("live");
    assert!(!backend.replace(&scope, b"done", b"v0", b"v2").await.expect("replace"), "another answer");
    assert!(backend.replace(&scope, b"done", b"v1", b"v2").await.expect("replace"), "the answer expected");
    assert!(!backend.replace(&scope, b"done", b"v1", b"v3").await.expect("replace"), "a stale answer");
    let after = backend.get(&scope, b"done").await.expect("get").expect("live");
    assert_eq!(after.response, b"v2");
    assert_eq!(
        (after.state, after.token, after.fingerprint, after.attempt, after.created_ms),
        (State::Completed, before.token, before.fingerprint, before.attempt, before.created_ms),
        "all but the answer and the expiry stays"
    );
    assert!(after.deadline_ms >= before.deadline_ms, "it lives its TTL from the replacement: {after:?}");
    assert!(after.deadline_ms >= after.updated_ms + 59_000, "its TTL (60 s) from the replacement: {after:?}");
    match backend.claim(&scope, b"done", fp("body"), options()).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"v2"),
        other => panic!("expected the new answer's replay, got {other:?}"),
    }

    let too_large = vec![0_u8; backend.limits().response_bytes_max + 1];
    assert!(
        matches!(backend.replace(&scope, b"done", b"v2", &too_large).await, Err(Error::ResponseTooLarge { .. })),
        "an answer over the limit"
    );

    let (one, two, three, four) = tokio::join!(
        backend.replace(&scope, b"done", b"v2", b"a"),
        backend.replace(&scope, b"done", b"v2", b"b"),
        backend.replace(&scope, b"done", b"v2", b"c"),
        backend.replace(&scope, b"done", b"v2", b"d"),
    );
    let won = [one, two, three, four].into_iter().map(|replaced| replaced.expect("replace")).collect::<Vec<_>>();
    assert_eq!(won.iter().filter(|won| **won).count(), 1, "one of four racing callers wins: {won:?}");
    let winner = [&b"a"[..], b"b", b"c", b"d"][won.iter().position(|won| *won).expect("a winner")];
    assert_eq!(backend.get(&scope, b"done").await.expect("get").expect("live").response, winner);
}
