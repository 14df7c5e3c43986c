//! The claim contract on PostgreSQL (feature `postgres`):
//! [`PostgresBackend`] implements [`IdempotencyBackend`](crate::backend::IdempotencyBackend), and a lease can
//! also be finished inside the caller's own transaction
//! ([`PostgresBackend::complete_in`]), so that the business rows and the
//! key's completion commit or roll back together: a crash can never leave
//! "charged but not recorded" or "recorded but not charged".
//!
//! Every transition is one statement calling a server-side function that
//! the migration creates ([`PostgresBackend::migrate`], or `idemkv migrate
//! --postgres URL`, run by the objects' owner; a versioned schema, see the
//! `schema` module's docs), except the two of every request, which are
//! plain statements (PL/pgSQL costs the server about a third more): a
//! claim first runs one that inserts a fresh key or answers, from the row
//! there, what writes nothing (a replay, a mismatch, in progress), and
//! leaves the rest to `idemkv_claim` (a takeover, a Failed key run again,
//! a waiter to mark, an expired row, a row its snapshot does not see yet);
//! a completion or failure is one `UPDATE`, then a `NOTIFY` only when a
//! waiting caller marked the row. Those statements name the store's
//! objects and functions with their schema (and `pg_catalog`). [`PostgresBackend::connect`] runs no DDL: it
//! checks the version and its role's privileges, so a service connects
//! with a role that cannot create anything. Each store lives in a
//! PostgreSQL schema of its own ([`PostgresOptions::schema`], default
//! `public`). A call is one round trip, on a pooled connection
//! (`deadpool-postgres` over `tokio-postgres`), with the statement prepared
//! once per connection. Leases and TTLs run on the server's clock
//! (`clock_timestamp()`), never a client's; fencing tokens come from one
//! sequence, so a token is never reused for any key, across release and
//! expiry. Expired rows are absent to every call; the elected reaper that
//! every backend starts ([`Reaping`]: one instance of a fleet reaps, chosen
//! by an advisory lock) deletes them in bounded batches, as
//! [`PostgresBackend::reap`] does by hand.
//! `claim_wait` is woken by `LISTEN/NOTIFY`, with polling as the fallback.
//! Every connection the backend opens (the pool's, the listener's, the
//! elected reaper's) is made and driven on the tokio runtime
//! [`connect`](PostgresBackend::connect) ran on, whatever runtime a call
//! comes from: keep that runtime running as long as the backend (under
//! actix-web, connect in `main`, not in a worker).
//!
//! Checkpoints ([`IdempotencyBackend::checkpoint`](crate::backend::IdempotencyBackend::checkpoint)) and reuse policies
//! ([`ClaimOptions::reuse`](crate::backend::ClaimOptions::reuse)) work as on the embedded store: the checkpoint
//! is a column of the key's row, fenced like a renewal, handed to a
//! takeover and kept for the one after it, dropped when the key is
//! finished, released or removed, and as durable as any commit. A table of
//! an earlier schema version is upgraded in place by the migration (see
//! the `schema` module's docs).
//!
//! # Privileges
//!
//! The owner migrates; the service's role needs USAGE on the schema,
//! SELECT, INSERT, UPDATE and DELETE on `idempo_store`, SELECT on
//! `idemkv_schema_version`, USAGE on the sequence `idemkv_tokens` and
//! EXECUTE on the schema's functions. `connect` answers
//! [`Error::MissingPrivileges`] with whatever of that is missing, and
//! [`Error::SchemaVersion`] when the schema holds no store or another
//! version.
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
//! [`Error::Backend`] with [`BackendFailure::Unavailable`](crate::backend::BackendFailure::Unavailable): the call may or
//! may not have taken effect, and nothing is guessed. A server's refusal (a
//! serialization failure, a deadlock, a constraint violation, a read-only
//! standby) is [`BackendFailure::Refused`](crate::backend::BackendFailure::Refused): nothing was done. Retrying a
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
//! use idemkv::backend::postgres::PostgresBackend;
//! use idemkv::{backend::{BackendClaim, ClaimOptions, IdempotencyBackend}, Config, Fingerprint};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The owner has run `idemkv migrate --postgres postgres://owner@127.0.0.1/shop`.
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

