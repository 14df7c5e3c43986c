//! The write that ends a run — its completion, its failure or its release —
//! and what happens when the backend refuses it for a moment (one failed
//! I/O, a full disk, the network, a failover): [`RunOnce`] and the HTTP
//! layer both hold a key whose handler ran, and a write given up at the
//! first failure lets the lease lapse, so that the next attempt would run
//! the side effect again.
//!
//! - **Quick tries** ([`quickly`]): the write is tried again at once a
//!   few times (after 10, 40 and 150 ms) while the lease is held, before
//!   the caller gets its answer.
//! - **Later** ([`later`]): an answer (a completion or a failure) that the
//!   quick tries did not store is tried again in the background while the
//!   lease is held (renewed meanwhile), for at most one lease. The key
//!   stays in progress meanwhile: a retry is told to wait, never run. If
//!   the write never succeeds the lease lapses and the next attempt runs
//!   with `recovered`, as after a crash.
//!
//! A write refused for what it is (a lost lease, an answer too large, a
//! read-only store) is not tried again: see [`worth_retrying`].
//!
//! [`RunOnce`]: super::RunOnce

use crate::backend::keeper::Kept;
use crate::backend::IdempotencyBackend;
use crate::events::event;
use crate::store::Outcome;
use crate::{Error, LeaseToken};
use std::time::{Duration, Instant};

/// Pauses before the quick tries made while the caller waits for its
/// answer.
const QUICK_RETRIES: [Duration; 3] = [Duration::from_millis(10), Duration::from_millis(40), Duration::from_millis(150)];

/// The first and the longest pause between background tries.
const LATER_FIRST: Duration = Duration::from_millis(100);
const LATER_MAX: Duration = Duration::from_secs(2);

/// Writes `outcome` under `token` once.
async fn write<B: IdempotencyBackend>(backend: &B, token: &LeaseToken, outcome: &Outcome) -> Result<(), Error> {
    match outcome {
        Outcome::Complete(response) => backend.complete(token, response).await,
        Outcome::Fail(response) => backend.fail(token, response).await,
        Outcome::Release => backend.release(token).await,
    }
}

/// Writes `outcome` under `token`, tried again after each of
/// [`QUICK_RETRIES`] while `kept` is held and the error is
/// [worth retrying](worth_retrying); the last error otherwise.
pub(crate) async fn quickly<B: IdempotencyBackend>(
    backend: &B,
    token: &LeaseToken,
    outcome: &Outcome,
    kept: &Kept,
) -> Result<(), Error> {
    let mut pauses = QUICK_RETRIES.iter();
    loop {
        let error = match write(backend, token, outcome).await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        match pauses.next() {
            Some(pause) if kept.held() && worth_retrying(&error) => {
                event!(warn, %error, "the write that ends a run failed; trying again");
                Box::pin(tokio::time::sleep(*pause)).await;
            }
            _ => return Err(error),
        }
    }
}

/// Tries `outcome`'s write again while the lease is held, for at most
/// `lease`; dropping `kept` at the end stops the renewals, so that a lease
/// whose answer never got stored lapses and the next attempt runs
/// recovered.
pub(crate) async fn later<B: IdempotencyBackend>(
    backend: &B,
    kept: Kept,
    token: &LeaseToken,
    outcome: &Outcome,
    lease: Duration,
) {
    let give_up = Instant::now() + lease;
    let mut pause = LATER_FIRST;
    while kept.held() && Instant::now() < give_up {
        tokio::time::sleep(pause).await;
        match write(backend, token, outcome).await {
            Ok(()) => {
                event!(info, "the run's answer is stored after all; retries replay it");
                return;
            }
            Err(error) if !worth_retrying(&error) => {
                event!(error, %error, "the run's answer could not be kept; a retry will not replay it");
                return;
            }
            Err(_) => pause = (pause * 2).min(LATER_MAX),
        }
    }
    event!(error, "the run's answer was never stored; once its lease ends the next attempt runs recovered");
}

/// Whether a failed write may succeed when tried again: not when the lease
/// is gone or the answer itself is refused.
pub(crate) fn worth_retrying(error: &Error) -> bool {
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
