//! The compaction driver: one pass over every shard, executing what the
//! pure policy ([`crate::engine::compaction_policy`]) chooses, under a byte-rate pacer;
//! and the background compactor that runs a pass at an interval.
//!
//! A pass is a sequence of steps (choose a shard's plan, compact one
//! segment), each with the engine in hand, and the pacer's sleeps between
//! them with nothing in hand: the background compactor upgrades its weak
//! reference for each step only, so the last user handle dropped mid-pass
//! frees the directory at once (or at the end of the step in flight), and
//! the engine's stop signal (close, drop) cuts any sleep short. One step
//! runs at a time per engine (`Engine::compaction`); a plan that another
//! pass made stale is harmless, since each step looks at the segment anew.

use crate::engine::background::{Stop, Worker};
use crate::engine::compaction_policy::{choose, Action, Policy};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::events::event;
use crate::stats::CompactionReport;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs one compaction pass (see [`crate::Store::compact`]). A pass cut
/// short by the store's close answers [`Error::Closed`].
pub(crate) fn compact(engine: &Engine) -> Result<CompactionReport> {
    pass(|| Some(engine), &engine.stop)
}

/// One pass; `engine()` lends the engine for one step, `None` once it is
/// gone (the pass then ends as closed).
fn pass<E: Deref<Target = Engine>>(mut engine: impl FnMut() -> Option<E>, stop: &Stop) -> Result<CompactionReport> {
    let mut lend = || engine().filter(|_| !stop.is_stopped()).ok_or(Error::Closed);
    let (shards, mut pacer, policy) = {
        let engine = lend()?;
        let config = &engine.config;
        let policy = Policy { live_fraction_min: config.compaction_live_fraction, actions_max: 16 };
        (engine.shards.len(), Pacer::new(config.compaction_bytes_per_second), policy)
    };
    let mut report = CompactionReport::default();
    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
    let started = Instant::now();
    for index in 0..shards {
        let actions = {
            let engine = lend()?;
            let shard = &engine.shards[index];
            // Abandoned leases leave the index first, so that their
            // records count as dead below.
            report.index_entries_released += shard.expire_abandoned()?;
            choose(&shard.sealed_views()?, &policy)
        };
        for action in actions {
            let (Action::Drop(id) | Action::Rewrite(id)) = action;
            let bytes = {
                let engine = lend()?;
                let _one_at_a_time = engine.compaction.lock();
                engine.shards[index].compact_segment(id, &engine.hasher, &mut report)?
            };
            if !pacer.pace(bytes, stop) {
                return Err(Error::Closed);
            }
        }
        lend()?.shards[index].shrink_index();
    }
    let engine = lend()?;
    let counters = &engine.shards[0].counters;
    counters.compaction_runs.add(1);
    counters.compaction_bytes_reclaimed.add(report.bytes_reclaimed);
    event!(
        info,
        segments_dropped = report.segments_dropped,
        segments_rewritten = report.segments_rewritten,
        bytes_reclaimed = report.bytes_reclaimed,
        records_dropped = report.records_dropped,
        index_entries_released = report.index_entries_released,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "compaction pass"
    );
    Ok(report)
}

/// Starts the background compactor. Like the flusher it holds only a weak
/// reference, upgraded for one step at a time (see the module docs); an
/// error of one pass (say a full disk) is retried at the next, and a failed
/// fsync has already poisoned its shard.
pub(crate) fn start_compactor(engine: &Arc<Engine>, interval: Duration) -> Result<()> {
    let weak = Arc::downgrade(engine);
    let stop = Arc::clone(&engine.stop);
    let pass_stop = Arc::clone(&stop);
    let worker = Worker::spawn("idemkv-compact", interval, stop, move || {
        let _retried_next_pass = pass(|| weak.upgrade(), &pass_stop);
        weak.strong_count() > 0
    })
    .map_err(|error| Error::io("spawn compactor", &engine.dir, error))?;
    engine.workers.lock().push(worker);
    Ok(())
}

/// Keeps compaction I/O under a byte rate by sleeping when ahead of it.
struct Pacer {
    bytes_per_second: u64,
    started: Instant,
    bytes: u64,
}

impl Pacer {
    fn new(bytes_per_second: u64) -> Self {
        Pacer { bytes_per_second, started: Instant::now(), bytes: 0 }
    }

    /// Accounts `bytes` and sleeps while ahead of the rate, unless `stop`
    /// is set first; returns false if it is.
    fn pace(&mut self, bytes: u64, stop: &Stop) -> bool {
        if self.bytes_per_second == 0 {
            return !stop.is_stopped();
        }
        self.bytes = self.bytes.saturating_add(bytes);
        #[expect(clippy::cast_precision_loss, reason = "a pacing delay needs no exact byte count")]
        let due_seconds = self.bytes as f64 / self.bytes_per_second as f64;
        // Past what a `Duration` holds, the delay is as good as forever.
        let due = Duration::try_from_secs_f64(due_seconds).unwrap_or(Duration::MAX);
        let ahead = due.saturating_sub(self.started.elapsed());
        !stop.wait(ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_holds_compaction_to_its_byte_rate() {
        // 1 MiB/s: 64 KiB is due after 62.5 ms at the earliest. Only the
        // lower bound is checked: sleeping is never shorter than asked.
        let stop = Stop::default();
        let mut pacer = Pacer::new(1 << 20);
        let started = Instant::now();
        assert!(pacer.pace(64 << 10, &stop));
        assert!(started.elapsed() >= Duration::from_millis(62));
        let mut unlimited = Pacer::new(0);
        let started = Instant::now();
        assert!(unlimited.pace(u64::MAX, &stop));
        assert!(started.elapsed() < Duration::from_secs(1), "0 means no limit");
    }

    #[test]
    fn the_stop_signal_cuts_a_pacing_sleep_short() {
        // 1 byte per second: 10^9 bytes would be due in about 32 years.
        let stop = Arc::new(Stop::default());
        let stopper = Arc::clone(&stop);
        let started = Instant::now();
        let signal = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            stopper.stop();
        });
        assert!(!Pacer::new(1).pace(1_000_000_000, &stop), "a stopped pacer said to go on");
        assert!(started.elapsed() < Duration::from_secs(5));
        signal.join().expect("join");
    }
}
