//! The claim contract on Redis or Valkey, standalone or Cluster (feature
//! `redis`): [`RedisBackend`] implements [`IdempotencyBackend`](crate::backend::IdempotencyBackend), so the
//! HTTP layer runs on it unchanged and a fleet of service instances shares
//! one store. Its connections, reconnections included, are made and
//! driven on the tokio runtime [`connect`](RedisBackend::connect) ran on,
//! whatever runtime a call comes from: keep that runtime running as long
//! as the backend (under actix-web, connect in `main`, not in a worker).
//!
//! Every transition is one round trip: a Lua script run by SHA, or, for
//! the claim of a fresh key and the claims that write nothing (a replay,
//! a mismatch, in progress), one transaction of bare commands (`SET … NX
//! GET PX`, `PEXPIRETIME`, `TIME`), a fifth of a script's cost on the
//! server (Redis 7.0 or later; an older server runs the script). All a
//! call touches for `(scope, key)` — the record, its channel and the
//! indexes it is filed in — carries one hash tag, so it lives in one
//! Cluster slot, and the step that writes a record files it in its
//! scope's indexes, so that a scan reads one scope and a relay's sweep
//! the keys with staged messages alone (`index`; on a Cluster a scope's
//! indexes sit in 16 slots, its records spread among them: `names`).
//! Leases and TTLs run on the server's clock (`TIME`, and
//! the key's expiry for a fresh claim), never a client's: a fleet's
//! clocks disagree. Records leave
//! through Redis's own expiry (`PX`), [`token_keep`](RedisBackend::token_keep)
//! after they stop being live (their fencing token outlives them that
//! long): no reaper, memory stays flat. `claim_wait` is woken by a publish of the finishing script
//! (sharded pub/sub on a Cluster), with polling as the fallback; a finish
//! publishes only when a waiting caller marked the record (the scripts'
//! docs say why none is missed).
//!
//! Checkpoints ([`IdempotencyBackend::checkpoint`](crate::backend::IdempotencyBackend::checkpoint)) and reuse policies
//! ([`ClaimOptions::reuse`](crate::backend::ClaimOptions::reuse)) work as on the embedded store: the checkpoint
//! is a field of the record, fenced like a renewal, handed to a
//! takeover and kept for the one after it, dropped when the key is
//! finished, released or removed; it lasts as long as the record does,
//! across a restart on the AOF. A record written by an earlier version
//! has no such field and reads as one without a checkpoint.
//!
//! # Configuration
//!
//! [`RedisBackend::connect`] takes the [`Config`] of the embedded store and checks it as
//! [`Store::open`](crate::Store::open) does: a value out of range is
//! [`Error::InvalidConfig`]. The default lease and TTL, the longest
//! duration and the size limits apply; a setting of the embedded store
//! alone (shards, durability, segments, compaction, waiter limits, clock,
//! storage, quotas) is refused with [`Error::UnsupportedSetting`] rather
//! than ignored. The table in [`Config`]'s docs lists every setting.
//!
//! # What Redis must be set to
//!
//! Read at connect with `CONFIG GET` (on every master of a Cluster) and
//! judged as [`ServerChecks`] say; by default the first is refused and the
//! others warned about ([`RedisBackend::server_report`]):
//!
//! - **`maxmemory-policy noeviction`**: any other policy evicts live
//!   records when memory is full (`volatile-*` too: every record has a
//!   TTL), and the retry of an evicted key runs twice, with no crash at
//!   all. Under `noeviction` a full server refuses claims
//!   ([`BackendFailure::Refused`](crate::backend::BackendFailure::Refused)) instead.
//! - **Persistence**: `appendonly yes` with `appendfsync always` for no
//!   loss of an acknowledged answer at a crash of the server;
//!   `appendfsync everysec` may lose the last second at a crash of the
//!   machine, `no` what the OS has not written, `appendonly no` everything
//!   since the last snapshot: a claim or completion lost that way lets a
//!   retry run the side effect again.
//! - A server that refuses `CONFIG GET` (managed services rename or
//!   disable it) cannot be checked: a warning by default, and the report
//!   says so.
//! - **Failover**: replication is asynchronous; a replica promoted after
//!   its primary died may lack the newest writes, with the same effect as
//!   a lost write above. [`RedisBackend::wait_for_replicas`] closes that
//!   for the replicas it waits for: each transition a failover must not
//!   lose is answered only once they acknowledged it (`WAIT`), else
//!   [`Error::NotReplicated`].
//!
//! # Errors and retries
//!
//! A lost connection or a timeout is [`Error::Backend`] with
//! [`BackendFailure::Unavailable`](crate::backend::BackendFailure::Unavailable): the call may or may not have taken
//! effect, and nothing is guessed. Retrying a claim is safe (the worst
//! case is `InProgress` until the lost lease ends, then a recovered
//! attempt); retrying a completion with the same token is safe (a second
//! one answers `LeaseLost` when the first took effect: `get` tells).
//!
//! # Examples
//!
//! ```no_run
//! use idemkv::backend::redis::RedisBackend;
//! use idemkv::{backend::{BackendClaim, ClaimOptions, IdempotencyBackend}, Config, Fingerprint};
//!
//! # async fn run() -> Result<(), idemkv::Error> {
//! let backend = RedisBackend::connect("redis://127.0.0.1:6379", Config::new()).await?;
//! let fingerprint = Fingerprint::of(b"POST /payments amount=10");
//! match backend.claim(b"account-42", b"order-1", fingerprint, ClaimOptions::new()).await? {
//!     BackendClaim::Acquired { token, .. } => backend.complete(&token, b"201 charged").await?,
//!     BackendClaim::Replay(response) => assert_eq!(response, b"201 charged"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

