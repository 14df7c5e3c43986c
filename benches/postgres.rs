//! The PostgreSQL backend against the bare statements on the same pool,
//! in one run: a real `postgres` started here (`fsync` and
//! `synchronous_commit` on), `TASKS` tokio tasks over one pool of `POOL`
//! connections, alternating slices so both see the same machine.
//!
//! Rows: a fresh key claimed and completed (the backend: the claim and
//! finish functions; the baseline: `INSERT ... ON CONFLICT DO NOTHING`
//! then `UPDATE`, two autocommit statements), and a replay (the backend:
//! one claim; the baseline: the `INSERT ... ON CONFLICT DO NOTHING`, no
//! row, then `SELECT`). 36-byte keys, 200-byte answers. Two more rows:
//! the same replays through a near cache
//! (`idemkv::backend::near::NearCache`, room for every replayed key), each
//! answered from memory after the first slice's, against the replay row
//! without it; and fresh keys claimed and completed through a near cache
//! of their own (what keeping each completion costs), against the first
//! row.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench postgres          # 1 s slices, 5 rounds
//! IDEMKV_BENCH_SECONDS=0.1 IDEMKV_BENCH_POOL=32 cargo bench -p idemkv-bench --bench postgres
//! IDEMKV_BENCH_PG_SQL='ALTER TABLE idempo_store SET (fillfactor = 70)' cargo bench -p idemkv-bench --bench postgres
//! ```
//!
//! `IDEMKV_BENCH_PG_SQL` runs its statements on the migrated store before
//! the load, to measure another layout of its table (a fillfactor, an
//! index more or less) against the same baseline; the run prints them.

#[path = "../tests/common/postgres.rs"]
#[allow(dead_code, reason = "the bench uses part of the test fixture")]
mod fixture;
#[path = "../tests/common/server_start.rs"]
mod server_start;

mod support;

use idemkv::backend::near::{NearCache, NearCacheConfig};
use idemkv::backend::postgres::PostgresBackend;
use idemkv::Config;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use support::tasks::{claim_complete, drive, key, Row, ANSWER, TASKS};

const ROUNDS: usize = 5;
const REPLAY_KEYS: u64 = 10_000;

fn pool_size() -> usize {
    std::env::var("IDEMKV_BENCH_POOL").ok().and_then(|value| value.parse().ok()).unwrap_or(16)
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
    let layout = std::env::var("IDEMKV_BENCH_PG_SQL").unwrap_or_default();
    prepare_tables(&backend, &layout).await;
    let preloading = backend.clone();
    support::tasks::preload(REPLAY_KEYS, move |n| {
        let backend = preloading.clone();
        async move {
            claim_complete(&backend, &key("idemkv-replay", n)).await;
            baseline_fresh(&backend, &key("plain-replay", n)).await;
        }
    })
    .await;
    let slice = support::seconds(1.0);
    let entries = usize::try_from(2 * REPLAY_KEYS).expect("a count");
    let near = NearCache::new(backend.clone(), NearCacheConfig::new().entries_max(entries).bytes_max(64 << 20));
    let rows = measure(&backend, &near, slice).await;
    let hot = hot_updates(&backend).await;
    println!(
        "PostgreSQL 15 on loopback, synchronous_commit on, pool of {pool}, {TASKS} tasks, {ROUNDS} alternating slices of {slice} s"
    );
    if !layout.is_empty() {
        println!("the store's table altered first: {layout}");
    }
    let pairs = [
        (0, "claim+complete (baseline: INSERT ON CONFLICT + UPDATE)"),
        (2, "replay (baseline: INSERT ON CONFLICT + SELECT)"),
    ];
    support::tasks::print_pairs(&rows, &pairs, 52);
    support::tasks::print_against(&rows[4], &rows[2], "replay, near cache (against the replay row)", 52);
    support::tasks::print_against(&rows[5], &rows[0], "claim+complete, near cache (against the first)", 52);
    println!("near cache: {:?}", near.stats());
    println!("{hot}");
}

/// Creates the baseline's table, then runs `layout` (statements that
/// change the store's table, if any) on the migrated store.
async fn prepare_tables(backend: &PostgresBackend, layout: &str) {
    let client = backend.pool().get().await.expect("client");
    client
        .batch_execute("CREATE TABLE plain (key text PRIMARY KEY, state text NOT NULL, response bytea NOT NULL)")
        .await
        .expect("baseline table");
    if !layout.is_empty() {
        client.batch_execute(layout).await.expect("IDEMKV_BENCH_PG_SQL");
    }
}

/// The rows, over `ROUNDS` alternating slices of `slice` s: the backend's
/// fresh keys, the baseline's, the backend's replays, the baseline's, and
/// the replays through `near`.
async fn measure(backend: &PostgresBackend, near: &NearCache<PostgresBackend>, slice: f64) -> Vec<Row> {
    let mut rows: Vec<Row> = (0..6).map(|_| Row::new()).collect();
    // Fresh keys through a cache of their own, so that their entries
    // take no room from the replayed keys'.
    let fresh = NearCache::new(near.backend().clone(), NearCacheConfig::new());
    let base = Arc::new(AtomicU64::new(0));
    for _ in 0..ROUNDS {
        let round = base.fetch_add(1 << 32, Ordering::Relaxed);
        let ours = backend.clone();
        drive(&mut rows[0], TASKS, slice, move |n| {
            let ours = ours.clone();
            async move { claim_complete(&ours, &key("idemkv-fresh", round + n)).await }
        })
        .await;
        let theirs = backend.clone();
        drive(&mut rows[1], TASKS, slice, move |n| {
            let theirs = theirs.clone();
            async move { baseline_fresh(&theirs, &key("plain-fresh", round + n)).await }
        })
        .await;
        let ours = backend.clone();
        drive(&mut rows[2], TASKS, slice, move |n| {
            let ours = ours.clone();
            async move { claim_complete(&ours, &key("idemkv-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        let theirs = backend.clone();
        drive(&mut rows[3], TASKS, slice, move |n| {
            let theirs = theirs.clone();
            async move { baseline_replay(&theirs, &key("plain-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        let near = near.clone();
        drive(&mut rows[4], TASKS, slice, move |n| {
            let near = near.clone();
            async move { claim_complete(&near, &key("idemkv-replay", n % REPLAY_KEYS)).await }
        })
        .await;
        let fresh = fresh.clone();
        drive(&mut rows[5], TASKS, slice, move |n| {
            let fresh = fresh.clone();
            async move { claim_complete(&fresh, &key("idemkv-near-fresh", round + n)).await }
        })
        .await;
    }
    rows
}

/// Of each table's updates, how many were HOT (no index entry written):
/// what its layout decides.
async fn hot_updates(backend: &PostgresBackend) -> String {
    // The pool's sessions report their counts when idle for a second.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let client = backend.pool().get().await.expect("client");
    let rows = client
        .query(
            "SELECT relname::text, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables \
             WHERE relname IN ('idempo_store', 'plain') ORDER BY relname",
            &[],
        )
        .await
        .expect("pg_stat_user_tables");
    let tables: Vec<String> = rows
        .iter()
        .map(|row| {
            let (name, updates, hot): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
            format!("{name}: {hot} of {updates} updates HOT")
        })
        .collect();
    tables.join("; ")
}
