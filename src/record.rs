//! The stored record: its state, the record as read back ([`Record`]), a
//! borrowed view of one where it lies ([`RecordRef`]), and what a record
//! says of itself (its header's fields). How a record is framed on disk
//! is the engine's (`engine/frame.rs`, `docs/format.md`).

use crate::checkpoint::Checkpoint;
use crate::fingerprint::Fingerprint;
use crate::format::FRAME_PREFIX_BYTES;
use crate::keyspace::Keyspace;

/// The state of a present record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Claimed; a lease holder is executing the request.
    Processing,
    /// Finished with a response that is replayed.
    Completed,
    /// Finished with a terminal failure that is replayed.
    Failed,
}

impl State {
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            State::Processing => 1,
            State::Completed => 2,
            State::Failed => 3,
        }
    }

    pub(crate) fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(State::Processing),
            2 => Some(State::Completed),
            3 => Some(State::Failed),
            _ => None,
        }
    }

    /// Completed or Failed.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        self != State::Processing
    }

    /// Whether a record in this state with this deadline reads as absent at
    /// `now_ms`: a Completed or Failed record whose TTL has passed.
    pub(crate) fn is_expired(self, deadline_ms: u64, now_ms: u64) -> bool {
        self.is_terminal() && deadline_ms <= now_ms
    }
}

/// What a record says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The key is present in `state`.
    Put(State),
    /// The key is absent (released or removed).
    Tombstone,
}

/// The fixed part of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    /// Whose record this is; the shard fills it in, as the lengths.
    pub keyspace: Keyspace,
    pub recovered: bool,
    pub attempt: u32,
    pub lsn: u64,
    pub token: u64,
    pub fingerprint: Fingerprint,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub deadline_ms: u64,
    pub ttl_ms: u64,
    pub scope_len: u16,
    pub key_len: u16,
    pub response_len: u32,
}

/// What a claim of a key whose request failed ([`State::Failed`],
/// same fingerprint) gets: the stored failure replayed, or a new attempt.
/// Set per claim ([`crate::ClaimRequest::reuse`]).
///
/// A Failed record says the side effect did not happen and will not (a
/// declined card): whether the same request may simply run again is the
/// service's call, per route. A Completed key is always replayed, a
/// Processing one never run twice, whatever the policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReusePolicy {
    /// Replay the stored failure, as every other finished answer (the
    /// default).
    #[default]
    ReplayFailure,
    /// Start a new attempt: the claim acquires a lease with a new token and
    /// attempt + 1 (`recovered` stays false: nothing ran half-way), and the
    /// failure is superseded.
    RetryFailed,
}

/// The first bytes of an answer that carries staged messages: the
/// outbox's envelope (`messaging`). Every backend keeps the keys of the
/// caller's Completed records whose answer starts with them apart, so that
/// a relay's sweep reads those alone (the backend trait's
/// `scan_staged`).
pub(crate) const STAGED_MARK: &[u8; 8] = b"IDKVOB1\0";

/// Whether `answer` carries staged messages (starts with [`STAGED_MARK`]).
pub(crate) fn is_staged(answer: &[u8]) -> bool {
    answer.starts_with(STAGED_MARK)
}

/// A stored record, as read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Whose record this is: the caller's, or one of idemkv's own.
    pub keyspace: Keyspace,
    /// The scope.
    pub scope: Vec<u8>,
    /// The key.
    pub key: Vec<u8>,
    /// Processing, Completed or Failed.
    pub state: State,
    /// The fingerprint of the request that claimed the key.
    pub fingerprint: Fingerprint,
    /// Fencing token of the current (or finishing) holder. Tokens of one key
    /// only grow; tokens of keys in different shards are unrelated.
    pub token: u64,
    /// 1 for the first holder, one more for each takeover after an expired lease.
    pub attempt: u32,
    /// Whether the current holder took over an expired lease.
    pub recovered: bool,
    /// When the key was first claimed (ms since the epoch).
    pub created_ms: u64,
    /// When the record last changed state or lease (ms since the epoch).
    pub updated_ms: u64,
    /// Lease end for Processing, expiry for Completed and Failed (ms since
    /// the epoch).
    pub deadline_ms: u64,
    /// How long the record is kept once finished (ms): the TTL its claim
    /// set, or the backend's default. While Processing, how long its
    /// answer will be kept.
    pub ttl_ms: u64,
    /// The stored response; empty while Processing.
    pub response: Vec<u8>,
    /// While Processing, the last checkpoint a holder stored
    /// ([`crate::Lease::checkpoint`]); `None` once finished.
    pub checkpoint: Option<Checkpoint>,
}