mod connection;
mod fast;
mod index;
mod migrate;
mod names;
mod reply;
mod scan;
mod scripts;
mod server;
mod wait;

pub use server::{Check, Finding, Risk, ServerChecks, ServerReport};

use crate::backend::remote::wake::Waits;
use crate::backend::remote::{millis, remote_backend, Address, ClaimArgs, Finish, Settings, Subscription, Transport};
use crate::backend::BackendClaim;
use crate::config::{Backend, Config};
use crate::error::{Error, Result};
use crate::record::Record;
use crate::{Keyspace, LeaseToken};
use ::redis::{Script, Value};
use connection::{Call, Connection, Lanes, Opener};
use names::{Layout, Names};
use reply::{bytes, number, protocol};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long Redis keeps a record after it stopped being live (expired,
/// released, removed) by default, for its fencing token: the
/// server clock may go back by less than this without a token repeating.
pub const TOKEN_KEEP_DEFAULT: Duration = Duration::from_secs(3600);

/// What this backend honours of a [`Config`]: a scope and key are bytes
/// of the record's value, not of its name (a digest), so the `Config`'s
/// own limits are the only ones.
const BACKEND: Backend = Backend { name: "redis", scope_and_key_bytes_max: usize::MAX };

/// The claim contract on a Redis / Valkey server or Cluster.
#[derive(Clone)]
pub struct RedisBackend {
    connection: Connection,
    settings: Settings,
    prefix: Arc<str>,
    /// How the server's names are spelt: [`Layout::Buckets`] on a
    /// Cluster.
    layout: Layout,
    /// Set once the server's records are where this build looks for
    /// them (see `migrate`), for this prefix.
    migrated: Arc<tokio::sync::OnceCell<()>>,
    keep_ms: u64,
    waits: Arc<Waits>,
    scripts: Arc<Scripts>,
    report: Arc<ServerReport>,
    replication: Option<Replication>,
    lanes: Arc<Lanes>,
    /// Whether claims take [`fast`]'s path (the server runs Redis 7.0 or
    /// later).
    fast_claims: bool,
    /// The indexes of the scope the last call named (see
    /// [`RedisBackend::filed`]).
    last_scope: Arc<parking_lot::Mutex<Option<LastScope>>>,
}

/// The names of a scope's indexes, kept for the next call of that scope:
/// most calls of a service name the scope the call before named, and
/// making the names costs a digest and four buffers.
struct LastScope {
    keyspace: Keyspace,
    scope: Vec<u8>,
    index: Arc<names::ScopeIndex>,
}

/// How many replicas a transition that must survive a failover waits
/// for, and how long at most.
#[derive(Debug, Clone, Copy)]
struct Replication {
    replicas: u32,
    timeout: Duration,
}

struct Scripts {
    claim: Script,
    finish: Script,
    renew: Script,
    checkpoint: Script,
    remove: Script,
    replace: Script,
    get: Script,
    page: Script,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RedisBackend")
            .field("cluster", &self.connection.is_cluster())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects to a standalone server (`redis://host:port/db`; with the
    /// feature `tls`, `rediss://` for TLS trusting the Mozilla roots, and
    /// see [`connect_tls`](RedisBackend::connect_tls)). The connection is
    /// multiplexed and reconnects by itself; `config` gives the default
    /// lease and TTL and the size limits ([`Config::default_lease`],
    /// [`Config::default_ttl`], [`Config::key_bytes_max`], ...), checked
    /// before anything is sent. A setting only the embedded store honours
    /// (its shards, durability, segments, compaction, waiter limits, clock,
    /// storage or quotas) is refused, not ignored: the table in
    /// [`Config`]'s docs lists which settings apply. The server's own
    /// settings are judged by the default [`ServerChecks`]: an evicting
    /// `maxmemory-policy` is refused; `appendonly no`, an `appendfsync`
    /// other than `always` and a server that refuses `CONFIG GET` are
    /// warned about ([`server_report`](RedisBackend::server_report));
    /// [`connect_with`](RedisBackend::connect_with) chooses otherwise.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL or a value out of range (as
    /// [`Store::open`](crate::Store::open) refuses it: a zero lease or TTL,
    /// say); [`Error::UnsupportedSetting`] for a setting of the embedded
    /// store alone; [`Error::Backend`] when the server cannot be reached;
    /// [`Error::UnsafeServerSetting`] for an evicting `maxmemory-policy`.
    pub async fn connect(url: &str, config: Config) -> Result<RedisBackend> {
        RedisBackend::connect_with(url, config, ServerChecks::new()).await
    }

    /// Connects to a standalone server over TLS (a `rediss://` URL),
    /// trusting what `tls` says (feature `tls`). The certificate's name is
    /// checked against the URL's host; the server's settings are judged as
    /// [`connect`](RedisBackend::connect)'s are, and the connections of
    /// [`wait_for_replicas`](RedisBackend::wait_for_replicas) go over TLS
    /// too.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn connect() -> Result<(), idemkv::Error> {
    /// use idemkv::backend::redis::RedisBackend;
    /// use idemkv::{backend::Tls, Config};
    ///
    /// let ca = std::fs::read("/etc/idemkv/redis-ca.pem").expect("the CA");
    /// let backend = RedisBackend::connect_tls("rediss://redis.internal:6380", Config::new(), &Tls::ca_pem(&ca)?).await?;
    /// # let _ = backend;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`connect`](RedisBackend::connect); [`Error::InvalidConfig`] for
    /// a URL that is not `rediss://`; [`Error::Backend`] when the handshake
    /// fails (a certificate that `tls` does not trust, or for another
    /// name).
    #[cfg(feature = "tls")]
    pub async fn connect_tls(url: &str, config: Config, tls: &crate::backend::Tls) -> Result<RedisBackend> {
        RedisBackend::connect_single(url, config, ServerChecks::new(), Some(tls)).await
    }

    /// [`connect`](RedisBackend::connect), judging the server's settings as
    /// `checks` say: its `maxmemory-policy`, `appendonly` and
    /// `appendfsync`, read with `CONFIG GET` (see [`ServerChecks`] and
    /// [`server_report`](RedisBackend::server_report)).
    ///
    /// ```no_run
    /// use idemkv::{backend::{redis::{Check, RedisBackend, ServerChecks}}};
    /// use idemkv::Config;
    ///
    /// # async fn run() -> Result<(), idemkv::Error> {
    /// // A cache-sized server with `appendfsync everysec`, taken knowingly.
    /// let checks = ServerChecks::new().persistence(Check::Ignore);
    /// let backend = RedisBackend::connect_with("redis://127.0.0.1:6379", Config::new(), checks).await?;
    /// assert!(backend.server_report().findings.iter().all(|finding| finding.setting != "maxmemory-policy"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`connect`](RedisBackend::connect), and
    /// [`Error::UnsafeServerSetting`] for a setting `checks` refuse.
    pub async fn connect_with(url: &str, config: Config, checks: ServerChecks) -> Result<RedisBackend> {
        RedisBackend::connect_single(url, config, checks, None).await
    }

    async fn connect_single(
        url: &str,
        config: Config,
        checks: ServerChecks,
        tls: Option<&connection::Tls>,
    ) -> Result<RedisBackend> {
        let settings = Settings::new(config, BACKEND)?;
        let waits = Arc::new(Waits::default());
        let pushes = wait::Pushes(Arc::clone(&waits));
        let connection = Connection::single(url, Some(pushes), tls).await?;
        let opener = Opener::Single(url.to_string(), tls.cloned());
        RedisBackend::checked(connection, opener, settings, waits, checks).await
    }

    /// Connects to a Cluster through any of its nodes; every master's
    /// settings are judged as [`connect`](RedisBackend::connect)'s are.
    ///
    /// # Errors
    /// As [`connect_with`](RedisBackend::connect_with).
    pub async fn connect_cluster(nodes: &[&str], config: Config) -> Result<RedisBackend> {
        RedisBackend::connect_cluster_with(nodes, config, ServerChecks::new()).await
    }

    /// [`connect_cluster`](RedisBackend::connect_cluster) with `checks`
    /// for every master's settings.
    ///
    /// # Errors
    /// As [`connect_with`](RedisBackend::connect_with).
    pub async fn connect_cluster_with(nodes: &[&str], config: Config, checks: ServerChecks) -> Result<RedisBackend> {
        let settings = Settings::new(config, BACKEND)?;
        let waits = Arc::new(Waits::default());
        let pushes = wait::Pushes(Arc::clone(&waits));
        let connection = Connection::cluster(nodes, Some(pushes)).await?;
        let opener = Opener::Cluster(nodes.iter().map(ToString::to_string).collect());
        RedisBackend::checked(connection, opener, settings, waits, checks).await
    }

    async fn checked(
        connection: Connection,
        opener: Opener,
        settings: Settings,
        waits: Arc<Waits>,
        checks: ServerChecks,
    ) -> Result<RedisBackend> {
        let report = server::assess(&connection.settings().await?, checks)?;
        let fast_claims = connection.version_7().await?;
        let lanes = Lanes::new(opener, crate::backend::remote::runtime::current(BACKEND.name)?);
        Ok(RedisBackend::with(connection, lanes, settings, waits, report, fast_claims))
    }

    /// What was found of the servers' settings at connect: every setting
    /// that can break the promise and was warned about or ignored (empty
    /// for servers set as the promise needs). A server that refused
    /// `CONFIG GET` has a [`Risk::Unreadable`] finding: nothing of it was
    /// checked.
    #[must_use]
    pub fn server_report(&self) -> &ServerReport {
        &self.report
    }

    fn with(
        connection: Connection,
        lanes: Lanes,
        settings: Settings,
        waits: Arc<Waits>,
        report: ServerReport,
        fast_claims: bool,
    ) -> RedisBackend {
        RedisBackend {
            layout: if connection.is_cluster() { Layout::Buckets } else { Layout::Digest },
            fast_claims,
            lanes: Arc::new(lanes),
            report: Arc::new(report),
            replication: None,
            connection,
            settings,
            prefix: Arc::from("idemkv"),
            migrated: Arc::default(),
            keep_ms: millis(TOKEN_KEEP_DEFAULT),
            waits,
            last_scope: Arc::default(),
            scripts: Arc::new(Scripts {
                claim: Script::new(scripts::CLAIM),
                finish: Script::new(scripts::FINISH),
                renew: Script::new(scripts::RENEW),
                checkpoint: Script::new(scripts::CHECKPOINT),
                remove: Script::new(scripts::REMOVE),
                replace: Script::new(scripts::REPLACE),
                get: Script::new(scripts::GET),
                page: Script::new(scripts::PAGE),
            }),
        }
    }

    /// Names every key with `prefix` (default `idemkv`), so that several
    /// services can share a server. On a Cluster a prefix with a hash tag
    /// (`app{t}`) puts every name in that one slot; a prefix with a `{`
    /// that no `}` closes, or an empty `{}`, would split a record from its
    /// scope's indexes, and every call refuses it
    /// ([`Error::InvalidConfig`]) before anything is written.
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Arc::from(prefix);
        self.migrated = Arc::default();
        self.last_scope = Arc::default();
        self
    }

    /// How long Redis keeps a record after it stopped being live (expired,
    /// released, removed; default an hour), absent to every call but for
    /// its fencing token: tokens of a key never repeat as long as the
    /// server clock never goes back by more than this. It costs that much
    /// longer in memory per record.
    #[must_use]
    pub fn token_keep(mut self, keep: Duration) -> Self {
        self.keep_ms = millis(keep);
        self
    }

    /// Waits, after every transition a failover must not lose (a claim
    /// that acquires, complete, fail, checkpoint, renew, replace), until
    /// `replicas` replicas acknowledged it, at most `timeout` (`WAIT`, in
    /// the same pipeline as the transition): fewer in time is
    /// [`Error::NotReplicated`], the transition standing on the primary.
    /// Off by default (a standalone server has no replica to wait for).
    /// `replicas` 0 turns it off; `timeout` is taken between 1 ms (`WAIT`
    /// with 0 would wait forever) and 4 s (under the answer timeout, so
    /// a slow replica is `NotReplicated`, not `Unavailable`).
    ///
    /// The timeout bounds each call, however many wait at once: it is
    /// counted from the start of the transition, and every `WAIT` is sent
    /// with what is left of it. A `WAIT` holds its connection until the
    /// replicas answer, so each waited transition has a connection of its
    /// own while it runs (opened as needed, at most 64, kept once open;
    /// past 64 at once a transition waits for one within its own
    /// timeout). A claim that writes nothing (a replay, a mismatch, a key
    /// in progress) is read first, with no write, and waits for nothing.
    /// What it protects and costs is in `docs/fleets.md`.
    ///
    /// ```no_run
    /// use idemkv::backend::redis::RedisBackend;
    /// use idemkv::Config;
    /// use std::time::Duration;
    ///
    /// # async fn run() -> Result<(), idemkv::Error> {
    /// let backend = RedisBackend::connect("redis://10.0.0.5:6379", Config::new())
    ///     .await?
    ///     .wait_for_replicas(1, Duration::from_millis(500));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        let longest = connection::RESPONSE_TIMEOUT.saturating_sub(Duration::from_secs(1));
        let timeout = Duration::from_millis(millis(timeout).clamp(1, millis(longest)));
        self.replication = (replicas > 0).then_some(Replication { replicas, timeout });
        self
    }

    /// Runs `call`, waiting for the replicas when it `must_survive` a
    /// failover and the backend waits for them: the answer, and how many
    /// acknowledged (`None` when not waited for). The wait is counted
    /// from here, a connection of its own taken or not: its answer is due
    /// when the wait ends, however many transitions wait at once.
    async fn send(&self, call: &Call<'_>, must_survive: bool) -> Result<(Value, Option<u64>)> {
        match self.replication {
            Some(Replication { replicas, timeout }) if must_survive => {
                let deadline = Instant::now() + timeout;
                let lane = self.lanes.take().await?;
                let answered = lane.connection().invoke_then_wait(call, replicas, deadline).await;
                // Answered, or refused by the server (which answered every
                // command sent): nothing is left running on the connection.
                if matches!(
                    &answered,
                    Ok(_) | Err(Error::Backend { failure: crate::backend::BackendFailure::Refused, .. })
                ) {
                    lane.put_back();
                }
                let (reply, acknowledged) = answered?;
                Ok((reply, Some(acknowledged)))
            }
            _ => Ok((self.connection.invoke(call).await?, None)),
        }
    }

    /// [`Error::NotReplicated`] when fewer replicas than waited for
    /// acknowledged `operation`.
    fn replicated(&self, operation: &'static str, acknowledged: Option<u64>) -> Result<()> {
        match (self.replication, acknowledged) {
            (Some(Replication { replicas, .. }), Some(acknowledged)) if acknowledged < u64::from(replicas) => {
                Err(Error::NotReplicated { backend: "redis", operation, acknowledged, required: replicas })
            }
            _ => Ok(()),
        }
    }

    /// Runs a fenced script: 1 when the token held the key. A transition
    /// that took effect is waited for as `operation` when it has one.
    async fn fenced(&self, call: &Call<'_>, operation: Option<&'static str>) -> Result<bool> {
        let (reply, acknowledged) = self.send(call, operation.is_some()).await?;
        let held = number(&reply)? == 1;
        if let (true, Some(operation)) = (held, operation) {
            self.replicated(operation, acknowledged)?;
        }
        Ok(held)
    }
}

