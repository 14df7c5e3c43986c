//! How a [`PostgresBackend`](super::PostgresBackend) is set up beyond the
//! [`Config`](crate::Config) every backend shares: the PostgreSQL schema
//! its objects live in (several stores share one database, each in a
//! schema of its own, as Redis stores share a server through `prefix`),
//! its pool, whether `connect` may migrate, and its reaper.

use crate::error::{Error, Result};
use std::time::Duration;

/// The schema of a store unless [`PostgresOptions::schema`] says otherwise:
/// where every earlier build created its objects, so their databases
/// upgrade in place.
pub const SCHEMA_DEFAULT: &str = "public";
/// Longest schema name PostgreSQL keeps whole (`NAMEDATALEN - 1` bytes);
/// a longer one would be cut silently, so it is refused.
const SCHEMA_BYTES_MAX: usize = 63;
/// Connections in the pool unless [`PostgresOptions::pool_size`] says
/// otherwise.
pub const POOL_SIZE_DEFAULT: usize = 16;
/// Pause between the reaper's passes unless [`Reaping::every`] says
/// otherwise.
pub const REAP_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// Rows one reaper statement deletes at most unless [`Reaping::batch`]
/// says otherwise.
pub const REAP_BATCH_DEFAULT: u32 = 1000;

/// A PostgreSQL schema name, checked, with its quoted form for SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Schema {
    name: String,
    quoted: String,
}

impl Schema {
    /// Refuses what PostgreSQL would refuse or change: an empty name, one
    /// longer than 63 bytes (cut silently), a NUL, the reserved `pg_`
    /// prefix. Anything else is taken as written (case kept) and quoted as
    /// an identifier, so no name can end the identifier and run SQL of its
    /// own.
    pub(super) fn new(name: &str) -> Result<Schema> {
        let refuse = |why: &str| Err(Error::InvalidConfig(format!("postgres schema {name:?}: {why}")));
        if name.is_empty() {
            return refuse("empty");
        }
        if name.len() > SCHEMA_BYTES_MAX {
            return refuse("longer than 63 bytes (PostgreSQL would cut it)");
        }
        if name.contains('\0') {
            return refuse("contains a NUL byte");
        }
        if name.to_ascii_lowercase().starts_with("pg_") {
            return refuse("the pg_ prefix is reserved for system schemas");
        }
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        Ok(Schema { name: name.to_owned(), quoted })
    }

    /// The name as written (and as `pg_namespace.nspname` holds it).
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The name as a quoted SQL identifier.
    pub(super) fn quoted(&self) -> &str {
        &self.quoted
    }

    /// `object` of this schema, qualified for SQL (`"s".object`).
    pub(super) fn object(&self, object: &str) -> String {
        format!("{}.{object}", self.quoted)
    }
}

/// Whether and how the backend deletes expired rows in the background.
/// Expired rows are absent to every call already; deleting them keeps the
/// table and its index from growing without bound. On by default: every
/// instance of a fleet runs one, and a session-level advisory lock
/// (`pg_try_advisory_lock`, one key per schema) elects the one that reaps;
/// the others retry the lock every interval, so when the reaping instance
/// stops (its session ends, the server releases the lock) another takes
/// over within one interval.
///
/// ```
/// use idemkv::{backend::{postgres::{PostgresOptions, Reaping}}};
/// use std::time::Duration;
///
/// let options = PostgresOptions::new().reaping(Reaping::every(Duration::from_secs(10)).batch(500));
/// let quiet = PostgresOptions::new().reaping(Reaping::Off); // reaped elsewhere, or by `reap`
/// # let _ = (options, quiet);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaping {
    /// No background reaper: the caller runs
    /// [`reap`](super::PostgresBackend::reap) or
    /// [`spawn_reaper`](super::PostgresBackend::spawn_reaper) itself.
    Off,
    /// An elected reaper: after each pass it pauses `interval`; a pass
    /// deletes `batch` rows a statement, statement after statement while
    /// they come back full (up to a bound per pass).
    Elected {
        /// Pause between passes, and between attempts at the lock.
        interval: Duration,
        /// Rows a statement deletes at most (at least 1).
        batch: u32,
    },
}

impl Reaping {
    /// An elected reaper every `interval`, in batches of
    /// [`REAP_BATCH_DEFAULT`].
    #[must_use]
    pub fn every(interval: Duration) -> Reaping {
        Reaping::Elected { interval, batch: REAP_BATCH_DEFAULT }
    }

    /// The same, deleting at most `batch` rows a statement; no change to
    /// [`Reaping::Off`].
    #[must_use]
    pub fn batch(self, batch: u32) -> Reaping {
        match self {
            Reaping::Elected { interval, .. } => Reaping::Elected { interval, batch },
            Reaping::Off => Reaping::Off,
        }
    }

