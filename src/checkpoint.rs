//! Checkpoints: what a lease holder records between the steps of a
//! request, so that a later attempt which takes over its expired lease
//! resumes where it stopped instead of guessing (DESIGN §3, "never twice").
//!
//! A checkpoint lives in the key's Processing record, in the bytes that
//! hold the response once the key is finished:
//!
//! ```text
//! offset size field
//!      0    1 step length (1..=255)
//!      1    . step (UTF-8)
//!      .    . payload
//! ```
//!
//! No bytes means no checkpoint. Writing one appends a new Processing
//! record under the same token (the holder's lease end is kept); a
//! takeover and a renewal carry the last one over into the record they
//! write; completing, failing, releasing or removing the key drops it with
//! the Processing record.

use crate::error::{Error, Result};

/// The longest step name, in bytes.
pub const STEP_BYTES_MAX: usize = 255;

/// A checkpoint: the last step a holder of the key finished, and what
/// the steps after it need (an external call's id, a half-built result).
///
/// # Examples
///
/// ```
/// use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
/// # fn main() -> Result<(), idemkv::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(dir.path(), Config::new())?;
/// let request = ClaimRequest::new("order-9", Fingerprint::of(b"POST /orders"));
/// let Claim::Acquired(mut lease) = store.claim(&request)? else { unreachable!() };
/// // A takeover would start from here: `lease.last_checkpoint()`.
/// assert!(lease.last_checkpoint().is_none());
/// lease.checkpoint("charged", b"charge ch_123")?;
/// assert_eq!(lease.last_checkpoint().map(|point| point.step.as_str()), Some("charged"));
/// lease.complete(b"201 created")?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Checkpoint {
    /// The step finished last (1..=255 bytes).
    pub step: String,
    /// What the following steps need.
    pub payload: Vec<u8>,
}

impl Checkpoint {
    /// A checkpoint at `step` with `payload`.
    #[must_use]
    pub fn new(step: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Checkpoint { step: step.into(), payload: payload.into() }
    }
}

/// The stored bytes of a checkpoint at `step` with `payload`, checked: a
/// step of 1..=[`STEP_BYTES_MAX`] bytes, and all of it within `max` bytes
/// (the store's response limit).
///
/// # Errors
/// [`Error::InvalidCheckpoint`] for the step, [`Error::CheckpointTooLarge`].
pub(crate) fn encode(step: &str, payload: &[u8], max: usize) -> Result<Vec<u8>> {
    let step_len = u8::try_from(step.len())
        .ok()
        .filter(|len| *len > 0)
        .ok_or(Error::InvalidCheckpoint { reason: "the step name must have 1 to 255 bytes" })?;
    let len = 1 + step.len() + payload.len();
    if len > max {
        return Err(Error::CheckpointTooLarge { len, max });
    }
    let mut bytes = Vec::with_capacity(len);
    bytes.push(step_len);
    bytes.extend_from_slice(step.as_bytes());
    bytes.extend_from_slice(payload);
    Ok(bytes)
}

/// The checkpoint stored as `bytes` in a Processing record; `None` for no
/// bytes, `Err` for bytes no checkpoint encodes to.
pub(crate) fn decode(bytes: &[u8]) -> std::result::Result<Option<Checkpoint>, &'static str> {
    let Some((&step_len, rest)) = bytes.split_first() else {
        return Ok(None);
    };
    let step_len = usize::from(step_len);
    if step_len == 0 || step_len > rest.len() {
        return Err("checkpoint step length out of range");
    }
    let (step, payload) = rest.split_at(step_len);
    let step = std::str::from_utf8(step).map_err(|_| "checkpoint step is not UTF-8")?;
    Ok(Some(Checkpoint { step: step.to_owned(), payload: payload.to_vec() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_cannot_store() {
        let bytes = encode("charged", b"ch_1", 64).expect("fits");
        assert_eq!(decode(&bytes), Ok(Some(Checkpoint::new("charged", b"ch_1".to_vec()))));
        assert_eq!(decode(&[]), Ok(None));
        assert_eq!(decode(&encode("s", b"", 2).expect("fits")), Ok(Some(Checkpoint::new("s", Vec::new()))));
        assert!(matches!(encode("", b"x", 64), Err(Error::InvalidCheckpoint { .. })));
        assert!(matches!(encode(&"s".repeat(256), b"", 1024), Err(Error::InvalidCheckpoint { .. })));
        assert!(matches!(encode("step", b"12345", 9), Err(Error::CheckpointTooLarge { len: 10, max: 9 })));
        assert!(encode(&"s".repeat(255), b"", 256).is_ok());
        assert!(decode(&[0]).is_err());
        assert!(decode(&[5, b'a']).is_err());
        assert!(decode(&[1, 0xff]).is_err());
    }
}
