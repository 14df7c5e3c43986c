//! The log record: one framed, CRC-checked version of one `(scope, key)`.
//!
//! ```text
//! frame                                  payload (all integers little-endian)
//! offset size field                      offset size field
//!      0    4 crc32 of bytes 4..end           0    1 kind (1 put, 2 tombstone)
//!      4    4 payload length                  1    1 state (0 none, 1 processing,
//!      8    . payload                                  2 completed, 3 failed)
//!                                             2    1 flags (bit 0: recovered)
//!                                             3    1 keyspace (0 the caller's,
//!                                                    1..=7 idemkv's own; see
//!                                                    crate::keyspace)
//!                                             4    4 attempt
//!                                             8    8 lsn (shard log sequence number)
//!                                            16    8 token (fencing token)
//!                                            24   32 fingerprint
//!                                            56    8 created_ms
//!                                            64    8 updated_ms
//!                                            72    8 deadline_ms (lease end or expiry)
//!                                            80    8 ttl_ms
//!                                            88    2 scope length
//!                                            90    2 key length
//!                                            92    4 response length
//!                                            96    . scope, key, response (while
//!                                                    Processing: the checkpoint)
//! ```

use crate::checkpoint::Checkpoint;
use crate::fingerprint::Fingerprint;
use crate::keyspace::Keyspace;

/// Bytes before the payload: CRC and length.
pub(crate) const FRAME_HEADER_BYTES: usize = 8;
/// Bytes of the payload's fixed part.
pub(crate) const FIXED_BYTES: usize = 96;
const OFFSET_KIND: usize = 0;
const OFFSET_STATE: usize = 1;
const OFFSET_FLAGS: usize = 2;
const OFFSET_KEYSPACE: usize = 3;
const OFFSET_ATTEMPT: usize = 4;
const OFFSET_LSN: usize = 8;
const OFFSET_TOKEN: usize = 16;
const OFFSET_FINGERPRINT: usize = 24;
const OFFSET_CREATED: usize = OFFSET_FINGERPRINT + Fingerprint::LEN;
const OFFSET_UPDATED: usize = OFFSET_CREATED + 8;
const OFFSET_DEADLINE: usize = OFFSET_UPDATED + 8;
const OFFSET_TTL: usize = OFFSET_DEADLINE + 8;
const OFFSET_SCOPE_LEN: usize = OFFSET_TTL + 8;
const OFFSET_KEY_LEN: usize = OFFSET_SCOPE_LEN + 2;
const OFFSET_RESPONSE_LEN: usize = OFFSET_KEY_LEN + 2;
const _: () = assert!(OFFSET_CREATED == 56);
const _: () = assert!(OFFSET_RESPONSE_LEN + 4 == FIXED_BYTES);

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
    fn to_byte(self) -> u8 {
        match self {
            State::Processing => 1,
            State::Completed => 2,
            State::Failed => 3,
        }
    }

    fn from_byte(byte: u8) -> Option<Self> {
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
        body(self.header, self.frame).0
    }

    /// The key.
    #[must_use]
    pub fn key(&self) -> &'a [u8] {
        body(self.header, self.frame).1
    }

    /// The stored response of a Completed or Failed record (empty while
    /// Processing).
    #[must_use]
    pub fn response(&self) -> &'a [u8] {
        match self.state() {
            State::Processing => &[],
            State::Completed | State::Failed => body(self.header, self.frame).2,
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
        let (scope, key, stored) = body(header, self.frame);
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
            response: response.to_vec(),
            checkpoint,
        }
    }
}

/// Why bytes did not decode as a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The frame runs past the end of the bytes given (a torn tail if at the
    /// end of the active segment).
    Truncated,
    /// The frame is whole but wrong.
    Invalid(&'static str),
}

/// Bytes one frame takes on disk.
pub(crate) fn frame_bytes(scope_len: usize, key_len: usize, response_len: usize) -> u64 {
    (FRAME_HEADER_BYTES + FIXED_BYTES) as u64 + scope_len as u64 + key_len as u64 + response_len as u64
}

/// Appends one whole frame to `out`. Lengths must fit their fields, which
/// the store checks against its limits before it gets here.
pub(crate) fn encode(header: &Header, scope: &[u8], key: &[u8], response: &[u8], out: &mut Vec<u8>) {
    assert_eq!(usize::from(header.scope_len), scope.len());
    assert_eq!(usize::from(header.key_len), key.len());
    assert_eq!(header.response_len as usize, response.len());
    let start = out.len();
    let payload_len = FIXED_BYTES + scope.len() + key.len() + response.len();
    let payload_len = u32::try_from(payload_len).expect("record length checked against limits");
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&payload_len.to_le_bytes());
    let (kind, state) = match header.kind {
        Kind::Put(state) => (1u8, state.to_byte()),
        Kind::Tombstone => (2u8, 0u8),
    };
    out.extend_from_slice(&[kind, state, u8::from(header.recovered), header.keyspace.to_byte()]);
    out.extend_from_slice(&header.attempt.to_le_bytes());
    out.extend_from_slice(&header.lsn.to_le_bytes());
    out.extend_from_slice(&header.token.to_le_bytes());
    out.extend_from_slice(header.fingerprint.as_bytes());
    for value in [header.created_ms, header.updated_ms, header.deadline_ms, header.ttl_ms] {
        out.extend_from_slice(&value.to_le_bytes());
    }
    out.extend_from_slice(&header.scope_len.to_le_bytes());
    out.extend_from_slice(&header.key_len.to_le_bytes());
    out.extend_from_slice(&header.response_len.to_le_bytes());
    out.extend_from_slice(scope);
    out.extend_from_slice(key);
    out.extend_from_slice(response);
    let crc = crc32fast::hash(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len() - start, FRAME_HEADER_BYTES + payload_len as usize);
}