    fn check(self) -> Result<()> {
        match self {
            Reaping::Elected { interval, .. } if interval.is_zero() => {
                Err(Error::InvalidConfig("postgres reaper: the interval must be more than zero".into()))
            }
            Reaping::Elected { batch: 0, .. } => {
                Err(Error::InvalidConfig("postgres reaper: the batch must be at least 1".into()))
            }
            _ => Ok(()),
        }
    }
}

impl Default for Reaping {
    /// Every [`REAP_INTERVAL_DEFAULT`], in batches of [`REAP_BATCH_DEFAULT`].
    fn default() -> Reaping {
        Reaping::every(REAP_INTERVAL_DEFAULT)
    }
}

/// The PostgreSQL settings of a backend, for
/// [`PostgresBackend::connect_with_options`](super::PostgresBackend::connect_with_options)
/// and [`PostgresBackend::migrate`](super::PostgresBackend::migrate).
///
/// ```
/// use idemkv::backend::postgres::PostgresOptions;
///
/// // The store of the billing service, beside others in the same database.
/// let options = PostgresOptions::new().schema("billing_idemkv").pool_size(8);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pub(super) schema: String,
    pub(super) pool_size: usize,
    pub(super) migrate: bool,
    pub(super) reaping: Reaping,
    #[cfg(feature = "tls")]
    pub(super) tls: Option<crate::backend::Tls>,
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions::new()
    }
}

impl PostgresOptions {
    /// Schema [`SCHEMA_DEFAULT`], a pool of [`POOL_SIZE_DEFAULT`], no
    /// migration at connect, the default [`Reaping`].
    #[must_use]
    pub fn new() -> PostgresOptions {
        PostgresOptions {
            schema: SCHEMA_DEFAULT.to_owned(),
            pool_size: POOL_SIZE_DEFAULT,
            migrate: false,
            reaping: Reaping::default(),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The PostgreSQL schema holding the store's table, sequence and
    /// functions (default [`SCHEMA_DEFAULT`]). Stores in different schemas
    /// of one database share nothing but the server: not a key, a token
    /// sequence or a reaper. The name is taken as written (case kept,
    /// quoted in every statement); it is checked at connect and migration:
    /// empty, longer than 63 bytes, with a NUL, or starting with `pg_` is
    /// [`Error::InvalidConfig`].
    #[must_use]
    pub fn schema(mut self, schema: &str) -> PostgresOptions {
        schema.clone_into(&mut self.schema);
        self
    }

    /// Connections in the pool (at least 1; default [`POOL_SIZE_DEFAULT`]).
    /// The listener of `claim_wait` and the reaper each hold one more.
    #[must_use]
    pub fn pool_size(mut self, pool_size: usize) -> PostgresOptions {
        self.pool_size = pool_size.max(1);
        self
    }

    /// Every connection over TLS, trusting what `tls` says (feature
    /// `tls`): the pool's, the one that listens for waits, the reaper's
    /// and a migration's. The URL's `sslmode` says whether the server must
    /// take TLS (`require`); the certificate is checked against the host.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: crate::backend::Tls) -> PostgresOptions {
        self.tls = Some(tls);
        self
    }

    /// Whether `connect` migrates the schema first, as
    /// [`PostgresBackend::migrate`](super::PostgresBackend::migrate) does
    /// (default `false`). For development and tests, where one role owns
    /// everything; in production the owner migrates once, as a step of its
    /// own, and the service connects with a role that cannot run DDL.
    #[must_use]
    pub fn migrate_on_connect(mut self, migrate: bool) -> PostgresOptions {
        self.migrate = migrate;
        self
    }

    /// The background reaper (default: [`Reaping::default`]).
    #[must_use]
    pub fn reaping(mut self, reaping: Reaping) -> PostgresOptions {
        self.reaping = reaping;
        self
    }

    /// The schema, checked.
    pub(super) fn checked_schema(&self) -> Result<Schema> {
        self.reaping.check()?;
        Schema::new(&self.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::Schema;

    #[test]
    fn a_schema_name_is_quoted_whole() {
        let schema = Schema::new(r#"a"; DROP TABLE t; --"#).expect("taken");
        assert_eq!(schema.quoted(), r#""a""; DROP TABLE t; --""#);
        assert_eq!(Schema::new("Billing").expect("taken").object("idempo_store"), "\"Billing\".idempo_store");
        for refused in ["", "pg_idemkv", "PG_x", "a\0b", &"x".repeat(64)] {
            assert!(Schema::new(refused).is_err(), "{refused:?}");
        }
    }
}
