//! Store configuration: a builder whose setters name their defaults.

use crate::clock::{duration_ms, Clock, SystemClock};
use crate::error::{Error, Result};
use crate::format::{frame_bytes, SEGMENT_HEADER_BYTES};
use crate::io::{StdStorage, Storage};
use crate::quota::{Quota, Quotas};
use std::sync::Arc;
use std::time::Duration;

/// Shards of a new store when [`Config::shards`] is not set.
pub const DEFAULT_SHARDS: u32 = 4;

/// When a call that changed the store returns, relative to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each record is written to the operating system before the call
    /// returns, without fsync. Survives a crash of the process, not a power
    /// cut or kernel crash. [`crate::Store::sync`] flushes on demand.
    Buffered,
    /// The call returns only after its record is on stable storage (fsync).
    /// Concurrent writers of a shard share one fsync. Answers that depend on
    /// a record written by another caller also wait until that record is
    /// durable — an "absent" answer too, for the tombstone or release behind
    /// it — so nobody is told about a state that a power cut could undo.
    /// Survives a process crash and a power cut. The default.
    #[default]
    Sync,
    /// Each record is written to the operating system before the call
    /// returns, and a background thread fsyncs every shard with unsynced
    /// records at most this often. Survives a process crash; a power cut
    /// loses at most the last interval of acknowledged calls.
    Interval(Duration),
}

/// How a store is opened.
///
/// # Examples
///
/// ```
/// use idemkv::{Config, Durability};
/// use std::time::Duration;
///
/// let config = Config::new()
///     .shards(8)
///     .durability(Durability::Buffered)
///     .default_lease(Duration::from_secs(10))
///     .default_ttl(Duration::from_secs(48 * 3600));
/// assert_eq!(config.shard_count(), Some(8));
/// ```
///
/// # On Redis and PostgreSQL
///
/// `RedisBackend::connect`, `RedisBackend::connect_cluster`,
/// `PostgresBackend::connect`, `connect_with` and `connect_with_options` check
/// their `Config` before they send anything: every value as
/// [`Config::validate`] checks it for [`crate::Store::open`]
/// ([`Error::InvalidConfig`] for a zero lease or TTL, `shards(3)`, ...), but
/// for the fit of the largest record in a segment (they have no segments),
/// and the longest scope and key against what the backend holds. Then each
/// setting the backend cannot honour is refused with
/// [`Error::UnsupportedSetting`] naming its setter, whatever its value, the
/// default's included:
///
/// | Setting | Embedded store | Redis, PostgreSQL |
/// |---|---|---|
/// | `default_lease`, `default_ttl`, `duration_max` | honoured | honoured, on the server's clock |
/// | `key_bytes_max`, `scope_bytes_max` | honoured | honoured, checked before a call is sent; on PostgreSQL the two together at most 2,683 (the largest primary-key entry, less the two bytes a keyspace may take), else [`Error::InvalidConfig`] |
/// | `response_bytes_max` | honoured | honoured, checked before a call is sent; not checked at connect against the server's own ceiling (Redis `proto-max-bulk-len`, 512 MB by default; PostgreSQL 1 GB a value), over which the server refuses the call |
/// | `shards`, `segment_bytes` | honoured | refused: the server lays out its own data |
/// | `durability` | honoured | refused: an answer is as durable as the server makes it (Redis `appendfsync`, PostgreSQL `synchronous_commit`) |
/// | `compaction_interval`, `compaction_live_fraction`, `compaction_bytes_per_second` | honoured | refused: records leave by Redis's expiry or PostgreSQL's reaper |
/// | `waiters_per_key_max`, `waiters_max` | honoured | refused: waiting callers are not counted there, at any limit, the defaults' included; bound them with the caller's own concurrency and its wait |
/// | `clock` | honoured | refused: leases and TTLs run on the server's clock |
/// | `storage` | honoured | refused: there are no local files |
/// | `quota`, `scope_quota` | honoured | refused: not enforced there |
///
/// Refused rather than ignored: a setting that connects is a setting in
/// force. Ignored, a quota would let one scope fill the server, a waiter
/// limit would bound nothing, `Durability::Sync` would promise an fsync the
/// server may not make, and a manual clock would not move a lease, each
/// while the service believed the opposite; the storage settings are
/// refused too, so that the rule has no exception to remember. One
/// configuration for an embedded store and a backend is built as the
/// common part and the store's settings added for the store alone.
#[derive(Debug, Clone)]
pub struct Config {
    /// `None`: 4 for a new store, whatever the manifest says for an existing one.
    pub(crate) shards: Option<u32>,
    pub(crate) durability: Durability,
    pub(crate) lease_ms: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) segment_bytes: u64,
    pub(crate) key_bytes_max: usize,
    pub(crate) scope_bytes_max: usize,
    pub(crate) response_bytes_max: usize,
    pub(crate) duration_ms_max: u64,
    pub(crate) waiters_per_key_max: usize,
    pub(crate) waiters_max: usize,
    pub(crate) compaction_interval: Option<Duration>,
    pub(crate) compaction_live_fraction: f64,
    pub(crate) compaction_bytes_per_second: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) storage: Arc<dyn Storage>,
    /// Per-scope quotas.
    pub(crate) quotas: Quotas,
    /// The settings only the embedded store honours that were set, so that
    /// a networked backend can refuse them instead of ignoring them.
    pub(crate) store_only: StoreOnly,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            shards: None,
            durability: Durability::Sync,
            lease_ms: 30_000,
            ttl_ms: 24 * 3600 * 1000,
            segment_bytes: 64 << 20,
            key_bytes_max: 255,
            scope_bytes_max: 255,
            response_bytes_max: 1 << 20,
            duration_ms_max: 365 * 24 * 3600 * 1000,
            waiters_per_key_max: 1024,
            waiters_max: 16 * 1024,
            compaction_interval: Some(Duration::from_secs(60)),
            compaction_live_fraction: 0.5,
            compaction_bytes_per_second: 64 << 20,
            clock: Arc::new(SystemClock),
            storage: Arc::new(StdStorage),
            quotas: Quotas::default(),
            store_only: StoreOnly::default(),
        }
    }
}

