//! What the store tells an operator while it runs: counters and histograms
//! through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`) and events through [`tracing`](https://docs.rs/tracing)
//! (feature `tracing`). Both record nothing unless the service installs a
//! recorder or a subscriber.
//!
//! Metric handles are registered when the store opens, once per shard and
//! per outcome, so that the hot path only increments them: install the
//! recorder *before* opening the store. See the README for the names.

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

/// A histogram only the exporter sees (nothing of it is in [`crate::Stats`]).
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

/// Whether claim latencies are measured: only with the `metrics` feature
/// (reading the clock twice a claim costs something).
pub(crate) const TIMES_CLAIMS: bool = cfg!(feature = "metrics");

/// Names of the histograms (the counters' names are beside their fields in
/// the stats module).
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

/// An event through `tracing` (target `idemkv`) when the feature is on;
/// nothing otherwise (its arguments are not evaluated).
macro_rules! event {
    ($level:ident, $($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        tracing::$level!(target: "idemkv", $($arg)+);
    }};
}
pub(crate) use event;

/// Enters an info-level span (target `idemkv`) for the rest of the scope
/// when the `tracing` feature is on; `()` otherwise.
macro_rules! info_span {
    ($($arg:tt)+) => {{
        #[cfg(feature = "tracing")]
        let entered = tracing::info_span!(target: "idemkv", $($arg)+).entered();
        #[cfg(not(feature = "tracing"))]
        let entered = $crate::engine::telemetry::NoSpan;
        entered
    }};
}
pub(crate) use info_span;

/// What [`info_span!`] enters without the `tracing` feature: nothing.
#[cfg(not(feature = "tracing"))]
pub(crate) struct NoSpan;

/// The claim outcomes, as the `outcome` label of claim latencies.
const CLAIM_OUTCOMES: [&str; 5] = ["acquired", "recovered", "replay", "in_progress", "mismatch"];

/// Latency of one shard's claims by outcome (index into
/// [`CLAIM_OUTCOMES`]); per shard, so that callers on different shards do
/// not share a histogram's cache lines.
#[derive(Debug)]
pub(crate) struct ClaimTimes([Observe; 5]);

impl ClaimTimes {
    pub(crate) fn new(shard: &Shard) -> Self {
        ClaimTimes(CLAIM_OUTCOMES.map(|outcome| Observe::for_outcome(names::CLAIM_SECONDS, shard, outcome)))
    }

    /// Records a claim of outcome `outcome` (an index of
    /// `["acquired", "recovered", "replay", "in_progress", "mismatch"]`)
    /// that took `elapsed`.
    pub(crate) fn record(&self, outcome: usize, elapsed: std::time::Duration) {
        if let Some(histogram) = self.0.get(outcome) {
            histogram.record(elapsed.as_secs_f64());
        }
    }
}
