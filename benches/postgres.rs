//! The PostgreSQL backend against the bare statements on the same pool,
//! in one run: a real `postgres` started here (`fsync` and
//! `synchronous_commit` on), `TASKS` tokio tasks over one pool of `POOL`
//! connections, alternating slices so both see the same machine.
//!
//! Rows: a fresh key claimed and completed (the backend: the claim and
//! finish functions; the baseline: `INSERT ... ON CONFLICT DO NOTHING`
//! then `UPDATE`, two autocommit statements), and a replay (the backend:
//! one claim; the baseline: the `INSERT ... ON CONFLICT DO NOTHING`, no
//! row, then `SELECT`). 36-byte keys, 200-byte answers.
//!
//! ```text
//! cargo bench --bench postgres --features postgres          # 1 s slices, 5 rounds
//! IDEMKV_BENCH_SECONDS=0.1 IDEMKV_BENCH_POOL=32 cargo bench --bench postgres --features postgres
//! ```

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code, reason = "the bench uses part of the test fixture")]
mod fixture;

use hdrhistogram::Histogram;
use idemkv::postgres::PostgresBackend;
use idemkv::{BackendClaim, ClaimOptions, Config, Fingerprint, IdempotencyBackend};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TASKS: usize = 64;
const ROUNDS: usize = 5;
const REPLAY_KEYS: u64 = 10_000;
const ANSWER: [u8; 200] = [b'a'; 200];

fn seconds() -> f64 {
    std::env::var("IDEMKV_BENCH_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(1.0)
}

fn pool_size() -> usize {
    std::env::var("IDEMKV_BENCH_POOL").ok().and_then(|value| value.parse().ok()).unwrap_or(16)
}

fn key(kind: &str, n: u64) -> String {
    format!("{kind}-{n:031}")
}

fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(30)).ttl(Duration::from_secs(3600))
}

/// Operations and latencies of one row, over its slices.
struct Row {
    operations: u64,
    seconds: f64,
    latencies: Histogram<u64>,
}

impl Row {
    fn new() -> Row {
        Row {
            operations: 0,
            seconds: 0.0,
            latencies: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"),
        }
    }

    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    fn rate(&self) -> f64 {
        self.operations as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }

    fn percentile(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.latencies.value_at_quantile(quantile))
    }
}

/// Runs `operation(n)` from `TASKS` tasks for `slice` and adds to `row`.
async fn drive<F, Fut>(row: &mut Row, slice: f64, operation: F)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let operation = Arc::new(operation);
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (operation, stop, next) = (Arc::clone(&operation), Arc::clone(&stop), Arc::clone(&next));
            tokio::spawn(async move {
                let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
                while !stop.load(Ordering::Relaxed) {
                    let call = Instant::now();
                    operation(next.fetch_add(1, Ordering::Relaxed)).await;
                    latencies.saturating_record(u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX));
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(slice)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let latencies = task.await.expect("task");
        row.operations += latencies.len();
        row.latencies.add(&latencies).expect("same bounds");
    }
    row.seconds += started.elapsed().as_secs_f64();
}

async fn claim_complete(backend: &PostgresBackend, key: &str) {
    let fingerprint = Fingerprint::of(key.as_bytes());
    match backend.claim(b"", key.as_bytes(), fingerprint, options()).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => backend.complete(&token, &ANSWER).await.expect("complete"),
        BackendClaim::Replay(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

const BASELINE_INSERT: &str = "INSERT INTO plain (key, state, response) VALUES ($1, 'P', '') ON CONFLICT DO NOTHING";
const BASELINE_UPDATE: &str = "UPDATE plain SET state = 'C', response = $2 WHERE key = $1";
const BASELINE_SELECT: &str = "SELECT response FROM plain WHERE key = $1";

async fn baseline_fresh(backend: &PostgresBackend, key: &str) {
    let client = backend.pool().get().await.expect("client");
    let insert = client.prepare_cached(BASELINE_INSERT).await.expect("prepare");
    if client.execute(&insert, &[&key]).await.expect("insert") == 1 {
        let update = client.prepare_cached(BASELINE_UPDATE).await.expect("prepare");
        client.execute(&update, &[&key, &&ANSWER[..]]).await.expect("update");
    }
}

async fn baseline_replay(backend: &PostgresBackend, key: &str) {
    let client = backend.pool().get().await.expect("client");
    let insert = client.prepare_cached(BASELINE_INSERT).await.expect("prepare");
    assert_eq!(client.execute(&insert, &[&key]).await.expect("insert"), 0, "replayed keys exist");
    let select = client.prepare_cached(BASELINE_SELECT).await.expect("prepare");
    let row = client.query_one(&select, &[&key]).await.expect("select");
    assert_eq!(row.get::<_, &[u8]>(0).len(), ANSWER.len());
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = fixture::PostgresServer::start(dir.path());
    let pool = pool_size();
    let connect = server.url().parse().expect("url");
    let backend = PostgresBackend::connect_with(connect, pool, Config::new()).await.expect("connect");
    let client = backend.pool().get().await.expect("client");
    client
        .batch_execute("CREATE TABLE plain (key text PRIMARY KEY, state text NOT NULL, response bytea NOT NULL)")
        .await
        .expect("baseline table");
    drop(client);
    for n in 0..REPLAY_KEYS {
        claim_complete(&backend, &key("idemkv-replay", n)).await;
        baseline_fresh(&backend, &key("plain-replay", n)).await;
    }
    let slice = seconds();
    let mut rows: Vec<Row> = (0..4).map(|_| Row::new()).collect();
    let base = Arc::new(AtomicU64::new(0));
    for _ in 0..ROUNDS {
        let round = base.fetch_add(1 << 32, Ordering::Relaxed);
        let ours = backend.clone();
        drive(&mut rows[0], slice, move |n| {
            let ours = ours.clone();
            async move { claim_complete(&ours, &key("idemkv-fresh", round + n)).await }
        })
        .await;
        let theirs = backend.clone();
        drive(&mut rows[1], slice, move |n| {
            let theirs = theirs.clone();
            async move { baseline_fresh(&theirs, &key("plain-fresh", round + n)).await }
        })
        .await;
        let ours = backend.clone();
        drive(&mut rows[2], slice, move |n| {
            let ours = ours.clone();
            async move { claim_complete(&ours, &key("idemkv-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        let theirs = backend.clone();
        drive(&mut rows[3], slice, move |n| {
            let theirs = theirs.clone();
            async move { baseline_replay(&theirs, &key("plain-replay", n % REPLAY_KEYS)).await }
        })
        .await;
    }
    println!(
        "PostgreSQL 15 on loopback, synchronous_commit on, pool of {pool}, {TASKS} tasks, {ROUNDS} alternating slices of {slice} s"
    );
    println!("{:<52} {:>10} {:>10} {:>10} {:>8}", "", "ops/s", "p50", "p99", "ratio");
    for (pair, name) in [
        (0, "claim+complete (baseline: INSERT ON CONFLICT + UPDATE)"),
        (2, "replay (baseline: INSERT ON CONFLICT + SELECT)"),
    ] {
        let (ours, theirs) = (&rows[pair], &rows[pair + 1]);
        let ratio = ours.rate() / theirs.rate().max(f64::MIN_POSITIVE);
        for (label, row) in [(name, ours), ("  baseline", theirs)] {
            let shown = if std::ptr::eq(row, ours) { format!("{ratio:.2}") } else { String::new() };
            println!(
                "{label:<52} {:>10.0} {:>10.1?} {:>10.1?} {shown:>8}",
                row.rate(),
                row.percentile(0.5),
                row.percentile(0.99)
            );
        }
    }
}
