//! Helpers shared by the bench binaries: timing many threads and
//! summarising latencies.
#![allow(
    dead_code,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "bench statistics: each binary uses a subset, and figures are approximate by nature"
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Seconds per measurement: `IDEMKV_BENCH_SECONDS`, else `default`.
pub fn seconds(default: f64) -> f64 {
    std::env::var("IDEMKV_BENCH_SECONDS").ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// Operations per second and sorted per-call latencies.
pub struct Measured {
    pub ops_per_second: f64,
    pub latencies: Vec<Duration>,
}

impl Measured {
    pub fn percentile(&self, fraction: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() - 1) as f64 * fraction).round() as usize;
        self.latencies[index]
    }
}

/// Runs `op(thread, n)` on `threads` threads for `seconds`, timing each call.
pub fn drive(threads: usize, seconds: f64, op: impl Fn(usize, u64) + Sync) -> Measured {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let latencies: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let (stop, op) = (&stop, &op);
                scope.spawn(move || {
                    let mut latencies = Vec::with_capacity(1 << 16);
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
    let mut latencies: Vec<Duration> = latencies.into_iter().flatten().collect();
    latencies.sort_unstable();
    Measured { ops_per_second: latencies.len() as f64 / elapsed, latencies }
}

/// Ratio of two rates, as printed in tables.
pub fn ratio(ours: f64, theirs: f64) -> f64 {
    ours / theirs.max(f64::MIN_POSITIVE)
}

/// `count` as f64 for averages.
pub fn as_f64(count: u64) -> f64 {
    count as f64
}
