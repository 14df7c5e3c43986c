//! How a scope's scan and a relay's sweep grow with the scope, on every
//! backend, in one run: the embedded store, a real `redis-server`, a real
//! Redis Cluster of three masters and a real PostgreSQL started here (each
//! skipped with a note when its programs are not on the PATH).
//!
//! For each size K of `IDEMKV_SCAN_KEYS` (default `1000,10000,100000`),
//! the scope `shop` holds K completed keys with plain answers (nothing
//! staged) and the scope `other` as many again, so that a backend that
//! reads what it keeps rather than what it returns shows it. Rows:
//!
//! - **sweep**: one [`Relay::sweep`] of `shop` with nothing to deliver
//!   (the sink is never called: checked);
//! - **scan**: every record of `shop`, [`IdempotencyBackend::scan`] 256 a
//!   page (as the relay, the tool and the listings page), from the first
//!   to the empty page (the count is checked);
//! - **load** (the networked backends): the claim+complete pairs that
//!   filled both scopes up to this size (64 at once, or
//!   `IDEMKV_SCAN_LOAD_TASKS`), its time a pair: what writing the scopes'
//!   indexes leaves the calls.
//!
//! The embedded store is closed and opened again before each size's rows,
//! and has each row twice: first on the store just opened (`sweep¹`,
//! `scan¹`: each makes its listing, one pass over the shard's records),
//! then again. After its largest size, the first scan of `other` gives
//! what a listing holds a key (anonymous memory before and after); after
//! Redis's, `INFO memory` and `MEMORY USAGE` what the records and the
//! scopes' indexes hold a key.
//!
//! Each row gives its wall time, its time a key of the scope, and on Redis
//! the commands the server (every node of the Cluster) ran for it (`INFO stats`,
//! `total_commands_processed`, less the `INFO` itself). A row is cut at
//! `IDEMKV_SCAN_LIMIT_SECONDS` (default 60) and shown as `>` that; the
//! sizes are loaded one after another into the same stores (each adds the
//! keys the next size lacks).
//!
//! ```text
//! cargo bench -p idemkv-bench --bench scans                       # 1 k, 10 k, 100 k keys
//! IDEMKV_SCAN_KEYS=1000 cargo bench -p idemkv-bench --bench scans # smoke run
//! IDEMKV_SCAN_BACKENDS=postgres cargo bench -p idemkv-bench --bench scans # one backend
//! ```

#[path = "../tests/common/redis.rs"]
#[allow(dead_code, reason = "the bench uses part of the test fixture")]
mod redis_fixture;
#[path = "../tests/common/server_start.rs"]
mod server_start;

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code, reason = "the bench uses part of the test fixture")]
mod postgres_fixture;

mod support;

use idemkv::backend::postgres::PostgresBackend;
use idemkv::backend::redis::RedisBackend;
use idemkv::backend::{BackendClaim, ClaimOptions, IdempotencyBackend};
use idemkv::messaging::{Relay, RelayConfig, Sink, SinkError, Staged};
use idemkv::{Config, Fingerprint, Store};
use std::future::Future;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCOPE: &[u8] = b"shop";
const OTHER: &[u8] = b"other";
const PAGE: usize = 256;
const ANSWER: [u8; 200] = [b'a'; 200];

fn sizes() -> Vec<u64> {
    let listed = std::env::var("IDEMKV_SCAN_KEYS").unwrap_or_else(|_| "1000,10000,100000".into());
    let mut sizes: Vec<u64> = listed.split(',').filter_map(|size| size.trim().parse().ok()).collect();
    sizes.sort_unstable();
    sizes
}

fn limit() -> Duration {
    let seconds = std::env::var("IDEMKV_SCAN_LIMIT_SECONDS").ok().and_then(|value| value.parse().ok());
    Duration::from_secs_f64(seconds.unwrap_or(60.0))
}

/// A sink that must never be called: nothing is staged.
#[derive(Clone, Default)]
struct Counted(Arc<AtomicU64>);

