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
use crate::backend::keeper::Kept;
use crate::backend::IdempotencyBackend;
use crate::{Error, LeaseToken};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Pauses before the quick tries made while the client waits for its
/// answer: a write that fails for a moment (one failed I/O) is stored
/// before the answer goes out.
const QUICK_RETRIES: [Duration; 3] = [Duration::from_millis(10), Duration::from_millis(40), Duration::from_millis(150)];

/// The first and the longest pause between background tries.
const LATER_FIRST: Duration = Duration::from_millis(100);
const LATER_MAX: Duration = Duration::from_secs(2);

/// Stores `encoded` under `token` as the key's completion (see the module
/// docs).
pub(super) async fn keep_answer<K: IdempotencyBackend>(
    shared: &Shared<K>,
    kept: Kept,
    token: &LeaseToken,
    encoded: Vec<u8>,
) -> Answer {
    let mut pauses = QUICK_RETRIES.iter();
    loop {
        match shared.backend.complete(token, &encoded).await {
            Ok(()) => return Answer::Stored,
            Err(Error::ResponseTooLarge { .. }) => return Answer::TooLarge(kept),
            Err(error) if !worth_retrying(&error) => {
                tracing::error!(%error, "the handler's answer could not be kept; a retry will not replay it");
                return Answer::NotStored;
            }
            Err(error) => match pauses.next() {
                Some(pause) if kept.held() => {
                    tracing::warn!(%error, "storing the handler's answer failed; trying again");
                    Box::pin(tokio::time::sleep(*pause)).await;
                }
                _ => break,
            },
        }
    }
    let (backend, token, lease) = (Arc::clone(&shared.backend), token.clone(), shared.config.lease);
    // On the keeper's runtime: the service's runtime may be shutting down
    // once the answer is out.
    let _runs_on = shared.keeper.spawn(async move { write_later(&*backend, kept, &token, &encoded, lease).await });
    tracing::error!("the handler's answer is not stored yet; trying again while its lease is held");
    Answer::NotStored
}

/// Tries the write again while the lease is held, for at most one lease;
/// dropping `kept` at the end stops the renewals, so that a lease whose
/// answer never got stored lapses and the next attempt runs recovered.
async fn write_later<K: IdempotencyBackend>(
    backend: &K,
    kept: Kept,
    token: &LeaseToken,
    encoded: &[u8],
    lease: Duration,
) {
    let give_up = Instant::now() + lease;
    let mut pause = LATER_FIRST;
    while kept.held() && Instant::now() < give_up {
        tokio::time::sleep(pause).await;
        match backend.complete(token, encoded).await {
            Ok(()) => {
                tracing::info!("the handler's answer is stored after all; retries replay it");
                return;
            }
            Err(error) if !worth_retrying(&error) => {
                tracing::error!(%error, "the handler's answer could not be kept; a retry will not replay it");
                return;
            }
            Err(_) => pause = (pause * 2).min(LATER_MAX),
        }
    }
    tracing::error!("the handler's answer was never stored; once its lease ends the next attempt runs recovered");
}

/// Whether a failed write may succeed when tried again: not when the lease
/// is gone or the answer itself is refused.
fn worth_retrying(error: &Error) -> bool {
    !matches!(
        error,
        Error::LeaseLost { .. }
            | Error::ResponseTooLarge { .. }
            | Error::KeyEmpty
            | Error::KeyTooLong { .. }
            | Error::ScopeTooLong { .. }
            | Error::ReadOnly { .. }
    )
}

/// Frees the key; a lost lease means the key moved on already.
pub(super) async fn release<K: IdempotencyBackend>(backend: &K, token: &LeaseToken) {
    match backend.release(token).await {
        Ok(()) | Err(Error::LeaseLost { .. }) => {}
        Err(error) => tracing::warn!(%error, "releasing a key failed; it stays in progress until its lease ends"),
    }
}