/// Leaves a channel's waiters when a wait ends (or its future is
/// dropped); the last one unsubscribes, in the background.
struct Leave<'a> {
    backend: &'a RedisBackend,
    channel: Vec<u8>,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.backend.waits.leave(&self.channel) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let connection = self.backend.connection.clone();
                let channel = std::mem::take(&mut self.channel);
                runtime.spawn(async move { connection.unsubscribe(&channel).await });
            }
        }
    }
}

impl RedisBackend {
    /// The names of `address`'s record and channel (see [`names`]).
    fn names(&self, address: Address<'_>) -> Names {
        Names::of(&self.prefix, self.layout, address)
    }

    /// [`Names::filed`] for `address`; on a standalone server the scope's
    /// indexes taken from the last call's when it named the same scope
    /// (on a Cluster they are its bucket's, which the record's digest
    /// picks).
    fn filed(&self, address: Address<'_>) -> Names {
        if self.layout == Layout::Buckets {
            return Names::filed(&self.prefix, self.layout, address);
        }
        let mut names = self.names(address);
        let Address { keyspace, scope, .. } = address;
        let mut last = self.last_scope.lock();
        let index = match &*last {
            Some(kept) if kept.keyspace == keyspace && kept.scope == scope => Arc::clone(&kept.index),
            _ => {
                let index = Arc::new(names::ScopeIndex::of(&self.prefix, keyspace, scope, None));
                *last = Some(LastScope { keyspace, scope: scope.to_vec(), index: Arc::clone(&index) });
                index
            }
        };
        names.index = Some(index);
        names
    }

