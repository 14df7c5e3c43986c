//! The lease: the only way to finish a claim, and the plain token it can
//! be turned into.

use crate::engine::{Engine, TokenRef};
use crate::error::Result;
use crate::stats::bump;
use crate::transition::{Finish, Held};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The right to execute a claimed request, fenced by a token.
///
/// Finish it with [`complete`](Lease::complete), [`fail`](Lease::fail) or
/// [`release`](Lease::release). A lease dropped unfinished leaves the record
/// Processing until the lease ends — refusing retries is safer than running
/// the side effect twice — and is counted in
/// [`Stats::abandoned_leases`](crate::Stats::abandoned_leases).
///
/// # Examples
///
/// ```
/// use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), Config::new())?;
/// let request = ClaimRequest::new("job-1", Fingerprint::of(b"resize image 7"));
/// if let Claim::Acquired(lease) = store.claim(&request)? {
///     // Hand the work to a background job: 202 Accepted now, result later.
///     let token = lease.into_token();
///     store.complete(&token, b"done")?;
/// }
/// # Ok(()) }
/// ```
pub struct Lease {
    engine: Arc<Engine>,
    hash: u128,
    scope: Vec<u8>,
    key: Vec<u8>,
    token: u64,
    held: Held,
    deadline_ms: u64,
    finished: bool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Lease")
            .field("scope", &String::from_utf8_lossy(&self.scope))
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("token", &self.token)
            .field("attempt", &self.held.attempt)
            .field("recovered", &self.held.recovered)
            .field("deadline_ms", &self.deadline_ms)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// The lease on the key of hash `hash` that a claim acquired.
    pub(crate) fn new(
        engine: Arc<Engine>,
        hash: u128,
        scope: &[u8],
        key: &[u8],
        token: u64,
        held: Held,
        deadline_ms: u64,
    ) -> Self {
        Lease { engine, hash, scope: scope.to_vec(), key: key.to_vec(), token, held, deadline_ms, finished: false }
    }

    /// The fencing token: every transition checks it.
    #[must_use]
    pub fn token(&self) -> u64 {
        self.token
    }

