//! The outbox's envelope: a completion's stored answer that carries the
//! messages staged with it, and reading it back.
//!
//! Envelope, all integers little-endian: the magic `IDKVOB1\0`, the
//! response's length (u32) and bytes, the count of messages (u32), then
//! for each the id, the destination and the payload, each a length (u32)
//! and bytes.

use crate::error::{Error, Result};
use crate::LeaseToken;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// The envelope's first bytes: the mark by which every backend knows a
/// completion with staged messages.
const MAGIC: &[u8; 8] = crate::record::STAGED_MARK;

/// A message to publish once its completion is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxMessage {
    /// Where it goes: the sink's name for it (a Redis stream, a URL path,
    /// a topic).
    pub destination: String,
    /// What it carries.
    pub payload: Vec<u8>,
}

impl OutboxMessage {
    /// A message for `destination` carrying `payload`.
    #[must_use]
    pub fn new(destination: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        OutboxMessage { destination: destination.into(), payload: payload.into() }
    }
}

/// A staged message as the relay reads it back: with the id it is
/// delivered under, the same at every attempt and redelivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Staged {
    /// `ob-<digest of scope and key>-<token>-<index>`: unique to the
    /// completion that staged it, so a consumer's inbox deduplicates by it.
    pub id: String,
    /// Where it goes.
    pub destination: String,
    /// What it carries.
    pub payload: Vec<u8>,
}

/// The id of message `index` of the completion of `token`.
fn message_id(token: &LeaseToken, index: usize) -> String {
    let mut hasher = Sha256::new();
    hasher.update(u32::try_from(token.scope.len()).unwrap_or(u32::MAX).to_le_bytes());
    hasher.update(&token.scope);
    hasher.update(&token.key);
    let digest = hasher.finalize();
    let mut id = String::from("ob-");
    for byte in digest.iter().take(8) {
        let _ = write!(id, "{byte:02x}");
    }
    let _ = write!(id, "-{}-{index}", token.token);
    id
}

fn put(bytes: &mut Vec<u8>, part: &[u8]) -> Result<()> {
    let len =
        u32::try_from(part.len()).map_err(|_| Error::ResponseTooLarge { len: part.len(), max: u32::MAX as usize })?;
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(part);
    Ok(())
}

/// The stored answer of a completion of `token` with `response` that
/// stages `messages`: what [`Outbox::complete`](super::Outbox::complete) stores, for a caller that
/// completes the key itself (PostgreSQL's `complete_in`, in its own
/// transaction).
///
/// # Errors
/// [`Error::ResponseTooLarge`] for a part over 4 GiB (the backend's own
/// limit on the whole is checked when it is stored).
pub fn envelope(token: &LeaseToken, response: &[u8], messages: &[OutboxMessage]) -> Result<Vec<u8>> {
    let size =
        messages.iter().map(|message| 12 + message.destination.len() + message.payload.len() + 48).sum::<usize>();
    let mut bytes = Vec::with_capacity(MAGIC.len() + 8 + response.len() + size);
    bytes.extend_from_slice(MAGIC);
    put(&mut bytes, response)?;
    let count = u32::try_from(messages.len())
        .map_err(|_| Error::ResponseTooLarge { len: messages.len(), max: u32::MAX as usize })?;
    bytes.extend_from_slice(&count.to_le_bytes());
    for (index, message) in messages.iter().enumerate() {
        put(&mut bytes, message_id(token, index).as_bytes())?;
        put(&mut bytes, message.destination.as_bytes())?;
        put(&mut bytes, &message.payload)?;
    }
    Ok(bytes)
}

/// Whether `stored` is an envelope.
#[must_use]
pub fn is_envelope(stored: &[u8]) -> bool {
    crate::record::is_staged(stored)
}

/// The response inside a stored answer: the envelope's, or the answer
/// itself when it is not an envelope.
#[must_use]
pub fn response_of(stored: &[u8]) -> &[u8] {
    opened(stored).map_or(stored, |(response, _)| response)
}

/// The messages of an envelope, in order.
///
/// # Errors
/// [`Error::InvalidEnvelope`] when `stored` is not a whole envelope.
pub fn messages_of(stored: &[u8]) -> Result<Vec<Staged>> {
    let (_, mut rest) = opened(stored).ok_or(Error::InvalidEnvelope)?;
    let count = take_u32(&mut rest).ok_or(Error::InvalidEnvelope)?;
    let mut messages = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1024));
    for _ in 0..count {
        let mut text = || -> Option<String> { String::from_utf8(take(&mut rest)?.to_vec()).ok() };
        let (id, destination) = (text().ok_or(Error::InvalidEnvelope)?, text().ok_or(Error::InvalidEnvelope)?);
        let payload = take(&mut rest).ok_or(Error::InvalidEnvelope)?.to_vec();
        messages.push(Staged { id, destination, payload });
    }
    if !rest.is_empty() {
        return Err(Error::InvalidEnvelope);
    }
    Ok(messages)
}

/// The response and what follows it, if `stored` is an envelope.
fn opened(stored: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut rest = stored.strip_prefix(MAGIC)?;
    let response = take(&mut rest)?;
    Some((response, rest))
}

fn take_u32(input: &mut &[u8]) -> Option<u32> {
    let (len, rest) = input.split_first_chunk::<4>()?;
    *input = rest;
    Some(u32::from_le_bytes(*len))
}

fn take<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(take_u32(input)?).ok()?;
    let (part, rest) = input.split_at_checked(len)?;
    *input = rest;
    Some(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> LeaseToken {
        LeaseToken { keyspace: crate::Keyspace::Caller, scope: b"shop".to_vec(), key: b"order-7".to_vec(), token: 42 }
    }

    #[test]
    fn an_envelope_reads_back_its_response_and_messages_with_stable_ids() {
        let messages = [OutboxMessage::new("orders", b"placed".to_vec()), OutboxMessage::new("mail", Vec::new())];
        let stored = envelope(&token(), b"201", &messages).expect("envelope");
        assert!(is_envelope(&stored));
        assert_eq!(response_of(&stored), b"201");
        let staged = messages_of(&stored).expect("messages");
        assert_eq!(staged.len(), 2);
        assert_eq!((staged[0].destination.as_str(), staged[0].payload.as_slice()), ("orders", &b"placed"[..]));
        assert!(staged[0].id.starts_with("ob-") && staged[0].id.ends_with("-42-0"), "{}", staged[0].id);
        assert_eq!(staged, messages_of(&envelope(&token(), b"201", &messages).expect("again")).expect("same ids"));
        let other = LeaseToken { token: 43, ..token() };
        assert_ne!(messages_of(&envelope(&other, b"201", &messages).expect("other")).expect("ok")[0].id, staged[0].id);
    }

    #[test]
    fn a_plain_answer_is_its_own_response_and_a_cut_envelope_is_a_typed_error() {
        assert_eq!(response_of(b"plain"), b"plain");
        assert!(matches!(messages_of(b"plain"), Err(Error::InvalidEnvelope)));
        let stored = envelope(&token(), b"201", &[OutboxMessage::new("orders", b"placed".to_vec())]).expect("envelope");
        for end in MAGIC.len()..stored.len() {
            assert!(matches!(messages_of(&stored[..end]), Err(Error::InvalidEnvelope)), "{end}");
        }
        let mut longer = stored.clone();
        longer.push(0);
        assert!(messages_of(&longer).is_err());
    }
}