/// The largest shard count a store may have.
pub const SHARDS_MAX: u32 = 1024;
/// The largest key, scope length a configuration may allow (the on-disk
/// length fields are `u16`).
pub const KEY_BYTES_LIMIT: usize = u16::MAX as usize;

impl Config {
    /// The defaults: 4 shards, [`Durability::Sync`], lease 30 s, TTL 24 h,
    /// 64 MiB segments, keys of 1..=255 bytes, scopes of 0..=255 bytes,
    /// responses up to 1 MiB, the system clock and file system.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Shard count, a power of two in `1..=1024`, fixed when the store is
    /// created; opening an existing store with another count set here is
    /// [`Error::ShardCountMismatch`]. Unset (the default), a new store gets
    /// 4 — enough to keep two to eight cores from waiting on one lock, few
    /// enough that `Sync` writers share fsyncs (each shard file needs its
    /// own) — and an existing store keeps its own count.
    #[must_use]
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = Some(shards);
        self.store_only.mark(StoreSetting::Shards);
        self
    }

    /// Durability mode. Default [`Durability::Sync`].
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self.store_only.mark(StoreSetting::Durability);
        self
    }

    /// Lease given to a claim that does not set one. Default 30 s.
    #[must_use]
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.lease_ms = duration_ms(lease);
        self
    }

    /// TTL, counted from completion, for a claim that does not set one.
    /// Default 24 h.
    #[must_use]
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.ttl_ms = duration_ms(ttl);
        self
    }

    /// Size at which a shard's active segment is sealed and a new one begun.
    /// Default 64 MiB; at least 4 KiB, at most 4 GiB, and large enough for
    /// one record of the largest key, scope and response.
    #[must_use]
    pub fn segment_bytes(mut self, segment_bytes: u64) -> Self {
        self.segment_bytes = segment_bytes;
        self.store_only.mark(StoreSetting::SegmentBytes);
        self
    }

    /// Longest key accepted. Default 255 bytes, at most 65 535.
    #[must_use]
    pub fn key_bytes_max(mut self, max: usize) -> Self {
        self.key_bytes_max = max;
        self
    }

    /// Longest scope accepted. Default 255 bytes, at most 65 535.
    #[must_use]
    pub fn scope_bytes_max(mut self, max: usize) -> Self {
        self.scope_bytes_max = max;
        self
    }

    /// Largest response accepted by complete / fail. Default 1 MiB.
    #[must_use]
    pub fn response_bytes_max(mut self, max: usize) -> Self {
        self.response_bytes_max = max;
        self
    }

    /// Longest lease or TTL accepted. Default 365 days.
    #[must_use]
    pub fn duration_max(mut self, max: Duration) -> Self {
        self.duration_ms_max = duration_ms(max);
        self
    }

    /// Most callers waiting at once for one key in `claim_wait` (or HTTP
    /// `Prefer: wait`); one more is answered `InProgress` at once. Default
    /// 1024.
    #[must_use]
    pub fn waiters_per_key_max(mut self, max: usize) -> Self {
        self.waiters_per_key_max = max;
        self.store_only.mark(StoreSetting::WaitersPerKeyMax);
        self
    }

    /// Most callers waiting at once in `claim_wait` across the store.
    /// Default 16 384.
    #[must_use]
    pub fn waiters_max(mut self, max: usize) -> Self {
        self.waiters_max = max;
        self.store_only.mark(StoreSetting::WaitersMax);
        self
    }

    /// How often the background compactor runs a pass; `None` runs none
    /// (call [`crate::Store::compact`] yourself). Default 60 s.
    #[must_use]
    pub fn compaction_interval(mut self, interval: Option<Duration>) -> Self {
        self.compaction_interval = interval;
        self.store_only.mark(StoreSetting::CompactionInterval);
        self
    }

    /// A sealed segment whose live bytes fall below this fraction of its
    /// size is rewritten. Default 0.5, so disk use stays within about twice
    /// the live data; in `0.0..=1.0`.
    #[must_use]
    pub fn compaction_live_fraction(mut self, fraction: f64) -> Self {
        self.compaction_live_fraction = fraction;
        self.store_only.mark(StoreSetting::CompactionLiveFraction);
        self
    }

    /// The most bytes per second compaction reads and writes, so it never
    /// starves the service's own I/O; 0 for no limit. Default 64 MiB/s.
    #[must_use]
    pub fn compaction_bytes_per_second(mut self, bytes_per_second: u64) -> Self {
        self.compaction_bytes_per_second = bytes_per_second;
        self.store_only.mark(StoreSetting::CompactionBytesPerSecond);
        self
    }

    /// Source of time. Default [`SystemClock`]; tests use
    /// [`crate::ManualClock`].
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self.store_only.mark(StoreSetting::Clock);
        self
    }

    /// File layer. Default [`StdStorage`]; tests inject faults here.
    #[must_use]
    pub fn storage(mut self, storage: Arc<dyn Storage>) -> Self {
        self.storage = storage;
        self.store_only.mark(StoreSetting::Storage);
        self
    }

    /// The quota of every scope that has none of its own
    /// ([`Config::scope_quota`]). Default: none, and then nothing is
    /// counted at all. See [`Quota`] for what counts and what is refused.
    #[must_use]
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quotas.set_default(quota);
        self.store_only.mark(StoreSetting::Quota);
        self
    }

    /// The quota of one scope, instead of the default of [`Config::quota`]
    /// ([`Quota::unlimited`] exempts it). Setting it again for the same
    /// scope replaces it.
    #[must_use]
    pub fn scope_quota(mut self, scope: impl AsRef<[u8]>, quota: Quota) -> Self {
        self.quotas.set_scope(scope.as_ref(), quota);
        self.store_only.mark(StoreSetting::ScopeQuota);
        self
    }

    /// The shard count set with [`Config::shards`], if any.
    #[must_use]
    pub fn shard_count(&self) -> Option<u32> {
        self.shards
    }

    /// Checks every value, as [`crate::Store::open`] does.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first value out of range.
    pub fn validate(&self) -> Result<()> {
        self.validate_values()?;
        self.validate_record_fits_segment()
    }

    /// Checks a configuration given to a networked backend (Redis,
    /// PostgreSQL) when it connects: every value as [`Config::validate`]
    /// checks it, but for the fit of the largest record in a segment (such
    /// a backend has no segments); then the longest scope and key against
    /// what the backend can hold, and every setting only the embedded store
    /// honours is refused, so that a configuration that connects means what
    /// it says. The table in [`Config`]'s docs lists them.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    pub(crate) fn validate_for_backend(&self, backend: Backend) -> Result<()> {
        self.validate_values()?;
        let scope_and_key_bytes = self.scope_bytes_max.saturating_add(self.key_bytes_max);
        if scope_and_key_bytes > backend.scope_and_key_bytes_max {
            return Err(Error::InvalidConfig(format!(
                "{} holds a scope and key of at most {} bytes together, scope_bytes_max + key_bytes_max is \
                 {scope_and_key_bytes}",
                backend.name, backend.scope_and_key_bytes_max
            )));
        }
        match StoreSetting::ALL.into_iter().find(|setting| self.store_only.has(*setting)) {
            Some(setting) => Err(Error::UnsupportedSetting { backend: backend.name, setting: setting.name() }),
            None => Ok(()),
        }
    }

    /// Every range check of [`Config::validate`] that does not depend on the
    /// on-disk layout.
    fn validate_values(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidConfig(reason));
        if let Some(shards) = self.shards.filter(|shards| !shards.is_power_of_two() || *shards > SHARDS_MAX) {
            return invalid(format!("shards must be a power of two in 1..={SHARDS_MAX}, got {shards}"));
        }
        if self.key_bytes_max == 0 || self.key_bytes_max > KEY_BYTES_LIMIT {
            return invalid(format!("key_bytes_max must be in 1..={KEY_BYTES_LIMIT}"));
        }
        if self.scope_bytes_max > KEY_BYTES_LIMIT {
            return invalid(format!("scope_bytes_max must be at most {KEY_BYTES_LIMIT}"));
        }
        if self.duration_ms_max == 0 {
            return invalid("duration_max must not be zero".into());
        }
        for (name, ms) in [("default_lease", self.lease_ms), ("default_ttl", self.ttl_ms)] {
            if ms == 0 || ms > self.duration_ms_max {
                return invalid(format!("{name} must be in 1 ms..=duration_max"));
            }
        }
        if let Durability::Interval(interval) = self.durability {
            if interval.is_zero() {
                return invalid("Durability::Interval must not be zero".into());
            }
        }
        if !(0.0..=1.0).contains(&self.compaction_live_fraction) {
            return invalid("compaction_live_fraction must be in 0.0..=1.0".into());
        }
        if self.compaction_interval.is_some_and(|interval| interval.is_zero()) {
            return invalid("compaction_interval must not be zero (use None to turn it off)".into());
        }
        if !(4096..=u64::from(u32::MAX)).contains(&self.segment_bytes) {
            return invalid("segment_bytes must be in 4 KiB..=4 GiB".into());
        }
        self.quotas.validate(self.scope_bytes_max)
    }

    /// A segment must hold one record of the largest scope, key and
    /// response, or such a record could never be written.
    fn validate_record_fits_segment(&self) -> Result<()> {
        let record_max = frame_bytes(self.scope_bytes_max, self.key_bytes_max, self.response_bytes_max);
        if SEGMENT_HEADER_BYTES as u64 + record_max > self.segment_bytes {
            return Err(Error::InvalidConfig(format!(
                "segment_bytes {} cannot hold one record of the largest scope, key and response ({record_max} bytes)",
                self.segment_bytes
            )));
        }
        Ok(())
    }

    /// Checks a key and scope against the limits.
    pub(crate) fn check_key(&self, scope: &[u8], key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::KeyEmpty);
        }
        if key.len() > self.key_bytes_max {
            return Err(Error::KeyTooLong { len: key.len(), max: self.key_bytes_max });
        }
        self.check_scope(scope)
    }

    /// Checks a scope against the limit.
    pub(crate) fn check_scope(&self, scope: &[u8]) -> Result<()> {
        if scope.len() > self.scope_bytes_max {
            return Err(Error::ScopeTooLong { len: scope.len(), max: self.scope_bytes_max });
        }
        Ok(())
    }

    /// Checks a response against the limit.
    pub(crate) fn check_response(&self, response: &[u8]) -> Result<()> {
        if response.len() > self.response_bytes_max {
            return Err(Error::ResponseTooLarge { len: response.len(), max: self.response_bytes_max });
        }
        Ok(())
    }

    /// A requested duration in ms, checked, or `default_ms` when none was given.
    pub(crate) fn check_duration(
        &self,
        what: &'static str,
        duration: Option<Duration>,
        default_ms: u64,
    ) -> Result<u64> {
        let Some(duration) = duration else {
            return Ok(default_ms);
        };
        if duration.is_zero() {
            return Err(Error::InvalidDuration { what, reason: "must not be zero" });
        }
        let ms = duration_ms(duration);
        if ms > self.duration_ms_max {
            return Err(Error::InvalidDuration { what, reason: "longer than the configured duration_max" });
        }
        Ok(ms)
    }
}

