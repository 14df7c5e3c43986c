//! Group commit under `Durability::Sync`: claim + complete with 1..128
//! concurrent callers, beside a naive fsync-per-call baseline in the same run.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench group_commit              # 3 s per row
//! IDEMKV_BENCH_SECONDS=0.2 cargo bench -p idemkv-bench --bench group_commit
//! IDEMKV_BENCH_SHARDS=1 cargo bench -p idemkv-bench --bench group_commit
//! IDEMKV_BENCH_CALLERS=1,128 cargo bench -p idemkv-bench --bench group_commit
//! ```
//!
//! Beside each idemkv row, the CPU time the whole process spent per
//! claim + complete (two records): this machine's cores are shared, and
//! CPU per call is what the group commit's wake-ups cost.
//!
//! Each idemkv row twice: callers as threads (`claim`, `complete`, each
//! parked until its fsync), and as tokio tasks on a runtime of two worker
//! threads (`claim_async`, `complete_async`: a task awaits its fsync, and
//! the caller that leads a shard's next fsync runs it on the blocking
//! pool), as a service on tokio calls the store. The naive peer's callers
//! are threads in both.
//!
//! And a third row, `floor`: the same records from callers as threads
//! through a bare group commit on one file — a shared buffer, one `write`
//! and one fdatasync a batch, a condition variable — with nothing of a
//! store around it: what batching durable writes costs callers that park
//! their thread, at the least, on this machine.

mod support;

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::Write;
use support::tasks::{self, Row};
use support::{as_f64, cpu_seconds, drive, ratio, Measured};

const CALLERS: [usize; 5] = [1, 2, 8, 32, 128];
const RESPONSE: [u8; 200] = [b'r'; 200];

/// The key of caller `caller`'s `n`-th call: 40 bytes in every row.
fn key(caller: usize, n: u64) -> String {
    format!("{caller:04}-{n:012}-0000-0000-000000000000")
}

/// The naive peer's and the floor's two records of a call with `key`.
fn records(key: &str) -> [Vec<u8>; 2] {
    let mut completion = format!("complete {key} ").into_bytes();
    completion.extend_from_slice(&RESPONSE);
    [format!("claim {key}\n").into_bytes(), completion]
}

/// `measured` with its records per fsync and the process's CPU µs a call
/// since `cpu_before`.
fn row_of(measured: Measured, records: u64, fsyncs: u64, cpu_before: f64) -> (Measured, f64, f64) {
    let cpu_us = (cpu_seconds() - cpu_before) * 1e6 / as_f64(measured.latencies.len().max(1));
    (measured, as_f64(records) / as_f64(fsyncs.max(1)), cpu_us)
}

/// An idemkv row: its calls, its records per fsync and its CPU time per
/// call in µs.
fn idemkv_row(shards: u32, callers: usize, seconds: f64) -> (Measured, f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().shards(shards).durability(Durability::Sync)).expect("open");
    let fingerprint = Fingerprint::of(b"POST /payments");
    let cpu_before = cpu_seconds();
    let measured = drive(callers, seconds, |thread, n| {
        let key = key(thread, n);
        let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, fingerprint)).expect("claim") else {
            panic!("fresh key not acquired");
        };
        lease.complete(&RESPONSE).expect("complete");
    });
    let stats = store.stats();
    row_of(measured, stats.records_synced, stats.fsyncs, cpu_before)
}

/// [`idemkv_row`] with tokio tasks as the callers, on a runtime of two
/// worker threads.
fn idemkv_async_row(shards: u32, callers: usize, seconds: f64) -> (Measured, f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().shards(shards).durability(Durability::Sync)).expect("open");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().expect("runtime");
    let cpu_before = cpu_seconds();
    let mut row = Row::new();
    let caller = store.clone();
    runtime.block_on(tasks::drive(&mut row, callers, seconds, move |n| {
        let store = caller.clone();
        async move {
            let key = key(0, n);
            let request = ClaimRequest::new(&key, Fingerprint::of(b"POST /payments"));
            let Claim::Acquired(lease) = store.claim_async(&request).await.expect("claim") else {
                panic!("fresh key not acquired");
            };
            lease.complete_async(&RESPONSE).await.expect("complete");
        }
    }));
    let stats = store.stats();
    row_of(row.measured(), stats.records_synced, stats.fsyncs, cpu_before)
}