    /// The live record at `address`, if any (the `get` script: it
    /// settles and checks liveness as every read does).
    async fn read(&self, address: Address<'_>) -> Result<Option<Record>> {
        let names = self.names(address);
        let call = Call::new(&self.scripts.get, &names.record);
        match self.connection.invoke(&call).await? {
            Value::Array(fields) if fields.is_empty() => Ok(None),
            Value::Array(fields) => reply::record(address, &fields).map(Some),
            _ => Err(protocol("get: not an array")),
        }
    }

    /// Before the first call that names a record: the server's records of
    /// idemkv's own moved to their keyspaces, then, on a Cluster, every
    /// record moved to its scope's buckets, and on a standalone server
    /// every record filed in its scope's indexes — once per backend and
    /// prefix (an `EXISTS` each on a server already migrated).
    async fn ready(&self) -> Result<()> {
        if self.layout == Layout::Buckets && !names::tags_hold(&self.prefix) {
            return Err(Error::InvalidConfig(format!(
                "Redis prefix {:?} on a Cluster: an unclosed or empty hash tag (`{{` without a `}}` after it, or \
                 `{{}}`) would put a record and its scope's indexes in different slots; close the tag (`app{{t}}`: \
                 every name in one slot) or use no brace",
                &*self.prefix
            )));
        }
        let migrations = || async {
            migrate::keyspaces(self).await?;
            match self.layout {
                Layout::Buckets => migrate::buckets(self).await.map(drop),
                Layout::Digest => migrate::scopes(self).await.map(drop),
            }
        };
        self.migrated.get_or_try_init(migrations).await?;
        Ok(())
    }
}

