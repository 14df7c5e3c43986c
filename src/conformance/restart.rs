//! The persistence scenario: what a backend acknowledged is there after a
//! restart.

use super::contract::{acquire, acquire_at, fp};
use super::{Restart, Setting};
use crate::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Checkpoint, State,
};
use std::time::Duration;

/// Every acknowledged call survives a restart ([`Restart`]): a completion
/// and a failure replay; a held key is still in progress under its token,
/// with its checkpoint, and its holder can still complete it; a
/// released and a removed key stay absent, and their next tokens are
/// greater than every token they had. Returns the restarted backend.
///
/// # Panics
/// When the backend answers otherwise after the restart.
pub async fn survives_restart<B: IdempotencyBackend>(backend: B, restart: &mut Restart<B>, setting: &Setting) -> B {
    // A minute of lease: the held key must still be held after the restart.
    let options = ClaimOptions::new().lease(Duration::from_secs(60)).ttl(Duration::from_secs(60));
    let names = ["completed", "failed", "held", "released", "removed"];
    let [completed, failed, held, released, removed] = names.map(|name| setting.key(name));
    let (token, _, _) = acquire(&backend, b"", &completed, options).await;
    backend.complete(&token, b"201 kept").await.expect("complete");
    let (token, _, _) = acquire(&backend, b"", &failed, options).await;
    backend.fail(&token, b"402 kept").await.expect("fail");
    let (holder, _, _) = acquire(&backend, b"", &held, options).await;
    backend.checkpoint(&holder, "charged", b"ch_1").await.expect("checkpoint");
    let (released_token, _, _) = acquire(&backend, b"", &released, options).await;
    backend.release(&released_token).await.expect("release");
    let (removed_token, _, _) = acquire(&backend, b"", &removed, options).await;
    backend.complete(&removed_token, b"gone").await.expect("complete");
    assert!(backend.remove(b"", &removed).await.expect("remove"));

    let backend = restart(backend).await;

    for (key, answer) in [(&completed, &b"201 kept"[..]), (&failed, b"402 kept")] {
        match backend.claim(b"", key, fp("body"), options).await.expect("claim after the restart") {
            BackendClaim::Replay(response) => assert_eq!(response, answer, "kept across the restart"),
            other => panic!("expected the answer kept across the restart, got {other:?}"),
        }
    }
    let record = backend.get(b"", &held).await.expect("get").expect("the held key is still there");
    assert_eq!(
        (record.state, record.token, record.checkpoint),
        (State::Processing, holder.token, Some(Checkpoint::new("charged", b"ch_1".to_vec()))),
        "held across the restart, with its checkpoint"
    );
    assert!(matches!(backend.claim(b"", &held, fp("body"), options).await, Ok(BackendClaim::InProgress { .. })));
    backend.complete(&holder, b"201 after").await.expect("the holder completes after the restart");
    match backend.claim(b"", &held, fp("body"), options).await.expect("claim") {
        BackendClaim::Replay(response) => assert_eq!(response, b"201 after"),
        other => panic!("expected Replay, got {other:?}"),
    }
    for (key, before) in [(&released, released_token.token), (&removed, removed_token.token)] {
        assert_eq!(backend.get(b"", key).await.expect("get"), None, "released or removed: still absent");
        let (token, attempt, recovered, point) = acquire_at(&backend, key, options).await;
        assert_eq!((attempt, recovered, point), (1, false, None), "a fresh start");
        assert!(token.token > before, "token {} after the restart, {before} before", token.token);
        backend.release(&token).await.expect("release");
    }
    backend
}