/// The declared payload length of the frame at the start of `bytes`, if its
/// 8-byte frame header is there.
pub(crate) fn declared_frame_bytes(bytes: &[u8]) -> Option<u64> {
    let length = bytes.get(4..8)?;
    Some(FRAME_HEADER_BYTES as u64 + u64::from(read_u32(length, 0)))
}

/// Where a frame's keyspace byte is, from the frame's start.
pub(crate) const KEYSPACE_AT: u64 = (FRAME_HEADER_BYTES + OFFSET_KEYSPACE) as u64;

/// Bytes of a frame before its scope, key and response: the frame header
/// and the fixed part of the payload.
pub(crate) const PREFIX_BYTES: usize = FRAME_HEADER_BYTES + FIXED_BYTES;

/// Decodes the first [`PREFIX_BYTES`] of a frame — its fields and lengths —
/// before its CRC is checked: returns the header, the frame's whole length
/// and the CRC it claims, which the caller checks over bytes `4..` of the
/// frame (see [`crc_start`]). Lets a reader check a frame of any size
/// through a bounded buffer.
pub(crate) fn decode_prefix(prefix: &[u8]) -> Result<(Header, u64, u32), DecodeError> {
    let prefix = prefix.get(..PREFIX_BYTES).ok_or(DecodeError::Truncated)?;
    let frame_len = declared_frame_bytes(prefix).ok_or(DecodeError::Truncated)?;
    let payload_len = frame_len - FRAME_HEADER_BYTES as u64;
    if payload_len < FIXED_BYTES as u64 {
        return Err(DecodeError::Invalid("payload shorter than the fixed record fields"));
    }
    let header = decode_fixed(&prefix[FRAME_HEADER_BYTES..])?;
    let variable = u64::from(header.scope_len) + u64::from(header.key_len) + u64::from(header.response_len);
    if FIXED_BYTES as u64 + variable != payload_len {
        return Err(DecodeError::Invalid("field lengths disagree with the frame length"));
    }
    Ok((header, frame_len, read_u32(prefix, 0)))
}

/// The fields of a frame whose CRC fails, as its damaged bytes read, and
/// the length they give it (from its scope, key and response lengths, not
/// its length field, which may be the damaged part): what repair can say of
/// a record no hint lists. Nothing here is checked but that the fields
/// decode at all.
pub(crate) fn decode_damaged(prefix: &[u8]) -> Option<(Header, u64)> {
    let fixed = prefix.get(FRAME_HEADER_BYTES..PREFIX_BYTES)?;
    let header = decode_fixed(fixed).ok()?;
    let frame_len =
        frame_bytes(usize::from(header.scope_len), usize::from(header.key_len), header.response_len as usize);
    Some((header, frame_len))
}

/// A CRC hasher fed with the part of `prefix` the frame CRC covers; the
/// caller goes on with the bytes after the prefix.
pub(crate) fn crc_start(prefix: &[u8]) -> crc32fast::Hasher {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&prefix[4..PREFIX_BYTES]);
    hasher
}

/// Decodes the frame at the start of `bytes`, checking its CRC and fields.
/// Returns the header and the frame's total length; scope, key and response
/// follow the fixed part in `bytes[FRAME_HEADER_BYTES + FIXED_BYTES..]`.
pub(crate) fn decode(bytes: &[u8]) -> Result<(Header, usize), DecodeError> {
    let frame_len = declared_frame_bytes(bytes).ok_or(DecodeError::Truncated)?;
    let payload_len = frame_len - FRAME_HEADER_BYTES as u64;
    if payload_len < FIXED_BYTES as u64 {
        return Err(DecodeError::Invalid("payload shorter than the fixed record fields"));
    }
    let frame_len = usize::try_from(frame_len).map_err(|_| DecodeError::Truncated)?;
    let frame = bytes.get(..frame_len).ok_or(DecodeError::Truncated)?;
    let stored_crc = read_u32(frame, 0);
    if crc32fast::hash(&frame[4..]) != stored_crc {
        return Err(DecodeError::Invalid("CRC mismatch"));
    }
    let header = decode_fixed(&frame[FRAME_HEADER_BYTES..])?;
    let variable = u64::from(header.scope_len) + u64::from(header.key_len) + u64::from(header.response_len);
    if FIXED_BYTES as u64 + variable != payload_len {
        return Err(DecodeError::Invalid("field lengths disagree with the frame length"));
    }
    Ok((header, frame_len))
}

