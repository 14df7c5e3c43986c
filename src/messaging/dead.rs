//! Dead letters: a message whose handler failed `max_attempts` times (or
//! whose consumer stopped during every attempt), quarantined with its last
//! error and its payload, until an operator re-drives or drops it.
//!
//! A dead letter is a record of its own, `(consumer, message id)` of
//! [`Keyspace::DeadLetter`](crate::Keyspace::DeadLetter), Completed, kept
//! for the inbox's dead-letter retention; a letter an operator re-drives
//! is copied to `(consumer, message id)` of
//! [`Keyspace::Redrive`](crate::Keyspace::Redrive) first, then its message's inbox record and the letter are
//! removed, so that a crash between the steps leaves it listed or queued
//! for re-driving, never lost.

use crate::error::{Error, Result};
use std::time::{SystemTime, UNIX_EPOCH};

/// The longest error text kept with a dead letter (longer ones are cut at
/// a character boundary).
pub const DEAD_LETTER_ERROR_BYTES_MAX: usize = 1024;

/// A quarantined message, as [`Inbox::dead_letters`](super::Inbox::dead_letters)
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The consumer whose inbox quarantined it.
    pub consumer: String,
    /// The message id.
    pub message_id: Vec<u8>,
    /// How many attempts failed (or never finished).
    pub attempts: u32,
    /// The last attempt's error (at most [`DEAD_LETTER_ERROR_BYTES_MAX`]
    /// bytes).
    pub error: String,
    /// When it was quarantined (ms since the epoch).
    pub dead_at_ms: u64,
    /// The payload, unless it was larger than the backend's response limit
    /// allows beside the rest (then `None`: a re-drive has nothing to run).
    pub payload: Option<Vec<u8>>,
}

const VERSION: u8 = 1;
/// Version, attempts, time, error length, whether the payload is kept,
/// its length.
const FIXED: usize = 1 + 4 + 8 + 4 + 1 + 4;

impl DeadLetter {
    pub(super) fn new(consumer: &str, message_id: &[u8], attempts: u32, error: &str, payload: &[u8]) -> Self {
        let dead_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
        DeadLetter {
            consumer: consumer.to_owned(),
            message_id: message_id.to_vec(),
            attempts,
            error: cut(error, DEAD_LETTER_ERROR_BYTES_MAX).to_owned(),
            dead_at_ms,
            payload: Some(payload.to_vec()),
        }
    }

    /// The stored bytes, at most `max` long: the payload is left out when
    /// it does not fit.
    pub(super) fn encode(&self, max: usize) -> Vec<u8> {
        let error = self.error.as_bytes();
        let payload = self.payload.as_deref().filter(|payload| FIXED + error.len() + payload.len() <= max);
        let mut bytes = Vec::with_capacity(FIXED + error.len() + payload.map_or(0, <[u8]>::len));
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.attempts.to_le_bytes());
        bytes.extend_from_slice(&self.dead_at_ms.to_le_bytes());
        bytes.extend_from_slice(&u32::try_from(error.len()).unwrap_or(u32::MAX).to_le_bytes());
        bytes.extend_from_slice(error);
        bytes.push(u8::from(payload.is_some()));
        let payload = payload.unwrap_or_default();
        bytes.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_le_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    /// Reads back what [`encode`](DeadLetter::encode) wrote.
    pub(super) fn decode(consumer: &str, message_id: &[u8], bytes: &[u8]) -> Result<Self> {
        let invalid = || Error::InvalidDeadLetter { message_id: message_id.to_vec() };
        let (&version, rest) = bytes.split_first().ok_or_else(invalid)?;
        if version != VERSION {
            return Err(invalid());
        }
        let (attempts, rest) = rest.split_first_chunk::<4>().ok_or_else(invalid)?;
        let (dead_at_ms, rest) = rest.split_first_chunk::<8>().ok_or_else(invalid)?;
        let (error_len, rest) = rest.split_first_chunk::<4>().ok_or_else(invalid)?;
        let error_len = usize::try_from(u32::from_le_bytes(*error_len)).map_err(|_| invalid())?;
        let (error, rest) = rest.split_at_checked(error_len).ok_or_else(invalid)?;
        let (&kept, rest) = rest.split_first().ok_or_else(invalid)?;
        let (payload_len, payload) = rest.split_first_chunk::<4>().ok_or_else(invalid)?;
        if usize::try_from(u32::from_le_bytes(*payload_len)).ok() != Some(payload.len()) {
            return Err(invalid());
        }
        let payload = match kept {
            1 => Some(payload.to_vec()),
            0 if payload.is_empty() => None,
            _ => return Err(invalid()),
        };
        Ok(DeadLetter {
            consumer: consumer.to_owned(),
            message_id: message_id.to_vec(),
            attempts: u32::from_le_bytes(*attempts),
            error: String::from_utf8_lossy(error).into_owned(),
            dead_at_ms: u64::from_le_bytes(*dead_at_ms),
            payload,
        })
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(super) fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_letter_reads_back_as_written_and_a_payload_too_large_is_left_out() {
        let letter = DeadLetter::new("billing", b"m-1", 5, "timeout talking to the ledger", b"{\"amount\":10}");
        let decoded = DeadLetter::decode("billing", b"m-1", &letter.encode(1024)).expect("decode");
        assert_eq!(decoded, letter);
        let small = DeadLetter::decode("billing", b"m-1", &letter.encode(FIXED + 40)).expect("decode");
        assert_eq!((small.payload, small.error), (None, letter.error.clone()));
    }

    #[test]
    fn damaged_bytes_are_a_typed_error_never_a_panic() {
        let encoded = DeadLetter::new("c", b"m", 1, "é", b"payload").encode(1024);
        for end in 0..encoded.len() {
            let decoded = DeadLetter::decode("c", b"m", &encoded[..end]);
            assert!(matches!(decoded, Err(Error::InvalidDeadLetter { .. })), "{end}: {decoded:?}");
        }
        let mut wrong = encoded.clone();
        wrong[0] = 9;
        assert!(DeadLetter::decode("c", b"m", &wrong).is_err());
    }

    #[test]
    fn errors_are_cut_at_a_character_boundary() {
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut("abc", 10), "abc");
        let long = "x".repeat(5000);
        assert_eq!(DeadLetter::new("c", b"m", 1, &long, b"").error.len(), DEAD_LETTER_ERROR_BYTES_MAX);
    }
}
