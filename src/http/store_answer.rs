//! Keeping what a handler answered: the answer's write, and what happens
//! when the backend refuses it.
//!
//! | the write | what the layer does | the client's answer |
//! |---|---|---|
//! | stored | renewals stop | the handler's answer |
//! | refused for its size ([`Error::ResponseTooLarge`]) | the answer is stored without its body (its status and headers, marked omitted), else its status alone | the handler's answer, whole |
//! | the lease was lost (a takeover, an admin's remove) | nothing more: the key is someone else's | the handler's answer with `Idempotency-Stored: false` |
//! | failed otherwise (I/O, a full disk, the network, a closed store) | tries again at once a few times, then, while the lease is held (renewed meanwhile) and for at most one lease, in the background; if it never succeeds the lease lapses and the next attempt runs with `recovered` | the handler's answer, with `Idempotency-Stored: false` if the quick tries failed |
//!
//! While the write is being retried the key stays in progress: a retry of
//! the request gets 409, never a second run.

use super::shared::Shared;
use crate::backend::finish;
use crate::backend::keeper::Kept;
use crate::backend::IdempotencyBackend;
use crate::lease::retry::worth_retrying;
use crate::store::Outcome;
use crate::{Error, LeaseToken};
use std::sync::Arc;

/// What became of an answer.
#[derive(Debug)]
pub(super) enum Answer {
    /// Stored: a retry replays it.
    Stored,
    /// Refused for its size; the lease is still kept, for a smaller
    /// form of the answer.
    TooLarge(Kept),
    /// Not stored (yet): a background write may still store it while the
    /// lease is held.
    NotStored,
}

/// Stores `encoded` under `token` as the key's completion (see the module
/// docs; the tries are [`finish`]'s, which [`RunOnce`] makes too).
///
/// [`RunOnce`]: crate::backend::RunOnce
pub(super) async fn keep_answer<K: IdempotencyBackend>(
    shared: &Shared<K>,
    kept: Kept,
    token: &LeaseToken,
    encoded: Vec<u8>,
) -> Answer {
    let outcome = Outcome::Complete(encoded);
    match finish::quickly(&*shared.backend, token, &outcome, &kept).await {
        Ok(()) => return Answer::Stored,
        Err(Error::ResponseTooLarge { .. }) => return Answer::TooLarge(kept),
        Err(error) if !worth_retrying(&error) => {
            tracing::error!(%error, "the handler's answer could not be kept; a retry will not replay it");
            return Answer::NotStored;
        }
        Err(_) => {}
    }
    let (backend, token, lease) = (Arc::clone(&shared.backend), token.clone(), shared.config.lease);
    // On the keeper's runtime: the service's runtime may be shutting down
    // once the answer is out.
    let _runs_on = shared.keeper.spawn(async move { finish::later(&*backend, kept, &token, &outcome, lease).await });
    tracing::error!("the handler's answer is not stored yet; trying again while its lease is held");
    Answer::NotStored
}

/// Frees the key; a lost lease means the key moved on already.
pub(super) async fn release<K: IdempotencyBackend>(backend: &K, token: &LeaseToken) {
    match backend.release(token).await {
        Ok(()) | Err(Error::LeaseLost { .. }) => {}
        Err(error) => tracing::warn!(%error, "releasing a key failed; it stays in progress until its lease ends"),
    }
}
