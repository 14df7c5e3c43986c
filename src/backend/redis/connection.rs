//! One handle over a standalone server (a reconnecting, multiplexed
//! connection) or a Cluster (the client's slot-routing connection), both
//! speaking RESP3 so that published messages arrive as pushes.

use super::reply::{backend_error, bytes, number, protocol};
use super::server::{Read, SETTINGS};
use super::wait::Pushes;
use crate::backend::remote::runtime;
use crate::error::{Error, Result};
use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use ::redis::{
    cmd, Client, Cmd, ErrorKind, IntoConnectionInfo, ProtocolVersion, RedisFuture, Script, ServerErrorKind,
    ToRedisArgs, Value,
};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, SemaphorePermit};

/// What a TLS connection trusts; without the feature `tls` there is none.
#[cfg(feature = "tls")]
pub(super) use crate::backend::Tls;
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub(super) enum Tls {}

/// How long a call waits for its answer before it is
/// [`BackendFailure::Unavailable`](crate::backend::BackendFailure::Unavailable).
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The backend's name in errors.
const BACKEND_NAME: &str = "redis";

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One run of a script by SHA (`EVALSHA`), with the script kept to load
/// it on `NOSCRIPT`.
pub(super) struct Call<'a> {
    script: &'a Script,
    command: Cmd,
}