remote_backend!(RedisBackend);

impl Transport for RedisBackend {
    fn settings(&self) -> &Settings {
        &self.settings
    }

    async fn claim_once(&self, args: &ClaimArgs<'_>, waiting: bool) -> Result<BackendClaim> {
        self.ready().await?;
        let names = self.filed(args.address());
        // The fast path. A claim whose writes must be waited for on the
        // replicas is the script, whose `WAIT` follows it on a lane; the
        // claims that write nothing are answered first, with no write,
        // so that they wait for no replica.
        if self.replication.is_some() {
            if let Some(answer) = fast::peek(&self.connection, &names, args, waiting).await? {
                return Ok(answer);
            }
        } else if self.fast_claims {
            if let Some(answer) = fast::claim(&self.connection, &names, args, self.keep_ms, waiting).await? {
                return Ok(answer);
            }
        }
        let mut call = Call::with_keys(&self.scripts.claim, &names.written());
        call.arg(args.scope)
            .arg(args.key)
            .arg(&args.fingerprint.as_bytes()[..])
            .arg(args.lease_ms)
            .arg(args.ttl_ms)
            .arg(self.keep_ms)
            .arg(args.reuse_arg())
            .arg(if waiting { "1" } else { "0" });
        let (reply, acknowledged) = self.send(&call, true).await?;
        let Value::Array(items) = reply else {
            return Err(protocol("claim: not an array"));
        };
        let tag = items.first().map(bytes).transpose()?.unwrap_or_default();
        match (tag.as_slice(), items.as_slice()) {
            (b"A", [_, token, attempt, recovered, _lease_end, point]) => {
                self.replicated("claim", acknowledged)?;
                Ok(BackendClaim::Acquired {
                    token: LeaseToken {
                        keyspace: args.keyspace,
                        scope: args.scope.to_vec(),
                        key: args.key.to_vec(),
                        token: number(token)?,
                    },
                    attempt: u32::try_from(number(attempt)?).map_err(|_| protocol("claim: attempt"))?,
                    recovered: number(recovered)? == 1,
                    checkpoint: reply::checkpoint(&bytes(point)?)?,
                })
            }
            (b"R", [_, _state, response]) => Ok(BackendClaim::Replay(bytes(response)?)),
            (b"I", [_, left, _attempt]) => {
                Ok(BackendClaim::InProgress { retry_after: Duration::from_millis(number(left)?) })
            }
            (b"M", [_]) => Ok(BackendClaim::Mismatch),
            (b"X", [_]) => Err(Error::KeyHashCollision),
            _ => Err(protocol("claim: unknown answer")),
        }
    }

