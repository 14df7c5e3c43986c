//! The store's counters and histograms: kept per shard (no shared cache
//! line on the hot path), summed into [`Stats`], and exported through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`), which
//! records nothing unless the service installs a recorder. Events go
//! through `crate::events`.
//!
//! Metric handles are registered when the store opens, once per shard and
//! per outcome, so that the hot path only increments them: install the
//! recorder *before* opening the store. See the README for the names.

use crate::stats::Stats;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter of one shard: summed by [`crate::Store::stats`], and
/// exported as `name{shard="N"}` when the `metrics` feature is on.
pub(crate) struct Count {
    value: AtomicU64,
    #[cfg(feature = "metrics")]
    exported: metrics::Counter,
}

impl Count {
    /// A zero counter exported under `name` for shard `shard`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the names are for the exporter"))]
    pub(crate) fn new(name: &'static str, shard: &Shard) -> Self {
        Count {
            value: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            exported: metrics::counter!(name, "shard" => shard.0.clone()),
        }
    }

    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.exported.increment(n);
    }

    /// The value now.
    pub(crate) fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for Count {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(formatter)
    }
}

/// A counter only the exporter sees (nothing of it is in [`Stats`]): no
/// value is kept, so counting costs nothing without a recorder but the
/// check of the handle.
pub(crate) struct Exported {
    #[cfg(feature = "metrics")]
    exported: metrics::Counter,
}

impl Exported {
    /// The counter `name` of shard `shard`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the names are for the exporter"))]
    pub(crate) fn new(name: &'static str, shard: &Shard) -> Self {
        Exported {
            #[cfg(feature = "metrics")]
            exported: metrics::counter!(name, "shard" => shard.0.clone()),
        }
    }

    /// Adds one.
    #[cfg_attr(not(feature = "metrics"), expect(clippy::unused_self, reason = "the count is for the exporter"))]
    pub(crate) fn increment(&self) {
        #[cfg(feature = "metrics")]
        self.exported.increment(1);
    }
}

impl fmt::Debug for Exported {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Exported")
    }
}

/// The `shard` label of one shard's metrics.
pub(crate) struct Shard(#[cfg(feature = "metrics")] metrics::SharedString);

impl Shard {
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the label is for the exporter"))]
    pub(crate) fn new(id: u32) -> Self {
        Shard(
            #[cfg(feature = "metrics")]
            metrics::SharedString::from(id.to_string()),
        )
    }
}

/// A histogram only the exporter sees (nothing of it is in [`crate::stats::Stats`]).
#[derive(Clone)]
pub(crate) struct Observe {
    #[cfg(feature = "metrics")]
    exported: metrics::Histogram,
}

impl Observe {
    /// The histogram `name` of shard `shard`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the names are for the exporter"))]
    pub(crate) fn for_shard(name: &'static str, shard: &Shard) -> Self {
        Observe {
            #[cfg(feature = "metrics")]
            exported: metrics::histogram!(name, "shard" => shard.0.clone()),
        }
    }

    /// The histogram `name` of shard `shard` with label `outcome`.
    #[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the names are for the exporter"))]
    pub(crate) fn for_outcome(name: &'static str, shard: &Shard, outcome: &'static str) -> Self {
        Observe {
            #[cfg(feature = "metrics")]
            exported: metrics::histogram!(name, "shard" => shard.0.clone(), "outcome" => outcome),
        }
    }

    /// Records one value.
    #[cfg_attr(
        not(feature = "metrics"),
        expect(unused_variables, clippy::unused_self, reason = "the value is for the exporter")
    )]
    pub(crate) fn record(&self, value: f64) {
        #[cfg(feature = "metrics")]
        self.exported.record(value);
    }
}

impl fmt::Debug for Observe {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Observe")
    }
}