impl<'a> Call<'a> {
    /// A run of `script` on one key.
    pub(super) fn new(script: &'a Script, key: &[u8]) -> Call<'a> {
        Call::with_keys(script, &[key])
    }

    /// A run of `script` on `keys` (on a Cluster, all in one slot).
    pub(super) fn with_keys(script: &'a Script, keys: &[&[u8]]) -> Call<'a> {
        Call::sized(script, keys, 8, 64)
    }

    /// [`Call::with_keys`] with room for `args` more arguments of about
    /// `bytes` bytes in all, so that the command is written without
    /// growing its buffers as they come.
    pub(super) fn sized(script: &'a Script, keys: &[&[u8]], args: usize, bytes: usize) -> Call<'a> {
        let names: usize = keys.iter().map(|key| key.len()).sum();
        // Each argument's own digits and separators come on top: 16 bytes
        // is room for a number, and for the `$n\r\n…\r\n` of any.
        let size = 64 + names + bytes + 16 * (keys.len() + args);
        let mut command = Cmd::with_capacity(2 + keys.len() + args, size);
        command.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for key in keys {
            command.arg(*key);
        }
        Call { script, command }
    }

    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.command.arg(arg);
        self
    }
}

#[derive(Clone)]
pub(super) enum Connection {
    /// The server's address (`host:port`) beside its connection.
    Single(Managed, Arc<str>),
    Cluster(ClusterConnection),
}

/// A server's reconnecting connection, polled on the runtime it was made
/// on ([`runtime::on`]): a reconnection, wherever the call that finds the
/// connection lost comes from, is made and driven there. (A Cluster's
/// connection reconnects inside its own driver, on the runtime that made
/// it.)
#[derive(Clone)]
pub(super) struct Managed {
    manager: ConnectionManager,
    runtime: Handle,
}

impl ConnectionLike for Managed {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        let Managed { manager, runtime } = self;
        Box::pin(runtime::on(runtime, manager.req_packed_command(command)))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let Managed { manager, runtime } = self;
        Box::pin(runtime::on(runtime, manager.req_packed_commands(pipeline, offset, count)))
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

impl Managed {
    async fn subscribe(&mut self, channel: &[u8]) -> ::redis::RedisResult<()> {
        runtime::on(&self.runtime, self.manager.subscribe(channel)).await
    }

    async fn unsubscribe(&mut self, channel: &[u8]) -> ::redis::RedisResult<()> {
        runtime::on(&self.runtime, self.manager.unsubscribe(channel)).await
    }
}

/// The client of `info`, trusting `tls` when given.
#[cfg(feature = "tls")]
fn client(info: ::redis::ConnectionInfo, tls: Option<&Tls>) -> ::redis::RedisResult<Client> {
    crate::backend::remote::tls::install_default_provider();
    if let Some(tls) = tls {
        let root_cert = tls.ca_pem_bytes().map(<[u8]>::to_vec);
        Client::build_with_tls(info, ::redis::TlsCertificates { client_tls: None, root_cert })
    } else {
        Client::open(info)
    }
}

#[cfg(not(feature = "tls"))]
fn client(info: ::redis::ConnectionInfo, _tls: Option<&Tls>) -> ::redis::RedisResult<Client> {
    Client::open(info)
}

/// The most connections the transitions that wait for replicas hold at
/// once. A `WAIT` holds its connection until the replicas answer, so each
/// such transition has a connection to itself while it runs (nothing is
/// ever queued behind another's `WAIT`); they are opened as they are
/// needed and kept once open. Past this many at once a transition waits
/// for a connection to come back, and that time counts against its own
/// wait (see [`Connection::invoke_then_wait`]), so its answer is still
/// due when its wait ends.
pub(super) const LANES_MAX: usize = 64;

/// Where a connection was opened, to open more like it. The connections
/// opened here subscribe to nothing, so they forward no push messages.
#[derive(Clone)]
pub(super) enum Opener {
    Single(String, Option<Tls>),
    Cluster(Vec<String>),
}

impl Opener {
    async fn open(&self) -> Result<Connection> {
        match self {
            Opener::Single(url, tls) => Connection::single(url, None, tls.as_ref()).await,
            Opener::Cluster(nodes) => {
                let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
                Connection::cluster(&nodes, None).await
            }
        }
    }
}

/// The connections of the transitions that wait for replicas: each one
/// held by one transition at a time ([`Lane`]), at most [`LANES_MAX`].
pub(super) struct Lanes {
    opener: Opener,
    /// The backend's runtime, where a new lane is opened.
    runtime: Handle,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

/// A connection of [`Lanes`] held by one transition. [`Lane::put_back`]
/// gives it back once the transition has its answer; a lane dropped
/// without it (the call failed, or its future was dropped halfway, a
/// `WAIT` perhaps still running on the server) is closed instead, so no
/// later transition waits behind what it left.
pub(super) struct Lane<'a> {
    idle: &'a Mutex<Vec<Connection>>,
    connection: Connection,
    _permit: SemaphorePermit<'a>,
}

impl Lanes {
    pub(super) fn new(opener: Opener, runtime: Handle) -> Lanes {
        Lanes { opener, runtime, idle: Mutex::new(Vec::new()), permits: Semaphore::new(LANES_MAX) }
    }

    /// A connection of its own for one transition: an idle one, else a
    /// new one; with [`LANES_MAX`] held, the first to come back (in turn).
    pub(super) async fn take(&self) -> Result<Lane<'_>> {
        let permit = self.permits.acquire().await.map_err(|_| protocol("the lanes were closed"))?;
        let idle = self.idle.lock().pop();
        let connection = match idle {
            Some(connection) => connection,
            // Opened on the backend's runtime, as the first connection was.
            None => runtime::on(&self.runtime, self.opener.open()).await?,
        };
        Ok(Lane { idle: &self.idle, connection, _permit: permit })
    }
}

impl Lane<'_> {
    pub(super) fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Gives the connection back for the next transition (its `WAIT`, if
    /// any, has answered).
    pub(super) fn put_back(self) {
        self.idle.lock().push(self.connection);
    }
}

/// What is left of a wait that ends at `deadline`, in whole ms, at least
/// 1 (`WAIT` with 0 would wait forever).
fn left_ms(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(Instant::now());
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn invalid(error: &::redis::RedisError) -> Error {
    Error::InvalidConfig(format!("redis: {error}"))
}

impl Connection {
    /// A connection to `url`; over TLS with `tls` (then `url` must be
    /// `rediss://`); its push messages to `pushes` when given.
    pub(super) async fn single(url: &str, pushes: Option<Pushes>, tls: Option<&Tls>) -> Result<Connection> {
        let info = url.into_connection_info().map_err(|error| invalid(&error))?;
        let is_tls = matches!(info.addr(), ::redis::ConnectionAddr::TcpTls { .. });
        if is_tls && !cfg!(feature = "tls") {
            return Err(Error::InvalidConfig("redis: a rediss:// URL needs the feature `tls`".into()));
        }
        if tls.is_some() && !is_tls {
            return Err(Error::InvalidConfig("redis: a TLS connection needs a rediss:// URL".into()));
        }
        let address = Arc::from(info.addr().to_string());
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let client = client(info, tls).map_err(|error| invalid(&error))?;
        let mut config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(2);
        if let Some(pushes) = pushes {
            config = config.set_push_sender(pushes).set_automatic_resubscription();
        }
        let runtime = runtime::current(BACKEND_NAME)?;
        let manager = ConnectionManager::new_with_config(client, config).await.map_err(backend_error)?;
        Ok(Connection::Single(Managed { manager, runtime }, address))
    }

    /// A connection to the Cluster of `nodes`; its push messages to
    /// `pushes` when given.
    pub(super) async fn cluster(nodes: &[&str], pushes: Option<Pushes>) -> Result<Connection> {
        let mut builder = ClusterClientBuilder::new(nodes.iter().copied())
            .use_protocol(ProtocolVersion::RESP3)
            .response_timeout(RESPONSE_TIMEOUT)
            .connection_timeout(CONNECT_TIMEOUT);
        if let Some(pushes) = pushes {
            builder = builder.push_sender(pushes);
        }
        let client = builder.build().map_err(|error| invalid(&error))?;
        let connection = client.get_async_connection().await.map_err(backend_error)?;
        Ok(Connection::Cluster(connection))
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// `SPUBLISH` on a Cluster (the message stays in the key's shard),
    /// `PUBLISH` on a standalone server.
    pub(super) fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// Runs `call` (loading its script on `NOSCRIPT`, which ran nothing).
    pub(super) async fn invoke(&self, call: &Call<'_>) -> Result<Value> {
        match self.query::<Value>(&call.command).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(call.script).await?;
                self.query(&call.command).await.map_err(backend_error)
            }
            answered => answered.map_err(backend_error),
        }
    }

    /// Runs `call` and then `WAIT replicas left` in one pipeline, on one
    /// connection (a `WAIT` on another connection, after a reconnect,
    /// would wait for nothing of ours), `left` being what is left until
    /// `deadline`: the script's answer and how many replicas acknowledged
    /// every write of the connection up to it. A script the server does
    /// not have (`NOSCRIPT`: a promoted replica, a `SCRIPT FLUSH`) ran
    /// nothing, but its `WAIT` did; the script is loaded and sent again
    /// with what is left of the same wait, so a caller waits once. Only
    /// for a connection of its own (a [`Lane`]): whatever else were queued
    /// on it would wait behind the `WAIT`.
    pub(super) async fn invoke_then_wait(
        &self,
        call: &Call<'_>,
        replicas: u32,
        deadline: Instant,
    ) -> Result<(Value, u64)> {
        let then_wait = || {
            let mut pipeline = ::redis::pipe();
            pipeline.add_command(call.command.clone()).cmd("WAIT").arg(replicas).arg(left_ms(deadline));
            pipeline
        };
        let answered = match self.query_pipeline(&then_wait()).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(call.script).await?;
                self.query_pipeline(&then_wait()).await
            }
            answered => answered,
        };
        match answered.map_err(backend_error)?.as_slice() {
            [reply, acknowledged] => Ok((reply.clone(), number(acknowledged)?)),
            _ => Err(protocol("WAIT: not two answers")),
        }
    }