    /// Woken by the finishing script's publish on the key's channel.
    async fn listen<'a>(&'a self, address: Address<'a>, _wait: Duration) -> Subscription<'a> {
        let channel = self.names(address).channel();
        let (event, first) = self.waits.join(&channel);
        if first {
            // Without the subscription the wait still ends: by polling.
            let _polled_instead = self.connection.subscribe(&channel).await;
        }
        Subscription { event, _leave: Box::new(Leave { backend: self, channel }) }
    }

    async fn finish(&self, token: &LeaseToken, finish: Finish, response: &[u8]) -> Result<bool> {
        let names = self.filed(Address::of(token));
        let bytes = token.scope.len() + token.key.len() + response.len();
        let mut call = Call::sized(&self.scripts.finish, &names.written(), 7, bytes);
        call.arg(&token.scope)
            .arg(&token.key)
            .arg(token.token)
            .arg(finish.code())
            .arg(response)
            .arg(self.connection.publish_command())
            .arg(self.keep_ms);
        let operation = match finish {
            Finish::Complete => Some("complete"),
            Finish::Fail => Some("fail"),
            // A lost release leaves the key held until its lease ends:
            // a delay, never a second run.
            Finish::Release => None,
        };
        self.fenced(&call, operation).await
    }

    async fn checkpoint(&self, token: &LeaseToken, point: &[u8]) -> Result<bool> {
        let names = self.filed(Address::of(token));
        let mut call = Call::with_keys(&self.scripts.checkpoint, &names.written());
        call.arg(&token.scope).arg(&token.key).arg(token.token).arg(point).arg(self.keep_ms);
        self.fenced(&call, Some("checkpoint")).await
    }

