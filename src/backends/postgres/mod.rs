//! The claim contract on PostgreSQL (feature `postgres`):
//! [`PostgresBackend`] implements [`IdempotencyBackend`](crate::IdempotencyBackend), and a lease can
//! also be finished inside the caller's own transaction
//! ([`PostgresBackend::complete_in`]), so that the business rows and the
//! key's completion commit or roll back together: a crash can never leave
//! "charged but not recorded" or "recorded but not charged".
//!
//! Every transition is one statement calling a server-side function that
//! [`PostgresBackend::connect`] creates (a versioned schema, see the
//! `schema` module's docs): one round trip, on a pooled connection
//! (`deadpool-postgres` over `tokio-postgres`), with the statement prepared
//! once per connection. Leases and TTLs run on the server's clock
//! (`clock_timestamp()`), never a client's; fencing tokens come from one
//! sequence, so a token is never reused for any key, across release and
//! expiry. Expired rows are absent to every call; [`PostgresBackend::reap`]
//! (or the background [`Reaper`]) deletes them in bounded batches.
//! `claim_wait` is woken by `LISTEN/NOTIFY`, with polling as the fallback.
//!
//! Checkpoints ([`IdempotencyBackend::checkpoint`](crate::IdempotencyBackend::checkpoint)) and reuse policies
//! ([`ClaimOptions::reuse`](crate::ClaimOptions::reuse)) work as on the embedded store: the checkpoint
//! is a column of the key's row, fenced like a renewal, handed to a
//! takeover and kept for the one after it, dropped when the key is
//! finished, released or removed, and as durable as any commit. A table of
//! an earlier schema version is upgraded in place at connect (see the
//! `schema` module's docs).
//!
//! # Configuration
//!
//! [`PostgresBackend::connect`] takes the [`Config`] of the embedded store and checks it as
//! [`Store::open`](crate::Store::open) does: a value out of range is
//! [`Error::InvalidConfig`]. The default lease and TTL, the longest
//! duration and the size limits apply; a setting of the embedded store
//! alone (shards, durability, segments, compaction, waiter limits, clock,
//! storage, quotas) is refused with [`Error::UnsupportedSetting`] rather
//! than ignored. The table in [`Config`]'s docs lists every setting.
//!
//! # Errors and retries
//!
//! A lost connection or a call without an answer in time is
//! [`Error::Backend`] with [`BackendFailure::Unavailable`](crate::BackendFailure::Unavailable): the call may or
//! may not have taken effect, and nothing is guessed. A server's refusal (a
//! serialization failure, a deadlock, a constraint violation, a read-only
//! standby) is [`BackendFailure::Refused`](crate::BackendFailure::Refused): nothing was done. Retrying a
//! claim is safe (the worst case is `InProgress` until the lost lease ends,
//! then a recovered attempt); retrying a completion with the same token is
//! safe (a second one answers `LeaseLost` when the first took effect: `get`
//! tells).
//!
//! # Durability
//!
//! An acknowledged claim or completion is as durable as the server makes
//! a commit: keep `synchronous_commit` on (the default) and, for
//! failover, a synchronous standby.
//!
//! # Examples
//!
//! ```no_run
//! use idemkv::postgres::PostgresBackend;
//! use idemkv::{BackendClaim, ClaimOptions, Config, Fingerprint, IdempotencyBackend};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let backend = PostgresBackend::connect("postgres://app@127.0.0.1/shop", Config::new()).await?;
//! let fingerprint = Fingerprint::of(b"POST /payments amount=10");
//! match backend.claim(b"account-42", b"order-1", fingerprint, ClaimOptions::new()).await? {
//!     BackendClaim::Acquired { token, .. } => {
//!         // The charge and the key's completion commit together.
//!         let mut client = backend.pool().get().await?;
//!         let transaction = client.transaction().await?;
//!         transaction.execute("INSERT INTO charges (order_id, cents) VALUES ('order-1', 1000)", &[]).await?;
//!         backend.complete_in(&transaction, &token, b"201 charged").await?;
//!         transaction.commit().await?;
//!     }
//!     BackendClaim::Replay(response) => assert_eq!(response, b"201 charged"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

mod reaper;
mod reply;
mod schema;
mod wait;

use crate::backend::BackendClaim;
use crate::backends::remote::{fenced, remote_backend, ClaimArgs, Finish, Settings, Subscription, Transport};
use crate::config::{Backend, Config};
use crate::error::{Error, Result};
use crate::record::Record;
use crate::LeaseToken;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
pub use reaper::Reaper;
use reply::{pool_error, postgres_error, protocol, timed_out};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row, Transaction};
use wait::{Listening, Stop};
/// The pool and client crates, at the versions this build uses.
pub use {deadpool_postgres, tokio_postgres};