    /// The claim's fast path ([`super::fast`]) on `record`: one
    /// transaction of `SET record fresh NX GET PX px`, `PEXPIRETIME
    /// record` and `TIME`, and with `filed` (a scope's key index and the
    /// key, on a standalone server: see [`super::index`]) `ZADD keys 0
    /// key`, so that a record the `SET` writes is listed from the same
    /// step on (a key listed already stays as it is). Answers the record
    /// that was there (`None` when `fresh` was written), the key's expiry
    /// and the server's time, both in ms.
    pub(super) async fn claim_fast(
        &self,
        record: &[u8],
        (fresh, px): (&[u8], u64),
        filed: Option<(&[u8], &[u8])>,
    ) -> Result<(Option<Vec<u8>>, i64, i64)> {
        let mut pipeline = ::redis::pipe();
        pipeline.atomic();
        pipeline.cmd("SET").arg(record).arg(fresh).arg("NX").arg("GET").arg("PX").arg(px);
        pipeline.cmd("PEXPIRETIME").arg(record);
        pipeline.cmd("TIME");
        if let Some((keys, key)) = filed {
            pipeline.cmd("ZADD").arg(keys).arg(0).arg(key);
        }
        found_number_time(&self.query_pipeline(&pipeline).await.map_err(backend_error)?)
    }

