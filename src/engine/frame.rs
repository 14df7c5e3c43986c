//! The frame codec: one framed, CRC-checked version of one `(scope, key)`
//! as it lies in a segment.
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

use crate::fingerprint::Fingerprint;
use crate::format::{frame_bytes, FRAME_FIXED_BYTES as FIXED_BYTES, FRAME_HEADER_BYTES, FRAME_PREFIX_BYTES};
use crate::keyspace::Keyspace;
use crate::record::{Header, Kind, State};

/// Bytes of the payload's fixed part.
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

/// Why bytes did not decode as a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// The frame runs past the end of the bytes given (a torn tail if at the
    /// end of the active segment).
    Truncated,
    /// The frame is whole but wrong.
    Invalid(&'static str),
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
pub(crate) const PREFIX_BYTES: usize = FRAME_PREFIX_BYTES;

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
        assert_eq!(decoded.body(&out), (&b"scope"[..], &b"key"[..], &b"body"[..]));
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
