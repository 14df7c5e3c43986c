//! The lease: the only way to finish a claim, and the plain token it can
//! be turned into; how the write that finishes it is tried again
//! ([`retry`]).

pub(crate) mod retry;

use crate::checkpoint::Checkpoint;
use crate::engine::telemetry::bump;
use crate::engine::transition::{Finish, Held};
use crate::engine::{Engine, TokenRef};
use crate::error::{Error, Result};
use crate::events::event;
use crate::keyspace::Keyspace;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The right to execute a claimed request, fenced by a token.
///
/// Finish it with [`complete`](Lease::complete), [`fail`](Lease::fail) or
/// [`release`](Lease::release); one refused before anything was written
/// hands the lease back ([`FinishError`]). A lease dropped unfinished leaves
/// the record Processing until the lease ends — refusing retries is safer
/// than running the side effect twice — and is counted in
/// [`Stats::abandoned_leases`](crate::stats::Stats::abandoned_leases); a claim
/// then takes it over (`recovered`), and if none does, the record expires
/// at lease end + its TTL
/// ([`Stats::abandoned_expired`](crate::stats::Stats::abandoned_expired)).
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
#[must_use = "dropping a lease unfinished leaves its key in progress until the lease ends; complete, fail or release it"]
pub struct Lease {
    engine: Arc<Engine>,
    hash: u128,
    keyspace: Keyspace,
    scope: Vec<u8>,
    key: Vec<u8>,
    token: u64,
    held: Held,
    deadline_ms: u64,
    finished: bool,
    /// The last checkpoint: the one a takeover found, then each this
    /// holder stored.
    last_checkpoint: Option<Checkpoint>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Lease")
            .field("keyspace", &self.keyspace)
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
        (keyspace, scope, key): (Keyspace, &[u8], &[u8]),
        token: u64,
        held: Held,
        deadline_ms: u64,
        last_checkpoint: Option<Checkpoint>,
    ) -> Self {
        Lease {
            engine,
            hash,
            keyspace,
            scope: scope.to_vec(),
            key: key.to_vec(),
            token,
            held,
            deadline_ms,
            finished: false,
            last_checkpoint,
        }
    }

    /// The last checkpoint of this key: after a takeover
    /// ([`recovered`](Lease::recovered)), the last one an earlier holder
    /// stored, so that this attempt resumes after that step instead of
    /// running it again; then each this lease stores. `None` if no holder
    /// stored one.
    #[must_use]
    pub fn last_checkpoint(&self) -> Option<&Checkpoint> {
        self.last_checkpoint.as_ref()
    }

    /// Stores a checkpoint — the step just finished and what the steps
    /// after it need — durably (under [`crate::Durability::Sync`] it is on
    /// disk when this returns) in the key's Processing record, fenced by
    /// this lease's token. A holder that takes the key over after this
    /// lease ends sees it in [`Lease::last_checkpoint`]. The lease end stays
    /// where it is (see [`renew`](Lease::renew)). The point vanishes with
    /// the Processing record: completing, failing, releasing or removing
    /// the key drops it.
    ///
    /// # Errors
    /// [`Error::InvalidCheckpoint`] for an empty step or one over
    /// [`crate::checkpoint::STEP_BYTES_MAX`] bytes; [`Error::CheckpointTooLarge`] past
    /// [`crate::Config::response_bytes_max`]; [`Error::LeaseLost`] if
    /// another holder took the key over (the point is not stored); the
    /// store's errors. Only `LeaseLost` ends the lease.
    pub fn checkpoint(&mut self, step: &str, payload: &[u8]) -> Result<()> {
        let outcome = self
            .engine
            .checkpoint(self.hash, &self.token_ref(), step, payload)
            .and_then(|lsn| self.engine.wait_durable(self.hash, lsn));
        self.checkpointed(outcome, step, payload)
    }

    /// Keeps the point just stored, or marks the lease lost.
    fn checkpointed(&mut self, outcome: Result<()>, step: &str, payload: &[u8]) -> Result<()> {
        if let Err(error) = outcome {
            self.finished |= matches!(error, Error::LeaseLost { .. });
            return Err(error);
        }
        self.last_checkpoint = Some(Checkpoint::new(step, payload));
        Ok(())
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

    /// When the lease ends, in wall-clock ms since the epoch as of the claim
    /// or the last renewal. The store counts the lease in elapsed time, so a
    /// later jump of the wall clock moves this estimate, not the lease.
    #[must_use]
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// The keyspace of the claimed key: [`Keyspace::Caller`] for every
    /// claim but idemkv's own.
    #[must_use]
    pub fn keyspace(&self) -> Keyspace {
        self.keyspace
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
    /// A call refused before anything was written — a response over
    /// [`Config::response_bytes_max`](crate::Config::response_bytes_max), an
    /// I/O error while writing, a closed store — hands the lease back in
    /// [`FinishError::lease`], so the caller can still
    /// [`fail`](Lease::fail) or [`release`](Lease::release) it. With `?` the
    /// error converts into [`Error`] (the lease, if handed back, is then
    /// dropped and counts as abandoned).
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Error, Fingerprint, State, Store};
    /// # fn main() -> Result<(), idemkv::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new().response_bytes_max(16))?;
    /// let request = ClaimRequest::new("report-1", Fingerprint::of(b"GET /report"));
    /// let Claim::Acquired(lease) = store.claim(&request)? else { unreachable!() };
    /// let refused = lease.complete(&[b'x'; 100]).unwrap_err();
    /// assert!(matches!(refused.error, Error::ResponseTooLarge { .. }));
    /// // The lease came back: keep a short failure instead.
    /// refused.lease.expect("handed back").fail(b"507 too large")?;
    /// let Claim::Replay(record) = store.claim(&request)? else { unreachable!() };
    /// assert_eq!((record.state, record.response.as_slice()), (State::Failed, &b"507 too large"[..]));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease expired and
    /// the key was reclaimed (or was released or removed);
    /// [`Error::ResponseTooLarge`](crate::Error::ResponseTooLarge); I/O
    /// errors. After an error of the fsync (the record was written, its
    /// durability is unknown) the lease is spent.
    pub fn complete(self, response: &[u8]) -> Result<(), FinishError> {
        self.finish(Finish::Complete(response))
    }

    /// Stores `response` as a terminal failure that is replayed (Failed),
    /// e.g. "card declined".
    ///
    /// # Errors
    /// As [`complete`](Lease::complete), which also hands the lease back.
    pub fn fail(self, response: &[u8]) -> Result<(), FinishError> {
        self.finish(Finish::Fail(response))
    }

    /// Makes the key absent again: nothing happened, a corrected retry may run.
    ///
    /// # Errors
    /// As [`complete`](Lease::complete), which also hands the lease back.
    pub fn release(self) -> Result<(), FinishError> {
        self.finish(Finish::Release)
    }

    fn finish(mut self, finish: Finish<'_>) -> Result<(), FinishError> {
        let lsn = self.write_finish(finish)?;
        self.engine.wait_durable(self.hash, lsn).map_err(FinishError::spent)
    }

    /// Writes the finishing record and spends the lease, or hands the lease
    /// back in the error when nothing was written (see [`FinishError`]).
    fn write_finish(&mut self, finish: Finish<'_>) -> Result<u64, FinishError> {
        match self.engine.finish(self.hash, &self.token_ref(), finish) {
            Ok(lsn) => {
                self.finished = true;
                Ok(lsn)
            }
            Err(error @ Error::LeaseLost { .. }) => {
                self.finished = true;
                Err(FinishError::spent(error))
            }
            Err(error) => Err(FinishError { error, lease: Some(Box::new(self.take())) }),
        }
    }

    /// Moves the lease out of `self`, leaving a spent husk behind.
    fn take(&mut self) -> Lease {
        let lease = Lease {
            engine: Arc::clone(&self.engine),
            hash: self.hash,
            keyspace: self.keyspace,
            scope: std::mem::take(&mut self.scope),
            key: std::mem::take(&mut self.key),
            token: self.token,
            held: self.held,
            deadline_ms: self.deadline_ms,
            finished: self.finished,
            last_checkpoint: self.last_checkpoint.take(),
        };
        self.finished = true;
        lease
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

    /// [`Lease::checkpoint`] as a future.
    ///
    /// # Errors
    /// As [`Lease::checkpoint`].
    #[cfg(feature = "tokio")]
    pub async fn checkpoint_async(&mut self, step: &str, payload: &[u8]) -> Result<()> {
        let outcome = match self.engine.checkpoint(self.hash, &self.token_ref(), step, payload) {
            Ok(lsn) => self.engine.wait_durable_async(self.hash, lsn).await,
            Err(error) => Err(error),
        };
        self.checkpointed(outcome, step, payload)
    }

    /// Writes the finishing record, then awaits its durability. Once the
    /// record is written the lease is spent, even if the future is dropped
    /// before the fsync ends.
    #[cfg(feature = "tokio")]
    pub(crate) async fn finish_async(mut self, finish: Finish<'_>) -> Result<(), FinishError> {
        let lsn = self.write_finish(finish)?;
        self.engine.wait_durable_async(self.hash, lsn).await.map_err(FinishError::spent)
    }

    /// Turns the lease into a plain token to finish later, from anywhere in
    /// the process, with [`Store::complete`](crate::Store::complete),
    /// [`Store::fail`](crate::Store::fail),
    /// [`Store::release`](crate::Store::release) or
    /// [`Store::renew`](crate::Store::renew). Not counted as abandoned.
    #[must_use]
    pub fn into_token(mut self) -> LeaseToken {
        self.finished = true;
        LeaseToken {
            keyspace: self.keyspace,
            scope: std::mem::take(&mut self.scope),
            key: std::mem::take(&mut self.key),
            token: self.token,
        }
    }

    fn token_ref(&self) -> TokenRef<'_> {
        TokenRef {
            keyspace: self.keyspace,
            scope: &self.scope,
            key: &self.key,
            token: self.token,
            held: Some(self.held),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.finished {
            let shard = self.engine.shard_of_hash(self.hash);
            bump(&shard.counters.abandoned_leases);
            event!(
                debug,
                shard = shard.id,
                token = self.token,
                "lease dropped unfinished; the key stays Processing until its lease ends"
            );
        }
    }
}

/// A lease held elsewhere: enough to finish it from any thread or after
/// handing the work to a background job. See [`Lease::into_token`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    /// The keyspace of the claimed key ([`Keyspace::Caller`] for every
    /// claim but idemkv's own).
    pub keyspace: Keyspace,
    /// The scope of the claimed key.
    pub scope: Vec<u8>,
    /// The claimed key.
    pub key: Vec<u8>,
    /// The fencing token of the claim.
    pub token: u64,
}

