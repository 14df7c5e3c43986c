//! `load` on a store directory: threads calling the embedded [`Store`]
//! directly (its blocking calls, no runtime in between).

use super::workload::{gather, latency_histogram, record, Progress, Workload};
use super::{report, summary, Plan};
use crate::output::{bytes, count, Failure};
use hdrhistogram::Histogram;
use idemkv::{Claim, ClaimRequest, Config, Durability, Fingerprint, Store};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

pub(super) fn run(plan: &Plan, dir: &Path, durability: Durability, threads: usize) -> Result<ExitCode, Failure> {
    let mut config = Config::new()
        .durability(durability)
        .response_bytes_max(plan.value_bytes.max(1 << 20))
        .segment_bytes((64 << 20).max(2 * plan.value_bytes as u64 + (1 << 20)));
    if let Some(ttl) = plan.ttl {
        config = config.default_ttl(ttl);
    }
    let store = Store::open(dir, config)?;
    let work = Workload::new(plan)?;
    let progress = Progress::start(plan.duration)?;
    let empty = latency_histogram()?;
    let results: Vec<(Histogram<u64>, Option<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (store, work, latency) = (&store, &work, empty.clone());
                scope.spawn(move || worker(store, work, plan, thread as u64, latency))
            })
            .collect();
        while let Some(pause) = progress.pause(&work) {
            std::thread::sleep(pause);
            progress.update(&work);
        }
        work.stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or_else(|_| (empty.clone(), Some("a load thread panicked".into()))))
            .collect()
    });
    // A worker that failed (a full disk, say) stopped them all; what was
    // acknowledged until then is still summed up.
    let elapsed = progress.finish();
    let (latency, failure) = gather(results)?;
    let mut lines = summary((threads, "threads"), &latency, elapsed, &work.tally);
    let stats = store.stats();
    lines.push(format!(
        "store: {} live records, {} on disk, {} fsyncs",
        count(stats.live_records),
        bytes(stats.disk_bytes),
        count(stats.fsyncs)
    ));
    let closed = store.close().map_err(Failure::from);
    report(lines, failure, closed, &work.tally)
}

/// Runs claims until stopped; returns their latencies and the error that
/// stopped this worker early, if one did (it then stops the others too).
fn worker(
    store: &Store,
    work: &Workload,
    plan: &Plan,
    thread: u64,
    mut latency: Histogram<u64>,
) -> (Histogram<u64>, Option<String>) {
    let outcome = claims(store, work, plan, thread, &mut latency);
    if outcome.is_err() {
        work.stop.store(true, Ordering::Relaxed);
    }
    (latency, outcome.err())
}

fn claims(
    store: &Store,
    work: &Workload,
    plan: &Plan,
    thread: u64,
    latency: &mut Histogram<u64>,
) -> Result<(), String> {
    let fingerprint = Fingerprint::of(b"idemkv load");
    let response = vec![b'v'; plan.value_bytes];
    let mut random = Workload::seed(thread);
    while !work.stopped() {
        let index = work.next(&mut random);
        let key = Workload::key(index);
        let call = std::time::Instant::now();
        let claim = store.claim(&ClaimRequest::new(&key, fingerprint)).map_err(|error| error.to_string())?;
        record(latency, call);
        match claim {
            Claim::Acquired(lease) => {
                let token = lease.token();
                work.acquired(index, token, lease.recovered());
                let finished = lease.complete(&response).map_err(|error| error.error.to_string());
                work.finished(index, token);
                finished?;
            }
            Claim::Replay(_) => {
                work.tally.replays.fetch_add(1, Ordering::Relaxed);
            }
            Claim::InProgress { .. } => {
                work.tally.in_progress.fetch_add(1, Ordering::Relaxed);
            }
            Claim::Mismatch => {
                work.tally.mismatches.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}
