//! The claim state machine of DESIGN §3 as pure functions: from what the
//! store holds for a key, the request and the time, the record to write and
//! the answer to give. The shard executes these decisions under its lock;
//! nothing here reads a file, writes one or looks at a clock, so every row
//! of the contract table is tested below without a disk.
//!
//! A record to write is a full [`Header`] whose `lsn` is the shard's next
//! LSN; a new lease's fencing token is that LSN too, so tokens of a key only
//! grow. The shard fills in the lengths of scope, key and response.

use crate::fingerprint::Fingerprint;
use crate::index::Entry;
use crate::record::{Header, Kind, State};

/// What a claim carries besides its key, already validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimParams {
    pub fingerprint: Fingerprint,
    pub lease_ms: u64,
    pub ttl_ms: u64,
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
    /// what the holder knows (no log read). Its lengths and `updated_ms`
    /// are not known and are zero; no decision reads them.
    pub(crate) fn record(&self, entry: &Entry) -> Header {
        Header {
            kind: Kind::Put(State::Processing),
            recovered: self.recovered,
            attempt: self.attempt,
            lsn: entry.lsn,
            token: entry.token,
            fingerprint: self.fingerprint,
            created_ms: self.created_ms,
            updated_ms: 0,
            deadline_ms: entry.deadline_ms,
            ttl_ms: self.ttl_ms,
            scope_len: 0,
            key_len: 0,
            response_len: 0,
        }
    }
}

/// The decision on a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimStep {
    /// Write this Processing record; its token is the new holder's lease.
    Acquire(Header),
    /// Answer with the stored record.
    Replay,
    /// Another holder's lease runs `retry_after_ms` more.
    InProgress { retry_after_ms: u64, attempt: u32 },
    /// The key is present with another fingerprint.
    Mismatch,
}

/// Decides a claim. `stored` is the newest record of the key, `None` when
/// the key is absent.
///
/// | stored | fingerprint | step |
/// |---|---|---|
/// | none, a tombstone, or Completed/Failed past its TTL | – | acquire, attempt 1 |
/// | Processing, lease running | same | in progress |
/// | Processing, lease ended | same | acquire, `recovered`, attempt + 1, first claim's `created_ms` |
/// | Completed / Failed | same | replay |
/// | any live | different | mismatch |
pub(crate) fn claim(stored: Option<&Header>, request: &ClaimParams, next_lsn: u64, now_ms: u64) -> ClaimStep {
    let fresh = Header {
        kind: Kind::Put(State::Processing),
        recovered: false,
        attempt: 1,
        lsn: next_lsn,
        token: next_lsn,
        fingerprint: request.fingerprint,
        created_ms: now_ms,
        updated_ms: now_ms,
        deadline_ms: now_ms.saturating_add(request.lease_ms),
        ttl_ms: request.ttl_ms,
        scope_len: 0,
        key_len: 0,
        response_len: 0,
    };
    let live = stored.and_then(|stored| match stored.kind {
        Kind::Put(state) if !state.is_expired(stored.deadline_ms, now_ms) => Some((stored, state)),
        Kind::Put(_) | Kind::Tombstone => None,
    });
    let Some((stored, state)) = live else {
        return ClaimStep::Acquire(fresh);
    };
    if stored.fingerprint != request.fingerprint {
        return ClaimStep::Mismatch;
    }
    match state {
        State::Processing if stored.deadline_ms > now_ms => {
            ClaimStep::InProgress { retry_after_ms: stored.deadline_ms - now_ms, attempt: stored.attempt }
        }
        State::Processing => ClaimStep::Acquire(Header {
            recovered: true,
            attempt: stored.attempt.saturating_add(1),
            created_ms: stored.created_ms,
            ..fresh
        }),
        State::Completed | State::Failed => ClaimStep::Replay,
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
/// Failed until `now + ttl`, or a tombstone for a release. Token, attempt,
/// fingerprint and creation time carry over.
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

/// The record that renews the held Processing record `held` so its lease
/// ends at least `extend_ms` from now; a renewal never shortens a lease.
pub(crate) fn renew(held: &Header, extend_ms: u64, next_lsn: u64, now_ms: u64) -> Header {
    let deadline_ms = held.deadline_ms.max(now_ms.saturating_add(extend_ms));
    Header { lsn: next_lsn, updated_ms: now_ms, deadline_ms, ..*held }
}

/// The tombstone that removes the live record `stored`, whatever its state.
pub(crate) fn remove(stored: &Header, next_lsn: u64, now_ms: u64) -> Header {
    Header { kind: Kind::Tombstone, lsn: next_lsn, updated_ms: now_ms, deadline_ms: 0, ..*stored }
}

#[cfg(test)]
mod tests;
