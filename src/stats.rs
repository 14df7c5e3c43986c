//! What [`crate::Store::stats`] and [`crate::Store::census`] answer: the
//! store's counters since it opened, and its records by state. The engine
//! keeps the counters per shard (`engine/telemetry.rs`).

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

/// What one compaction pass did.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = idemkv::Store::open(dir.path(), idemkv::Config::new())?;
/// let report = store.compact()?;
/// assert_eq!(report.segments_dropped, 0); // nothing sealed yet
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// Sealed segments deleted whole.
    pub segments_dropped: u64,
    /// Sealed segments rewritten with only what must stay.
    pub segments_rewritten: u64,
    /// Bytes of segment files freed.
    pub bytes_reclaimed: u64,
    /// Records left out: expired, released, removed or superseded.
    pub records_dropped: u64,
    /// Index entries of expired records released from memory.
    pub index_entries_released: u64,
}
