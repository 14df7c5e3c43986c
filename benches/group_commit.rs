//! Group commit under `Durability::Sync`: claim + complete with 1..128
//! concurrent callers, beside a naive fsync-per-call baseline in the same run.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench group_commit              # 3 s per row
//! IDEMKV_BENCH_SECONDS=0.2 cargo bench -p idemkv-bench --bench group_commit
//! IDEMKV_BENCH_SHARDS=1 cargo bench -p idemkv-bench --bench group_commit
//! IDEMKV_BENCH_CALLERS=1,128 cargo bench -p idemkv-bench --bench group_commit
//! IDEMKV_BENCH_FLOOR_EACH=1 cargo bench -p idemkv-bench --bench group_commit
//! IDEMKV_BENCH_REVERSE=1 cargo bench -p idemkv-bench --bench group_commit
//! ```
//!
//! The rows run in the order printed (threads, tasks, the naive peer,
//! `floor`, `floor/t`), or with `IDEMKV_BENCH_REVERSE=1` the other way
//! round.
//!
//! Beside each idemkv row, the CPU time the whole process spent per
//! claim + complete (two records): this machine's cores are shared, and
//! CPU per call is what the group commit's wake-ups cost.
//!
//! Each idemkv row twice: callers as threads (`claim`, `complete`, each
//! parked until its fsync), and as tokio tasks on a runtime of two worker
//! threads (`claim_async`, `complete_async`: a task awaits its fsync,
//! which a thread of the shard's own runs), as a service on tokio calls
//! the store. The naive peer's callers
//! are threads in both.
//!
//! And two floors: `floor`, the same records from callers as threads
//! through a bare group commit on one file — a shared buffer, one `write`
//! and one fdatasync a batch, a condition variable — with nothing of a
//! store around it: what batching durable writes costs callers that park
//! their thread, at the least, on this machine; and `floor/t`, the same
//! from tokio tasks, which await a `watch` while a thread of its own
//! writes and fdatasyncs. `IDEMKV_BENCH_FLOOR_EACH=1`: in `floor/t` each
//! task writes its own record (as idemkv's callers do), the thread only
//! fdatasyncs.

mod support;

use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Arc;
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

/// The shared state of [`floor_tasks_row`].
struct FloorLog {
    /// Records not yet written (or, with `each`, a byte a record
    /// written), records appended, and whether the row is over.
    buffer: Mutex<(Vec<u8>, u64, bool)>,
    filled: parking_lot::Condvar,
    durable: tokio::sync::watch::Sender<u64>,
    file: File,
}

/// The thread of [`floor_tasks_row`]: takes the buffer, writes it (unless
/// `each` task wrote its own), fdatasyncs and tells the tasks, until the
/// row is over; returns the records and fsyncs.
fn flush_floor(log: &FloorLog, each: bool) -> (u64, u64) {
    let mut fsyncs = 0_u64;
    loop {
        let (batch, upto) = {
            let mut buffer = log.buffer.lock();
            while buffer.0.is_empty() && !buffer.2 {
                log.filled.wait(&mut buffer);
            }
            if buffer.0.is_empty() {
                return (buffer.1, fsyncs);
            }
            (std::mem::take(&mut buffer.0), buffer.1)
        };
        let written = if each { Ok(()) } else { (&log.file).write_all(&batch) };
        if let Err(error) = written.and_then(|()| log.file.sync_data()) {
            eprintln!("floor: {error}");
            std::process::abort();
        }
        fsyncs += 1;
        log.durable.send_replace(upto);
    }
}