impl Record {
    /// Builds a record from a decoded Put frame.
    pub(crate) fn from_frame(header: &Header, frame: &[u8]) -> Option<Self> {
        RecordRef::new(header, frame).map(|record| record.to_record())
    }
}

/// A stored record borrowed where it lies (a segment's map, or the
/// buffer it was read into), for [`Store::claim_with`](crate::Store::claim_with):
/// a replay answered from it copies nothing it does not need to.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    header: &'a Header,
    frame: &'a [u8],
}

impl<'a> RecordRef<'a> {
    /// The put `header` of `frame` (`None` for a tombstone).
    pub(crate) fn new(header: &'a Header, frame: &'a [u8]) -> Option<Self> {
        matches!(header.kind, Kind::Put(_)).then_some(RecordRef { header, frame })
    }

    /// Whose record this is.
    #[must_use]
    pub fn keyspace(&self) -> Keyspace {
        self.header.keyspace
    }

    /// The scope.
    #[must_use]
    pub fn scope(&self) -> &'a [u8] {
        self.header.body(self.frame).0
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &'a [u8] {
        self.header.body(self.frame).1
    }

    /// The stored response of a Completed or Failed record (empty while
    /// Processing).
    #[must_use]
    pub fn response(&self) -> &'a [u8] {
        match self.state() {
            State::Processing => &[],
            State::Completed | State::Failed => self.header.body(self.frame).2,
        }
    }

    /// The record's state.
    #[must_use]
    pub fn state(&self) -> State {
        match self.header.kind {
            Kind::Put(state) => state,
            Kind::Tombstone => State::Processing,
        }
    }

    /// The fingerprint of the request that claimed the key.
    #[must_use]
    pub fn fingerprint(&self) -> Fingerprint {
        self.header.fingerprint
    }

    /// The fencing token of the last holder.
    #[must_use]
    pub fn token(&self) -> u64 {
        self.header.token
    }

    /// The holder's attempt number.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.header.attempt
    }

    /// Wall-clock ms when the key was first claimed.
    #[must_use]
    pub fn created_ms(&self) -> u64 {
        self.header.created_ms
    }

    /// Wall-clock ms of the last change.
    #[must_use]
    pub fn updated_ms(&self) -> u64 {
        self.header.updated_ms
    }

    /// Wall-clock ms of the lease end (Processing) or of the expiry.
    #[must_use]
    pub fn deadline_ms(&self) -> u64 {
        self.header.deadline_ms
    }

    /// The owned [`Record`] (what [`Store::claim`](crate::Store::claim)
    /// answers a replay with).
    #[must_use]
    pub fn to_record(&self) -> Record {
        let header = self.header;
        let state = self.state();
        let (scope, key, stored) = header.body(self.frame);
        // A Processing record keeps its checkpoint where a finished one
        // keeps its response; the frame's CRC passed, so bytes that are no
        // checkpoint are a bug, shown as none rather than as a response.
        let (response, checkpoint) = match state {
            State::Processing => (&[][..], crate::checkpoint::decode(stored).ok().flatten()),
            State::Completed | State::Failed => (stored, None),
        };
        Record {
            keyspace: header.keyspace,
            scope: scope.to_vec(),
            key: key.to_vec(),
            state,
            fingerprint: header.fingerprint,
            token: header.token,
            attempt: header.attempt,
            recovered: header.recovered,
            created_ms: header.created_ms,
            updated_ms: header.updated_ms,
            deadline_ms: header.deadline_ms,
            ttl_ms: header.ttl_ms,
            response: response.to_vec(),
            checkpoint,
        }
    }
}

impl Header {
    /// The scope, key and response of `frame`, the frame this header was
    /// decoded from.
    pub(crate) fn body<'a>(&self, frame: &'a [u8]) -> (&'a [u8], &'a [u8], &'a [u8]) {
        let scope_start = FRAME_PREFIX_BYTES;
        let key_start = scope_start + usize::from(self.scope_len);
        let response_start = key_start + usize::from(self.key_len);
        let end = response_start + self.response_len as usize;
        (&frame[scope_start..key_start], &frame[key_start..response_start], &frame[response_start..end])
    }
}
