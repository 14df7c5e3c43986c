//! The claim state machine of DESIGN §3 as pure functions: from what the
//! store holds for a key, the request and the time, the record to write and
//! the answer to give. The shard executes these decisions under its lock;
//! nothing here reads a file, writes one or looks at a clock, so every row
//! of the contract table is tested below without a disk.
//!
//! A record to write is a full [`Header`] whose `lsn` is the shard's next
//! LSN; a new lease's fencing token is that LSN too, so tokens of a key only
//! grow. The shard fills in the lengths of scope, key and response.
//!
//! Time comes in as [`Now`]: both clocks read together. A lease is decided
//! on the monotonic scale (the stored lease end, [`Stored::lease_end_ms`],
//! is kept by the shard in memory); TTLs on the wall clock, from the
//! record's own fields (see [`crate::clock`]).

use crate::clock::Now;
use crate::engine::entry::Entry;
use crate::engine::index::Address;
use crate::fingerprint::Fingerprint;
use crate::keyspace::Keyspace;
use crate::record::{Header, Kind, ReusePolicy, State};

/// What a claim carries besides its key, already validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimParams {
    pub fingerprint: Fingerprint,
    pub lease_ms: u64,
    pub ttl_ms: u64,
    pub reuse: ReusePolicy,
}

/// How a holder finishes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Finish<'a> {
    Complete(&'a [u8]),
    Fail(&'a [u8]),
    Release,
}

/// What a lease holder knows of its Processing record, so finishing it
/// needs no read of the log: while the token still matches the index, these
/// are exactly the stored values (a renewal keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub attempt: u32,
    pub fingerprint: Fingerprint,
    pub created_ms: u64,
    pub ttl_ms: u64,
    pub recovered: bool,
}

impl Held {
    /// What the holder of a new Processing record knows of it.
    pub(crate) fn of(record: &Header) -> Self {
        Held {
            attempt: record.attempt,
            fingerprint: record.fingerprint,
            created_ms: record.created_ms,
            ttl_ms: record.ttl_ms,
            recovered: record.recovered,
        }
    }

    /// The stored Processing record that `entry` points at, rebuilt from
    /// what the holder knows (no log read). Its lengths, `updated_ms` and
    /// written lease end are not known and are zero; no decision reads them
    /// (a renewal counts from the lease end in memory).
    pub(crate) fn record(&self, entry: &Entry) -> Header {
        Header {
            kind: Kind::Put(State::Processing),
            keyspace: Keyspace::Caller,
            recovered: self.recovered,
            attempt: self.attempt,
            lsn: entry.lsn,
            token: entry.token,
            fingerprint: self.fingerprint,
            created_ms: self.created_ms,
            updated_ms: 0,
            deadline_ms: 0,
            ttl_ms: self.ttl_ms,
            scope_len: 0,
            key_len: 0,
            response_len: 0,
        }
    }
}

/// The newest record of a key, with what the shard keeps of it in memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stored<'a> {
    pub record: &'a Header,
    /// For a Processing record, its lease end on the monotonic scale.
    pub lease_end_ms: u64,
}

/// The decision on a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimStep {
    /// Write this Processing record; its token is the new holder's lease.
    Acquire(Header),
    /// Answer with the stored record.
    Replay,
    /// Another holder's lease runs `retry_after_ms` more (elapsed time).
    InProgress { retry_after_ms: u64, attempt: u32 },
    /// The key is present with another fingerprint.
    Mismatch,
}

/// The wall-clock time from which a put reads absent: a Completed or
/// Failed record at its expiry; a Processing one at its written lease end +
/// its TTL (an abandoned lease), and then only once its lease has also ended
/// on the monotonic scale ([`is_gone`]).
pub(crate) fn gone_ms(record: &Header) -> u64 {
    match record.kind {
        Kind::Put(State::Processing) => record.deadline_ms.saturating_add(record.ttl_ms),
        Kind::Put(_) => record.deadline_ms,
        Kind::Tombstone => 0,
    }
}

/// The index entry of the put `header` at `at` (`None` for a tombstone),
/// its deadline as [`gone_ms`] computes it.
pub(crate) fn entry(header: &Header, at: Address) -> Option<Entry> {
    let Kind::Put(state) = header.kind else { return None };
    Some(Entry {
        lsn: header.lsn,
        token: header.token,
        deadline_ms: gone_ms(header),
        segment: at.segment,
        offset: at.offset,
        frame_len: at.len,
        state,
    })
}

/// Whether a put whose index entry is `entry` reads absent at `now`; for a
/// Processing record `lease_end_ms` is its lease end on the monotonic scale.
/// A running lease never expires, whatever the wall clock says.
pub(crate) fn is_gone(entry: &Entry, lease_end_ms: u64, now: Now) -> bool {
    match entry.state {
        State::Processing => lease_end_ms <= now.monotonic_ms && entry.deadline_ms <= now.wall_ms,
        State::Completed | State::Failed => entry.is_expired(now.wall_ms),
    }
}

/// The lease end, on the monotonic scale, of the Processing record
/// `record` read at `now`: the wall-clock time it has left, clamped to
/// `[0, its length]`, where its length is what its last claim or renewal
/// granted (written lease end − written update time). For a record just
/// written (`updated_ms` is now) that is exactly its length; at open it is
/// the rule across a restart (see [`crate::Clock`]).
pub(crate) fn lease_end(record: &Header, now: Now) -> u64 {
    let length = record.deadline_ms.saturating_sub(record.updated_ms);
    let left = record.deadline_ms.saturating_sub(now.wall_ms).min(length);
    now.monotonic_ms.saturating_add(left)
}