/// What a networked backend can honour, for
/// [`Config::validate_for_backend`].
#[cfg(any(feature = "redis", feature = "postgres"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backend {
    /// Its name in errors (`"redis"`, `"postgres"`).
    pub(crate) name: &'static str,
    /// The longest scope and key, together, that it can hold.
    pub(crate) scope_and_key_bytes_max: usize,
}

/// A setting only the embedded store honours: the layout and persistence
/// of its files, its background work, its own waiters, clock and quotas.
/// A networked backend's server does all of that itself (or nothing does),
/// so such a backend refuses a configuration that sets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreSetting {
    Shards,
    Durability,
    SegmentBytes,
    WaitersPerKeyMax,
    WaitersMax,
    CompactionInterval,
    CompactionLiveFraction,
    CompactionBytesPerSecond,
    Clock,
    Storage,
    Quota,
    ScopeQuota,
}

impl StoreSetting {
    /// Every one, in the order of the setters.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    pub(crate) const ALL: [StoreSetting; 12] = [
        StoreSetting::Shards,
        StoreSetting::Durability,
        StoreSetting::SegmentBytes,
        StoreSetting::WaitersPerKeyMax,
        StoreSetting::WaitersMax,
        StoreSetting::CompactionInterval,
        StoreSetting::CompactionLiveFraction,
        StoreSetting::CompactionBytesPerSecond,
        StoreSetting::Clock,
        StoreSetting::Storage,
        StoreSetting::Quota,
        StoreSetting::ScopeQuota,
    ];

    /// The name of its setter on [`Config`].
    #[cfg(any(feature = "redis", feature = "postgres"))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreSetting::Shards => "shards",
            StoreSetting::Durability => "durability",
            StoreSetting::SegmentBytes => "segment_bytes",
            StoreSetting::WaitersPerKeyMax => "waiters_per_key_max",
            StoreSetting::WaitersMax => "waiters_max",
            StoreSetting::CompactionInterval => "compaction_interval",
            StoreSetting::CompactionLiveFraction => "compaction_live_fraction",
            StoreSetting::CompactionBytesPerSecond => "compaction_bytes_per_second",
            StoreSetting::Clock => "clock",
            StoreSetting::Storage => "storage",
            StoreSetting::Quota => "quota",
            StoreSetting::ScopeQuota => "scope_quota",
        }
    }
}

