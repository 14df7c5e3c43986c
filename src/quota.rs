//! Per-scope quotas: the limits ([`Quota`]; what they mean is there), what
//! a refusal names ([`QuotaLimit`]) and what a scope holds ([`ScopeUsage`]).
//! The ledger that counts it store-wide is `engine::ledger`, the `Config`
//! setters are in `config`, the shards' hooks into their index in
//! `engine::shard::quota`, the sweep before a refusal in `engine`,
//! `Store::scope_usage` in `store::usage`.

use crate::error::{Error, QuotaLimit, Result};
use std::collections::HashMap;
use std::time::Duration;

/// Limits on the live records and stored bytes of one scope, so that one
/// tenant cannot fill the store for the others.
///
/// A limit left unset is no limit; a quota with neither set is
/// [`Quota::unlimited`]. Set one for every scope with [`Config::quota`](crate::Config::quota)
/// and for one scope with [`Config::scope_quota`](crate::Config::scope_quota). Quotas are enforced by
/// the embedded [`Store`](crate::Store) only; the Redis and PostgreSQL backends do not
/// enforce them.
///
/// # What counts
///
/// A scope's **records** are its keys whose newest record is in the index:
/// Processing, Completed or Failed. Its **bytes** are what those newest
/// records take in the log (a 104-byte frame prefix, then scope, key and
/// response). Superseded and dead records still on disk until compaction
/// count for no one.
///
/// # What is refused
///
/// Only a claim that would create a **new** live record — the key is
/// absent, released, removed or expired — and only when the scope already
/// holds its record limit, or when the new Processing record would take
/// its bytes over the byte limit. It is answered [`Error::QuotaExceeded`]
/// and writes nothing. Replays, in-progress answers, mismatches and
/// takeovers of an expired lease create no record and are never refused.
/// Completing, failing and renewing a lease are never refused either: the
/// side effect already ran and its answer must be kept ("never twice"). A
/// completion may therefore take a scope's bytes over its limit; the
/// scope's next new keys are refused until records leave it.
///
/// # When a record stops counting
///
/// The counts follow the index exactly. A record counts from the write that
/// puts its key in the index until its key leaves it: a release, a remove,
/// or an expiry (its TTL, or an abandoned lease past its end + TTL) once
/// found — at a read of the key, by compaction, at open. So that a record
/// whose time is up never holds a slot, a claim that would be refused
/// first drops every expired record of the store (a sweep of each shard's
/// index) and is then decided. Sweeps are spaced by one millisecond per
/// thousand indexed records (a store of a million records sweeps at most
/// once a second, for a few milliseconds), so a tenant hammering a full
/// scope cannot turn them into a full-time scan; only then may an expired
/// record hold its slot for up to that spacing. [`Store::scope_usage`](crate::Store::scope_usage)
/// reports the counts as they stand, expired records not yet found
/// included. Across a restart the counts are rebuilt at open from the
/// index: records that expired while the store was closed do not count.
///
/// A scope's keys are spread over every shard, so its counts are
/// store-wide: a claim checks and counts its new record under one lock of
/// the scope's part of the ledger, before the record is written (and gives
/// it back if the write fails), so no two claims can both take a scope's
/// last slot.
///
/// # What it costs
///
/// Nothing when no quota is configured: no ledger is built, and each hook
/// is one test of an `Option`. With quotas, each scope that holds live
/// records takes one hash-map entry (its name and two counts: 72–80 bytes
/// for a 15-byte name, measured), and nothing per record: when a record leaves
/// the index without its key at hand (an expiry), its scope is read back
/// from the record's frame (104 bytes and the scope, never the response).
/// Opening counts every live record's scope the same way. A claim looks at
/// its scope's counts before it is decided only while some scope is near
/// its limit; otherwise that is one atomic load. `cargo bench -p idemkv-bench
/// --bench quota` measures it all; the README has the figures.
///
/// # Examples
///
/// ```
/// use idemkv::{Config, store::Quota};
/// use std::time::Duration;
///
/// let quota = Quota::new().records(10_000).bytes(64 << 20).retry_after(Duration::from_secs(30));
/// assert_eq!((quota.records_max(), quota.bytes_max()), (Some(10_000), Some(64 << 20)));
/// let config = Config::new().quota(quota).scope_quota("internal", Quota::unlimited());
/// config.validate()?;
/// # Ok::<(), idemkv::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    records_max: Option<u64>,
    bytes_max: Option<u64>,
    retry_after: Duration,
}

impl Default for Quota {
    fn default() -> Self {
        Quota { records_max: None, bytes_max: None, retry_after: Duration::from_secs(60) }
    }
}