/// Decides a claim. `stored` is the newest record of the key, `None` when
/// the key is absent.
///
/// | stored | fingerprint | step |
/// |---|---|---|
/// | none, a tombstone, Completed/Failed past its TTL, or Processing past lease end + TTL | – | acquire, attempt 1 |
/// | Processing, lease running | same | in progress |
/// | Processing, lease ended | same | acquire, `recovered`, attempt + 1, first claim's `created_ms` |
/// | Failed, policy [`ReusePolicy::RetryFailed`] | same | acquire, attempt + 1 |
/// | Completed / Failed | same | replay |
/// | any live | different | mismatch |
pub(crate) fn claim(stored: Option<Stored<'_>>, request: &ClaimParams, next_lsn: u64, now: Now) -> ClaimStep {
    let fresh = Header {
        kind: Kind::Put(State::Processing),
        keyspace: Keyspace::Caller,
        recovered: false,
        attempt: 1,
        lsn: next_lsn,
        token: next_lsn,
        fingerprint: request.fingerprint,
        created_ms: now.wall_ms,
        updated_ms: now.wall_ms,
        deadline_ms: now.wall_ms.saturating_add(request.lease_ms),
        ttl_ms: request.ttl_ms,
        scope_len: 0,
        key_len: 0,
        response_len: 0,
    };
    let live = stored.and_then(|stored| match stored.record.kind {
        Kind::Put(state) if !is_gone_record(stored, now) => Some((stored, state)),
        Kind::Put(_) | Kind::Tombstone => None,
    });
    let Some((Stored { record: stored, lease_end_ms }, state)) = live else {
        return ClaimStep::Acquire(fresh);
    };
    if stored.fingerprint != request.fingerprint {
        return ClaimStep::Mismatch;
    }
    match state {
        State::Processing if lease_end_ms > now.monotonic_ms => {
            ClaimStep::InProgress { retry_after_ms: lease_end_ms - now.monotonic_ms, attempt: stored.attempt }
        }
        State::Processing => ClaimStep::Acquire(Header {
            recovered: true,
            attempt: stored.attempt.saturating_add(1),
            created_ms: stored.created_ms,
            ..fresh
        }),
        State::Failed if request.reuse == ReusePolicy::RetryFailed => {
            ClaimStep::Acquire(Header { attempt: stored.attempt.saturating_add(1), ..fresh })
        }
        State::Completed | State::Failed => ClaimStep::Replay,
    }
}

/// [`is_gone`] for a stored put, from the record's own fields.
fn is_gone_record(stored: Stored<'_>, now: Now) -> bool {
    match stored.record.kind {
        Kind::Put(State::Processing) => {
            stored.lease_end_ms <= now.monotonic_ms && gone_ms(stored.record) <= now.wall_ms
        }
        Kind::Put(state) => state.is_expired(stored.record.deadline_ms, now.wall_ms),
        Kind::Tombstone => true,
    }
}

/// Whether `token` holds the key whose index entry is `entry`: the newest
/// record is Processing under that very token. Anything else — another
/// token after a takeover, a finished key, or (with no entry at all) a
/// released, removed or expired one — is a lost lease.
pub(crate) fn holds(entry: &Entry, token: u64) -> bool {
    entry.state == State::Processing && entry.token == token
}

/// The record that finishes the held Processing record `held`: Completed or
/// Failed until `now + ttl` (wall clock), or a tombstone for a release.
/// Token, attempt, fingerprint and creation time carry over.
pub(crate) fn finish(held: &Header, finish: Finish<'_>, next_lsn: u64, now_ms: u64) -> Header {
    let header = Header { lsn: next_lsn, updated_ms: now_ms, ..*held };
    match finish {
        Finish::Complete(_) => {
            Header { kind: Kind::Put(State::Completed), deadline_ms: now_ms.saturating_add(held.ttl_ms), ..header }
        }
        Finish::Fail(_) => {
            Header { kind: Kind::Put(State::Failed), deadline_ms: now_ms.saturating_add(held.ttl_ms), ..header }
        }
        Finish::Release => Header { kind: Kind::Tombstone, deadline_ms: 0, ..header },
    }
}

/// The record that renews the held Processing record `held`, whose lease
/// ends at `lease_end_ms` (monotonic), so that the lease ends at least
/// `extend_ms` of elapsed time from now; a renewal never shortens a lease.
/// The record carries the new end as wall-clock time from now, so that
/// [`lease_end`] of it at `now` is the new end.
pub(crate) fn renew(held: &Header, lease_end_ms: u64, extend_ms: u64, next_lsn: u64, now: Now) -> Header {
    let end_ms = lease_end_ms.max(now.monotonic_ms.saturating_add(extend_ms));
    let left_ms = end_ms - now.monotonic_ms;
    Header { lsn: next_lsn, updated_ms: now.wall_ms, deadline_ms: now.wall_ms.saturating_add(left_ms), ..*held }
}

/// The record that replaces the answer of the Completed record `stored`:
/// state, token, fingerprint, attempt and creation carry over; it lives at
/// least its TTL from now, as a completion written now would.
pub(crate) fn replace(stored: &Header, next_lsn: u64, now_ms: u64) -> Header {
    let deadline_ms = stored.deadline_ms.max(now_ms.saturating_add(stored.ttl_ms));
    Header { lsn: next_lsn, updated_ms: now_ms.max(stored.updated_ms), deadline_ms, ..*stored }
}

/// The tombstone that removes the live record `stored`, whatever its state.
pub(crate) fn remove(stored: &Header, next_lsn: u64, now_ms: u64) -> Header {
    Header { kind: Kind::Tombstone, lsn: next_lsn, updated_ms: now_ms, deadline_ms: 0, ..*stored }
}

#[cfg(test)]
mod tests;
