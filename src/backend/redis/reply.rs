//! Reading the server's answers: the client's errors as the contract's,
//! reply elements as numbers and bytes, a record hash as a [`Record`].
//! Nothing is guessed: an answer the contract does not know is
//! [`BackendFailure::Protocol`].

use crate::backend::remote::Address;
use crate::error::{BackendFailure, Error, Result};
use crate::record::{Record, State};
use crate::{Checkpoint, Fingerprint};
use ::redis::{RedisError, Value};

/// Maps the client's error: see [`BackendFailure`].
pub(crate) fn backend_error(error: RedisError) -> Error {
    use ::redis::ErrorKind;
    let failure = match error.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => BackendFailure::Refused,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => BackendFailure::Protocol,
        _ => BackendFailure::Unavailable,
    };
    Error::Backend { backend: "redis", failure, source: Box::new(error) }
}

/// An answer the contract does not know.
pub(super) fn protocol(what: &str) -> Error {
    Error::Backend { backend: "redis", failure: BackendFailure::Protocol, source: what.to_string().into() }
}

/// A whole number from a reply element (integer or decimal string).
pub(super) fn number(value: &Value) -> Result<u64> {
    match value {
        Value::Int(number) => u64::try_from(*number).map_err(|_| protocol("negative number in a reply")),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| protocol("not a number in a reply")),
        _ => Err(protocol("not a number in a reply")),
    }
}

/// Bytes from a reply element.
pub(super) fn bytes(value: &Value) -> Result<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Ok(bytes.clone()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Ok(text.clone().into_bytes()),
        _ => Err(protocol("not a string in a reply")),
    }
}

/// The checkpoint stored as `bytes` (see [`crate::checkpoint`]);
/// `None` for none.
pub(super) fn checkpoint(bytes: &[u8]) -> Result<Option<Checkpoint>> {
    crate::checkpoint::decode(bytes).map_err(protocol)
}

/// The record of `address` from the thirteen fields the `GET` script
/// answers (see the scripts' docs for their order).
pub(super) fn record(address: Address<'_>, fields: &[Value]) -> Result<Record> {
    let Address { keyspace, scope, key } = address;
    let [state, fingerprint, attempt, recovered, token, created, updated, deadline, ttl, stored_scope, stored_key, response, point] =
        fields
    else {
        return Err(protocol("get: not thirteen fields"));
    };
    if bytes(stored_scope)? != scope || bytes(stored_key)? != key {
        return Err(Error::KeyHashCollision);
    }
    let state = match bytes(state)?.as_slice() {
        b"P" => State::Processing,
        b"C" => State::Completed,
        b"F" => State::Failed,
        _ => return Err(protocol("get: unknown state")),
    };
    let fingerprint = <[u8; 32]>::try_from(bytes(fingerprint)?.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| protocol("get: fingerprint"))?;
    Ok(Record {
        keyspace,
        scope: scope.to_vec(),
        key: key.to_vec(),
        state,
        fingerprint,
        token: number(token)?,
        attempt: u32::try_from(number(attempt)?).map_err(|_| protocol("get: attempt"))?,
        recovered: number(recovered)? == 1,
        created_ms: number(created)?,
        updated_ms: number(updated)?,
        deadline_ms: number(deadline)?,
        ttl_ms: number(ttl)?,
        response: bytes(response)?,
        checkpoint: match state {
            State::Processing => checkpoint(&bytes(point)?)?,
            State::Completed | State::Failed => None,
        },
    })
}
