//! What every worker of a `load` run shares, whatever it loads: which
//! key comes next, who holds each key (the fencing check), the tally of
//! answers, the flag that stops them all, the progress bar and the latency
//! histograms.

#![expect(clippy::cast_precision_loss, reason = "rates and ratios for display")]

use super::Plan;
use crate::output::Failure;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counts of each answer, and the fencing check's findings.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) acquired: AtomicU64,
    pub(super) replays: AtomicU64,
    pub(super) in_progress: AtomicU64,
    pub(super) mismatches: AtomicU64,
    pub(super) double_holders: AtomicU64,
}

/// What every worker shares: which keys exist, who holds each, the tally,
/// and the flag that stops them all.
pub(super) struct Workload {
    /// Per key, the token of the holder between its acquire and its finish.
    holders: Vec<AtomicU64>,
    created: AtomicU64,
    keys: u64,
    replay_ratio: f64,
    pub(super) tally: Tally,
    pub(super) stop: AtomicBool,
}

impl Workload {
    pub(super) fn new(plan: &Plan) -> Result<Workload, Failure> {
        let keys = usize::try_from(plan.keys).map_err(|_| Failure::other("--keys too large for this machine"))?;
        Ok(Workload {
            holders: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            created: AtomicU64::new(0),
            keys: plan.keys,
            replay_ratio: plan.replay_ratio,
            tally: Tally::default(),
            stop: AtomicBool::new(false),
        })
    }

    /// The first state of worker `worker`'s generator (never zero).
    pub(super) fn seed(worker: u64) -> u64 {
        0x9E37_79B9_7F4A_7C15_u64 ^ (worker + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)
    }

    /// The index of the next key to claim: an existing one with the replay
    /// ratio, else a new one while there are keys left.
    #[inline]
    pub(super) fn next(&self, random: &mut u64) -> u64 {
        *random ^= *random << 13;
        *random ^= *random >> 7;
        *random ^= *random << 17;
        // Threads racing for the last new key may push the counter past
        // `keys`; the keys that exist stop there.
        let existing = self.created.load(Ordering::Relaxed).min(self.keys);
        let replay = existing > 0 && ((*random % 10_000) as f64) < self.replay_ratio * 10_000.0;
        if replay || existing >= self.keys {
            (*random >> 16) % existing.max(1)
        } else {
            self.created.fetch_add(1, Ordering::Relaxed).min(self.keys - 1)
        }
    }

    /// The key of index `index`.
    pub(super) fn key(index: u64) -> String {
        format!("load-{index:016x}")
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Records an acquire: the key's slot holds `token` until the lease is
    /// finished, so a second acquire meanwhile is a double holder (unless
    /// it took over a lease that ended).
    #[inline]
    pub(super) fn acquired(&self, index: u64, token: u64, recovered: bool) {
        self.tally.acquired.fetch_add(1, Ordering::Relaxed);
        let slot = &self.holders[usize::try_from(index).unwrap_or(usize::MAX)];
        if slot.compare_exchange(0, token, Ordering::SeqCst, Ordering::SeqCst).is_err() && !recovered {
            self.tally.double_holders.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the end of the lease `token` on the key (ours, or a taker's
    /// that is left in place).
    #[inline]
    pub(super) fn finished(&self, index: u64, token: u64) {
        let slot = &self.holders[usize::try_from(index).unwrap_or(usize::MAX)];
        let _ours_or_a_taker_s = slot.compare_exchange(token, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub(super) fn answered(&self) -> u64 {
        self.tally.acquired.load(Ordering::Relaxed)
            + self.tally.replays.load(Ordering::Relaxed)
            + self.tally.in_progress.load(Ordering::Relaxed)
            + self.tally.mismatches.load(Ordering::Relaxed)
    }
}

/// The progress bar of a run, and its clock.
pub(super) struct Progress {
    bar: ProgressBar,
    started: Instant,
    duration: Duration,
}

impl Progress {
    pub(super) fn start(duration: Duration) -> Result<Progress, Failure> {
        let bar = ProgressBar::new(duration.as_millis().try_into().unwrap_or(u64::MAX));
        let style = ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
            .map_err(|error| Failure::other(error.to_string()))?;
        bar.set_style(style);
        Ok(Progress { bar, started: Instant::now(), duration })
    }

    /// How long to wait before the next update; `None` once the run is
    /// over (its time is up, or a worker stopped it).
    pub(super) fn pause(&self, work: &Workload) -> Option<Duration> {
        let left = self.duration.saturating_sub(self.started.elapsed());
        (!left.is_zero() && !work.stopped()).then(|| Duration::from_millis(100).min(left))
    }

    pub(super) fn update(&self, work: &Workload) {
        let elapsed = self.started.elapsed();
        self.bar.set_position(elapsed.as_millis().try_into().unwrap_or(u64::MAX));
        self.bar.set_message(format!("{:.0} claims/s", work.answered() as f64 / elapsed.as_secs_f64()));
    }

    /// Clears the bar; the run's length in seconds.
    pub(super) fn finish(&self) -> f64 {
        self.bar.finish_and_clear();
        self.started.elapsed().as_secs_f64()
    }
}

/// Latencies from 1 ns to an hour at 3 significant digits: a fixed range,
/// so that no latency is clamped to a small automatic bound.
pub(super) fn latency_histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|error| Failure::other(error.to_string()))
}

/// Records the latency of a call that started at `call`.
#[inline]
pub(super) fn record(latency: &mut Histogram<u64>, call: Instant) {
    latency.saturating_record(u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX));
}

/// What the workers bring back: their latencies merged, and the first
/// error that stopped one of them (which stopped the others too).
pub(super) fn gather(
    results: Vec<(Histogram<u64>, Option<String>)>,
) -> Result<(Histogram<u64>, Option<String>), Failure> {
    let mut latency = latency_histogram()?;
    let mut failure = None;
    for (histogram, error) in results {
        latency.add(&histogram).map_err(|error| Failure::other(error.to_string()))?;
        failure = failure.or(error);
    }
    Ok((latency, failure))
}