/// When a claim was called, for its latency (`idempo_claim_seconds`):
/// only with the `metrics` feature, and then read from the processor's
/// time-stamp counter where it runs at a constant rate ([`quanta`], which
/// falls back to the system's monotonic clock elsewhere): 27–34 ns a
/// reading where [`std::time::Instant`] takes 39–50 (the `clocks` bench
/// in docs/benchmarks.md), and a claim reads it twice.
#[derive(Clone, Copy)]
pub(crate) struct ClaimStart(#[cfg(feature = "metrics")] quanta::Instant);

impl ClaimStart {
    /// Now, when claims are timed (feature `metrics`); else `None`, and
    /// no clock is read.
    #[cfg_attr(feature = "metrics", expect(clippy::unnecessary_wraps, reason = "`None` without the feature"))]
    pub(crate) fn now() -> Option<Self> {
        #[cfg(feature = "metrics")]
        return Some(ClaimStart(quanta::Instant::now()));
        #[cfg(not(feature = "metrics"))]
        None
    }
}

/// Names of the histograms (the counters' names are beside their fields in
/// [`Counters`]).
pub(crate) mod names {
    /// Seconds from a claim's call to its answer (durable under `Sync`), by
    /// outcome.
    pub(crate) const CLAIM_SECONDS: &str = "idempo_claim_seconds";
    /// Records made durable by one fsync (the group-commit batch).
    pub(crate) const FSYNC_BATCH_RECORDS: &str = "idempo_fsync_batch_records";
    /// Claims that found their key already claimed: replays, in-progress
    /// answers and mismatches together.
    pub(crate) const DUPLICATE_DETECTED: &str = "duplicate_detected_total";
}

/// The claim outcomes, as the `outcome` label of claim latencies.
const CLAIM_OUTCOMES: [&str; 5] = ["acquired", "recovered", "replay", "in_progress", "mismatch"];

/// Latency of one shard's claims by outcome (index into
/// [`CLAIM_OUTCOMES`]); per shard, so that callers on different shards do
/// not share a histogram's cache lines.
#[derive(Debug)]
pub(crate) struct ClaimTimes([Observe; 5]);

impl ClaimTimes {
    /// The histograms of one shard, at open. The first reading of the
    /// claims' clock in a process calibrates it against the system's
    /// (0.62–0.66 ms in the `clocks` bench, at most 200 ms): it is taken
    /// now, so that no claim waits for it.
    pub(crate) fn new(shard: &Shard) -> Self {
        let _calibrated = ClaimStart::now();
        ClaimTimes(CLAIM_OUTCOMES.map(|outcome| Observe::for_outcome(names::CLAIM_SECONDS, shard, outcome)))
    }

    /// Records a claim of outcome `outcome` (an index of
    /// `["acquired", "recovered", "replay", "in_progress", "mismatch"]`)
    /// that began at `started`.
    #[cfg_attr(
        not(feature = "metrics"),
        expect(unused_variables, clippy::unused_self, reason = "no claim is timed without the exporter")
    )]
    pub(crate) fn record(&self, outcome: usize, started: ClaimStart) {
        #[cfg(feature = "metrics")]
        if let Some(histogram) = self.0.get(outcome) {
            histogram.record(started.0.elapsed().as_secs_f64());
        }
    }
}

macro_rules! counters {
    ($($name:ident => $metric:literal, $help:literal;)*) => {
        /// Counters of one shard, each also exported through `metrics`
        /// under its name (see the module docs).
        #[derive(Debug)]
        pub(crate) struct Counters {
            $(pub $name: Count,)*
            /// Claims that found their key claimed (replays, in-progress
            /// answers, mismatches); exported only.
            pub duplicates: Exported,
            /// Records made durable by each fsync; exported only.
            pub fsync_batch: Observe,
            /// Claim latencies by outcome; exported only.
            pub claim_times: ClaimTimes,
        }

        impl Counters {
            /// Zero counters of shard `shard`.
            pub(crate) fn new(shard: u32) -> Self {
                let label = Shard::new(shard);
                Counters {
                    $($name: Count::new($metric, &label),)*
                    duplicates: Exported::new(names::DUPLICATE_DETECTED, &label),
                    fsync_batch: Observe::for_shard(names::FSYNC_BATCH_RECORDS, &label),
                    claim_times: ClaimTimes::new(&label),
                }
            }

            pub(crate) fn add_to(&self, stats: &mut Stats) {
                $(stats.$name += self.$name.get();)*
            }
        }

        /// Every counter's exported name and help text.
        #[cfg_attr(not(feature = "metrics"), expect(dead_code, reason = "read by the exporter"))]
        pub(crate) const COUNTER_HELP: &[(&str, &str)] = &[$(($metric, $help),)*];
    };
}

