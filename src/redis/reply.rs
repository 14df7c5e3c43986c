//! Reading the server's answers: the client's errors as the contract's,
//! reply elements as numbers and bytes, a record hash as a [`Record`].
//! Nothing is guessed: an answer the contract does not know is
//! [`BackendFailure::Protocol`].

use crate::error::{BackendFailure, Error, Result};
use crate::record::{Record, State};
use crate::Fingerprint;
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
        Value::SimpleString(text) => Ok(text.clone().into_bytes()),
        _ => Err(protocol("not a string in a reply")),
    }
}

/// The record of `(scope, key)` from its hash's fields (see the scripts'
/// docs for the field names).
pub(super) fn record(scope: &[u8], key: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Record> {
    let field = |name: &str| fields.iter().find(|(field, _)| field == name.as_bytes()).map(|(_, value)| value);
    let text = |name: &str| -> Result<u64> {
        let value = field(name).ok_or_else(|| protocol("get: a field is missing"))?;
        std::str::from_utf8(value).ok().and_then(|text| text.parse().ok()).ok_or_else(|| protocol("get: not a number"))
    };
    if field("s").map(Vec::as_slice) != Some(scope) || field("k").map(Vec::as_slice) != Some(key) {
        return Err(Error::KeyHashCollision);
    }
    let state = match field("st").map(Vec::as_slice) {
        Some(b"P") => State::Processing,
        Some(b"C") => State::Completed,
        Some(b"F") => State::Failed,
        _ => return Err(protocol("get: unknown state")),
    };
    let fingerprint = field("fp")
        .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
        .map(Fingerprint::from_bytes)
        .ok_or_else(|| protocol("get: fingerprint"))?;
    Ok(Record {
        scope: scope.to_vec(),
        key: key.to_vec(),
        state,
        fingerprint,
        token: text("t")?,
        attempt: u32::try_from(text("a")?).map_err(|_| protocol("get: attempt"))?,
        recovered: text("rc")? == 1,
        created_ms: text("c")?,
        updated_ms: text("u")?,
        deadline_ms: text("le")?,
        response: field("r").cloned().unwrap_or_default(),
    })
}