/// Which [`StoreSetting`]s a configuration set, one bit each. A setter
/// marks its bit whatever the value, the default's included: a backend
/// that cannot honour the setting cannot honour it at any value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StoreOnly(u16);

impl StoreOnly {
    fn mark(&mut self, setting: StoreSetting) {
        self.0 |= 1 << setting as u16;
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    fn has(self, setting: StoreSetting) -> bool {
        self.0 & (1 << setting as u16) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Config::new().validate().expect("defaults");
    }

    #[test]
    fn bad_values_are_refused() {
        let cases = [
            Config::new().shards(3),
            Config::new().shards(0),
            Config::new().shards(2048),
            Config::new().key_bytes_max(0),
            Config::new().key_bytes_max(70_000),
            Config::new().scope_bytes_max(70_000),
            Config::new().default_lease(Duration::ZERO),
            Config::new().default_ttl(Duration::ZERO),
            Config::new().default_ttl(Duration::from_secs(400 * 24 * 3600)),
            Config::new().segment_bytes(100),
            Config::new().segment_bytes(1 << 20).response_bytes_max(1 << 20),
            Config::new().durability(Durability::Interval(Duration::ZERO)),
            Config::new().compaction_live_fraction(1.5),
            Config::new().compaction_interval(Some(Duration::ZERO)),
        ];
        for config in cases {
            assert!(matches!(config.validate(), Err(Error::InvalidConfig(_))), "accepted {config:?}");
        }
    }

    #[cfg(any(feature = "redis", feature = "postgres"))]
    const NETWORKED: Backend = Backend { name: "networked", scope_and_key_bytes_max: 1000 };

    /// Every setter of a setting only the embedded store honours marks it,
    /// whatever the value, and a networked backend refuses it by name.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn backends_refuse_store_only_settings() {
        let quota = Quota::new().records(1);
        let cases = [
            Config::new().shards(4),
            Config::new().durability(Durability::Sync),
            Config::new().segment_bytes(8 << 20),
            Config::new().waiters_per_key_max(1024),
            Config::new().waiters_max(1),
            Config::new().compaction_interval(None),
            Config::new().compaction_live_fraction(0.5),
            Config::new().compaction_bytes_per_second(0),
            Config::new().clock(Arc::new(SystemClock)),
            Config::new().storage(Arc::new(StdStorage)),
            Config::new().quota(quota),
            Config::new().scope_quota(b"a", quota),
        ];
        for (setting, config) in StoreSetting::ALL.into_iter().zip(cases) {
            config.validate().expect("valid for the embedded store");
            let refused = config.validate_for_backend(NETWORKED);
            assert!(
                matches!(refused, Err(Error::UnsupportedSetting { backend: "networked", setting: name }) if name == setting.name()),
                "{setting:?}: {refused:?}"
            );
        }
        Config::new().validate_for_backend(NETWORKED).expect("the defaults");
    }

