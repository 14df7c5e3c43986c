//! For the networked backends' benches: many tokio tasks calling one
//! operation for a slice of time, the rows they fill, and the
//! claim+complete both benches measure on any backend.

use super::{histogram, Measured};
use hdrhistogram::Histogram;
use idemkv::{
    backend::{BackendClaim, ClaimOptions, IdempotencyBackend},
    Fingerprint,
};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Concurrent tasks of every slice.
pub const TASKS: usize = 64;
/// The stored answer: 200 bytes.
pub const ANSWER: [u8; 200] = [b'a'; 200];

/// A 36-byte key of `kind`.
pub fn key(kind: &str, n: u64) -> String {
    format!("{kind}-{n:031}")
}

/// A 30 s lease, a one-hour TTL.
pub fn options() -> ClaimOptions {
    ClaimOptions::new().lease(Duration::from_secs(30)).ttl(Duration::from_secs(3600))
}

/// Claims `key`; when acquired, completes it with [`ANSWER`].
pub async fn claim_complete<B: IdempotencyBackend>(backend: &B, key: &str) {
    let fingerprint = Fingerprint::of(key.as_bytes());
    match backend.claim(b"", key.as_bytes(), fingerprint, options()).await.expect("claim") {
        BackendClaim::Acquired { token, .. } => backend.complete(&token, &ANSWER).await.expect("complete"),
        BackendClaim::Replay(_) => {}
        other => panic!("unexpected {other:?}"),
    }
}

/// Operations and latencies of one row, over its slices.
pub struct Row {
    operations: u64,
    seconds: f64,
    latencies: Histogram<u64>,
}

impl Row {
    pub fn new() -> Row {
        Row { operations: 0, seconds: 0.0, latencies: histogram() }
    }

    pub fn operations(&self) -> u64 {
        self.operations
    }

    pub fn rate(&self) -> f64 {
        self.operations as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }

    pub fn percentile(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.latencies.value_at_quantile(quantile))
    }

    /// The row as the thread benches report theirs.
    pub fn measured(self) -> Measured {
        Measured { ops_per_second: self.rate(), latencies: self.latencies }
    }
}

/// Prints a header, then for each `(index, name)` the row at `index` (the
/// store's) and the one after it (its baseline's), the first with its rate's
/// ratio to the baseline's; the first column is `width` wide.
pub fn print_pairs(rows: &[Row], pairs: &[(usize, &str)], width: usize) {
    println!("{:<width$} {:>10} {:>10} {:>10} {:>8}", "", "ops/s", "p50", "p99", "ratio");
    for &(pair, name) in pairs {
        let (ours, theirs) = (&rows[pair], &rows[pair + 1]);
        let ratio = ours.rate() / theirs.rate().max(f64::MIN_POSITIVE);
        for (label, row) in [(name, ours), ("  baseline", theirs)] {
            let shown = if std::ptr::eq(row, ours) { format!("{ratio:.2}") } else { String::new() };
            println!(
                "{label:<width$} {:>10.0} {:>10.1?} {:>10.1?} {shown:>8}",
                row.rate(),
                row.percentile(0.5),
                row.percentile(0.99)
            );
        }
    }
}

/// Prints `row` against `other` (their rates' ratio), named `name`.
pub fn print_against(row: &Row, other: &Row, name: &str, width: usize) {
    let ratio = row.rate() / other.rate().max(f64::MIN_POSITIVE);
    println!(
        "{name:<width$} {:>10.0} {:>10.1?} {:>10.1?} {ratio:>8.2}",
        row.rate(),
        row.percentile(0.5),
        row.percentile(0.99)
    );
}

/// Runs `operation(n)` from `tasks` tasks (the networked benches: [`TASKS`])
/// for `slice` seconds and adds to `row`; `n` counts the calls of all tasks.
pub async fn drive<F, Fut>(row: &mut Row, tasks: usize, slice: f64, operation: F)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let operation = Arc::new(operation);
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..tasks)
        .map(|_| {
            let (operation, stop, next) = (Arc::clone(&operation), Arc::clone(&stop), Arc::clone(&next));
            tokio::spawn(async move {
                let mut latencies = histogram();
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

/// Runs `each(n)` for every `n` below `count`, on [`TASKS`] tasks at once
/// (the keys a replay row reads, written before the rows run).
pub async fn preload<F, Fut>(count: u64, each: F)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let each = Arc::new(each);
    let lanes = TASKS as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..lanes {
        let each = Arc::clone(&each);
        tasks.spawn(async move {
            for n in (lane..count).step_by(TASKS) {
                each(n).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("preload task");
    }
}
