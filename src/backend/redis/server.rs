//! What the server's own settings mean for the promise, read at connect:
//! `maxmemory-policy`, `appendonly` and `appendfsync` of the server (every
//! master of a Cluster), each judged as [`Risk`] and answered as the
//! caller's [`ServerChecks`] say: a refusal ([`Error::UnsafeServerSetting`]),
//! a warning (a `tracing` event and a [`Finding`] in the [`ServerReport`]),
//! or only the finding.

use crate::error::{Error, Result};
use crate::events::event;

/// What to do when a server setting can break the promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// `connect` fails with [`Error::UnsafeServerSetting`].
    Refuse,
    /// `connect` succeeds; a `tracing` warning (target `idemkv`) is emitted
    /// and the finding is in [`RedisBackend::server_report`](super::RedisBackend::server_report).
    Warn,
    /// `connect` succeeds silently; the finding is still in the report.
    Ignore,
}

/// How each kind of setting is judged at connect. The defaults refuse an
/// evicting policy (it breaks the promise with no crash at all: a full
/// server drops live records and their retries run again) and warn on
/// persistence and on settings that cannot be read (those lose answers
/// only when a server crashes, a risk many deployments take knowingly, and
/// managed services often disable `CONFIG`: refusing those would make the
/// backend unusable there).
///
/// ```
/// use idemkv::{backend::{redis::{Check, ServerChecks}}};
///
/// let strict = ServerChecks::new().persistence(Check::Refuse).unreadable(Check::Refuse);
/// assert_eq!(strict.eviction_check(), Check::Refuse);
/// assert_eq!(ServerChecks::new().persistence_check(), Check::Warn);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerChecks {
    eviction: Check,
    persistence: Check,
    unreadable: Check,
}

impl Default for ServerChecks {
    fn default() -> Self {
        ServerChecks { eviction: Check::Refuse, persistence: Check::Warn, unreadable: Check::Warn }
    }
}

impl ServerChecks {
    /// The defaults: refuse eviction, warn on persistence and on settings
    /// that cannot be read.
    #[must_use]
    pub fn new() -> Self {
        ServerChecks::default()
    }

    /// For a `maxmemory-policy` other than `noeviction` ([`Risk::Eviction`]).
    #[must_use]
    pub fn eviction(mut self, check: Check) -> Self {
        self.eviction = check;
        self
    }

    /// For `appendonly no` or an `appendfsync` other than `always`
    /// ([`Risk::Persistence`]).
    #[must_use]
    pub fn persistence(mut self, check: Check) -> Self {
        self.persistence = check;
        self
    }

    /// For a server that refuses `CONFIG GET` (renamed, disabled, or denied
    /// by its ACL): nothing can be judged ([`Risk::Unreadable`]).
    #[must_use]
    pub fn unreadable(mut self, check: Check) -> Self {
        self.unreadable = check;
        self
    }

    /// What is done on [`Risk::Eviction`].
    #[must_use]
    pub fn eviction_check(&self) -> Check {
        self.eviction
    }

    /// What is done on [`Risk::Persistence`].
    #[must_use]
    pub fn persistence_check(&self) -> Check {
        self.persistence
    }

    /// What is done on [`Risk::Unreadable`].
    #[must_use]
    pub fn unreadable_check(&self) -> Check {
        self.unreadable
    }

    fn for_risk(self, risk: Risk) -> Check {
        match risk {
            Risk::Eviction => self.eviction,
            Risk::Persistence => self.persistence,
            Risk::Unreadable => self.unreadable,
        }
    }
}

/// How a setting can break the promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Risk {
    /// The server may evict a live record when its memory is full, with
    /// no crash at all: the retry of an evicted key runs its side effect
    /// again.
    Eviction,
    /// A crash loses answers the backend acknowledged: their retries run
    /// the side effect again.
    Persistence,
    /// The settings could not be read, so none was judged.
    Unreadable,
}

/// One setting of one server that can break the promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The server (`host:port`).
    pub server: String,
    /// The setting (`maxmemory-policy`, `appendonly`, `appendfsync`), or
    /// `CONFIG GET` when the settings could not be read.
    pub setting: &'static str,
    /// Its value, or the server's error when it could not be read.
    pub value: String,
    /// What it risks.
    pub risk: Risk,
    /// Why, in words.
    pub reason: &'static str,
}

/// What was found of the servers' settings at connect: every setting that
/// can break the promise and was not refused (warned about or ignored, as
/// [`ServerChecks`] said). Empty for servers set as the promise needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerReport {
    /// The findings, server by server.
    pub findings: Vec<Finding>,
}