    /// A backend checks values as the store does, but has no segment for a
    /// record to fit, and its own ceiling on scope and key.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn backends_check_values_but_not_the_segment_fit() {
        let large = Config::new().response_bytes_max(256 << 20);
        assert!(matches!(large.validate(), Err(Error::InvalidConfig(_))));
        large.validate_for_backend(NETWORKED).expect("no segments");
        let zero = Config::new().default_lease(Duration::ZERO);
        assert!(matches!(zero.validate_for_backend(NETWORKED), Err(Error::InvalidConfig(_))));
        let long = Config::new().scope_bytes_max(500).key_bytes_max(501);
        assert!(matches!(long.validate_for_backend(NETWORKED), Err(Error::InvalidConfig(_))));
        Config::new().scope_bytes_max(500).key_bytes_max(500).validate_for_backend(NETWORKED).expect("at the ceiling");
    }

    /// The tables of what a backend takes, in these docs and docs/fleets.md,
    /// list every setting a backend refuses, as refused.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    #[test]
    fn the_tables_list_every_refused_setting() {
        for (file, text) in
            [("src/config.rs", include_str!("config.rs")), ("docs/fleets.md", include_str!("../docs/fleets.md"))]
        {
            for setting in StoreSetting::ALL {
                let listed = text.lines().any(|line| {
                    let cells: Vec<&str> = line.trim_start_matches("/// ").split(" | ").collect();
                    cells.len() == 3
                        && cells[0]
                            .split(", ")
                            .any(|name| name.trim_start_matches("| ") == format!("`{}`", setting.name()))
                        && cells[2].starts_with("refused")
                });
                assert!(listed, "{file} does not list `{}` as refused", setting.name());
            }
        }
    }
}