counters! {
    claims => "idempo_claims_total", "Calls of claim (a claim_wait counts once, however long it waits)";
    acquired => "idempo_acquired_total", "Claims answered Acquired (fresh and recovered)";
    replays => "idempo_replay_total", "Claims answered Replay (a stored Completed or Failed answer)";
    in_progress => "idempo_conflict_total", "Claims answered InProgress: another holder's lease is live (HTTP 409)";
    wait_looks => "idempo_wait_looks_total", "Looks again at a key by waiting claims (claim_wait), not counted in claims";
    mismatches => "idempo_mismatch_total", "Claims answered Mismatch: same key, other request fingerprint (HTTP 422)";
    recovered => "idempo_recovered_total", "Claims that took over a Processing record whose lease had expired";
    lease_lost => "idempo_lease_lost_total", "Finishing or renewing calls refused with LeaseLost";
    completions => "idempo_completed_total", "Leases completed";
    failures => "idempo_failed_total", "Leases failed";
    releases => "idempo_released_total", "Leases released";
    renewals => "idempo_renewed_total", "Leases renewed";
    checkpoints => "idempo_checkpoints_total", "Checkpoints stored by lease holders";
    abandoned_leases => "idempo_abandoned_total", "Leases dropped without being finished";
    removes => "idempo_removed_total", "Records removed";
    replacements => "idempo_replaced_total", "Completed answers replaced by a compare-and-set (replace)";
    expirations => "idempo_expired_total", "Completed or Failed records found past their TTL";
    abandoned_expired => "idempo_abandoned_expired_total", "Processing records found past lease end + TTL";
    compaction_runs => "idempo_compaction_runs_total", "Compaction passes run";
    compaction_bytes_reclaimed => "idempo_compaction_reclaimed_bytes_total", "Bytes reclaimed by compaction";
    records_written => "idempo_records_written_total", "Records appended to the log";
    bytes_written => "idempo_written_bytes_total", "Bytes appended to the log";
    fsyncs => "idempo_fsync_total", "fsync calls on segment files";
    records_synced => "idempo_fsync_records_total", "Records made durable by fsyncs";
    torn_tail_bytes_cut => "idempo_torn_tail_cut_bytes_total", "Bytes of torn tail cut from active segments at open";
    hints_loaded => "idempo_hints_loaded_total", "Segments rebuilt at open from their hint files";
    hints_ignored => "idempo_hints_ignored_total", "Hint files found at open but not used (damaged or stale): replayed from the log";
    quota_refusals => "idempo_quota_exceeded_total", "Claims refused with QuotaExceeded: the scope is at its quota (HTTP 429)";
}

/// Describes every metric to the installed recorder (its help text), once
/// per open.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        for (name, help) in COUNTER_HELP {
            metrics::describe_counter!(*name, *help);
        }
        metrics::describe_counter!(
            names::DUPLICATE_DETECTED,
            "Claims that found their key already claimed (replays, in-progress answers and mismatches)"
        );
        metrics::describe_histogram!(
            names::CLAIM_SECONDS,
            metrics::Unit::Seconds,
            "Claim latency, call to answer (durable under Sync), by outcome"
        );
        metrics::describe_histogram!(
            names::FSYNC_BATCH_RECORDS,
            metrics::Unit::Count,
            "Records made durable by one fsync (group-commit batch size)"
        );
    }
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &Count) {
    counter.add(1);
}