mod connector;
mod keyspace;
mod migrations;
mod options;
mod reaper;
mod reply;
mod schema;
mod statements;
mod wait;

use crate::backend::remote::{
    fenced, remote_backend, runtime, Address, ClaimArgs, Finish, Settings, Subscription, Transport,
};
use crate::backend::BackendClaim;
use crate::config::{Backend, Config};
use crate::error::{Error, Result};
use crate::record::Record;
use crate::{Keyspace, LeaseToken};
use connector::Connector;
use deadpool_postgres::{Pool, Runtime};
pub use options::{
    PostgresOptions, Reaping, POOL_SIZE_DEFAULT, REAP_BATCH_DEFAULT, REAP_INTERVAL_DEFAULT, SCHEMA_DEFAULT,
};
use reaper::Elected;
pub use reaper::Reaper;
use reply::{pool_error, postgres_error, protocol, timed_out};
pub use schema::Migration;
use statements::Statements;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Row, Transaction};
use wait::{Listening, Stop};
/// The pool and client crates, at the versions this build uses.
pub use {deadpool_postgres, tokio_postgres};

/// What this backend honours of a [`Config`]. A scope and key are the
/// table's primary key, and a B-tree entry of 8 KiB pages holds at most
/// 2,704 bytes: 8 of entry header, 4 of length before each of the two
/// (over 126 bytes) and up to 3 of padding between them leave 2,685 for
/// the two, however incompressible, of which a keyspace takes up to 2.
const BACKEND: Backend = Backend { name: "postgres", scope_and_key_bytes_max: 2685 - keyspace::OVERHEAD };
/// How long a call waits for a connection and its answer before it is
/// [`BackendFailure::Unavailable`](crate::backend::BackendFailure::Unavailable).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first wait lets the listener connect before it polls.
const LISTEN_PATIENCE: Duration = Duration::from_secs(1);

/// The claim contract on a PostgreSQL server. Clones share the pool.
#[derive(Clone)]
pub struct PostgresBackend {
    pool: Pool,
    settings: Settings,
    sql: Arc<Statements>,
    listening: Arc<Listening>,
    reaper: Option<Arc<Elected>>,
    /// The runtime the backend was connected on: every connection it
    /// opens is made and driven there ([`runtime::on`]).
    runtime: Handle,
    _stop: Arc<Stop>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PostgresBackend").field("pool", &self.pool.status()).finish_non_exhaustive()
    }
}

/// The client's configuration from a URL or key-value string.
fn parse(url: &str) -> Result<tokio_postgres::Config> {
    url.parse().map_err(|error| Error::InvalidConfig(format!("postgres: {error}")))
}

