//! Counters, kept per shard (no shared cache line on the hot path) and
//! summed by [`crate::Store::stats`]; the census of records by state.

use crate::engine::telemetry::{self, names, ClaimTimes, Count, Observe};

/// A snapshot of the store's counters since it was opened.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = idemkv::Store::open(dir.path(), idemkv::Config::new())?;
/// assert_eq!(store.stats().claims, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls of claim: a call of `claim_wait` counts once, however long it
    /// waits.
    pub claims: u64,
    /// Claims answered `Acquired` (fresh and recovered).
    pub acquired: u64,
    /// Claims answered `Replay`.
    pub replays: u64,
    /// Claims answered `InProgress` (a `claim_wait` only when it ends so:
    /// its timeout passed or the waiter caps refused it).
    pub in_progress: u64,
    /// Claims answered `Mismatch`.
    pub mismatches: u64,
    /// Claims that took over a Processing record whose lease had expired.
    pub recovered: u64,
    /// Finishing calls refused with `LeaseLost`.
    pub lease_lost: u64,
    /// Looks again at a key by waiting claims (`claim_wait`), not counted
    /// in `claims`: one as a waiter starts to listen, then one per wake-up
    /// (a finish, a takeover, a close, the lease end the last look
    /// reported, the timeout). What waiting costs the store.
    pub wait_looks: u64,
    /// Leases completed.
    pub completions: u64,
    /// Leases failed.
    pub failures: u64,
    /// Leases released.
    pub releases: u64,
    /// Leases renewed.
    pub renewals: u64,
    /// Checkpoints stored ([`crate::Lease::checkpoint`]).
    pub checkpoints: u64,
    /// Leases dropped without being finished or turned into a token.
    pub abandoned_leases: u64,
    /// Records removed with `remove`.
    pub removes: u64,
    /// Completed answers replaced with `replace`.
    pub replacements: u64,
    /// Completed or Failed records found past their TTL (at a read, at open
    /// or by compaction).
    pub expirations: u64,
    /// Processing records found past their lease end + TTL (a holder that
    /// never came back: a crash or a dropped lease), at a read, at open or
    /// by compaction. Such a key reads absent; the next claim of it starts
    /// afresh (attempt 1, not recovered).
    pub abandoned_expired: u64,
    /// Compaction passes run.
    pub compaction_runs: u64,
    /// Bytes reclaimed by compaction.
    pub compaction_bytes_reclaimed: u64,
    /// Records appended to the log.
    pub records_written: u64,
    /// Bytes appended to the log.
    pub bytes_written: u64,
    /// fsync calls on segment files.
    pub fsyncs: u64,
    /// Records made durable by those fsyncs (records per fsync =
    /// `records_synced / fsyncs`).
    pub records_synced: u64,
    /// Bytes of torn tail cut from active segments at open.
    pub torn_tail_bytes_cut: u64,
    /// Segments that open rebuilt from their hint files, without reading
    /// their frames (a hint may cover a prefix; the rest came from the log).
    pub hints_loaded: u64,
    /// Hint files that open found but did not use — damaged, truncated,
    /// stale (their segment was rewritten or cut since) or of another
    /// version — and replayed those segments from the log instead.
    pub hints_ignored: u64,
    /// Claims refused with [`Error::QuotaExceeded`](crate::Error::QuotaExceeded):
    /// a new key in a scope at its quota.
    pub quota_refusals: u64,
    /// Live records (Processing, Completed, Failed) in the index now,
    /// including expired ones not yet dropped.
    pub live_records: u64,
    /// Bytes of the records the index points at, not yet expired.
    pub live_bytes: u64,
    /// Bytes of all segment files, as long as they are: the active
    /// segment's zeros filled ahead of its records included (and, for a
    /// read-only open, a torn tail it leaves in place).
    pub disk_bytes: u64,
    /// Segment files, sealed and active.
    pub segments: u64,
}

/// Indexed records by state, from [`crate::Store::census`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Census {
    /// Processing (leases valid or not).
    pub processing: u64,
    /// Completed and not expired.
    pub completed: u64,
    /// Failed and not expired.
    pub failed: u64,
    /// Completed or Failed past their TTL, or Processing past lease end +
    /// TTL, still on disk until compaction.
    pub expired: u64,
}

macro_rules! counters {
    ($($name:ident => $metric:literal, $help:literal;)*) => {
        /// Counters of one shard, each also exported through `metrics`
        /// under its name (see [`crate::engine::telemetry`]).
        #[derive(Debug)]
        pub(crate) struct Counters {
            $(pub $name: Count,)*
            /// Claims that found their key claimed (replays, in-progress
            /// answers, mismatches); exported only.
            pub duplicates: Count,
            /// Records made durable by each fsync; exported only.
            pub fsync_batch: Observe,
            /// Claim latencies by outcome; exported only.
            pub claim_times: ClaimTimes,
        }

        impl Counters {
            /// Zero counters of shard `shard`.
            pub(crate) fn new(shard: u32) -> Self {
                let label = telemetry::Shard::new(shard);
                Counters {
                    $($name: Count::new($metric, &label),)*
                    duplicates: Count::new(names::DUPLICATE_DETECTED, &label),
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
            telemetry::names::DUPLICATE_DETECTED,
            "Claims that found their key already claimed (replays, in-progress answers and mismatches)"
        );
        metrics::describe_histogram!(
            telemetry::names::CLAIM_SECONDS,
            metrics::Unit::Seconds,
            "Claim latency, call to answer (durable under Sync), by outcome"
        );
        metrics::describe_histogram!(
            telemetry::names::FSYNC_BATCH_RECORDS,
            metrics::Unit::Count,
            "Records made durable by one fsync (group-commit batch size)"
        );
    }
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &Count) {
    counter.add(1);
}