/// What this backend honours of a [`Config`]. A scope and key are the
/// table's primary key, and a B-tree entry of 8 KiB pages holds at most
/// 2,704 bytes: 8 of entry header, 4 of length before each of the two
/// (over 126 bytes) and up to 3 of padding between them leave 2,685 for
/// the two, however incompressible.
const BACKEND: Backend = Backend { name: "postgres", scope_and_key_bytes_max: 2685 };
/// Connections in the pool of [`PostgresBackend::connect`].
pub const POOL_SIZE_DEFAULT: usize = 16;
/// How long a call waits for a connection and its answer before it is
/// [`BackendFailure::Unavailable`](crate::BackendFailure::Unavailable).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first wait lets the listener connect before it polls.
const LISTEN_PATIENCE: Duration = Duration::from_secs(1);

const CLAIM: &str = "SELECT o_answer, o_token, o_attempt, o_recovered, o_left_ms, o_response, o_checkpoint \
                     FROM idemkv_claim($1, $2, $3, $4, $5, $6, $7)";
const FINISH: &str = "SELECT idemkv_finish($1, $2, $3, $4, $5)";
const RENEW: &str = "SELECT idemkv_renew($1, $2, $3, $4)";
const CHECKPOINT: &str = "SELECT idemkv_checkpoint($1, $2, $3, $4)";
const REMOVE: &str = "SELECT idemkv_remove($1, $2)";
const REAP: &str = "SELECT idemkv_reap($1)";
const GET: &str = "SELECT state, fingerprint, token, attempt, recovered, idemkv_ms(created_at), \
                   idemkv_ms(updated_at), idemkv_ms(CASE WHEN state = 'P' THEN lease_end ELSE expires_at END), \
                   response, checkpoint FROM idempo_store \
                   WHERE scope = $1 AND key = $2 AND expires_at > clock_timestamp()";

/// The claim contract on a PostgreSQL server. Clones share the pool.
#[derive(Clone)]
pub struct PostgresBackend {
    pool: Pool,
    settings: Settings,
    listening: Arc<Listening>,
    _stop: Arc<Stop>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PostgresBackend").field("pool", &self.pool.status()).finish_non_exhaustive()
    }
}

/// A duration in ms as PostgreSQL's `bigint`, saturated.
fn ms(duration: u64) -> i64 {
    i64::try_from(duration).unwrap_or(i64::MAX)
}

/// A lease's token as PostgreSQL's `bigint`; a token past it cannot be one
/// the server handed out, so it holds nothing.
fn signed(token: &LeaseToken) -> Option<i64> {
    i64::try_from(token.token).ok()
}

impl PostgresBackend {
    /// Connects with a URL (`postgres://user:password@host:port/db`) or a
    /// key-value string (`host=... dbname=...`), a pool of
    /// [`POOL_SIZE_DEFAULT`] connections, and creates or migrates the
    /// schema. `config` gives the default lease and TTL and the size limits
    /// ([`Config::default_lease`], [`Config::default_ttl`],
    /// [`Config::key_bytes_max`], ...), checked before anything is sent. A
    /// setting only the embedded store honours (its shards, durability,
    /// segments, compaction, waiter limits, clock, storage or quotas) is
    /// refused, not ignored: the table in [`Config`]'s docs lists which
    /// settings apply.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL, a value out of range (as
    /// [`Store::open`](crate::Store::open) refuses it: a zero lease or TTL,
    /// say), or a schema migrated by a newer build;
    /// [`Error::UnsupportedSetting`] for a setting of the embedded store
    /// alone; [`Error::Backend`] when the server cannot be reached or
    /// refuses the migration.
    pub async fn connect(url: &str, config: Config) -> Result<PostgresBackend> {
        let connect: tokio_postgres::Config =
            url.parse().map_err(|error| Error::InvalidConfig(format!("postgres: {error}")))?;
        PostgresBackend::connect_with(connect, POOL_SIZE_DEFAULT, config).await
    }

    /// As [`connect`](PostgresBackend::connect), with the client's
    /// configuration and a pool of `pool_size` connections (plus one that
    /// listens for `claim_wait`, opened at the first wait).
    ///
    /// # Errors
    /// As [`connect`](PostgresBackend::connect).
    pub async fn connect_with(
        connect: tokio_postgres::Config,
        pool_size: usize,
        config: Config,
    ) -> Result<PostgresBackend> {
        PostgresBackend::connect_over(connect, pool_size, config, Connector::Plain).await
    }