    /// `record` as it is, written by nobody: one transaction of `GET
    /// record`, `PTTL record` and `TIME`. Answers the record (`None` when
    /// absent), its expiry and the server's time, both in ms (the expiry
    /// as the time plus the ms left, within a ms of the key's own; any
    /// Redis has `PTTL`).
    pub(super) async fn peek(&self, record: &[u8]) -> Result<(Option<Vec<u8>>, i64, i64)> {
        let mut pipeline = ::redis::pipe();
        pipeline.atomic();
        pipeline.cmd("GET").arg(record);
        pipeline.cmd("PTTL").arg(record);
        pipeline.cmd("TIME");
        let (found, left, now) = found_number_time(&self.query_pipeline(&pipeline).await.map_err(backend_error)?)?;
        let expiry = if left >= 0 { now.saturating_add(left) } else { i64::MAX };
        Ok((found, expiry, now))
    }

    /// Whether the server, or every master of a Cluster, runs Redis 7.0 or
    /// later (`redis_version` of `INFO server`; Valkey says it too). A
    /// server that refuses `INFO` or answers no version is not.
    pub(super) async fn version_7(&self) -> Result<bool> {
        let mut command = cmd("INFO");
        command.arg("server");
        let answers = self.each_master(&command).await?;
        Ok(!answers.is_empty()
            && answers.iter().all(|(_, answer)| {
                let Ok(info) = answer else { return false };
                let Ok(info) = bytes(info) else { return false };
                String::from_utf8_lossy(&info).lines().any(|line| {
                    line.strip_prefix("redis_version:")
                        .and_then(|version| version.trim().split('.').next()?.parse::<u32>().ok())
                        .is_some_and(|major| major >= 7)
                })
            }))
    }

    async fn query<T: ::redis::FromRedisValue>(&self, command: &Cmd) -> ::redis::RedisResult<T> {
        match self.clone() {
            Connection::Single(mut connection, _) => command.query_async(&mut connection).await,
            Connection::Cluster(mut connection) => command.query_async(&mut connection).await,
        }
    }

    /// The server's `TIME`, in ms since the epoch (on a cluster, the time
    /// of the node the command is sent to).
    pub(super) async fn time_ms(&self) -> Result<u64> {
        match self.command(&::redis::cmd("TIME")).await? {
            Value::Array(time) => millis_of_time(&time),
            _ => Err(protocol("TIME: not an array")),
        }
    }

    /// The answer of one plain command.
    pub(super) async fn command(&self, command: &Cmd) -> Result<Value> {
        self.query(command).await.map_err(backend_error)
    }