impl Quota {
    /// No limit yet; add them with [`Quota::records`] and [`Quota::bytes`].
    #[must_use]
    pub fn new() -> Self {
        Quota::default()
    }

    /// No limit at all: as a scope's own quota it exempts that scope from
    /// the store's default quota (and its usage is not counted).
    #[must_use]
    pub fn unlimited() -> Self {
        Quota::default()
    }

    /// The most live records (Processing, Completed, Failed) the scope may
    /// hold; a claim of a new key in a scope that holds them is refused.
    /// Default: no limit. Zero is refused by [`Config::validate`](crate::Config::validate).
    #[must_use]
    pub fn records(mut self, max: u64) -> Self {
        self.records_max = Some(max);
        self
    }

    /// The most bytes the scope's live records may take in the log (header,
    /// scope, key and response of each; a Processing record has no
    /// response): a claim whose new record would take the scope over it is
    /// refused. A completion is never refused, so a large response may take
    /// the scope over; its next new claims are then refused. Default: no
    /// limit. Zero is refused by [`Config::validate`](crate::Config::validate).
    #[must_use]
    pub fn bytes(mut self, max: u64) -> Self {
        self.bytes_max = Some(max);
        self
    }

    /// How long a refused caller is told to wait before it tries again
    /// ([`Error::QuotaExceeded::retry_after`](Error::QuotaExceeded), HTTP
    /// `Retry-After`). Default 60 s.
    #[must_use]
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// The record limit, if any.
    #[must_use]
    pub fn records_max(&self) -> Option<u64> {
        self.records_max
    }

    /// The byte limit, if any.
    #[must_use]
    pub fn bytes_max(&self) -> Option<u64> {
        self.bytes_max
    }

    /// How long a refused caller is told to wait ([`Quota::retry_after`]).
    #[cfg(any(feature = "testing", feature = "conformance"))]
    pub(crate) fn retry_after_duration(&self) -> Duration {
        self.retry_after
    }

    fn is_limited(&self) -> bool {
        self.records_max.is_some() || self.bytes_max.is_some()
    }

    /// The refusal of a new record of `bytes` in a scope using `used`.
    pub(crate) fn refusal(&self, used: ScopeUsage, bytes: u64) -> Option<Error> {
        let refused = |limit, max, used| Error::QuotaExceeded { limit, max, used, retry_after: self.retry_after };
        if let Some(max) = self.records_max.filter(|max| used.records >= *max) {
            return Some(refused(QuotaLimit::Records, max, used.records));
        }
        if let Some(max) = self.bytes_max.filter(|max| used.bytes.saturating_add(bytes) > *max) {
            return Some(refused(QuotaLimit::Bytes, max, used.bytes));
        }
        None
    }
}

/// What one scope holds against its quota (see [`Store::scope_usage`](crate::Store::scope_usage)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScopeUsage {
    /// Keys of the scope whose newest record is Processing, Completed or
    /// Failed.
    pub records: u64,
    /// Bytes those newest records take in the log.
    pub bytes: u64,
}

/// The configured quotas: a default and per-scope overrides.
#[derive(Debug, Clone, Default)]
pub(crate) struct Quotas {
    default: Option<Quota>,
    scopes: HashMap<Vec<u8>, Quota>,
}

impl Quotas {
    /// Sets the quota of every scope without one of its own.
    pub(crate) fn set_default(&mut self, quota: Quota) {
        self.default = Some(quota);
    }

    /// Sets the quota of `scope`.
    pub(crate) fn set_scope(&mut self, scope: &[u8], quota: Quota) {
        self.scopes.insert(scope.to_vec(), quota);
    }

    /// The limits that apply to `scope`, `None` if it is not limited.
    pub(crate) fn of(&self, scope: &[u8]) -> Option<&Quota> {
        self.scopes.get(scope).or(self.default.as_ref()).filter(|quota| quota.is_limited())
    }

    /// Whether any scope is limited.
    pub(crate) fn any(&self) -> bool {
        self.default.iter().chain(self.scopes.values()).any(Quota::is_limited)
    }

    /// Checks the limits, as [`Config::validate`](crate::Config::validate) does.
    pub(crate) fn validate(&self, scope_bytes_max: usize) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidConfig(reason));
        for quota in self.default.iter().chain(self.scopes.values()) {
            if quota.records_max == Some(0) || quota.bytes_max == Some(0) {
                return invalid("a quota's records and bytes limits must not be zero".into());
            }
        }
        if let Some(scope) = self.scopes.keys().find(|scope| scope.len() > scope_bytes_max) {
            return invalid(format!(
                "scope_quota for a scope of {} bytes, longer than scope_bytes_max {scope_bytes_max}",
                scope.len()
            ));
        }
        Ok(())
    }
}
