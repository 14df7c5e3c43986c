//! Helpers shared by the bench binaries: timing many threads and
//! summarising latencies.
#![allow(
    dead_code,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "bench statistics: each binary uses a subset, and figures are approximate by nature"
)]

pub mod engines;
pub mod floor;
pub mod pool;
pub mod summary;
pub mod tasks;

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Resident memory of this process (`VmRSS`), in bytes.
pub fn rss_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// Anonymous resident memory of this process (`RssAnon`): the heap, with
/// neither the segments' mapped pages nor the binary.
pub fn anon_rss_bytes() -> u64 {
    status_bytes("RssAnon:")
}

/// CPU seconds (user + system, all threads) of process `pid` (`"self"`
/// for this one) from its `/proc/{pid}/stat`, in ticks of 1/100 s; 0 when
/// it cannot be read. Beside wall time, since this machine's cores are
/// shared with other work.
pub fn process_cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // utime and stime: the 14th and 15th fields, the 12th and 13th after the name.
    let ticks: u64 = fields.split_whitespace().skip(11).take(2).filter_map(|field| field.parse::<u64>().ok()).sum();
    as_f64(ticks) / 100.0
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap_or("");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// CPU seconds this process has used (see [`process_cpu_seconds`]).
pub fn cpu_seconds() -> f64 {
    process_cpu_seconds("self")
}

/// Claims and completes `records` new keys (UUID-shaped, 200-byte
/// responses) on `threads` threads.
pub fn load_completed(store: &idemkv::Store, records: u64, threads: u64) {
    use idemkv::{Claim, ClaimRequest, Fingerprint};
    let fingerprint = Fingerprint::of(b"POST /payments");
    std::thread::scope(|scope| {
        for thread in 0..threads {
            scope.spawn(move || {
                let response = [b'r'; 200];
                for n in (thread..records).step_by(usize::try_from(threads).expect("small")) {
                    let key = format!("{n:08x}-0000-4000-8000-{:012x}", n.wrapping_mul(0x9E37_79B9));
                    let request = ClaimRequest::new(&key, fingerprint);
                    let Claim::Acquired(lease) = store.claim(&request).expect("claim") else { panic!("not acquired") };
                    lease.complete(&response).expect("complete");
                }
            });
        }
    });
}

/// Seconds per measurement: `IDEMKV_BENCH_SECONDS`, else `default`.
pub fn seconds(default: f64) -> f64 {
    std::env::var("IDEMKV_BENCH_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// Operations per second and per-call latencies (a fixed-size histogram,
/// so recording never allocates or faults pages in the measured loop).
pub struct Measured {
    pub ops_per_second: f64,
    pub latencies: Histogram<u64>,
}

impl Measured {
    pub fn percentile(&self, fraction: f64) -> Duration {
        Duration::from_nanos(self.latencies.value_at_quantile(fraction))
    }
}

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// Runs `op(thread, n)` on `threads` threads for `seconds`, timing each call.
pub fn drive(threads: usize, seconds: f64, op: impl Fn(usize, u64) + Sync) -> Measured {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let latencies: Vec<Histogram<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (stop, op) = (&stop, &op);
                scope.spawn(move || {
                    let mut latencies = histogram();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let call = Instant::now();
                        op(thread, n);
                        latencies.saturating_record(u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX));
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
    let mut all = histogram();
    for histogram in &latencies {
        all.add(histogram).expect("same bounds");
    }
    Measured { ops_per_second: all.len() as f64 / elapsed, latencies: all }
}

/// Ratio of two rates, as printed in tables.
pub fn ratio(ours: f64, theirs: f64) -> f64 {
    ours / theirs.max(f64::MIN_POSITIVE)
}

/// `count` as f64 for averages.
pub fn as_f64(count: u64) -> f64 {
    count as f64
}