    /// Runs `calls` in pipelines of a thousand (loading their script
    /// first): each one's answer, in order.
    pub(super) async fn invoke_all(&self, script: &Script, calls: &[Call<'_>]) -> Result<Vec<Value>> {
        self.load(script).await?;
        let mut answers = Vec::with_capacity(calls.len());
        for batch in calls.chunks(1000) {
            let mut pipeline = ::redis::pipe();
            for call in batch {
                pipeline.add_command(call.command.clone());
            }
            answers.extend(self.pipeline(&pipeline).await?);
        }
        Ok(answers)
    }

    /// The answers of `pipeline`'s commands, in order.
    pub(super) async fn pipeline(&self, pipeline: &::redis::Pipeline) -> Result<Vec<Value>> {
        self.query_pipeline(pipeline).await.map_err(backend_error)
    }

    async fn query_pipeline(&self, pipeline: &::redis::Pipeline) -> ::redis::RedisResult<Vec<Value>> {
        match self.clone() {
            Connection::Single(mut connection, _) => pipeline.query_async(&mut connection).await,
            Connection::Cluster(mut connection) => pipeline.query_async(&mut connection).await,
        }
    }

    async fn load(&self, script: &Script) -> Result<()> {
        match self.clone() {
            Connection::Single(mut connection, _) => script.load_async(&mut connection).await,
            Connection::Cluster(mut connection) => script.load_async(&mut connection).await,
        }
        .map(drop)
        .map_err(backend_error)
    }

    pub(super) async fn subscribe(&self, channel: &[u8]) -> Result<()> {
        match self.clone() {
            Connection::Single(mut connection, _) => connection.subscribe(channel).await,
            Connection::Cluster(mut connection) => connection.ssubscribe(channel).await,
        }
        .map_err(backend_error)
    }

    pub(super) async fn unsubscribe(&self, channel: &[u8]) {
        let _best_effort = match self.clone() {
            Connection::Single(mut connection, _) => connection.unsubscribe(channel).await,
            Connection::Cluster(mut connection) => connection.sunsubscribe(channel).await,
        };
    }

    /// [`SETTINGS`] of the server, or of every master of a Cluster; a
    /// server that refuses `CONFIG GET` answers its refusal.
    pub(super) async fn settings(&self) -> Result<Vec<Read>> {
        let mut command = cmd("CONFIG");
        command.arg("GET");
        let mut reads: Vec<Read> = Vec::new();
        for (index, setting) in SETTINGS.iter().enumerate() {
            let mut command = command.clone();
            command.arg(*setting);
            for (server, answer) in self.each_master(&command).await? {
                let at = reads.iter().position(|read| read.server == server).unwrap_or_else(|| {
                    reads.push(Read { server, values: Ok(Default::default()) });
                    reads.len() - 1
                });
                let outcome = match answer {
                    Ok(reply) => {
                        config_value(&reply, setting)?.ok_or_else(|| format!("CONFIG GET {setting} answered no value"))
                    }
                    Err(refusal) => Err(refusal),
                };
                match (outcome, &mut reads[at].values) {
                    (Ok(value), Ok(values)) => values[index] = value,
                    (Err(refusal), values @ Ok(_)) => *values = Err(refusal),
                    (_, Err(_)) => {}
                }
            }
        }
        Ok(reads)
    }

    /// Sends `command` to the server, or to every master of a Cluster:
    /// each one's answer, or its refusal (a server error) as text. A lost
    /// connection is an error.
    pub(super) async fn each_master(&self, command: &Cmd) -> Result<Vec<(String, std::result::Result<Value, String>)>> {
        match self.clone() {
            Connection::Single(mut connection, address) => match command.query_async::<Value>(&mut connection).await {
                Ok(reply) => Ok(vec![(address.to_string(), Ok(reply))]),
                Err(error) if matches!(error.kind(), ErrorKind::Server(_)) => {
                    Ok(vec![(address.to_string(), Err(error.to_string()))])
                }
                Err(error) => Err(backend_error(error)),
            },
            Connection::Cluster(mut connection) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match connection.route_command(command.clone(), routing).await.map_err(backend_error)? {
                    Value::Map(answers) => {
                        answers.into_iter().map(|(server, answer)| per_node(&server, answer)).collect()
                    }
                    _ => Err(protocol("CONFIG GET: not one answer per master")),
                }
            }
        }
    }
}

/// One master's answer in a Cluster's map of answers.
fn per_node(server: &Value, answer: Value) -> Result<(String, std::result::Result<Value, String>)> {
    let server = String::from_utf8_lossy(&bytes(server)?).into_owned();
    match answer {
        Value::ServerError(refusal) => Ok((server, Err(refusal.to_string()))),
        reply => Ok((server, Ok(reply))),
    }
}

/// The value of `setting` in a `CONFIG GET` answer (a map in RESP3, a
/// flat array of pairs in RESP2).
fn config_value(reply: &Value, setting: &str) -> Result<Option<String>> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Map(pairs) => pairs.iter().map(|(name, value)| (name, value)).collect(),
        Value::Array(flat) => flat.chunks_exact(2).map(|pair| (&pair[0], &pair[1])).collect(),
        _ => return Err(protocol("CONFIG GET: not a map")),
    };
    for (name, value) in pairs {
        if bytes(name)? == setting.as_bytes() {
            return Ok(Some(String::from_utf8_lossy(&bytes(value)?).into_owned()));
        }
    }
    Ok(None)
}

/// The answers of a transaction that reads a record, a number of the key
/// (its expiry, or the ms it has left) and `TIME`: the record (`None` when
/// absent), the number and the server's time in ms.
fn found_number_time(answers: &[Value]) -> Result<(Option<Vec<u8>>, i64, i64)> {
    match answers {
        [found, number, Value::Array(time), ..] => {
            let found = match found {
                Value::Nil => None,
                found => Some(bytes(found)?),
            };
            let Value::Int(number) = number else { return Err(protocol("claim: an expiry not a number")) };
            let now = i64::try_from(millis_of_time(time)?).map_err(|_| protocol("claim: TIME out of range"))?;
            Ok((found, *number, now))
        }
        _ => Err(protocol("claim: not three answers")),
    }
}

/// The ms since the epoch of a `TIME` answer (seconds, microseconds).
fn millis_of_time(time: &[Value]) -> Result<u64> {
    let [seconds, micros] = time else { return Err(protocol("TIME: not two numbers")) };
    Ok(number(seconds)?.saturating_mul(1000).saturating_add(number(micros)? / 1000))
}