impl Sink for Counted {
    async fn deliver(&self, _message: &Staged) -> Result<(), SinkError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Counts the commands a server ran (`None` for a backend without one to
/// ask).
trait Calls: Send + Sync {
    fn commands(&self) -> Option<u64>;
}

struct NoCount;

impl Calls for NoCount {
    fn commands(&self) -> Option<u64> {
        None
    }
}

/// `total_commands_processed` of a Redis server, read with `redis-cli`.
struct RedisCalls(u16);

impl Calls for RedisCalls {
    fn commands(&self) -> Option<u64> {
        let output = Command::new("redis-cli").args(["-p", &self.0.to_string(), "INFO", "stats"]).output().ok()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let line = text.lines().find(|line| line.starts_with("total_commands_processed:"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }
}

/// `total_commands_processed` of every node of a Cluster.
struct ClusterCalls(Vec<u16>);

impl Calls for ClusterCalls {
    fn commands(&self) -> Option<u64> {
        self.0.iter().map(|port| RedisCalls(*port).commands()).sum()
    }
}

/// Claims and completes `(scope, key)` with a plain answer.
async fn put<B: IdempotencyBackend>(backend: &B, scope: &[u8], key: &[u8]) {
    let options = ClaimOptions::new().ttl(Duration::from_secs(3600));
    match backend.claim(scope, key, Fingerprint::of(key), options).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => backend.complete(&token, &ANSWER).await.expect("complete"),
        other => panic!("a fresh key answered {other:?}"),
    }
}

/// Tasks that load the scopes at once: `IDEMKV_SCAN_LOAD_TASKS`, 64 by
/// default (1 gives a single caller's time a pair in the `load` rows).
fn load_tasks() -> u64 {
    let tasks = std::env::var("IDEMKV_SCAN_LOAD_TASKS").ok().and_then(|value| value.parse().ok());
    tasks.unwrap_or(64_u64).max(1)
}

/// Adds keys `from..to` to both scopes, [`load_tasks`] at once.
async fn load<B: IdempotencyBackend>(backend: &Arc<B>, from: u64, to: u64) {
    let mut tasks = tokio::task::JoinSet::new();
    let lanes = load_tasks();
    for lane in 0..lanes {
        let backend = Arc::clone(backend);
        tasks.spawn(async move {
            for n in (from + lane..to).step_by(usize::try_from(lanes).unwrap_or(64)) {
                let key = format!("order-{n:08}");
                put(&*backend, SCOPE, key.as_bytes()).await;
                put(&*backend, OTHER, key.as_bytes()).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("load task");
    }
}

/// Every record of the scope, a page at a time; how many.
async fn scan_all<B: IdempotencyBackend>(backend: &B) -> u64 {
    let (mut after, mut seen) = (None::<Vec<u8>>, 0);
    loop {
        let page = backend.scan(SCOPE, after.as_deref(), PAGE).await.expect("scan");
        let Some(last) = page.last() else { return seen };
        seen += page.len() as u64;
        after = Some(last.key.clone());
    }
}

/// One row's figures.
struct Figures {
    elapsed: Option<Duration>,
    commands: Option<u64>,
}

/// Runs `work` within the limit, with the server's commands counted.
async fn timed<T>(calls: &dyn Calls, work: impl Future<Output = T>) -> (Figures, Option<T>) {
    let (mut figures, done) = counted(calls, tokio::time::timeout(limit(), work)).await;
    let done = done.ok();
    if done.is_none() {
        figures.elapsed = None;
    }
    (figures, done)
}

/// Runs `work` to its end, with the server's commands counted.
async fn counted<T>(calls: &dyn Calls, work: impl Future<Output = T>) -> (Figures, T) {
    let before = calls.commands();
    let started = Instant::now();
    let done = work.await;
    let elapsed = started.elapsed();
    let after = calls.commands();
    // The second INFO counts the first.
    let commands = before.zip(after).map(|(before, after)| after.saturating_sub(before).saturating_sub(1));
    (Figures { elapsed: Some(elapsed), commands }, done)
}

fn print_row(backend: &str, row: &str, keys: u64, figures: &Figures) {
    let (time, per_key) = match figures.elapsed {
        Some(elapsed) => {
            let per_key = elapsed.as_secs_f64() * 1e6 / support::as_f64(keys.max(1));
            (format!("{:.1} ms", elapsed.as_secs_f64() * 1e3), format!("{per_key:.2} µs"))
        }
        None => (format!("> {:.0} s", limit().as_secs_f64()), "-".to_owned()),
    };
    let commands = match figures.commands {
        Some(commands) if figures.elapsed.is_some() => commands.to_string(),
        Some(commands) => format!("> {commands}"),
        None => "-".to_owned(),
    };
    println!("{backend:<13} {row:<7} {keys:>8} {time:>12} {per_key:>12} {commands:>12}");
}

/// The rows of one backend, size after size; before each, the load of
/// the keys it adds (`load`: claim+complete pairs, 64 at once, in both
/// scopes), timed and counted as a row of its own.
async fn measure<B: IdempotencyBackend>(name: &str, backend: Arc<B>, calls: &dyn Calls) {
    let mut loaded = 0;
    for keys in sizes() {
        let (figures, ()) = counted(calls, load(&backend, loaded, keys)).await;
        print_row(name, "load", 2 * (keys - loaded), &figures);
        loaded = keys;
        rows(name, ("sweep", "scan"), &backend, calls, keys).await;
    }
}

/// The store's rows, size after size: first the sweep and the scan of a
/// store just opened (each makes its listing: one pass over the records),
/// then the same again.
async fn measure_store(path: &std::path::Path) {
    let mut loaded = 0;
    for keys in sizes() {
        let store = Arc::new(Store::open(path, Config::new()).expect("open"));
        load(&store, loaded, keys).await;
        loaded = keys;
        Arc::into_inner(store).expect("the one handle").close().expect("close");
        let store = Arc::new(Store::open(path, Config::new()).expect("open again"));
        rows("store", ("sweep¹", "scan¹"), &store, &NoCount, keys).await;
        rows("store", ("sweep", "scan"), &store, &NoCount, keys).await;
        if Some(keys) == sizes().last().copied() {
            store_memory(&store);
        }
    }
}

/// One sweep with nothing to deliver, then one full scan, of `keys`.
async fn rows<B: IdempotencyBackend>(
    name: &str,
    (sweep_row, scan_row): (&str, &str),
    backend: &Arc<B>,
    calls: &dyn Calls,
    keys: u64,
) {
    let sink = Counted::default();
    let relay = Relay::new(Arc::clone(backend), sink.clone(), RelayConfig::new([SCOPE]));
    let (figures, sweep) = timed(calls, relay.sweep()).await;
    if let Some(sweep) = sweep {
        assert_eq!(sweep.expect("sweep").delivered, 0, "nothing was staged");
    }
    assert_eq!(sink.0.load(Ordering::Relaxed), 0, "the sink was never called");
    print_row(name, sweep_row, keys, &figures);
    let (figures, seen) = timed(calls, scan_all(&**backend)).await;
    if let Some(seen) = seen {
        assert_eq!(seen, keys, "the scan returns every key of the scope");
    }
    print_row(name, scan_row, keys, &figures);
}

/// What the store's listing of a scope holds a key: the anonymous memory
/// of the process before and after the first scan of `other` (which no
/// row scanned), over its keys.
fn store_memory(store: &Store) {
    let keys = sizes().last().copied().unwrap_or(0);
    let before = support::anon_rss_bytes();
    let (mut after, mut seen) = (None::<Vec<u8>>, 0_u64);
    loop {
        let page = store.scan(OTHER, after.as_deref(), PAGE).expect("scan");
        let Some(last) = page.last() else { break };
        seen += page.len() as u64;
        after = Some(last.key.clone());
    }
    assert_eq!(seen, keys, "the scan returns every key of `other`");
    let grown = support::anon_rss_bytes().saturating_sub(before);
    println!(
        "store memory: the listing of a scope of {keys} keys took {:.0} B a key (anonymous RSS before and after its first scan)",
        support::as_f64(grown) / support::as_f64(keys.max(1))
    );
}

/// What the server's memory holds a key: all of it (`used_memory` over
/// the keys of both scopes), and the scopes' indexes alone (`MEMORY
/// USAGE` of each `idemkv:scope:*` key).
fn redis_memory(server: &redis_fixture::RedisServer) {
    let number = |text: Option<String>| text.and_then(|text| text.trim().parse::<u64>().ok()).unwrap_or(0);
    let info = server.cli(&["INFO", "memory"]).unwrap_or_default();
    let used = info.lines().find_map(|line| line.strip_prefix("used_memory:")).map(str::to_owned);
    let records = number(server.cli(&["DBSIZE"]));
    let names = server.cli(&["--scan", "--pattern", "idemkv:scope:*"]).unwrap_or_default();
    let index: u64 = names
        .lines()
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| number(server.cli(&["MEMORY", "USAGE", name, "SAMPLES", "0"])))
        .sum();
    let keys = sizes().last().copied().unwrap_or(0) * 2;
    let per_key = |bytes: u64| support::as_f64(bytes) / support::as_f64(keys.max(1));
    println!(
        "redis memory: {:.0} B a key in all (used_memory, {records} keys in the db), {:.0} B a key in the scopes' indexes",
        per_key(number(used)),
        per_key(index)
    );
}

/// Whether `backend` is among `IDEMKV_SCAN_BACKENDS` (a list of `store`,
/// `redis`, `redis-cluster`, `postgres`; all of them by default).
fn wanted(backend: &str) -> bool {
    std::env::var("IDEMKV_SCAN_BACKENDS").map_or(true, |list| list.split(',').any(|name| name.trim() == backend))
}

fn on_path(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|output| output.status.success())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("idemkv scans bench: scope `shop` of K completed keys, `other` as many again; pages of {PAGE}");
    println!(
        "reproduce: IDEMKV_SCAN_KEYS={} cargo bench -p idemkv-bench --bench scans",
        sizes().iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    );
    println!("{:<13} {:<7} {:>8} {:>12} {:>12} {:>12}", "backend", "row", "keys", "time", "per key", "commands");
    let dir = tempfile::tempdir().expect("tempdir");
    if wanted("store") {
        measure_store(&dir.path().join("store")).await;
        println!("¹ the first of a store just opened: it makes the listing, one pass over the records");
    }
    if !on_path("redis-server") {
        println!("redis: skipped, redis-server is not on the PATH");
    }
    if on_path("redis-server") && wanted("redis") {
        // A scan bench, not a durability one: the AOF is written every second.
        let args = ["--appendfsync", "everysec"];
        let server =
            redis_fixture::RedisServer::start_with(&dir.path().join("redis"), redis_fixture::free_port(), &args);
        let backend = RedisBackend::connect(&server.url(), Config::new()).await.expect("connect");
        measure("redis", Arc::new(backend), &RedisCalls(server.port)).await;
        redis_memory(&server);
    }
    if on_path("redis-server") && wanted("redis-cluster") {
        let cluster = redis_fixture::RedisCluster::start_async(&dir.path().join("cluster")).await;
        let backend = cluster.connect(Config::new()).await.expect("connect");
        let ports = cluster.nodes.iter().map(|node| node.port).collect();
        measure("redis-cluster", Arc::new(backend), &ClusterCalls(ports)).await;
    }
    if !wanted("postgres") {
        return;
    }
    if on_path("initdb") {
        let server = postgres_fixture::PostgresServer::start(&dir.path().join("postgres"));
        let backend = PostgresBackend::connect_with(server.url().parse().expect("url"), 16, Config::new())
            .await
            .expect("connect");
        measure("postgres", Arc::new(backend), &NoCount).await;
    } else {
        println!("postgres: skipped, initdb is not on the PATH (PATH=\"$(bash .ci/servers):$PATH\")");
    }
}
