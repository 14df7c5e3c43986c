//! The compaction driver: one pass over every shard, executing what the
//! pure policy ([`crate::compaction`]) chooses, under a byte-rate pacer;
//! and the background compactor that runs a pass at an interval.

use crate::background::Worker;
use crate::compaction::{choose, Action, CompactionReport, Policy};
use crate::engine::Engine;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs one compaction pass (see [`crate::Store::compact`]).
pub(crate) fn compact(engine: &Engine) -> Result<CompactionReport> {
    let _one_at_a_time = engine.compaction.lock();
    let config = &engine.config;
    let policy = Policy { live_fraction_min: config.compaction_live_fraction, actions_max: 16 };
    let mut pacer = Pacer::new(config.compaction_bytes_per_second);
    let mut report = CompactionReport::default();
    for shard in &*engine.shards {
        // Abandoned leases leave the index first, so that their records
        // count as dead below.
        report.index_entries_released += shard.expire_abandoned()?;
        let sealed = shard.sealed_views()?;
        for action in choose(&sealed, &policy) {
            let (Action::Drop(id) | Action::Rewrite(id)) = action;
            let bytes = shard.compact_segment(id, &engine.hasher, &mut report)?;
            pacer.pace(bytes);
        }
        shard.shrink_index();
    }
    let counters = &engine.shards[0].counters;
    counters.compaction_runs.fetch_add(1, Ordering::Relaxed);
    counters.compaction_bytes_reclaimed.fetch_add(report.bytes_reclaimed, Ordering::Relaxed);
    Ok(report)
}

/// Starts the background compactor. Like the flusher it holds only a weak
/// reference; an error of one pass (say a full disk) is retried at the
/// next, and a failed fsync has already poisoned its shard.
pub(crate) fn start_compactor(engine: &Arc<Engine>, interval: Duration) -> Result<()> {
    let weak = Arc::downgrade(engine);
    let worker = Worker::spawn("idemkv-compact", interval, move || {
        let Some(engine) = weak.upgrade() else {
            return false;
        };
        let _retried_next_pass = compact(&engine);
        true
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

    fn pace(&mut self, bytes: u64) {
        if self.bytes_per_second == 0 {
            return;
        }
        self.bytes += bytes;
        #[expect(clippy::cast_precision_loss, reason = "a pacing delay needs no exact byte count")]
        let due = Duration::from_secs_f64(self.bytes as f64 / self.bytes_per_second as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_holds_compaction_to_its_byte_rate() {
        // 1 MiB/s: 64 KiB is due after 62.5 ms at the earliest. Only the
        // lower bound is checked: sleeping is never shorter than asked.
        let mut pacer = Pacer::new(1 << 20);
        let started = Instant::now();
        pacer.pace(64 << 10);
        assert!(started.elapsed() >= Duration::from_millis(62));
        let mut unlimited = Pacer::new(0);
        let started = Instant::now();
        unlimited.pace(u64::MAX);
        assert!(started.elapsed() < Duration::from_secs(1), "0 means no limit");
    }
}