    /// As [`connect`](PostgresBackend::connect), over TLS trusting what
    /// `tls` says (feature `tls`), for every connection: the pool's and the
    /// one that listens. The URL's `sslmode` says whether the server must
    /// take TLS (`require`) or may refuse it (`prefer`, the default); the
    /// certificate is checked against the host name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn connect() -> Result<(), idemkv::Error> {
    /// use idemkv::postgres::PostgresBackend;
    /// use idemkv::{Config, Tls};
    ///
    /// let url = "postgres://payments@db.internal/payments?sslmode=require";
    /// let backend = PostgresBackend::connect_tls(url, Config::new(), &Tls::webpki_roots()).await?;
    /// # let _ = backend;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`connect`](PostgresBackend::connect); [`Error::Backend`] when
    /// the handshake fails (a certificate that `tls` does not trust, or
    /// for another name) or the server takes no TLS under `sslmode=require`.
    #[cfg(feature = "tls")]
    pub async fn connect_tls(url: &str, config: Config, tls: &crate::Tls) -> Result<PostgresBackend> {
        let connect: tokio_postgres::Config =
            url.parse().map_err(|error| Error::InvalidConfig(format!("postgres: {error}")))?;
        let connector = Connector::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(tls.client_config()?));
        PostgresBackend::connect_over(connect, POOL_SIZE_DEFAULT, config, connector).await
    }

    async fn connect_over(
        mut connect: tokio_postgres::Config,
        pool_size: usize,
        config: Config,
        connector: Connector,
    ) -> Result<PostgresBackend> {
        let settings = Settings::new(config, BACKEND)?;
        if connect.get_connect_timeout().is_none() {
            connect.connect_timeout(CONNECT_TIMEOUT);
        }
        let recycling = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = match &connector {
            Connector::Plain => Manager::from_config(connect.clone(), NoTls, recycling),
            #[cfg(feature = "tls")]
            Connector::Rustls(tls) => Manager::from_config(connect.clone(), tls.clone(), recycling),
        };
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CALL_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|error| Error::InvalidConfig(format!("postgres pool: {error}")))?;
        let mut client = pool.get().await.map_err(pool_error)?;
        schema::migrate(&mut client).await?;
        drop(client);
        let (listening, stop) = Listening::new(connect, connector);
        Ok(PostgresBackend { pool, settings, listening, _stop: stop })
    }

    /// The pool, for the caller's own transactions
    /// ([`complete_in`](PostgresBackend::complete_in)).
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The schema version this build creates and uses.
    #[must_use]
    pub fn schema_version() -> i32 {
        schema::SCHEMA_VERSION
    }

    /// Completes the lease inside `transaction`: the key is Completed (and
    /// its waiters woken) when the transaction commits, and still held by
    /// `token` if it rolls back (its retry after the lease is then a
    /// `recovered` attempt). Until the commit the key's row stays locked: a
    /// concurrent claim of the key waits for the outcome.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the token no longer holds the key,
    /// [`Error::ResponseTooLarge`], or [`Error::Backend`]; after an error
    /// from the server the transaction is aborted and must be rolled back.
    pub async fn complete_in(&self, transaction: &Transaction<'_>, token: &LeaseToken, response: &[u8]) -> Result<()> {
        self.finish_in(transaction, token, Finish::Complete, response).await
    }

    /// As [`complete_in`](PostgresBackend::complete_in), storing a replayed
    /// terminal failure.
    ///
    /// # Errors
    /// As [`complete_in`](PostgresBackend::complete_in).
    pub async fn fail_in(&self, transaction: &Transaction<'_>, token: &LeaseToken, response: &[u8]) -> Result<()> {
        self.finish_in(transaction, token, Finish::Fail, response).await
    }

    /// Deletes up to `batch` expired rows (oldest expiry first); returns
    /// how many it deleted. Expired rows are already absent to every call.
    ///
    /// # Errors
    /// [`Error::Backend`].
    pub async fn reap(&self, batch: u32) -> Result<u64> {
        let batch = i32::try_from(batch).unwrap_or(i32::MAX);
        let row = self.call("reap", REAP, &[&batch]).await?;
        let deleted: i64 = row.try_get(0).map_err(|_| protocol("reap: count"))?;
        u64::try_from(deleted).map_err(|_| protocol("reap: count"))
    }

    /// Runs [`reap`](PostgresBackend::reap) in the background every
    /// `interval`, batch after batch while batches come back full (up to a
    /// bound per pass); it stops when the returned [`Reaper`] drops. Needs
    /// a tokio runtime.
    #[must_use]
    pub fn spawn_reaper(&self, interval: Duration, batch: u32) -> Reaper {
        Reaper::spawn(self.clone(), interval, batch.max(1))
    }

    /// One statement on a pooled connection, prepared once per connection,
    /// answering one row.
    async fn call(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        self.call_optional(what, sql, params).await?.ok_or_else(|| protocol(what))
    }

    async fn call_optional(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        let call = async {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client.prepare_cached(sql).await.map_err(postgres_error)?;
            client.query_opt(&statement, params).await.map_err(postgres_error)
        };
        tokio::time::timeout(CALL_TIMEOUT, call).await.map_err(|_| timed_out(what))?
    }

    async fn finish_in(
        &self,
        transaction: &Transaction<'_>,
        token: &LeaseToken,
        finish: Finish,
        response: &[u8],
    ) -> Result<()> {
        self.settings.check_finish(token, response)?;
        let Some(number) = signed(token) else {
            return Err(Error::LeaseLost { token: token.token });
        };
        let (scope, key, kind) = (token.scope.as_slice(), token.key.as_slice(), finish.code());
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&scope, Type::BYTEA),
            (&key, Type::BYTEA),
            (&number, Type::INT8),
            (&kind, Type::TEXT),
            (&response, Type::BYTEA),
        ];
        let call = transaction.query_typed(FINISH, &params);
        let rows =
            tokio::time::timeout(CALL_TIMEOUT, call).await.map_err(|_| timed_out("finish"))?.map_err(postgres_error)?;
        fenced(held(rows.first().ok_or_else(|| protocol("finish: no row"))?, "finish")?, token)
    }

    /// A fenced function on a pooled connection; `false` when the token
    /// cannot be one the server handed out.
    async fn fenced_call(
        &self,
        what: &str,
        sql: &str,
        token: &LeaseToken,
        rest: &[&(dyn ToSql + Sync)],
    ) -> Result<bool> {
        let Some(number) = signed(token) else {
            return Ok(false);
        };
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&token.scope, &token.key, &number];
        params.extend_from_slice(rest);
        held(&self.call(what, sql, &params).await?, what)
    }
}