    async fn renew(&self, token: &LeaseToken, extend_ms: u64) -> Result<bool> {
        let names = self.filed(Address::of(token));
        let mut call = Call::with_keys(&self.scripts.renew, &names.written());
        call.arg(&token.scope).arg(&token.key).arg(token.token).arg(extend_ms).arg(self.keep_ms);
        let (reply, acknowledged) = self.send(&call, true).await?;
        let Value::Array(items) = reply else {
            return Err(protocol("renew: not an array"));
        };
        let held = items.first().map(number).transpose()? == Some(1);
        if held {
            self.replicated("renew", acknowledged)?;
        }
        Ok(held)
    }

    async fn get(&self, address: Address<'_>) -> Result<Option<Record>> {
        self.ready().await?;
        self.read(address).await
    }

    async fn now_ms(&self) -> Result<u64> {
        self.connection.time_ms().await
    }

    async fn scan(&self, keyspace: Keyspace, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.ready().await?;
        index::page(self, keyspace, scope, (after, limit), index::Of::Every).await
    }

    async fn scan_staged(&self, scope: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Record>> {
        self.ready().await?;
        index::page(self, Keyspace::Caller, scope, (after, limit), index::Of::Staged).await
    }

    async fn remove(&self, address: Address<'_>) -> Result<bool> {
        self.ready().await?;
        let names = self.filed(address);
        let mut call = Call::with_keys(&self.scripts.remove, &names.written());
        call.arg(address.scope)
            .arg(address.key)
            .arg(names.channel())
            .arg(self.connection.publish_command())
            .arg(self.keep_ms);
        // A lost removal brings the record back: never a second run.
        match self.connection.invoke(&call).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            Value::Int(-1) => Err(Error::KeyHashCollision),
            _ => Err(protocol("remove: unknown answer")),
        }
    }

    async fn replace(&self, address: Address<'_>, expected: &[u8], answer: &[u8]) -> Result<bool> {
        self.ready().await?;
        let names = self.filed(address);
        let mut call = Call::with_keys(&self.scripts.replace, &names.written());
        call.arg(address.scope).arg(address.key).arg(expected).arg(answer).arg(self.keep_ms);
        let (reply, acknowledged) = self.send(&call, true).await?;
        match reply {
            Value::Int(1) => self.replicated("replace", acknowledged).map(|()| true),
            Value::Int(0) => Ok(false),
            Value::Int(-1) => Err(Error::KeyHashCollision),
            _ => Err(protocol("replace: unknown answer")),
        }
    }
}
