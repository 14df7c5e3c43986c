//! [`Versions`]: a version number per resource, stepped by one atomic
//! compare-and-set on any backend — what an HTTP `ETag` names and
//! `If-Match` checks (see the HTTP layer's `LayerConfig::versioned_resource`).
//!
//! A resource's version is a completed record `(scope, resource)` of
//! [`Keyspace::Version`] — idemkv's own, where no caller's scope reaches —
//! whose answer is the number. The first version is written by
//! a claim and its completion (a creator that dies leaves the claim to
//! lapse; nobody reads a version meanwhile); each step after it is one
//! [`IdempotencyBackend::replace`] from the version expected to the next —
//! an embedded record, a Redis script, a PostgreSQL `UPDATE … WHERE
//! response = <expected>` — so of two writers from one version one steps
//! and the other is told the version it lost to. A record replaced lives
//! its TTL from the step: a resource written at least once a
//! [`ttl`](Versions::ttl) keeps its version for good; one left alone
//! longer starts again at 1.

use crate::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use crate::error::Result;
use crate::{Fingerprint, Keyspace, State};
use std::sync::Arc;
use std::time::Duration;

/// How long a resource's version lives after its last step, by default:
/// 90 days.
pub const VERSIONS_TTL_DEFAULT: Duration = Duration::from_secs(90 * 24 * 3600);

const MAGIC: &[u8; 8] = b"IDKVVER1";

/// What [`Versions::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The version is now this one.
    Stepped(u64),
    /// The version was not the one expected: it is this one (`None`: the
    /// resource has none, or its first is being written).
    Conflict(Option<u64>),
}

/// The versions of resources over a backend (see the module docs).
///
/// # Examples
///
/// ```
/// use idemkv::{backend::{Step, Versions}, Config, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// let versions = Versions::new(Store::open(dir.path(), Config::new())?);
/// assert_eq!(versions.step(b"acct-1", b"payment-7", None).await?, Step::Stepped(1));
/// assert_eq!(versions.step(b"acct-1", b"payment-7", Some(1)).await?, Step::Stepped(2));
/// // A writer that read version 1 lost to the one that stepped it.
/// assert_eq!(versions.step(b"acct-1", b"payment-7", Some(1)).await?, Step::Conflict(Some(2)));
/// # Ok(()) })
/// # }
/// ```
pub struct Versions<B> {
    backend: Arc<B>,
    ttl: Duration,
}

impl<B> Clone for Versions<B> {
    fn clone(&self) -> Self {
        Versions { backend: Arc::clone(&self.backend), ttl: self.ttl }
    }
}

impl<B> std::fmt::Debug for Versions<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Versions").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

fn encode(version: u64) -> Vec<u8> {
    [&MAGIC[..], &version.to_le_bytes()].concat()
}

fn decode(answer: &[u8]) -> Option<u64> {
    let bytes = answer.strip_prefix(MAGIC)?;
    Some(u64::from_le_bytes(*<&[u8; 8]>::try_from(bytes).ok()?))
}

impl<B: IdempotencyBackend> Versions<B> {
    /// The versions over `backend`.
    #[must_use]
    pub fn new(backend: B) -> Self {
        Versions::shared(Arc::new(backend))
    }

    /// As [`new`](Versions::new), for a backend shared with others.
    #[must_use]
    pub fn shared(backend: Arc<B>) -> Self {
        Versions { backend, ttl: VERSIONS_TTL_DEFAULT }
    }

    /// Sets how long a version lives after its last step
    /// ([`VERSIONS_TTL_DEFAULT`]); within the backend's `duration_max`.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The current version of `resource` in `scope`; `None` before its
    /// first.
    ///
    /// # Errors
    /// The backend's errors; the key errors.
    pub async fn current(&self, scope: &[u8], resource: &[u8]) -> Result<Option<u64>> {
        let record = self.backend.get_in(Keyspace::Version, scope, resource).await?;
        Ok(record.filter(|record| record.state == State::Completed).and_then(|record| decode(&record.response)))
    }

    /// Steps `resource`'s version from `expected` (`None`: it has none
    /// yet) to the next, in one atomic step.
    ///
    /// # Errors
    /// As [`current`](Versions::current).
    pub async fn step(&self, scope: &[u8], resource: &[u8], expected: Option<u64>) -> Result<Step> {
        let Some(version) = expected else {
            let options = ClaimOptions::new().lease(Duration::from_secs(10)).ttl(self.ttl);
            let first = self.backend.claim_in(Keyspace::Version, scope, resource, Fingerprint::of(MAGIC), options);
            return Ok(match first.await? {
                BackendClaim::Acquired { token, .. } => {
                    self.backend.complete(&token, &encode(1)).await?;
                    Step::Stepped(1)
                }
                BackendClaim::Replay(answer) => Step::Conflict(decode(&answer)),
                BackendClaim::InProgress { .. } | BackendClaim::Mismatch => Step::Conflict(None),
            });
        };
        let next = version.saturating_add(1);
        let (from, to) = (encode(version), encode(next));
        if self.backend.replace_in(Keyspace::Version, scope, resource, &from, &to).await? {
            return Ok(Step::Stepped(next));
        }
        Ok(Step::Conflict(self.current(scope, resource).await?))
    }
}