/// A finishing call ([`Lease::complete`], [`Lease::fail`],
/// [`Lease::release`]) that did not finish the lease: the error, and the
/// lease back when the call wrote nothing and the lease may still hold the
/// key — the input was refused (a response over the limit), writing failed,
/// or the store is closed or poisoned — so that the caller can fall back to
/// another finishing call. `lease` is `None` after
/// [`Error::LeaseLost`] and after an error past the write (a failed fsync:
/// the record may or may not survive a power cut; the lease is spent).
///
/// `?` converts it into [`Error`], dropping the lease (which then counts as
/// abandoned).
///
/// # Examples
///
/// ```
/// use idemkv::{Claim, ClaimRequest, Config, Error, Fingerprint, FinishError, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), Config::new().response_bytes_max(4))?;
/// let request = ClaimRequest::new("k", Fingerprint::of(b"r"));
/// let Claim::Acquired(lease) = store.claim(&request)? else { unreachable!() };
/// match lease.complete(b"too long") {
///     Err(FinishError { error: Error::ResponseTooLarge { .. }, lease: Some(lease), .. }) => lease.release()?,
///     other => other?,
/// }
/// assert_eq!(store.get(b"", b"k")?, None); // released: a retry may run
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct FinishError {
    /// Why the call did not finish the lease.
    pub error: Error,
    /// The lease, handed back when nothing was written (boxed, so that the
    /// error stays small on the path where all went well).
    pub lease: Option<Box<Lease>>,
}

impl FinishError {
    /// An error after which the lease is spent.
    fn spent(error: Error) -> Self {
        FinishError { error, lease: None }
    }
}

impl fmt::Display for FinishError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, formatter)
    }
}

/// Transparent: displays as its [`Error`], whose source it shares.
impl std::error::Error for FinishError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

impl From<FinishError> for Error {
    fn from(finish: FinishError) -> Self {
        finish.error
    }
}
