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
//! Beside them a floor (`floor`, callers as threads): a bare group commit
//! on one file — a shared buffer, one `write` and one fdatasync a batch,
//! a condition variable — with nothing of a store around it: what
//! batching durable writes costs at the least on this machine.
//!
//! Each row twice: callers as threads (`claim`, `complete`, each parked
//! until its fsync), and as tokio tasks on a runtime of two worker threads
//! (`claim_async`, `complete_async`: a task awaits its fsync, and the
//! caller that leads a shard's next fsync runs it on the blocking pool),
//! as a service on tokio calls the store. The naive peer's callers are
//! threads in both.

mod support;

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::Write;
use support::tasks::{self, Row};
use support::{as_f64, cpu_seconds, drive, ratio, Measured};

const CALLERS: [usize; 5] = [1, 2, 8, 32, 128];
const RESPONSE: [u8; 200] = [b'r'; 200];

/// An idemkv row: its calls, its records per fsync and its CPU time per
/// call in µs.
fn idemkv_row(shards: u32, callers: usize, seconds: f64) -> (Measured, f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), Config::new().shards(shards).durability(Durability::Sync)).expect("open");
    let fingerprint = Fingerprint::of(b"POST /payments");
    let cpu_before = cpu_seconds();
    let measured = drive(callers, seconds, |thread, n| {
        let key = format!("{thread:04}-{n:012}-0000-0000-000000000000");
        let Claim::Acquired(lease) = store.claim(&ClaimRequest::new(&key, fingerprint)).expect("claim") else {
            panic!("fresh key not acquired");
        };
        lease.complete(&RESPONSE).expect("complete");
    });
    let cpu_us = (cpu_seconds() - cpu_before) * 1e6 / as_f64(measured.latencies.len().max(1));
    let stats = store.stats();
    (measured, as_f64(stats.records_synced) / as_f64(stats.fsyncs.max(1)), cpu_us)
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
            let key = format!("{n:016}-0000-0000-0000-000000000000");
            let request = ClaimRequest::new(&key, Fingerprint::of(b"POST /payments"));
            let Claim::Acquired(lease) = store.claim_async(&request).await.expect("claim") else {
                panic!("fresh key not acquired");
            };
            lease.complete_async(&RESPONSE).await.expect("complete");
        }
    }));
    let measured = row.measured();
    let cpu_us = (cpu_seconds() - cpu_before) * 1e6 / as_f64(measured.latencies.len().max(1));
    let stats = store.stats();
    (measured, as_f64(stats.records_synced) / as_f64(stats.fsyncs.max(1)), cpu_us)
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
        let key = format!("{thread:04}-{n:012}-0000-0000-000000000000");
        append(format!("claim {key}\n").as_bytes());
        let mut record = format!("complete {key} ").into_bytes();
        record.extend_from_slice(&RESPONSE);
        append(&record);
    })
}

/// A floor for any group commit on one file: callers append their record
/// to a shared buffer, and whichever finds no fsync running writes the
/// whole buffer with one `write` and fdatasyncs it while the others wait
/// on a condition variable. No index, no frames, no checks, nothing read
/// back: what a log whose durable writes are batched costs at the least.
/// (idemkv writes each record with a `pwrite` of its own, so that a full
/// disk fails that call alone.) Returns the row, its records per fsync
/// and its CPU µs a call.
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
            (&file).write_all(&batch).expect("write");
            file.sync_data().expect("fsync");
            state = log.lock();
            (state.durable, state.syncing) = (upto, false);
            state.fsyncs += 1;
            done.notify_all();
        }
    };
    let cpu_before = cpu_seconds();
    let measured = drive(callers, seconds, |thread, n| {
        let key = format!("{thread:04}-{n:012}-0000-0000-000000000000");
        append(format!("claim {key}\n").as_bytes());
        let mut record = format!("complete {key} ").into_bytes();
        record.extend_from_slice(&RESPONSE);
        append(&record);
    });
    let cpu_us = (cpu_seconds() - cpu_before) * 1e6 / as_f64(measured.latencies.len().max(1));
    let state = log.lock();
    (measured, as_f64(state.appended) / as_f64(state.fsyncs.max(1)), cpu_us)
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
        "callers", "as", "idemkv op/s", "p50", "p99", "rec/fsync", "CPU µs/op", "naive op/s", "p50", "p99", "ratio"
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
