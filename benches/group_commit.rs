//! Group commit under `Durability::Sync`: claim + complete with 1..128
//! concurrent callers, beside a naive fsync-per-call baseline in the same run.
//!
//! ```text
//! cargo bench --bench group_commit              # 3 s per row
//! IDEMKV_BENCH_SECONDS=0.2 cargo bench --bench group_commit
//! ```

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CALLERS: [usize; 5] = [1, 2, 8, 32, 128];
const RESPONSE: [u8; 200] = [b'r'; 200];

struct Row {
    ops_per_second: f64,
    p50: Duration,
    p99: Duration,
    records_per_fsync: f64,
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index]
}

/// Runs `op(thread, n)` on `callers` threads for `seconds`, timing each call.
fn drive(callers: usize, seconds: f64, op: impl Fn(usize, u64) + Sync) -> (f64, Vec<Duration>) {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let latencies: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..callers)
            .map(|thread| {
                let (stop, op) = (&stop, &op);
                scope.spawn(move || {
                    let mut latencies = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let call = Instant::now();
                        op(thread, n);
                        latencies.push(call.elapsed());
                        n += 1;
                    }
                    latencies
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|handle| handle.join().expect("bench thread")).collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
    all.sort_unstable();
    (all.len() as f64 / elapsed, all)
}

fn idemkv_row(callers: usize, seconds: f64) -> Row {
    let dir = tempfile::tempdir().expect("tempdir");
    let shards = std::env::var("IDEMKV_BENCH_SHARDS").ok().and_then(|value| value.parse().ok()).unwrap_or(4);
    let store = Store::open(dir.path(), Config::new().shards(shards).durability(Durability::Sync)).expect("open");
    let fingerprint = Fingerprint::of(b"POST /payments");
    let (ops_per_second, latencies) = drive(callers, seconds, |thread, n| {
        let key = format!("{thread:04}-{n:012}-0000-0000-000000000000");
        let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, fingerprint)).expect("claim") else {
            panic!("fresh key not acquired");
        };
        lease.complete(&RESPONSE).expect("complete");
    });
    let stats = store.stats();
    Row {
        ops_per_second,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        records_per_fsync: stats.records_synced as f64 / stats.fsyncs.max(1) as f64,
    }
}

/// The baseline a service team would write first: one file behind a mutex,
/// every mutation appended and fsynced on its own.
fn naive_row(callers: usize, seconds: f64) -> Row {
    let dir = tempfile::tempdir().expect("tempdir");
    let file: Mutex<File> =
        Mutex::new(OpenOptions::new().create(true).append(true).open(dir.path().join("log")).expect("open"));
    let append = |record: &[u8]| {
        let mut file = file.lock();
        file.write_all(record).expect("write");
        file.sync_data().expect("fsync");
    };
    let (ops_per_second, latencies) = drive(callers, seconds, |thread, n| {
        let key = format!("{thread:04}-{n:012}-0000-0000-000000000000");
        append(format!("claim {key}\n").as_bytes());
        let mut record = format!("complete {key} ").into_bytes();
        record.extend_from_slice(&RESPONSE);
        append(&record);
    });
    Row { ops_per_second, p50: percentile(&latencies, 0.50), p99: percentile(&latencies, 0.99), records_per_fsync: 1.0 }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used here.
    let seconds: f64 = std::env::var("IDEMKV_BENCH_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(3.0);
    println!("claim + complete, Durability::Sync, 200-byte responses, {seconds} s per row");
    println!(
        "{:>7} | {:>12} {:>9} {:>9} {:>10} | {:>12} {:>9} {:>9} | {:>7}",
        "callers", "idemkv op/s", "p50", "p99", "rec/fsync", "naive op/s", "p50", "p99", "ratio"
    );
    for callers in CALLERS {
        let ours = idemkv_row(callers, seconds);
        let naive = naive_row(callers, seconds);
        println!(
            "{callers:>7} | {:>12.0} {:>9.1?} {:>9.1?} {:>10.1} | {:>12.0} {:>9.1?} {:>9.1?} | {:>6.1}x",
            ours.ops_per_second,
            ours.p50,
            ours.p99,
            ours.records_per_fsync,
            naive.ops_per_second,
            naive.p50,
            naive.p99,
            ours.ops_per_second / naive.ops_per_second
        );
        let _unused = naive.records_per_fsync;
    }
}