impl ServerReport {
    /// No setting can break the promise, and all could be read.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// The settings read, in order.
pub(super) const SETTINGS: [&str; 3] = ["maxmemory-policy", "appendonly", "appendfsync"];

/// One server's answers to `CONFIG GET` for [`SETTINGS`], in order: the
/// value, or the server's refusal.
pub(super) struct Read {
    pub(super) server: String,
    pub(super) values: std::result::Result<[String; 3], String>,
}

const EVICTS_ALL: &str = "evicts any key when memory is full: an evicted live record lets its retry run the side effect again (set maxmemory-policy noeviction)";
const EVICTS_VOLATILE: &str = "evicts keys with a TTL when memory is full, and every idemkv record has one: an evicted live record lets its retry run the side effect again (set maxmemory-policy noeviction)";
const NO_AOF: &str = "without the append-only file a crash loses every answer written since the last snapshot: their retries run the side effects again (set appendonly yes, appendfsync always)";
const EVERYSEC: &str = "a crash of the machine loses the answers of the last second or so (not yet fsynced): their retries run the side effects again (set appendfsync always)";
const FSYNC_NO: &str = "the operating system writes the file when it likes (about every 30 s on Linux): a crash of the machine loses the answers since (set appendfsync always)";
const UNREADABLE: &str = "the server refuses CONFIG GET (renamed, disabled or denied), so its eviction policy and persistence could not be checked";

/// The risk of one setting's value, if any.
fn judge(setting: &str, value: &str, aof: bool) -> Option<(Risk, &'static str)> {
    match (setting, value) {
        ("maxmemory-policy", "noeviction") | ("appendonly", "yes") | ("appendfsync", "always") => None,
        ("maxmemory-policy", policy) if policy.starts_with("volatile-") => Some((Risk::Eviction, EVICTS_VOLATILE)),
        ("maxmemory-policy", _) => Some((Risk::Eviction, EVICTS_ALL)),
        ("appendonly", _) => Some((Risk::Persistence, NO_AOF)),
        // Without the AOF its fsync policy means nothing: `appendonly` says it.
        ("appendfsync", _) if !aof => None,
        ("appendfsync", "everysec") => Some((Risk::Persistence, EVERYSEC)),
        ("appendfsync", _) => Some((Risk::Persistence, FSYNC_NO)),
        _ => None,
    }
}

/// The findings of one server.
fn findings(read: &Read) -> Vec<Finding> {
    let finding = |setting, value: &str, (risk, reason)| Finding {
        server: read.server.clone(),
        setting,
        value: value.to_string(),
        risk,
        reason,
    };
    match &read.values {
        Err(refusal) => vec![finding("CONFIG GET", refusal, (Risk::Unreadable, UNREADABLE))],
        Ok(values) => {
            let aof = values[1] == "yes";
            SETTINGS
                .iter()
                .zip(values)
                .filter_map(|(setting, value)| judge(setting, value, aof).map(|risk| finding(setting, value, risk)))
                .collect()
        }
    }
}

/// Judges every server's settings: the first finding `checks` refuses is
/// the error; the others are warned about or kept silently.
pub(super) fn assess(reads: &[Read], checks: ServerChecks) -> Result<ServerReport> {
    let found: Vec<Finding> = reads.iter().flat_map(findings).collect();
    if let Some(refused) = found.iter().find(|finding| checks.for_risk(finding.risk) == Check::Refuse) {
        return Err(Error::UnsafeServerSetting {
            backend: "redis",
            server: refused.server.clone(),
            setting: refused.setting,
            value: refused.value.clone(),
            reason: refused.reason,
        });
    }
    for finding in found.iter().filter(|finding| checks.for_risk(finding.risk) == Check::Warn) {
        event!(
            warn,
            server = %finding.server,
            setting = finding.setting,
            value = %finding.value,
            "redis setting can break the idempotency promise: {}",
            finding.reason
        );
        // Without the feature `tracing` the event is nothing.
        let _ = finding;
    }
    Ok(ServerReport { findings: found })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(values: [&str; 3]) -> Read {
        Read { server: "127.0.0.1:6379".into(), values: Ok(values.map(String::from)) }
    }

    #[test]
    fn safe_settings_find_nothing() {
        let report = assess(&[read(["noeviction", "yes", "always"])], ServerChecks::new()).expect("clean");
        assert!(report.is_clean());
    }

    #[test]
    fn every_evicting_policy_is_refused_by_default() {
        for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl"] {
            let error = assess(&[read([policy, "yes", "always"])], ServerChecks::new()).expect_err(policy);
            assert!(matches!(error, Error::UnsafeServerSetting { setting: "maxmemory-policy", .. }), "{error}");
        }
    }

    #[test]
    fn fsync_policy_counts_only_with_the_aof() {
        let report = assess(&[read(["noeviction", "no", "everysec"])], ServerChecks::new()).expect("warned");
        let settings: Vec<_> = report.findings.iter().map(|finding| finding.setting).collect();
        assert_eq!(settings, ["appendonly"]);
        let report = assess(&[read(["noeviction", "yes", "no"])], ServerChecks::new()).expect("warned");
        assert_eq!(report.findings[0].reason, FSYNC_NO);
    }
}