/// The baseline a service team would write first: one file behind a mutex,
/// every mutation appended and fsynced (fdatasync) on its own.
fn naive_row(callers: usize, seconds: f64) -> Measured {
    let dir = tempfile::tempdir().expect("tempdir");
    let file: Mutex<File> =
        Mutex::new(OpenOptions::new().create(true).append(true).open(dir.path().join("log")).expect("open"));
    let append = |record: &[u8]| {
        let mut file = file.lock();
        file.write_all(record).expect("write");
        file.sync_data().expect("fsync");
    };
    drive(callers, seconds, |thread, n| {
        for record in records(&key(thread, n)) {
            append(&record);
        }
    })
}

/// A floor for a group commit on one file whose callers park their
/// thread: callers append their record to a shared buffer, and whichever
/// finds no fsync running writes the whole buffer with one `write` and
/// fdatasyncs it while the others wait on a condition variable. No index,
/// no frames, no checks, nothing read back. (idemkv writes each record
/// with a `pwrite` of its own, so that a full disk fails that call
/// alone.) A failed write or fsync ends the process: the waiters would
/// wait for ever. Returns the row, its records per fsync and its CPU µs a
/// call.
fn floor_row(callers: usize, seconds: f64) -> (Measured, f64, f64) {
    struct Log {
        buffer: Vec<u8>,
        appended: u64,
        durable: u64,
        syncing: bool,
        fsyncs: u64,
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = OpenOptions::new().create(true).append(true).open(dir.path().join("log")).expect("open");
    let log = Mutex::new(Log { buffer: Vec::new(), appended: 0, durable: 0, syncing: false, fsyncs: 0 });
    let done = parking_lot::Condvar::new();
    let append = |record: &[u8]| {
        let mut state = log.lock();
        state.buffer.extend_from_slice(record);
        state.appended += 1;
        let mine = state.appended;
        while state.durable < mine {
            if state.syncing {
                done.wait(&mut state);
                continue;
            }
            let (batch, upto) = (std::mem::take(&mut state.buffer), state.appended);
            state.syncing = true;
            drop(state);
            // Only the caller that set `syncing` writes: the file needs no lock.
            if let Err(error) = (&file).write_all(&batch).and_then(|()| file.sync_data()) {
                eprintln!("floor: {error}");
                std::process::abort();
            }
            state = log.lock();
            (state.durable, state.syncing) = (upto, false);
            state.fsyncs += 1;
            done.notify_all();
        }
    };
    let cpu_before = cpu_seconds();
    let measured = drive(callers, seconds, |thread, n| {
        for record in records(&key(thread, n)) {
            append(&record);
        }
    });
    let state = log.lock();
    row_of(measured, state.appended, state.fsyncs, cpu_before)
}

fn main() {
    let seconds = support::seconds(3.0);
    let shards = std::env::var("IDEMKV_BENCH_SHARDS").ok().and_then(|value| value.parse().ok()).unwrap_or(4);
    let callers: Vec<usize> = std::env::var("IDEMKV_BENCH_CALLERS").ok().map_or_else(
        || CALLERS.to_vec(),
        |list| list.split(',').map(|callers| callers.trim().parse().expect("IDEMKV_BENCH_CALLERS: numbers")).collect(),
    );
    println!("claim + complete, Durability::Sync, {shards} shards, 200-byte responses, {seconds} s per row");
    println!(
        "{:>7} {:<7} | {:>12} {:>9} {:>9} {:>10} {:>11} | {:>12} {:>9} {:>9} | {:>7}",
        "callers", "as", "op/s", "p50", "p99", "rec/fsync", "CPU µs/op", "naive op/s", "p50", "p99", "ratio"
    );
    for callers in callers {
        let threads = idemkv_row(shards, callers, seconds);
        let tasks = idemkv_async_row(shards, callers, seconds);
        let naive = naive_row(callers, seconds);
        let floor = floor_row(callers, seconds);
        for (kind, (ours, records_per_fsync, cpu_us)) in [("threads", threads), ("tasks", tasks), ("floor", floor)] {
            println!(
                "{callers:>7} {kind:<7} | {:>12.0} {:>9.1?} {:>9.1?} {:>10.1} {:>11.1} | {:>12.0} {:>9.1?} {:>9.1?} | {:>6.1}x",
                ours.ops_per_second,
                ours.percentile(0.50),
                ours.percentile(0.99),
                records_per_fsync,
                cpu_us,
                naive.ops_per_second,
                naive.percentile(0.50),
                naive.percentile(0.99),
                ratio(ours.ops_per_second, naive.ops_per_second)
            );
        }
    }
}
