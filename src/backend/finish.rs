//! The write that ends a run — its completion, its failure or its release —
//! and what happens when the backend refuses it for a moment (one failed
//! I/O, a full disk, the network, a failover): [`RunOnce`] and the HTTP
//! layer both hold a key whose handler ran, and a write given up at the
//! first failure lets the lease lapse, so that the next attempt would run
//! the side effect again.
//!
//! The pauses and which errors are tried again are
//! [`retry`](crate::lease::retry)'s, which [`Store::run_once`] follows too.
//!
//! [`Store::run_once`]: crate::Store::run_once
//! [`RunOnce`]: super::RunOnce

use crate::backend::keeper::Kept;
use crate::backend::IdempotencyBackend;
use crate::events::event;
use crate::lease::retry::{worth_retrying, LATER_FIRST, LATER_MAX, QUICK};
use crate::store::Outcome;
use crate::{Error, LeaseToken};
use std::time::{Duration, Instant};

/// Writes `outcome` under `token` once.
async fn write<B: IdempotencyBackend>(backend: &B, token: &LeaseToken, outcome: &Outcome) -> Result<(), Error> {
    match outcome {
        Outcome::Complete(response) => backend.complete(token, response).await,
        Outcome::Fail(response) => backend.fail(token, response).await,
        Outcome::Release => backend.release(token).await,
    }
}

/// Writes `outcome` under `token`, tried again after each of the
/// [`QUICK`] pauses while `kept` is held and the error is
/// [worth retrying](worth_retrying); the last error otherwise.
pub(crate) async fn quickly<B: IdempotencyBackend>(
    backend: &B,
    token: &LeaseToken,
    outcome: &Outcome,
    kept: &Kept,
) -> Result<(), Error> {
    let mut pauses = QUICK.iter();
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
