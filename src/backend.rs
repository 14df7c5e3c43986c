//! The contract any idempotency backend implements — the embedded [`Store`]
//! now, networked ones later — for the HTTP layer and the tools built on it.
//!
//! It speaks in owned parts ([`BackendClaim`], [`LeaseToken`]) so that a
//! backend need not hand out borrows of its own state, and it knows nothing
//! of HTTP, tower or tokio.

use crate::{Claim, ClaimRequest, Error, Fingerprint, LeaseToken, Store};
use std::time::Duration;

/// The answer of a backend's claim, in owned parts.
#[derive(Debug)]
pub enum BackendClaim {
    /// Run the request, then finish this token.
    Acquired(LeaseToken),
    /// The stored response of the first request.
    Replay(Vec<u8>),
    /// Another request with this key is running.
    InProgress {
        /// Until its lease ends.
        retry_after: Duration,
    },
    /// The key was used for a different request.
    Mismatch,
}

/// What the layer needs of an idempotency store. Calls may block (fsync);
/// the layer makes them on tokio's blocking pool.
pub trait IdempotencyBackend: Send + Sync + 'static {
    /// Claims `(scope, key)`; with `wait`, waits up to that long while the
    /// key is in progress.
    ///
    /// # Errors
    /// The store's error.
    fn claim(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        wait: Option<Duration>,
    ) -> Result<BackendClaim, Error>;

    /// Stores `response` as the replayed answer.
    ///
    /// # Errors
    /// The store's error ([`Error::LeaseLost`] for a stale token).
    fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error>;

    /// Stores `response` as a replayed terminal failure.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`].
    fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error>;

    /// Frees the key so that a retry may run.
    ///
    /// # Errors
    /// As [`IdempotencyBackend::complete`].
    fn release(&self, token: &LeaseToken) -> Result<(), Error>;
}

impl IdempotencyBackend for Store {
    fn claim(
        &self,
        scope: &[u8],
        key: &[u8],
        fingerprint: Fingerprint,
        wait: Option<Duration>,
    ) -> Result<BackendClaim, Error> {
        let request = ClaimRequest::new(key, fingerprint).scope(scope);
        let claim = match wait {
            Some(timeout) => self.claim_wait(&request, timeout)?,
            None => Store::claim(self, &request)?,
        };
        Ok(match claim {
            Claim::Acquired(lease) => BackendClaim::Acquired(lease.into_token()),
            Claim::Replay(record) => BackendClaim::Replay(record.response),
            Claim::InProgress { retry_after, .. } => BackendClaim::InProgress { retry_after },
            Claim::Mismatch => BackendClaim::Mismatch,
        })
    }

    fn complete(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        Store::complete(self, token, response)
    }

    fn fail(&self, token: &LeaseToken, response: &[u8]) -> Result<(), Error> {
        Store::fail(self, token, response)
    }

    fn release(&self, token: &LeaseToken) -> Result<(), Error> {
        Store::release(self, token)
    }
}