/// The answer of a fenced function: whether the token held the key.
fn held(row: &Row, what: &str) -> Result<bool> {
    row.try_get::<_, bool>(0).map_err(|_| protocol(what))
}

/// How the backend's connections are made: in plain text, or over TLS.
#[derive(Clone)]
pub(super) enum Connector {
    Plain,
    #[cfg(feature = "tls")]
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Connector::Plain => "plain",
            #[cfg(feature = "tls")]
            Connector::Rustls(_) => "tls",
        })
    }
}

/// Leaves a tag's waiters when a wait ends (or its future is dropped).
struct Leave<'a> {
    listening: &'a Listening,
    tag: String,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.listening.leave(&self.tag);
    }
}

remote_backend!(PostgresBackend);

impl Transport for PostgresBackend {
    fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A waiting caller's claim waits for a row locked by a transaction
    /// that is completing it, instead of answering in progress at once.
    async fn claim_once(&self, args: &ClaimArgs<'_>, waiting: bool) -> Result<BackendClaim> {
        let (scope, key, fingerprint, reuse) =
            (args.scope, args.key, &args.fingerprint.as_bytes()[..], args.reuse_arg());
        let (lease_ms, ttl_ms) = (ms(args.lease_ms), ms(args.ttl_ms));
        let params: [&(dyn ToSql + Sync); 7] = [&scope, &key, &fingerprint, &lease_ms, &ttl_ms, &waiting, &reuse];
        let row = self.call("claim", CLAIM, &params).await?;
        reply::claim(scope, key, &row)
    }

    /// Woken by the finishing function's `NOTIFY`, through the listener
    /// connection.
    async fn listen<'a>(&'a self, scope: &'a [u8], key: &'a [u8], wait: Duration) -> Subscription<'a> {
        let tag = wait::tag(scope, key);
        let event = self.listening.join(&tag);
        let leave = Leave { listening: &self.listening, tag };
        // Without the listener the wait still ends: by polling.
        let _listening = self.listening.ensure(LISTEN_PATIENCE.min(wait)).await;
        Subscription { event, _leave: Box::new(leave) }
    }

    async fn finish(&self, token: &LeaseToken, finish: Finish, response: &[u8]) -> Result<bool> {
        self.fenced_call("finish", FINISH, token, &[&finish.code(), &response]).await
    }

    async fn checkpoint(&self, token: &LeaseToken, point: &[u8]) -> Result<bool> {
        self.fenced_call("checkpoint", CHECKPOINT, token, &[&point]).await
    }

    async fn renew(&self, token: &LeaseToken, extend_ms: u64) -> Result<bool> {
        self.fenced_call("renew", RENEW, token, &[&ms(extend_ms)]).await
    }

    async fn get(&self, scope: &[u8], key: &[u8]) -> Result<Option<Record>> {
        match self.call_optional("get", GET, &[&scope, &key]).await? {
            Some(row) => reply::record(scope, key, &row).map(Some),
            None => Ok(None),
        }
    }

    async fn remove(&self, scope: &[u8], key: &[u8]) -> Result<bool> {
        let row = self.call("remove", REMOVE, &[&scope, &key]).await?;
        row.try_get(0).map_err(|_| protocol("remove: not a boolean"))
    }
}