    /// 1 for the first holder, one more for each takeover.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.held.attempt
    }

    /// Whether this lease took over from a holder whose lease expired. The
    /// old holder may have half-run: check the domain state before
    /// executing again.
    #[must_use]
    pub fn recovered(&self) -> bool {
        self.held.recovered
    }

    /// When the lease ends (ms since the epoch, on the store's clock).
    #[must_use]
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// The scope of the claimed key.
    #[must_use]
    pub fn scope(&self) -> &[u8] {
        &self.scope
    }

    /// The claimed key.
    #[must_use]
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Stores `response` as the replayed answer (Completed).
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease expired and
    /// the key was reclaimed (or was released or removed);
    /// [`Error::ResponseTooLarge`](crate::Error::ResponseTooLarge); I/O
    /// errors. The lease is spent either way; after an I/O error the record
    /// stays Processing until the lease ends and the lease counts as abandoned.
    pub fn complete(mut self, response: &[u8]) -> Result<()> {
        let outcome = self
            .engine
            .finish(self.hash, &self.token_ref(), Finish::Complete(response))
            .and_then(|lsn| self.engine.wait_durable(self.hash, lsn));
        self.settle(&outcome);
        outcome
    }

    /// Stores `response` as a terminal failure that is replayed (Failed),
    /// e.g. "card declined".
    ///
    /// # Errors
    /// As [`complete`](Lease::complete).
    pub fn fail(mut self, response: &[u8]) -> Result<()> {
        let outcome = self
            .engine
            .finish(self.hash, &self.token_ref(), Finish::Fail(response))
            .and_then(|lsn| self.engine.wait_durable(self.hash, lsn));
        self.settle(&outcome);
        outcome
    }

    /// Makes the key absent again: nothing happened, a corrected retry may run.
    ///
    /// # Errors
    /// As [`complete`](Lease::complete).
    pub fn release(mut self) -> Result<()> {
        let outcome = self
            .engine
            .finish(self.hash, &self.token_ref(), Finish::Release)
            .and_then(|lsn| self.engine.wait_durable(self.hash, lsn));
        self.settle(&outcome);
        outcome
    }

    /// Extends the lease so it ends at least `extend` from now (it never
    /// shortens it).
    ///
    /// # Errors
    /// As [`complete`](Lease::complete), and
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a zero
    /// or too long `extend`.
    pub fn renew(&mut self, extend: Duration) -> Result<()> {
        let outcome = self.engine.renew(self.hash, &self.token_ref(), extend).and_then(|(deadline_ms, lsn)| {
            self.engine.wait_durable(self.hash, lsn)?;
            Ok(deadline_ms)
        });
        self.renewed(outcome)
    }

    /// After a renewal: the new lease end, or the lease is spent if lost.
    fn renewed(&mut self, outcome: Result<u64>) -> Result<()> {
        match outcome {
            Ok(deadline_ms) => {
                self.deadline_ms = deadline_ms;
                Ok(())
            }
            Err(error) => {
                if matches!(error, crate::Error::LeaseLost { .. }) {
                    self.finished = true;
                }
                Err(error)
            }
        }
    }

    /// [`Lease::renew`] as a future.
    ///
    /// # Errors
    /// As [`Lease::renew`].
    #[cfg(feature = "tokio")]
    pub async fn renew_async(&mut self, extend: Duration) -> Result<()> {
        let outcome = match self.engine.renew(self.hash, &self.token_ref(), extend) {
            Ok((deadline_ms, lsn)) => self.engine.wait_durable_async(self.hash, lsn).await.map(|()| deadline_ms),
            Err(error) => Err(error),
        };
        self.renewed(outcome)
    }

    /// Writes the finishing record, then awaits its durability. Once the
    /// record is written the lease is spent, even if the future is dropped
    /// before the fsync ends.
    #[cfg(feature = "tokio")]
    pub(crate) async fn finish_async(mut self, finish: Finish<'_>) -> Result<()> {
        match self.engine.finish(self.hash, &self.token_ref(), finish) {
            Ok(lsn) => {
                self.finished = true;
                self.engine.wait_durable_async(self.hash, lsn).await
            }
            Err(error) => {
                let outcome = Err(error);
                self.settle(&outcome);
                outcome
            }
        }
    }

    /// Turns the lease into a plain token to finish later, from anywhere in
    /// the process, with [`Store::complete`](crate::Store::complete),
    /// [`Store::fail`](crate::Store::fail),
    /// [`Store::release`](crate::Store::release) or
    /// [`Store::renew`](crate::Store::renew). Not counted as abandoned.
    #[must_use]
    pub fn into_token(mut self) -> LeaseToken {
        self.finished = true;
        LeaseToken { scope: std::mem::take(&mut self.scope), key: std::mem::take(&mut self.key), token: self.token }
    }

    fn token_ref(&self) -> TokenRef<'_> {
        TokenRef { scope: &self.scope, key: &self.key, token: self.token, held: Some(self.held) }
    }

    /// After a finishing call: the lease is spent unless the call failed in a
    /// way that can be retried.
    fn settle(&mut self, outcome: &Result<()>) {
        let retryable = matches!(outcome, Err(crate::Error::Io { .. } | crate::Error::ResponseTooLarge { .. }));
        self.finished = !retryable;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.finished {
            bump(&self.engine.shard_of_hash(self.hash).counters.abandoned_leases);
        }
    }
}

/// A lease held elsewhere: enough to finish it from any thread or after
/// handing the work to a background job. See [`Lease::into_token`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    /// The scope of the claimed key.
    pub scope: Vec<u8>,
    /// The claimed key.
    pub key: Vec<u8>,
    /// The fencing token of the claim.
    pub token: u64,
}