/// The pool of a backend; connections open on demand.
fn pool(connect: &tokio_postgres::Config, connector: &Connector, size: usize) -> Result<Pool> {
    Pool::builder(connector.manager(connect))
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(CALL_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|error| Error::InvalidConfig(format!("postgres pool: {error}")))
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
    /// key-value string (`host=... dbname=...`) and the default
    /// [`PostgresOptions`]: schema `public`, a pool of
    /// [`POOL_SIZE_DEFAULT`] connections, the elected reaper. Runs no DDL:
    /// the schema must have been migrated ([`migrate`](PostgresBackend::migrate)).
    /// `config` gives the default lease and TTL and the size limits
    /// ([`Config::default_lease`], [`Config::default_ttl`],
    /// [`Config::key_bytes_max`], ...), checked before anything is sent. A
    /// setting only the embedded store honours (its shards, durability,
    /// segments, compaction, waiter limits, clock, storage or quotas) is
    /// refused, not ignored: the table in [`Config`]'s docs lists which
    /// settings apply.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL or a value out of range (as
    /// [`Store::open`](crate::Store::open) refuses it: a zero lease or TTL,
    /// say); [`Error::UnsupportedSetting`] for a setting of the embedded
    /// store alone; [`Error::SchemaVersion`] when the schema holds no store
    /// or one at another version; [`Error::MissingPrivileges`] when the role
    /// lacks a privilege the calls need; [`Error::Backend`] when the server
    /// cannot be reached.
    pub async fn connect(url: &str, config: Config) -> Result<PostgresBackend> {
        PostgresBackend::connect_with_options(parse(url)?, config, PostgresOptions::new()).await
    }

    /// As [`connect`](PostgresBackend::connect), with the client's
    /// configuration and a pool of `pool_size` connections (plus one that
    /// listens for `claim_wait`, opened at the first wait, and the
    /// reaper's).
    ///
    /// # Errors
    /// As [`connect`](PostgresBackend::connect).
    pub async fn connect_with(
        connect: tokio_postgres::Config,
        pool_size: usize,
        config: Config,
    ) -> Result<PostgresBackend> {
        PostgresBackend::connect_with_options(connect, config, PostgresOptions::new().pool_size(pool_size)).await
    }

    /// As [`connect`](PostgresBackend::connect), with the client's
    /// configuration and every [`PostgresOptions`]: the schema, the pool,
    /// whether to migrate first, the reaper.
    ///
    /// ```no_run
    /// use idemkv::{backend::{postgres::{PostgresBackend, PostgresOptions}}};
    /// use idemkv::Config;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = "postgres://billing_app@db/shop".parse()?;
    /// let options = PostgresOptions::new().schema("billing_idemkv");
    /// let backend = PostgresBackend::connect_with_options(client, Config::new(), options).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`connect`](PostgresBackend::connect); with
    /// [`PostgresOptions::migrate_on_connect`], as
    /// [`migrate`](PostgresBackend::migrate) too.
    pub async fn connect_with_options(
        mut connect: tokio_postgres::Config,
        config: Config,
        options: PostgresOptions,
    ) -> Result<PostgresBackend> {
        let settings = Settings::new(config, BACKEND)?;
        let schema = options.checked_schema()?;
        let runtime = runtime::current(BACKEND.name)?;
        if connect.get_connect_timeout().is_none() {
            connect.connect_timeout(CONNECT_TIMEOUT);
        }
        if options.migrate {
            PostgresBackend::migrate_with(connect.clone(), &options).await?;
        }
        let connector = Connector::of(&options)?;
        let pool = pool(&connect, &connector, options.pool_size)?;
        let client = pool.get().await.map_err(pool_error)?;
        schema::check(&client, &schema).await?;
        drop(client);
        let reaper = match options.reaping {
            Reaping::Elected { interval, batch } => {
                Some(Arc::new(Elected::spawn(connect.clone(), connector.clone(), &schema, interval, batch)))
            }
            Reaping::Off => None,
        };
        let (listening, stop) = Listening::new(connect, connector, runtime.clone());
        let sql = Arc::new(Statements::of(&schema));
        Ok(PostgresBackend { pool, settings, sql, listening, reaper, runtime, _stop: stop })
    }

    /// As [`connect`](PostgresBackend::connect), over TLS trusting what
    /// `tls` says (feature `tls`), for every connection: the pool's, the
    /// one that listens and the reaper's (see [`PostgresOptions::tls`]).
    /// The URL's `sslmode` says whether the server must take TLS
    /// (`require`) or may refuse it (`prefer`, the default); the
    /// certificate is checked against the host name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn connect() -> Result<(), idemkv::Error> {
    /// use idemkv::backend::postgres::PostgresBackend;
    /// use idemkv::{backend::Tls, Config};
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
    pub async fn connect_tls(url: &str, config: Config, tls: &crate::backend::Tls) -> Result<PostgresBackend> {
        PostgresBackend::connect_with_options(parse(url)?, config, PostgresOptions::new().tls(tls.clone())).await
    }

    /// Creates or upgrades the store in `options`' schema (creating the
    /// schema if missing) to [`schema_version`](PostgresBackend::schema_version):
    /// the one step that runs DDL, for the role that is to own the
    /// objects, once per release before the services connect (the tool
    /// runs it: `idemkv migrate --postgres URL`). Safe to run again, and
    /// from several places at once (an advisory lock serializes them).
    /// Only [`PostgresOptions::schema`] is read of `options`.
    ///
    /// ```no_run
    /// use idemkv::{backend::{postgres::{PostgresBackend, PostgresOptions}}};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let done = PostgresBackend::migrate("postgres://owner@db/shop", &PostgresOptions::new()).await?;
    /// println!("schema {} from version {} to {}", done.schema, done.from, done.to);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL or schema name;
    /// [`Error::SchemaVersion`] for a schema migrated by a newer build;
    /// [`Error::Backend`] when the server cannot be reached or refuses the
    /// DDL (a role without `CREATE` on the schema, say: nothing is
    /// changed, the migration is one transaction).
    pub async fn migrate(url: &str, options: &PostgresOptions) -> Result<Migration> {
        PostgresBackend::migrate_with(parse(url)?, options).await
    }

    /// As [`migrate`](PostgresBackend::migrate), with the client's
    /// configuration.
    ///
    /// # Errors
    /// As [`migrate`](PostgresBackend::migrate).
    pub async fn migrate_with(mut connect: tokio_postgres::Config, options: &PostgresOptions) -> Result<Migration> {
        let schema = options.checked_schema()?;
        if connect.get_connect_timeout().is_none() {
            connect.connect_timeout(CONNECT_TIMEOUT);
        }
        let mut client = Connector::of(options)?.connect(&connect).await.map_err(postgres_error)?;
        schema::migrate(&mut client, &schema).await
    }

    /// Whether this backend's elected reaper holds the fleet's reaper lock
    /// now (`false` with [`Reaping::Off`]): of the instances on one
    /// schema, at most one answers `true` at a time.
    #[must_use]
    pub fn reaping(&self) -> bool {
        self.reaper.as_ref().is_some_and(|reaper| reaper.reaping.leading())
    }

    /// Expired rows this backend's elected reaper has deleted so far.
    #[must_use]
    pub fn reaped(&self) -> u64 {
        self.reaper.as_ref().map_or(0, |reaper| reaper.reaping.deleted())
    }

    /// The pool, for the caller's own transactions
    /// ([`complete_in`](PostgresBackend::complete_in)). A connection it
    /// opens for the caller's `get` is driven by the caller's runtime.
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
        let row = self.call("reap", &self.sql.reap, &[&batch]).await?;
        let deleted: i64 = row.try_get(0).map_err(|_| protocol("reap: count"))?;
        u64::try_from(deleted).map_err(|_| protocol("reap: count"))
    }

    /// Runs [`reap`](PostgresBackend::reap) in the background every
    /// `interval`, batch after batch while batches come back full (up to a
    /// bound per pass); it stops when the returned [`Reaper`] drops. Needs
    /// a tokio runtime. Unlike the elected reaper every backend starts
    /// ([`Reaping`]), it takes no lock: for a backend connected with
    /// [`Reaping::Off`] whose caller decides where reaping runs.
    #[must_use]
    pub fn spawn_reaper(&self, interval: Duration, batch: u32) -> Reaper {
        Reaper::spawn(self.clone(), interval, batch.max(1))
    }

    /// One statement on a pooled connection, prepared once per connection,
    /// answering one row.
    async fn call(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        self.call_optional(what, sql, params).await?.ok_or_else(|| protocol(what))
    }

    /// The rows of a page of a scope, in a transaction of its own whose
    /// planner may not sort ([`statements::NO_SORT`]): a page is then always
    /// a range of an index read in its order from the cursor on, never every
    /// row of the scope after the cursor gathered and sorted — the plan a
    /// table without statistics yet (one just filled, before autovacuum's
    /// `ANALYZE`) otherwise gets for a prepared statement's first runs,
    /// which made a scope's scan quadratic.
    async fn call_page(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let call = async {
            let mut client = runtime::on(&self.runtime, self.pool.get()).await.map_err(pool_error)?;
            let transaction = client.transaction().await.map_err(postgres_error)?;
            transaction.batch_execute(statements::NO_SORT).await.map_err(postgres_error)?;
            let statement = transaction.prepare_cached(sql).await.map_err(postgres_error)?;
            let rows = transaction.query(&statement, params).await.map_err(postgres_error)?;
            transaction.commit().await.map_err(postgres_error)?;
            Ok(rows)
        };
        tokio::time::timeout(CALL_TIMEOUT, call).await.map_err(|_| timed_out(what))?
    }

    async fn call_optional(&self, what: &str, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        let call = async {
            let client = runtime::on(&self.runtime, self.pool.get()).await.map_err(pool_error)?;
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
        let scope = keyspace::stored(token.keyspace, &token.scope);
        let (scope, key, kind) = (scope.as_ref(), token.key.as_slice(), finish.code());
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&scope, Type::BYTEA),
            (&key, Type::BYTEA),
            (&number, Type::INT8),
            (&kind, Type::TEXT),
            (&response, Type::BYTEA),
        ];
        let call = transaction.query_typed(&self.sql.finish, &params);
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
        let scope = keyspace::stored(token.keyspace, &token.scope);
        let scope = scope.as_ref();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&scope, &token.key, &number];
        params.extend_from_slice(rest);
        held(&self.call(what, sql, &params).await?, what)
    }
}