fn decode_fixed(payload: &[u8]) -> Result<Header, DecodeError> {
    let kind = match (payload[OFFSET_KIND], payload[OFFSET_STATE]) {
        (1, state) => Kind::Put(State::from_byte(state).ok_or(DecodeError::Invalid("unknown state"))?),
        (2, 0) => Kind::Tombstone,
        _ => return Err(DecodeError::Invalid("unknown record kind")),
    };
    if payload[OFFSET_FLAGS] > 1 {
        return Err(DecodeError::Invalid("unknown flags"));
    }
    let keyspace = Keyspace::from_byte(payload[OFFSET_KEYSPACE]).ok_or(DecodeError::Invalid("unknown keyspace"))?;
    let mut fingerprint = [0u8; Fingerprint::LEN];
    fingerprint.copy_from_slice(&payload[OFFSET_FINGERPRINT..OFFSET_FINGERPRINT + Fingerprint::LEN]);
    let header = Header {
        kind,
        keyspace,
        recovered: payload[OFFSET_FLAGS] == 1,
        attempt: read_u32(payload, OFFSET_ATTEMPT),
        lsn: read_u64(payload, OFFSET_LSN),
        token: read_u64(payload, OFFSET_TOKEN),
        fingerprint: Fingerprint::from_bytes(fingerprint),
        created_ms: read_u64(payload, OFFSET_CREATED),
        updated_ms: read_u64(payload, OFFSET_UPDATED),
        deadline_ms: read_u64(payload, OFFSET_DEADLINE),
        ttl_ms: read_u64(payload, OFFSET_TTL),
        scope_len: read_u16(payload, OFFSET_SCOPE_LEN),
        key_len: read_u16(payload, OFFSET_KEY_LEN),
        response_len: read_u32(payload, OFFSET_RESPONSE_LEN),
    };
    if matches!(header.kind, Kind::Tombstone) && header.response_len != 0 {
        return Err(DecodeError::Invalid("tombstone with a response"));
    }
    Ok(header)
}

/// The scope, key and response of a decoded frame.
pub(crate) fn body<'a>(header: &Header, frame: &'a [u8]) -> (&'a [u8], &'a [u8], &'a [u8]) {
    let scope_start = FRAME_HEADER_BYTES + FIXED_BYTES;
    let key_start = scope_start + usize::from(header.scope_len);
    let response_start = key_start + usize::from(header.key_len);
    let end = response_start + header.response_len as usize;
    (&frame[scope_start..key_start], &frame[key_start..response_start], &frame[response_start..end])
}

fn read_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(raw)
}

pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: Kind, response: &[u8]) -> Header {
        Header {
            kind,
            keyspace: Keyspace::Inbox,
            recovered: true,
            attempt: 3,
            lsn: 42,
            token: 41,
            fingerprint: Fingerprint::of(b"request"),
            created_ms: 1,
            updated_ms: 2,
            deadline_ms: 3,
            ttl_ms: 4,
            scope_len: 5,
            key_len: 3,
            response_len: u32::try_from(response.len()).expect("small"),
        }
    }

    #[test]
    fn round_trip() {
        let header = sample(Kind::Put(State::Completed), b"body");
        let mut out = Vec::new();
        encode(&header, b"scope", b"key", b"body", &mut out);
        assert_eq!(out.len() as u64, frame_bytes(5, 3, 4));
        let (decoded, len) = decode(&out).expect("decode");
        assert_eq!(decoded, header);
        assert_eq!(len, out.len());
        assert_eq!(body(&decoded, &out), (&b"scope"[..], &b"key"[..], &b"body"[..]));
    }

    #[test]
    fn every_truncation_is_truncated() {
        let mut out = Vec::new();
        encode(&sample(Kind::Tombstone, b""), b"scope", b"key", b"", &mut out);
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]), Err(DecodeError::Truncated), "cut at {cut}");
        }
    }

    #[test]
    fn every_bit_flip_is_caught() {
        let mut out = Vec::new();
        encode(&sample(Kind::Put(State::Failed), b"xy"), b"scope", b"key", b"xy", &mut out);
        for byte in 0..out.len() {
            for bit in 0..8 {
                let mut damaged = out.clone();
                damaged[byte] ^= 1 << bit;
                assert!(decode(&damaged).is_err(), "flip at byte {byte} bit {bit} accepted");
            }
        }
    }

    #[test]
    fn garbage_with_valid_crc_is_refused() {
        let mut frame = vec![0u8; FRAME_HEADER_BYTES + FIXED_BYTES];
        let payload_len = u32::try_from(FIXED_BYTES).expect("small");
        frame[4..8].copy_from_slice(&payload_len.to_le_bytes());
        frame[8] = 9;
        let crc = crc32fast::hash(&frame[4..]);
        frame[..4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&frame), Err(DecodeError::Invalid("unknown record kind")));
    }
}
