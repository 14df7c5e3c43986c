//! Per-scope quotas: optional limits on the live records and the stored
//! bytes of each scope, so that one tenant cannot fill the store for the
//! others.
//!
//! # What counts
//!
//! A scope's **records** are its keys whose newest record is in the index:
//! Processing, Completed or Failed. Its **bytes** are the frame bytes of
//! those newest records (the fixed record header, scope, key and response
//! as they lie in the log). Superseded and dead records still on disk until
//! compaction do not count: they belong to no one's quota.
//!
//! # What is refused
//!
//! Only a claim that would create a **new** live record — the key is absent,
//! released, removed or expired — and only when the scope already holds its
//! record limit, or when the new Processing record would take its bytes
//! over the byte limit. It is answered [`Error::QuotaExceeded`] and writes
//! nothing. Replays, in-progress answers, mismatches and takeovers of an
//! expired lease create no record and are never refused. Completing or
//! failing a lease is never refused either: the side effect already ran,
//! and its answer must be kept (DESIGN §3, "never twice"). A completion may
//! therefore take a scope's bytes over its limit; the scope's next new
//! claims are then refused until records leave it.
//!
//! # Exactness
//!
//! The counts follow the index exactly: a record counts from the write that
//! puts its key in the index to the moment its key leaves it — a release,
//! a remove, or an expiry (TTL, or an abandoned lease past its end + TTL)
//! once found: at a read of the key, by compaction, at open. A claim that
//! would be refused first drops every expired record of the store (a
//! sweep of each shard's index), so that records whose time is up never
//! hold a slot; sweeps are spaced by one millisecond per thousand indexed
//! records, so that a tenant hammering a full scope cannot turn them into
//! a full-time index scan (a store of a million records sweeps at most once
//! a second, for about a millisecond). [`Store::scope_usage`] reports the
//! counts as they stand, which may include records expired but not yet
//! found.
//!
//! Counting is store-wide (a scope's keys are spread over every shard): a
//! claim reserves its record under the lock of the scope's stripe of the
//! ledger, before its record is written, and gives it back if the write
//! fails, so no two claims of one scope can both take its last slot.
//!
//! # What it costs
//!
//! Nothing when no quota is configured: the ledger is not built and every
//! hook is one test of an `Option`. With quotas, each scope that holds live
//! records costs one entry of a hash map (its name, its two counts), and
//! nothing per record: when a record leaves the index without its key at
//! hand (an expiry), its scope is read back from the record's frame in the
//! log. At open, the counts are rebuilt by reading the scope of every live
//! record once. `benches/quota.rs` measures all three; the README has the
//! figures.
//!
//! Quotas are enforced by the embedded store only; the Redis and PostgreSQL
//! backends do not enforce them.

mod ledger;

pub(crate) use ledger::Ledger;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::Store;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// Limits on the live records and stored bytes of one scope.
///
/// A limit left unset is no limit; a quota with neither set is
/// [`Quota::unlimited`]. Set it for every scope with [`Config::quota`] and
/// for one scope with [`Config::scope_quota`].
///
/// # Examples
///
/// ```
/// use idemkv::{Config, Quota};
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
    /// Default: no limit. Zero is refused by [`Config::validate`].
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
    /// limit. Zero is refused by [`Config::validate`].
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

    fn is_limited(&self) -> bool {
        self.records_max.is_some() || self.bytes_max.is_some()
    }

    /// The refusal of a new record of `bytes` in a scope using `used`.
    fn refusal(&self, used: ScopeUsage, bytes: u64) -> Option<Error> {
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

/// Which limit of a [`Quota`] refused a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaLimit {
    /// The scope holds as many live records as [`Quota::records`] allows.
    Records,
    /// The new record would take the scope over [`Quota::bytes`].
    Bytes,
}

impl fmt::Display for QuotaLimit {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            QuotaLimit::Records => "record",
            QuotaLimit::Bytes => "byte",
        })
    }
}

/// What one scope holds against its quota (see [`Store::scope_usage`]).
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
    /// The limits that apply to `scope`, `None` if it is not limited.
    fn of(&self, scope: &[u8]) -> Option<&Quota> {
        self.scopes.get(scope).or(self.default.as_ref()).filter(|quota| quota.is_limited())
    }

    /// Whether any scope is limited.
    fn any(&self) -> bool {
        self.default.iter().chain(self.scopes.values()).any(Quota::is_limited)
    }

    /// Checks the limits, as [`Config::validate`] does.
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

impl Config {
    /// The quota of every scope that has none of its own
    /// ([`Config::scope_quota`]). Default: none, and then nothing is
    /// counted at all. See [`Quota`] for what counts and what is refused.
    #[must_use]
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quotas.default = Some(quota);
        self
    }

    /// The quota of one scope, instead of the default of
    /// [`Config::quota`] ([`Quota::unlimited`] exempts it). Setting it again
    /// for the same scope replaces it.
    #[must_use]
    pub fn scope_quota(mut self, scope: impl AsRef<[u8]>, quota: Quota) -> Self {
        self.quotas.scopes.insert(scope.as_ref().to_vec(), quota);
        self
    }
}

impl Store {
    /// The live records and bytes `scope` holds against its quota, or
    /// `None` when it holds none, or when no quota applies to it (then
    /// nothing of it is counted). O(1): the counts as they stand, which
    /// include records expired but not yet found (see [`Quota`]: a claim
    /// that would be refused drops those first).
    ///
    /// # Examples
    ///
    /// ```
    /// use idemkv::{Claim, ClaimRequest, Config, Error, Fingerprint, Quota, QuotaLimit, Store};
    /// # fn main() -> Result<(), Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = Store::open(dir.path(), Config::new().quota(Quota::new().records(1)))?;
    /// let first = ClaimRequest::new("order-1", Fingerprint::of(b"a")).scope("tenant-a");
    /// let Claim::Acquired(lease) = store.claim(&first)? else { unreachable!() };
    /// lease.complete(b"201")?;
    /// assert_eq!(store.scope_usage("tenant-a").map(|usage| usage.records), Some(1));
    ///
    /// let second = ClaimRequest::new("order-2", Fingerprint::of(b"b")).scope("tenant-a");
    /// assert!(matches!(store.claim(&second), Err(Error::QuotaExceeded { limit: QuotaLimit::Records, .. })));
    /// assert!(store.remove(b"tenant-a", b"order-1")?);
    /// assert_eq!(store.scope_usage("tenant-a"), None);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn scope_usage(&self, scope: impl AsRef<[u8]>) -> Option<ScopeUsage> {
        self.engine().quota.as_ref()?.usage(scope.as_ref())
    }

    /// Recounts every limited scope's usage from the index (reading the
    /// scope of each live record) and compares it with the running counts:
    /// `None` when they agree, else the first difference. For tests and
    /// fuzzing, on a store nothing else uses meanwhile.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::Poisoned`], [`Error::Corruption`], I/O.
    #[doc(hidden)]
    pub fn quota_audit(&self) -> Result<Option<String>> {
        let Some(ledger) = &self.engine().quota else {
            return Ok(None);
        };
        let mut counted = HashMap::new();
        for shard in &*self.engine().shards {
            shard.count_scopes(ledger, &mut counted)?;
        }
        let running = ledger.snapshot();
        let mut scopes = counted.keys().chain(running.keys());
        Ok(scopes.find_map(|scope| {
            let (recounted, kept) = (counted.get(scope), running.get(scope));
            (recounted != kept).then(|| {
                format!("scope {:?}: recounted {recounted:?}, running {kept:?}", String::from_utf8_lossy(scope))
            })
        }))
    }
}