/// The answer of a fenced function: whether the token held the key.
fn held(row: &Row, what: &str) -> Result<bool> {
    row.try_get::<_, bool>(0).map_err(|_| protocol(what))
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
        let stored = keyspace::stored(args.keyspace, args.scope);
        let (scope, key, fingerprint, reuse) =
            (stored.as_ref(), args.key, &args.fingerprint.as_bytes()[..], args.reuse_arg());
        let (lease_ms, ttl_ms) = (ms(args.lease_ms), ms(args.ttl_ms));
        let params: [&(dyn ToSql + Sync); 7] = [&scope, &key, &fingerprint, &lease_ms, &ttl_ms, &waiting, &reuse];
        // The fast path: one plain statement inserts a fresh key, or
        // answers from the row there what writes nothing; `S` (or no row:
        // one inserted by a transaction the statement's snapshot does not
        // see) leaves the claim to the function.
        if let Some(row) = self.call_optional("claim", &self.sql.claim_fast, &params).await? {
            if row.try_get::<_, &str>(0).map_err(|_| protocol("claim: answer"))? != "S" {
                return reply::claim(args.address(), &row);
            }
        }
        let row = self.call("claim", &self.sql.claim, &params).await?;
        reply::claim(args.address(), &row)
    }

    /// Woken by the finishing function's `NOTIFY`, through the listener
    /// connection.
    async fn listen<'a>(&'a self, address: Address<'a>, wait: Duration) -> Subscription<'a> {
        let tag = wait::tag(&keyspace::stored(address.keyspace, address.scope), address.key);
        let event = self.listening.join(&tag);
        let leave = Leave { listening: &self.listening, tag };
        // Without the listener the wait still ends: by polling.
        let _listening = self.listening.ensure(LISTEN_PATIENCE.min(wait)).await;
        Subscription { event, _leave: Box::new(leave) }
    }

    /// A completion or failure is one plain statement (what
    /// `idemkv_finish` does, without PL/pgSQL), and a `NOTIFY` only when a
    /// waiting caller marked the row; a release is the function.
    async fn finish(&self, token: &LeaseToken, finish: Finish, response: &[u8]) -> Result<bool> {
        if matches!(finish, Finish::Complete | Finish::Fail) {
            let Some(number) = signed(token) else {
                return Ok(false);
            };
            let kind = finish.code();
            let scope = keyspace::stored(token.keyspace, &token.scope);
            let scope = scope.as_ref();
            let params: [&(dyn ToSql + Sync); 5] = [&scope, &token.key, &number, &kind, &response];
            let Some(row) = self.call_optional("finish", &self.sql.finish_fast, &params).await? else {
                return Ok(false);
            };
            if row.try_get::<_, bool>(0).map_err(|_| protocol("finish: waited"))? {
                // The finish took effect; a lost wake-up only leaves the
                // waiters to their polling.
                let _polled_instead = self.call("finish", &self.sql.notify, &[&scope, &token.key]).await;
            }
            return Ok(true);
        }
        self.fenced_call("finish", &self.sql.finish, token, &[&finish.code(), &response]).await
    }

    async fn checkpoint(&self, token: &LeaseToken, point: &[u8]) -> Result<bool> {
        self.fenced_call("checkpoint", &self.sql.checkpoint, token, &[&point]).await
    }

    async fn renew(&self, token: &LeaseToken, extend_ms: u64) -> Result<bool> {
        self.fenced_call("renew", &self.sql.renew, token, &[&ms(extend_ms)]).await
    }

    async fn get(&self, address: Address<'_>) -> Result<Option<Record>> {
        let (scope, key) = (keyspace::stored(address.keyspace, address.scope), address.key);
        match self.call_optional("get", &self.sql.get, &[&scope.as_ref(), &key]).await? {
            Some(row) => reply::record(address, &row).map(Some),
            None => Ok(None),
        }
    }

    async fn now_ms(&self) -> Result<u64> {
        let row = self.call("now", &self.sql.now, &[]).await?;
        let now: i64 = row.try_get(0).map_err(|_| protocol("now: not a number"))?;
        u64::try_from(now).map_err(|_| protocol("now: before the epoch"))
    }

    async fn remove(&self, address: Address<'_>) -> Result<bool> {
        let (scope, key) = (keyspace::stored(address.keyspace, address.scope), address.key);
        let row = self.call("remove", &self.sql.remove, &[&scope.as_ref(), &key]).await?;
        row.try_get(0).map_err(|_| protocol("remove: not a boolean"))
    }

    async fn replace(&self, address: Address<'_>, expected: &[u8], answer: &[u8]) -> Result<bool> {
        let (scope, key) = (keyspace::stored(address.keyspace, address.scope), address.key);
        let params: [&(dyn ToSql + Sync); 4] = [&scope.as_ref(), &key, &expected, &answer];
        let replaced = self.call_optional("replace", &self.sql.replace, &params).await?;
        Ok(replaced.is_some())
    }

    async fn scan(&self, keyspace: Keyspace, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.page(&self.sql.scan, keyspace, scope, (after, limit)).await
    }

    async fn scan_staged(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.page(&self.sql.scan_staged, Keyspace::Caller, scope, (after, limit)).await
    }
}

impl PostgresBackend {
    /// The rows of `statement` (`scan`'s or `scan_staged`'s) for `scope`
    /// of `keyspace`, after a key, at most a limit.
    async fn page(
        &self,
        statement: &str,
        keyspace: Keyspace,
        scope: &[u8],
        (after, limit): (Option<&[u8]>, usize),
    ) -> Result<Vec<Record>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let stored = keyspace::stored(keyspace, scope);
        let rows = self.call_page("scan", statement, &[&stored.as_ref(), &after, &limit]).await?;
        rows.iter()
            .map(|row| {
                let key: Vec<u8> = row.try_get(11).map_err(|_| protocol("scan: key"))?;
                reply::record(Address { keyspace, scope, key: &key }, row)
            })
            .collect()
    }
}