/// [`floor_row`] for tokio tasks, on a runtime of two worker threads: a
/// task appends its record to the shared buffer and awaits a `watch` of
/// how far the file is durable; one thread of its own takes the buffer,
/// writes it with one `write` and fdatasyncs it, again and again while
/// there is something to take (each fsync wakes every waiting task; those
/// whose record came later wait again). With `each` a task writes its
/// own record (one `write` a record, under the buffer's lock, as idemkv's
/// callers do) and the thread only fdatasyncs.
fn floor_tasks_row(callers: usize, seconds: f64, each: bool) -> (Measured, f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = OpenOptions::new().create(true).append(true).open(dir.path().join("log")).expect("open");
    let log = Arc::new(FloorLog {
        buffer: Mutex::new((Vec::new(), 0, false)),
        filled: parking_lot::Condvar::new(),
        durable: tokio::sync::watch::Sender::new(0),
        file,
    });
    let flusher = std::thread::spawn({
        let log = Arc::clone(&log);
        move || flush_floor(&log, each)
    });
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().expect("runtime");
    let cpu_before = cpu_seconds();
    let mut row = Row::new();
    let caller = Arc::clone(&log);
    runtime.block_on(tasks::drive(&mut row, callers, seconds, move |n| {
        let log = Arc::clone(&caller);
        async move {
            for record in records(&key(0, n)) {
                let mine = {
                    let mut buffer = log.buffer.lock();
                    if each {
                        if let Err(error) = (&log.file).write_all(&record) {
                            eprintln!("floor: {error}");
                            std::process::abort();
                        }
                        buffer.0.push(0);
                    } else {
                        buffer.0.extend_from_slice(&record);
                    }
                    buffer.1 += 1;
                    log.filled.notify_one();
                    buffer.1
                };
                log.durable.subscribe().wait_for(|durable| *durable >= mine).await.expect("the flusher runs");
            }
        }
    }));
    log.buffer.lock().2 = true;
    log.filled.notify_one();
    let (records, fsyncs) = flusher.join().expect("flusher");
    row_of(row.measured(), records, fsyncs, cpu_before)
}

/// A row's name, and the row with its records per fsync and CPU µs a call.
type Named = (&'static str, (Measured, f64, f64));

/// The naive peer's row and the others', named, at `callers`: run in the
/// order printed, or (`reverse`) the other way round, so that no row
/// always follows the same one.
fn rows(shards: u32, callers: usize, seconds: f64, floor_each: bool, reverse: bool) -> (Measured, Vec<Named>) {
    let mut order = [0, 1, 2, 3, 4];
    if reverse {
        order.reverse();
    }
    let (mut naive, mut kinds) = (None, vec![]);
    for row in order {
        match row {
            0 => kinds.push(("threads", idemkv_row(shards, callers, seconds))),
            1 => kinds.push(("tasks", idemkv_async_row(shards, callers, seconds))),
            2 => naive = Some(naive_row(callers, seconds)),
            3 => kinds.push(("floor", floor_row(callers, seconds))),
            _ => kinds.push(("floor/t", floor_tasks_row(callers, seconds, floor_each))),
        }
    }
    if reverse {
        kinds.reverse();
    }
    (naive.expect("the naive row ran"), kinds)
}

fn main() {
    let seconds = support::seconds(3.0);
    let shards = std::env::var("IDEMKV_BENCH_SHARDS").ok().and_then(|value| value.parse().ok()).unwrap_or(4);
    let callers: Vec<usize> = std::env::var("IDEMKV_BENCH_CALLERS").ok().map_or_else(
        || CALLERS.to_vec(),
        |list| list.split(',').map(|callers| callers.trim().parse().expect("IDEMKV_BENCH_CALLERS: numbers")).collect(),
    );
    let floor_each = std::env::var_os("IDEMKV_BENCH_FLOOR_EACH").is_some();
    println!("claim + complete, Durability::Sync, {shards} shards, 200-byte responses, {seconds} s per row");
    println!(
        "{:>7} {:<7} | {:>12} {:>9} {:>9} {:>10} {:>11} | {:>12} {:>9} {:>9} | {:>7}",
        "callers", "as", "op/s", "p50", "p99", "rec/fsync", "CPU µs/op", "naive op/s", "p50", "p99", "ratio"
    );
    let reverse = std::env::var_os("IDEMKV_BENCH_REVERSE").is_some();
    for callers in callers {
        let (naive, kinds) = rows(shards, callers, seconds, floor_each, reverse);
        for (kind, (ours, records_per_fsync, cpu_us)) in kinds {
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
